/**
 * A 2-rank Trainer run on emulated GPUs with f16 autocast, the GradScaler
 * (its inf/NaN flag reduced on the device) and clipping, checkpointing
 * device tensors every 2 steps; then `--resume` from its step-2 checkpoint
 * in a new run, which must continue with the same losses and gradient norms
 * bit for bit, and record where it resumed from, the device and the backend.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { HAVE_EMU } from "./_emu.ts";

function metrics(runDir: string): Record<string, number>[] {
  return Deno.readTextFileSync(join(runDir, "metrics.jsonl")).trim().split("\n").map((l) =>
    JSON.parse(l)
  );
}

Deno.test({
  name:
    "Trainer on cuda-emu: AMP + GradScaler, checkpoints of device tensors, --resume continues exactly",
  ignore: !HAVE_EMU,
  async fn() {
    const t = new TestRun();
    try {
      const script = join(REPO, "scripts/gpu_check/train_job.ts");
      const first = join(t.dir, "first"), second = join(t.dir, "second");
      const a = await t.finish(
        t.launch(["--nproc", "2", "--device", "cuda-emu", "--run-dir", first, script, "4"]),
        180_000,
      );
      assert.equal(a.code, 0, a.stdout + a.stderr);
      const from = join(first, "checkpoints", "step-00000002");
      const b = await t.finish(
        t.launch([
          "--nproc",
          "2",
          "--device",
          "cuda-emu",
          "--run-dir",
          second,
          "--resume",
          from,
          script,
          "4",
        ]),
        180_000,
      );
      assert.equal(b.code, 0, b.stdout + b.stderr);
      assert.match(b.stdout, new RegExp(`resumed from ${from}: epoch 0, step 2`));
      const [ma, mb] = [metrics(first), metrics(second)];
      assert.deepEqual(ma.map((m) => m.step), [1, 2, 3, 4]);
      assert.deepEqual(mb.map((m) => m.step), [3, 4]);
      for (const m of mb) {
        const ref = ma.find((x) => x.step === m.step)!;
        assert.equal(m.loss, ref.loss, `step ${m.step}: loss after resume`);
        assert.equal(m.gradNorm, ref.gradNorm, `step ${m.step}: grad norm after resume`);
        assert.equal(m.lossScale, ref.lossScale);
      }
      assert.ok(ma.every((m) => m.lossScale === 65536 && Number.isFinite(m.loss)));
      const config = JSON.parse(Deno.readTextFileSync(join(second, "config.json")));
      assert.equal(config.device, "cuda-emu");
      assert.equal(config.processGroup, "nccl");
      assert.equal(config.config.precision.autocast, "f16");
      const run = JSON.parse(Deno.readTextFileSync(join(second, "run.json")));
      assert.equal(run.resume, from);
      assert.equal(run.world.backend, "nccl");
      assert.equal(run.attempts[0].processGroup.backend, "nccl");
    } finally {
      await t.cleanup();
    }
  },
});

Deno.test("--resume of a folder that does not exist is refused before anything starts", async () => {
  const t = new TestRun();
  try {
    const r = await t.finish(
      t.launch(["--resume", join(t.dir, "nope"), join(REPO, "scripts/gpu_check/train_job.ts")]),
    );
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /--resume .*nope: no such folder/);
  } finally {
    await t.cleanup();
  }
});
