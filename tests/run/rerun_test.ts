/**
 * `dtrain rerun`: a relaunched run repeats the original's per-step losses bit
 * for bit on the CPU, and a changed script is refused unless forced.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { TestRun } from "../launch/launch_helpers.ts";
import { rerunArgv } from "../../run/rerun.ts";

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
    assert.equal(r.code, 1);
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
