/**
 * `dtrain rerun`: a relaunched run repeats the original's per-step losses bit
 * for bit on the CPU, a changed script is refused unless forced, and a rerun
 * runs exactly the file it verified (or refuses).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { TestRun } from "../launch/launch_helpers.ts";
import { rerunArgv, rerunMain } from "../../record_tools/rerun.ts";
import { parseLaunchArgs, UsageError } from "../../launch/options.ts";
import { launch } from "../../launch/launcher.ts";

buildNative({ quiet: true });

const SCRIPT = `
import { crossEntropy, Linear, ReLU, Sequential, TensorDataset, Trainer, TorchGenerator } from "dtrain";
const gen = new TorchGenerator(3);
const x = gen.normal_(new Float32Array(512 * 8), 0, 1);
const y = Int32Array.from({ length: 512 }, () => gen.randint(0, 2));
await new Trainer({
  model: () => new Sequential(new Linear(8, 16), new ReLU(), new Linear(16, 2)),
  data: new TensorDataset({ data: x, sampleShape: [8] }, { data: y, sampleShape: [] }),
  loss: (m, [a, b]) => crossEntropy(m.forward(a!), b!),
  config: { epochs: 2, seed: Number(Deno.args[0]), data: { globalBatchSize: 32 }, logEvery: 1000 },
}).fit();
`;

function losses(runDir: string): number[] {
  return Deno.readTextFileSync(join(runDir, "metrics.jsonl")).trim().split("\n").map((l) =>
    JSON.parse(l).loss
  );
}

Deno.test("dtrain rerun repeats the recorded run's losses bit for bit and refuses a changed script", async () => {
  const t = new TestRun();
  try {
    const script = join(t.dir, "train.ts");
    Deno.writeTextFileSync(script, SCRIPT);
    const first = join(t.dir, "runs", "first");
    let r = await t.finish(t.launch(["--nproc", "2", "--run-dir", first, "train.ts", "7"]), 60_000);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const original = losses(first);
    assert.equal(original.length, 32);

    const again = join(t.dir, "runs", "again");
    r = await t.finish(t.launch(["rerun", first, "--run-dir", again]), 60_000);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.deepEqual(losses(again), original);
    const rec = JSON.parse(Deno.readTextFileSync(join(again, "run.json")));
    assert.equal(rec.world.worldSize, 2);
    assert.deepEqual(rec.script.args, ["7"]);

    Deno.writeTextFileSync(script, SCRIPT + "\n// edited\n");
    r = await t.finish(
      t.launch(["rerun", first, "--run-dir", join(t.dir, "runs", "refused")]),
      30_000,
    );
    assert.equal(r.code, 2, "a refused rerun exits as every refusal does");
    assert.match(r.stderr, /changed since the run .*--force/);
    r = await t.finish(
      t.launch(["rerun", first, "--force", "--run-dir", join(t.dir, "runs", "forced")]),
      60_000,
    );
    assert.equal(r.code, 0, r.stdout + r.stderr);
  } finally {
    await t.cleanup();
  }
});

Deno.test("rerunArgv() replaces the run directory and keeps every other option", () => {
  assert.deepEqual(
    rerunArgv([
      "dtrain",
      "--nproc",
      "2",
      "--run-dir",
      "runs/a",
      "--threads",
      "1",
      "t.ts",
      "--lr",
      "1",
    ], "runs/b"),
    ["--run-dir", "runs/b", "--nproc", "2", "--threads", "1", "t.ts", "--lr", "1"],
  );
  assert.deepEqual(rerunArgv(["dtrain", "run", "--run-dir=x", "t.ts"], "y"), [
    "--run-dir",
    "y",
    "t.ts",
  ]);
});

/** A run.json in `dir` recording `script` (hashed) and the command line `argv`, run from `cwd`. */
async function recordRun(dir: string, cwd: string, script: string, argv: string[]) {
  const { newRunRecord, beginAttempt, finishAttempt, writeRunRecord, sha256File } = await import(
    "../../run_record/record.ts"
  );
  let r = newRunRecord({
    runId: "20260101-000000-t-0001",
    name: "t",
    argv: ["dtrain", ...argv],
    cwd,
    script: { path: script, sha256: await sha256File(join(cwd, script)), args: [] },
    world: { nnodes: 1, nprocPerNode: 1, hosts: ["h"] },
    versions: { dtrain: "0", deno: "0", v8: "0", typescript: "0", native: {} },
    env: {},
  });
  r = finishAttempt(beginAttempt(r), { exitCode: 0 });
  Deno.mkdirSync(dir, { recursive: true });
  writeRunRecord(dir, r);
}

Deno.test("dtrain rerun refuses a record whose command line names another script than the one it hashed", async () => {
  const t = new TestRun();
  try {
    Deno.writeTextFileSync(join(t.dir, "a.ts"), "// verified\n");
    Deno.writeTextFileSync(join(t.dir, "b.ts"), "// never verified\n");
    const calls: { argv: string[]; expect?: { scriptSha256: string } }[] = [];
    const launch = (argv: string[], expect?: { scriptSha256: string }) => {
      calls.push({ argv, ...(expect ? { expect } : {}) });
      return Promise.resolve(0);
    };
    const cwd = Deno.cwd();
    try {
      const bad = join(t.dir, "runs", "bad");
      await recordRun(bad, t.dir, "a.ts", ["--nproc", "1", "b.ts"]);
      assert.equal(await rerunMain([bad], launch), 2);
      assert.equal(calls.length, 0, "nothing was launched");

      // A consistent record launches the verified file by its real path, and tells the
      // launcher which hash to find there before it starts any rank.
      Deno.symlinkSync(join(t.dir, "a.ts"), join(t.dir, "link.ts"));
      const good = join(t.dir, "runs", "good");
      await recordRun(good, t.dir, "link.ts", ["--nproc", "1", "link.ts", "--x", "1"]);
      assert.equal(await rerunMain([good, "--run-dir", join(t.dir, "runs", "new")], launch), 0);
      assert.equal(calls.length, 1);
      const { sha256File } = await import("../../run_record/record.ts");
      assert.deepEqual(calls[0], {
        argv: [
          "--run-dir",
          join(t.dir, "runs", "new"),
          "--nproc",
          "1",
          join(t.dir, "a.ts"),
          "--x",
          "1",
        ],
        expect: { scriptSha256: await sha256File(join(t.dir, "a.ts")) },
      });
    } finally {
      Deno.chdir(cwd);
    }
  } finally {
    await t.cleanup();
  }
});

Deno.test("the launcher refuses a rerun whose script changed after it was verified, before anything starts", async () => {
  const t = new TestRun();
  try {
    const script = join(t.dir, "a.ts");
    Deno.writeTextFileSync(script, "// changed after verification\n");
    const opts = parseLaunchArgs(["--no-check", "--run-dir", join(t.dir, "r"), script]);
    assert.ok(opts !== "help");
    opts.expectScriptSha256 = "0".repeat(64);
    await assert.rejects(
      () => launch(opts, []),
      (e: Error) =>
        e instanceof UsageError &&
        /a\.ts changed after `dtrain rerun` verified it \(sha256 000000000000… then, [0-9a-f]{12}… now\); nothing was started/
          .test(e.message),
    );
    assert.throws(() => Deno.statSync(join(t.dir, "r")), Deno.errors.NotFound);
  } finally {
    await t.cleanup();
  }
});
