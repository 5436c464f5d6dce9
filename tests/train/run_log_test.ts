/**
 * RunLog, the run records of a loop of one's own: on 2 ranks its step lines
 * hold the loss averaged over ranks, the samples of all ranks and every
 * rank's step time; evaluations are weighted means over the ranks; the
 * indices a loop without a sampler drew become data_order.jsonl lines; and
 * the files read back through the run directory format.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readRunDir } from "../../run_record/format.ts";
import { RunLog } from "../../train/run_log.ts";
import { orderDigest } from "../../run_record/data_order.ts";
import { DistributedSampler } from "../../data/distributed_sampler.ts";
import { TestRun } from "../launch/launch_helpers.ts";
import { DEFAULT_NUMERICS } from "../../tensor/numerics_policy.ts";

const SCRIPT = new URL("./scripts/run_log_ranks.ts", import.meta.url).pathname;

Deno.test("RunLog on 2 ranks: mean losses, summed samples, weighted evaluations, drawn indices", async () => {
  const t = new TestRun();
  try {
    const runDir = join(t.dir, "run");
    const r = await t.finish(
      t.launch(["--nproc", "2", "--run-dir", runDir, SCRIPT]),
      60_000,
    );
    assert.equal(r.code, 0, r.stderr);
    const result = JSON.parse(/^\[r0\] RESULT (.*)$/m.exec(r.stdout)![1]!);
    assert.deepEqual(result.losses, [1.5, 3]);
    assert.deepEqual(result.evaluation, { acc: (30 * 1 + 10 * 0.5) / 40, loss: 3 });
    const run = readRunDir(runDir);
    assert.deepEqual(run.config, {
      config: { lr: 0.5, batchSize: 4, seed: 11 },
      seed: 11,
      worldSize: 2,
      device: "cpu",
      numerics: { ...DEFAULT_NUMERICS, dropout: false },
    });
    assert.deepEqual(run.run.attempts[0]!.numerics, { ...DEFAULT_NUMERICS, dropout: false });
    assert.deepEqual(
      run.metrics.map((m) => [m.step, m.loss, m.lr, m.samples, m.stepMsByRank!.length]),
      [[1, 1.5, 0.5, 9, 2], [2, 3, 0.25, 8, 2]],
    );
    assert.deepEqual(run.evals.map((e) => [e.step, e.metrics]), [[2, result.evaluation]]);
    assert.deepEqual(run.dataOrder, [
      orderDigest(0, 0, Int32Array.of(0, 1, 2)),
      orderDigest(0, 1, Int32Array.of(10, 11, 12)),
    ]);
  } finally {
    await t.cleanup();
  }
});

Deno.test("RunLog in one process records the sampler's order per epoch without consuming a pass", () => {
  const runDir = Deno.makeTempDirSync({ prefix: "dtrain-run-log-" });
  try {
    const warnings: string[] = [];
    const sampler = new DistributedSampler(10, {
      numReplicas: 1,
      rank: 0,
      seed: 3,
      onWarning: (w) => warnings.push(w),
    });
    const log = new RunLog({ config: { epochs: 2 }, runDir, sampler, tensorboard: false });
    for (let epoch = 0; epoch < 2; epoch++) {
      sampler.setEpoch(epoch);
      log.epoch(epoch);
      [...sampler];
      log.step({ loss: 1 / (epoch + 1), samples: 10, lr: 0.1 });
    }
    log.close();
    assert.deepEqual(warnings, []);
    const lines = Deno.readTextFileSync(join(runDir, "data_order.jsonl")).trim().split("\n");
    assert.deepEqual(lines.map((l) => JSON.parse(l)), [
      orderDigest(0, 0, sampler.indicesFor(0)),
      orderDigest(1, 0, sampler.indicesFor(1)),
    ]);
    const steps = Deno.readTextFileSync(join(runDir, "metrics.jsonl")).trim().split("\n");
    assert.deepEqual(steps.map((l) => JSON.parse(l).epoch), [0, 1]);
    assert.throws(() => log.step({ loss: 1, samples: 1, lr: 1 }), /the log was closed/);
  } finally {
    Deno.removeSync(runDir, { recursive: true });
  }
});

Deno.test("RunLog.step without a learning rate says where to give one", () => {
  const log = new RunLog({ config: {}, runDir: null });
  assert.throws(
    () => log.step({ loss: 1, samples: 1 }),
    /no learning rate .*pass the optimizer in RunLog's options, or lr in step\(\)/,
  );
  log.close();
});
