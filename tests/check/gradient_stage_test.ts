/**
 * Tests of check/gradient_stage.ts on synthetic step records: agreeing runs
 * pass, and each pattern of disagreement (summed loss, ranks out of sync,
 * unaveraged gradients, a changed global batch, a later divergence, a run
 * under the launcher that differs from alone, missing steps) names its cause.
 */
import assert from "node:assert/strict";
import type { StepRecord } from "../../check/events.ts";
import { checkGradients, relDiff } from "../../check/gradient_stage.ts";
import { assertFailsWith, rowOf, withOutcome } from "./_helpers.ts";

const LOSSES = [0.69, 0.6, 0.52, 0.47];
const NORMS = [0.41, 0.35, 0.3, 0.28];

/** A run of `world` ranks whose step losses average to `losses`, all ranks with grad norm `norms` and the same parameters. */
function run(
  world: number,
  losses = LOSSES,
  norms = NORMS,
  params = (s: number, _rank: number) => [`p${s}`],
): { ranks: Map<number, StepRecord[]> } {
  const ranks = new Map<number, StepRecord[]>();
  for (let r = 0; r < world; r++) {
    // rank losses differ (other samples) but average to the step loss
    const offset = (r - (world - 1) / 2) * 0.01;
    ranks.set(
      r,
      losses.map((loss, s) => ({ loss: loss + offset, gradNorm: norms[s]!, params: params(s, r) })),
    );
  }
  return { ranks };
}

const K = { nproc: 2, steps: 4 };

Deno.test("checkGradients() passes runs that agree to f32 rounding", () => {
  const nudged = LOSSES.map((l) => l * (1 + 3e-7));
  const { rows, distributedMatchesSingle } = checkGradients({
    single: run(1),
    world1: run(1),
    worldN: run(2, nudged),
  }, K);
  assert.deepEqual(withOutcome(rows, "FAIL"), []);
  assert.ok(distributedMatchesSingle);
  assert.match(
    rowOf(rows, "gradients", "world 2 vs single").measured,
    /^loss max rel diff 3\.0e-7, grad norm 0\.0e\+0 over 4 steps$/,
  );
  assert.equal(
    rowOf(rows, "gradients", "ranks in sync").measured,
    "parameters identical at 4/4 steps, grad norms max rel diff 0.0e+0",
  );
});

Deno.test("checkGradients() names a summed loss when N ranks report 1/N of the loss and gradient", () => {
  const half = (xs: number[]) => xs.map((x) => x / 2);
  const { rows, distributedMatchesSingle } = checkGradients(
    { single: run(1), world1: run(1), worldN: run(2, half(LOSSES), half(NORMS)) },
    K,
  );
  assert.deepEqual(withOutcome(rows, "FAIL"), ["gradients / world 2 vs single process"]);
  assert.ok(!distributedMatchesSingle);
  assertFailsWith(
    rows,
    "gradients",
    "world 2 vs single",
    "1/2 of the single process's",
    "summed over the batch instead of averaged",
  );
});

Deno.test("checkGradients() finds ranks that start from different parameters", () => {
  const rankInit = run(2, LOSSES.map((l) => l + 0.02), NORMS, (s, r) => [`p${s}-rank${r}`]);
  const { rows } = checkGradients({ single: run(1), world1: run(1), worldN: rankInit }, K);
  assertFailsWith(
    rows,
    "gradients",
    "ranks in sync",
    "differ between ranks before the first update",
    "never broadcast",
  );
  assert.equal(
    rowOf(rows, "gradients", "ranks in sync").measured.split(",")[0],
    "parameters identical at 0/4 steps",
  );
  assertFailsWith(rows, "gradients", "world 2 vs single", "out of sync");
});

Deno.test("checkGradients() finds unaveraged gradients and ranks that drift apart later", () => {
  const unaveraged = run(2);
  unaveraged.ranks.get(1)![0]!.gradNorm = 0.5;
  assertFailsWith(
    checkGradients({ single: run(1), world1: run(1), worldN: unaveraged }, K).rows,
    "gradients",
    "ranks in sync",
    "differ between ranks at step 1 (rank 0: 0.410000, rank 1: 0.500000)",
    "not averaged",
  );
  const drift = run(2, LOSSES, NORMS, (s, r) => [s >= 2 ? `p${s}-rank${r}` : `p${s}`]);
  assertFailsWith(
    checkGradients({ single: run(1), world1: run(1), worldN: drift }, K).rows,
    "gradients",
    "ranks in sync",
    "agree at step 1 but differ between ranks from step 3",
  );
});

