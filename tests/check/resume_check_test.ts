/**
 * Tests of check/resume_check.ts on synthetic step records: a resumed run
 * passes when it continues the original exactly (N ranks) or within
 * tolerance (one process), and each way a resume breaks names its cause.
 */
import assert from "node:assert/strict";
import { type CombinedStep, combineSteps } from "../../check/gradient_stage.ts";
import type { StepRecord } from "../../check/events.ts";
import { checkResumeInOneProcess, checkResumeOnRanks } from "../../check/resume_check.ts";
import type { ResumePlan } from "../../check/state_stage.ts";
import { assertFailsWith, rowOf } from "./_helpers.ts";

/** A combined original run of `world` ranks with params "p<step>-r<rank>". */
function original(world: number, losses: number[]): CombinedStep[] {
  const ranks = new Map<number, StepRecord[]>();
  for (let r = 0; r < world; r++) {
    ranks.set(
      r,
      losses.map((loss, s) => ({ loss, gradNorm: loss / 2, params: [`p${s + 1}-r${r}`] })),
    );
  }
  return combineSteps({ ranks }, world, losses.length) as CombinedStep[];
}

/** A resumed run continuing from step j with the original's numbers, optionally changed. */
function resumed(
  world: number,
  losses: number[],
  params = (s: number, r: number) => [`p${s}-r${r}`],
) {
  const j = 4 - losses.length;
  const ranks = new Map<number, StepRecord[]>();
  for (let r = 0; r < world; r++) {
    ranks.set(
      r,
      losses.map((loss, i) => ({ loss, gradNorm: loss / 2, params: params(j + i + 1, r) })),
    );
  }
  return { ranks };
}

const PLAN: ResumePlan = {
  checkpoint: { step: 2, dir: "/r/checkpoints/step-00000002", copy: "/k" },
  root: "checkpoints",
};
const LOSSES = [0.7, 0.6, 0.5, 0.45];

Deno.test("checkResumeOnRanks() passes a bit-identical continuation and explains each kind of break", () => {
  const base = { original: original(2, LOSSES), world: 2, k: 4, plan: PLAN };
  const ok = checkResumeOnRanks({ ...base, resumed: resumed(2, [0.5, 0.45]) });
  assert.equal(ok.outcome, "PASS");
  assert.equal(
    ok.measured,
    "parameters after load = saved on 2/2 ranks; steps 3-4: loss max |diff| 0, grad norm 0",
  );
  const tiny = checkResumeOnRanks({ ...base, resumed: resumed(2, [0.5, 0.45 + 1e-12]) });
  assert.equal(tiny.outcome, "FAIL", "on the same world size the continuation must be bit for bit");
  assert.match(tiny.cause!, /optimizer state, the learning-rate schedule or the RNG/);
  const data = checkResumeOnRanks({ ...base, resumed: resumed(2, [0.55, 0.45]) });
  assert.match(data.cause!, /data did not resume where it stopped/);
  const fresh = checkResumeOnRanks({
    ...base,
    resumed: resumed(2, [0.7, 0.6], (s, r) => [`p${s - 2}-r${r}`]),
  });
  assert.match(fresh.cause!, /did not start from the checkpoint: its parameters at step 3/);
  const rank1 = checkResumeOnRanks({
    ...base,
    resumed: resumed(2, [0.5, 0.45], (s, _r) => [`p${s}-r0`]),
  });
  assert.match(rank1.cause!, /rank 1 holds parameters other than the ones it trained with/);
  assert.match(rank1.measured, /= saved on 1\/2 ranks/);
  const short = checkResumeOnRanks({ ...base, resumed: resumed(2, [0.45]) });
  assert.match(short.cause!, /recorded 1 of 2 optimizer steps/);
});

Deno.test("checkResumeInOneProcess() checks the load exactly and the continuation within tolerance", () => {
  const base = { original: original(2, LOSSES), world: 1, k: 4, plan: PLAN };
  const close = resumed(1, [0.5 * (1 + 2e-7), 0.45]);
  const rows = checkResumeInOneProcess({ ...base, resumed: close }, true);
  assert.deepEqual(rows.map((r) => [r.check, r.outcome]), [["load into 1 process", "PASS"], [
    "resume in 1 process from step 2",
    "PASS",
  ]]);
  assert.equal(rows[0]!.measured, "parameters after load = saved (strict load, no DDP wrapper)");
  const far = checkResumeInOneProcess({ ...base, resumed: resumed(1, [0.5, 0.46]) }, true);
  assertFailsWith(far, "state", "resume in 1 process", "step 3 matches but step 4");
  const skipped = checkResumeInOneProcess({ ...base, resumed: resumed(1, [0.5, 0.46]) }, false);
  assert.equal(rowOf(skipped, "state", "resume in 1 process").outcome, "SKIP");
  const notLoaded = checkResumeInOneProcess({
    ...base,
    resumed: resumed(1, [0.7, 0.6], (s) => [`p${s - 2}-r0`]),
  }, true);
  assertFailsWith(notLoaded, "state", "load into 1 process", "did not start from the checkpoint");
  const crashed = checkResumeInOneProcess({
    ...base,
    resumed: { failed: "the run exited with code 1: StateDictError" },
  }, true);
  assertFailsWith(crashed, "state", "load into 1 process", "StateDictError");
});
