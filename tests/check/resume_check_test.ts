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

/** What the probe measures at step s (1-based) on rank r of the original run. */
function measured(s: number, r: number, world: number): Omit<StepRecord, "loss" | "gradNorm"> {
  // Rank r's share of the step's global batch of 4 samples.
  const samples = [0, 1, 2, 3].filter((i) => i % world === r).map((i) => 4 * s + i);
  return { params: [`p${s}-r${r}`], samples, lr: 0.1, rng: `g${s}`, optimizer: `o${s}` };
}

/** A combined original run of `world` ranks with params "p<step>-r<rank>". */
function original(world: number, losses: number[]): CombinedStep[] {
  const ranks = new Map<number, StepRecord[]>();
  for (let r = 0; r < world; r++) {
    ranks.set(
      r,
      losses.map((loss, s) => ({ loss, gradNorm: loss / 2, ...measured(s + 1, r, world) })),
    );
  }
  return combineSteps({ ranks }, world, losses.length) as CombinedStep[];
}

/** A resumed run continuing from step j with the original's numbers, optionally changed. */
function resumed(
  world: number,
  losses: number[],
  params = (s: number, r: number) => [`p${s}-r${r}`],
  change: (s: number, rec: StepRecord) => void = () => {},
) {
  const j = 4 - losses.length;
  const ranks = new Map<number, StepRecord[]>();
  for (let r = 0; r < world; r++) {
    ranks.set(
      r,
      losses.map((loss, i) => {
        const rec: StepRecord = {
          loss,
          gradNorm: loss / 2,
          ...measured(j + i + 1, r, world),
          params: params(j + i + 1, r),
        };
        change(j + i + 1, rec);
        return rec;
      }),
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
  assert.match(
    tiny.cause!,
    /step 3 matches but step 4: .*with the same samples, random state, learning rate and optimizer state at step 3/,
  );
  const pass = (s: number, r: number) => [`p${s}-r${r}`];
  const data = checkResumeOnRanks({
    ...base,
    resumed: resumed(2, [0.55, 0.45], pass, (s, rec) => {
      if (s === 3) rec.samples = rec.samples!.map((i) => i - 4); // step 2's samples again
    }),
  });
  assert.match(
    data.cause!,
    /step 3 trained on other samples than the original's \(8, 9, 10, 11 vs 12, 13, 14, 15\): the data did not resume/,
  );
  const rng = checkResumeOnRanks({
    ...base,
    resumed: resumed(2, [0.55, 0.45], pass, (s, rec) => {
      rec.rng = `fresh${s}`;
    }),
  });
  assert.match(rng.cause!, /default generator's state at step 3 differs .*setRngState/);
  const lr = checkResumeOnRanks({
    ...base,
    resumed: resumed(2, [0.5, 0.47], pass, (s, rec) => {
      if (s === 3) rec.lr = 0.2;
    }),
  });
  assert.match(
    lr.cause!,
    /step 3 matches but step 4: .*the learning rate at step 3 is 0\.2 vs the original's 0\.1/,
  );
  const moments = checkResumeOnRanks({
    ...base,
    resumed: resumed(2, [0.5, 0.47], pass, (s, rec) => {
      rec.optimizer = `zero${s}`;
    }),
  });
  assert.match(
    moments.cause!,
    /the optimizer's state at step 3 differs .*optimizer\.loadStateDict/,
  );
  const unknown = checkResumeOnRanks({ ...base, resumed: resumed(2, [0.55, 0.45]) });
  assert.match(
    unknown.cause!,
    /step 3: .*with the saved parameters and the same samples, random state/,
  );
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
