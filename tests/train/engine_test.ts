/**
 * The Trainer end to end under the launcher, on the toy_mlp fixture: DDP
 * matches PyTorch's single process; resuming gives bit-identical losses and
 * weights at the same world size and skips or repeats no sample at another;
 * --max-restarts resumes from the latest checkpoint; SIGTERM saves and stops.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildNative } from "../../scripts/build_native.ts";
import { REPO, TestRun, waitUntil } from "../launch/launch_helpers.ts";
import { defaultFixtureDir, FixtureDir, toFloat32 } from "../../parity/fixtures.ts";
import { maxRelError, relL2Error } from "../../parity/report.ts";
import { readSafetensorsFile } from "../../io/safetensors.ts";

buildNative({ quiet: true });
const SCRIPT = join(REPO, "tests/train/scripts/toy_fixture_train.ts");
const fx = new FixtureDir(defaultFixtureDir());

interface Outcome {
  losses: number[];
  final: Map<string, Uint8Array>;
}

async function train(
  t: TestRun,
  nproc: number,
  runDir: string,
  env: Record<string, string>,
  extra: string[] = [],
  attempt = 0,
): Promise<Outcome> {
  const out = join(t.dir, "out");
  Deno.mkdirSync(out, { recursive: true });
  const l = t.launch(["--nproc", String(nproc), "--run-dir", runDir, ...extra, SCRIPT], {
    env: { OUT_DIR: out, ...env },
  });
  const r = await t.finish(l, 60_000);
  assert.equal(r.code, 0, `launcher failed:\n${r.stdout}\n${r.stderr}`);
  const result = JSON.parse(Deno.readTextFileSync(join(out, `result-${attempt}.json`)));
  const final = new Map(
    [...readSafetensorsFile(join(out, `final-${attempt}.safetensors`)).tensors].map((
      [k, v],
    ) => [k, v.data]),
  );
  return { losses: result.losses, final };
}

function sameBits(a: Map<string, Uint8Array>, b: Map<string, Uint8Array>): boolean {
  return [...a].every(([k, v]) => {
    const w = b.get(k);
    return w !== undefined && w.length === v.length && v.every((x, i) => x === w[i]);
  });
}

Deno.test("Trainer: 2-rank DDP of the toy_mlp fixture matches PyTorch's single-process losses and weights", async () => {
  const t = new TestRun();
  try {
    const run = await train(t, 2, join(t.dir, "ddp"), { RESUME: "never" });
    const ref = fx.json("toy_mlp.json").variants.a;
    assert.ok(
      maxRelError(run.losses, ref.losses) < 1e-5,
      `losses: ${maxRelError(run.losses, ref.losses)}`,
    );
    const refFinal = fx.tensors("toy_mlp_a_final.safetensors");
    for (const [name, bytes] of run.final) {
      const got = new Float32Array(bytes.slice().buffer);
      const e = relL2Error(got, toFloat32(refFinal.get(name)!, name));
      assert.ok(e < 1e-4, `${name}: rel L2 ${e}`);
    }
  } finally {
    await t.cleanup();
  }
});

Deno.test("Trainer: resuming from step 12 is bit-identical to the uninterrupted run (same world size)", async () => {
  const t = new TestRun();
  try {
    const full = await train(t, 2, join(t.dir, "full"), { RESUME: "never" });
    const dir = join(t.dir, "resumed");
    const first = await train(t, 2, dir, { STEPS: "12", CKPT_EVERY: "4" });
    assert.deepEqual(first.losses, full.losses.slice(0, 12));
    // A second launch into the run directory is the run's attempt 1 (run.json continues).
    const rest = await train(t, 2, dir, {}, [], 1);
    assert.deepEqual(rest.losses, full.losses.slice(12), "losses after the resume differ");
    assert.ok(sameBits(rest.final, full.final), "final weights differ from the uninterrupted run");
  } finally {
    await t.cleanup();
  }
});

Deno.test("Trainer: resuming on 1 rank after 2 continues the epoch without skipping or repeating a sample", async () => {
  const t = new TestRun();
  try {
    const full = await train(t, 2, join(t.dir, "full"), { RESUME: "never" });
    const dir = join(t.dir, "shrunk");
    await train(t, 2, dir, { STEPS: "12" });
    const rest = await train(t, 1, dir, {}, [], 1);
    // Epoch 0 had 16 steps of 64 samples; 12 were done on 2 ranks, the rest runs on 1.
    const orders = Deno.readTextFileSync(join(dir, "data_order.jsonl")).trim().split("\n").map((
      l,
    ) => JSON.parse(l));
    const resumed = orders.find((o) => o.epoch === 0 && o.count === 256);
    assert.ok(
      resumed,
      `no resumed epoch-0 order in ${
        JSON.stringify(orders.map((o) => [o.epoch, o.rank, o.count]))
      }`,
    );
    assert.deepEqual(resumed.first, Array.from({ length: 16 }, (_, i) => 768 + i));
    // Same global batches, another reduction order: losses agree to float rounding.
    assert.equal(rest.losses.length, 20);
    assert.ok(maxRelError(rest.losses, full.losses.slice(12)) < 1e-5);
  } finally {
    await t.cleanup();
  }
});

Deno.test("launcher --max-restarts: the second attempt resumes from the latest checkpoint and ends identical", async () => {
  const t = new TestRun();
  try {
    const full = await train(t, 2, join(t.dir, "full"), { RESUME: "never" });
    const restarted = await train(
      t,
      2,
      join(t.dir, "crash"),
      { CRASH_AT_STEP: "10", CKPT_EVERY: "4" },
      ["--max-restarts", "1"],
      1,
    );
    assert.deepEqual(restarted.losses, full.losses.slice(8));
    assert.ok(sameBits(restarted.final, full.final));
  } finally {
    await t.cleanup();
  }
});

Deno.test("SIGTERM to the launcher: ranks finish the step, rank 0 saves, all exit within the grace period", async () => {
  const t = new TestRun();
  try {
    const dir = join(t.dir, "preempt");
    const l = t.launch(["--nproc", "2", "--run-dir", dir, "--grace", "20", SCRIPT], {
      env: { EPOCHS: "200", OUT_DIR: join(t.dir, "out") },
    });
    const metrics = join(dir, "metrics.jsonl");
    await waitUntil(
      () => {
        try {
          return Deno.readTextFileSync(metrics).split("\n").length > 5;
        } catch {
          return false;
        }
      },
      30_000,
      "5 training steps",
    );
    Deno.kill(l.pid, "SIGTERM");
    const r = await t.finish(l, 25_000);
    assert.match(r.stdout, /stopping at step (\d+) on request/);
    const step = Number(/stopping at step (\d+)/.exec(r.stdout)![1]);
    const latest = Deno.readTextFileSync(join(dir, "checkpoints", "latest")).trim();
    assert.equal(latest, `step-${String(step).padStart(8, "0")}`);
  } finally {
    await t.cleanup();
  }
});
