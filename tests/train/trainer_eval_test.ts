/**
 * The Trainer's evaluation, parameter groups and best checkpoint on 2
 * ranks: an async evalStep shared among the ranks gives the metrics of the
 * whole held-out set (equal to one process evaluating all of it), the
 * evaluations go to metrics.jsonl and the report, the best checkpoint by
 * accuracy is kept in checkpoints/best with its value recorded, and
 * nanoGPT's groups reach the optimizer.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO, TestRun } from "../launch/launch_helpers.ts";
import { readRunDir } from "../../run_record/format.ts";
import { reportMain } from "../../record_tools/report.ts";
import { CheckpointManager } from "../../train/checkpoint/manager.ts";

const SCRIPT = join(REPO, "tests/train/scripts/trainer_eval.ts");

Deno.test("Trainer on 2 ranks: shared evaluation equals one process's, best checkpoint, groups", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "run");
    const r = await t.finish(
      t.launch(["--nproc", "2", "--run-dir", runDir, SCRIPT], { env: { OUT_DIR: t.dir } }),
      120_000,
    );
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    const out = JSON.parse(Deno.readTextFileSync(join(t.dir, "trainer_eval.json")));
    // 256 samples, 32 per step: 8 steps per epoch; evaluations at 4, 8 (epoch end), 12, 16.
    assert.equal(out.steps, 16);
    const run = readRunDir(runDir);
    assert.deepEqual(run.evals.map((e) => [e.step, e.epoch]), [[4, 0], [8, 0], [12, 1], [16, 1]]);
    assert.deepEqual(run.evals.map((e) => e.metrics), out.evaluations);
    // Each step line holds the rate that step used: warmup (s + 1) / 3 of 3e-2 for steps 0, 1.
    assert.deepEqual(run.metrics.slice(0, 3).map((m) => m.lr), [1e-2, 2e-2, 3e-2]);
    // The last evaluation saw the final model: the same as rank 0 alone over all 101 samples.
    const last = out.evaluations.at(-1);
    assert.equal(last.accuracy, out.whole.accuracy);
    assert.ok(
      Math.abs(last.loss - out.whole.loss) <= 1e-6 * out.whole.loss,
      `${last.loss} vs ${out.whole.loss}`,
    );
    // The best accuracy and its checkpoint.
    const accs: number[] = out.evaluations.map((e: { accuracy: number }) => e.accuracy);
    const bestAt = accs.indexOf(Math.max(...accs));
    assert.deepEqual(out.best, {
      metric: "accuracy",
      value: accs[bestAt],
      step: run.evals[bestAt]!.step,
    });
    const best = new CheckpointManager(join(runDir, "checkpoints", "best"), { rank: 0 })
      .loadLatest()!;
    assert.equal(best.step, out.best.step);
    assert.deepEqual(best.state.best, out.best);
    assert.ok(best.files.has("model") && best.files.has("optimizer"));
    // nanoGPT's groups: 2 biases without decay, then 2 weight matrices with it.
    assert.deepEqual(out.groups, [{ count: 2, weightDecay: 0 }, { count: 2, weightDecay: 0.1 }]);
    const saved = JSON.parse(best.files.get("optimizer")!.metadata.param_groups!);
    assert.deepEqual(saved.map((g: { weight_decay: number }) => g.weight_decay), [0, 0.1]);
    // Evaluations in the report.
    assert.equal(await reportMain([runDir], () => {}, () => {}), 0);
    assert.match(Deno.readTextFileSync(join(runDir, "report.html")), /accuracy/);
  } finally {
    await t.cleanup();
  }
});