/** `r` with each step's samples recorded: rank r of `world` takes `per` samples of step s. */
function withSamples(
  r: { ranks: Map<number, StepRecord[]> },
  per: number,
  world: number,
  shift = 0,
): { ranks: Map<number, StepRecord[]> } {
  for (const [rank, steps] of r.ranks) {
    steps.forEach((st, s) => {
      st.samples = Array.from(
        { length: per },
        (_, i) => shift + s * per * world + rank + i * world,
      );
    });
  }
  return r;
}

Deno.test("checkGradients() names a step-1 loss difference by the samples it measured", () => {
  const differ = LOSSES.map((l) => l * 1.01), lower = NORMS.map((g) => g / Math.SQRT2);
  // The tutorial's per-rank batch: 2 x 4 samples against the single process's 4.
  const bigBatch = withSamples(run(2, differ, lower), 4, 2);
  const rows = checkGradients({
    single: withSamples(run(1), 4, 1),
    world1: run(1),
    worldN: bigBatch,
  }, K).rows;
  assertFailsWith(
    rows,
    "gradients",
    "world 2 vs single",
    "the 2 ranks trained on 8 samples in step 1 together (rank 0: 4, rank 1: 4), the single process on 4",
  );
  assert.doesNotMatch(rowOf(rows, "gradients", "world 2 vs single").cause!, /sqrt|summed/);
  // As many samples, but other ones.
  const others = withSamples(run(2, differ), 2, 2, 100);
  assertFailsWith(
    checkGradients({ single: withSamples(run(1), 4, 1), world1: run(1), worldN: others }, K).rows,
    "gradients",
    "world 2 vs single",
    "step 1 of the 2 ranks trained on other samples than the single process's step 1 (4 of 4 differ",
  );
  // The same samples, yet another loss: what depends on how the batch is split.
  const same = withSamples(run(2, differ), 2, 2);
  assertFailsWith(
    checkGradients({ single: withSamples(run(1), 4, 1), world1: run(1), worldN: same }, K).rows,
    "gradients",
    "world 2 vs single",
    "trained on exactly the single process's samples, from the same parameters, yet the mean loss",
  );
  // Nothing recorded: no guess.
  assertFailsWith(
    checkGradients({ single: run(1), world1: run(1), worldN: run(2, differ, lower) }, K).rows,
    "gradients",
    "world 2 vs single",
    "the samples of the steps were not recorded",
  );
});

Deno.test("checkGradients() separates gradients summed over ranks from a later divergence", () => {
  const summedGrads = run(2, LOSSES, NORMS.map((g) => g * 2));
  assertFailsWith(
    checkGradients({ single: run(1), world1: run(1), worldN: summedGrads }, K).rows,
    "gradients",
    "world 2 vs single",
    "loss agrees",
    "summed over the 2 ranks instead of averaged",
  );
  const later = run(2, LOSSES.map((l, s) => (s === 2 ? l * 1.1 : l)));
  assertFailsWith(
    checkGradients({ single: run(1), world1: run(1), worldN: later }, K).rows,
    "gradients",
    "world 2 vs single",
    "step 1 agrees but step 3:",
  );
});

Deno.test("checkGradients() blames the launcher environment when world 1 differs from alone", () => {
  const { rows } = checkGradients({
    single: run(1),
    world1: run(1, LOSSES.map((l) => l + 0.1)),
    worldN: run(2),
  }, K);
  assert.deepEqual(withOutcome(rows, "FAIL"), ["gradients / world 1 vs single process"]);
  assertFailsWith(
    rows,
    "gradients",
    "world 1 vs single",
    "under the launcher with one rank",
    "RANK, WORLD_SIZE",
  );
});

Deno.test("checkGradients() fails runs that crashed or stepped too few times", () => {
  const short = run(2);
  short.ranks.get(1)!.pop();
  const { rows } = checkGradients({
    single: { failed: "the run (single process) exited with code 1" },
    world1: run(1),
    worldN: short,
  }, K);
  assertFailsWith(rows, "gradients", "ranks in sync", "rank 1 recorded 3 of 4 optimizer steps");
  assertFailsWith(
    rows,
    "gradients",
    "world 1 vs single",
    "single process: the run (single process) exited with code 1",
  );
});

Deno.test("relDiff() is relative to the reference and exact for equal values", () => {
  assert.equal(relDiff(1.5, 1.5), 0);
  assert.equal(relDiff(0, 0), 0);
  assert.ok(Math.abs(relDiff(1.0001, 1) - 1e-4) < 1e-12);
  assert.ok(relDiff(1e-3, 0) > 1e6);
});
