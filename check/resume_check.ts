/**
 * Stage 3 of `dtrain check`, the resumed runs: the script restarted from the
 * step-j checkpoint must load it (each rank's parameters equal its own at
 * step j+1 of the original) and continue identically — on the original N
 * ranks bit for bit, and as a single process (a plain, unwrapped model)
 * within the stage-2 tolerance. A failure says what was measured not to be
 * restored (the samples, the random state, the rate, the optimizer's state).
 */
import {
  type CombinedStep,
  combineSteps,
  relDiff,
  type RunSteps,
  TOLERANCE,
} from "./gradient_stage.ts";
import type { ResumePlan } from "./state_stage.ts";
import { fail, pass, type Row, skip } from "./verdict.ts";

/** A resumed run and the original N-rank run it continues. */
export interface ResumeComparison {
  /** the original N-rank run, combined, all k steps */
  original: CombinedStep[] | string;
  resumed: RunSteps;
  /** ranks of the resumed run (1: a single process) */
  world: number;
  k: number;
  plan: ResumePlan;
}

/** Steps j+1..k of the resumed run next to the original's, with their differences. */
interface Continuation {
  resumed: CombinedStep[];
  original: CombinedStep[];
  lossDiff: number[];
  normDiff: number[];
  /** "steps 3-5" */
  span: string;
}

function continuation(c: ResumeComparison, exact: boolean): Continuation | string {
  const j = c.plan.checkpoint.step;
  if (typeof c.original === "string") return c.original;
  const resumed = combineSteps(c.resumed, c.world, c.k - j);
  if (typeof resumed === "string") return resumed;
  const original = c.original.slice(j);
  const diff = exact ? (x: number, y: number) => Math.abs(x - y) : relDiff;
  return {
    resumed,
    original,
    lossDiff: resumed.map((s, i) => diff(s.loss, original[i]!.loss)),
    normDiff: resumed.map((s, i) => diff(s.gradNorm, original[i]!.gradNorm)),
    span: j + 1 === c.k ? `step ${c.k}` : `steps ${j + 1}-${c.k}`,
  };
}

function maxText(xs: number[]): string {
  const m = Math.max(...xs);
  return m === 0 ? "0" : m.toExponential(1);
}

/** All ranks' samples of a step, sorted (a step's global batch), or null when a rank recorded none. */
function globalBatch(step: CombinedStep): number[] | null {
  if (step.samples.some((x) => x === null)) return null;
  return step.samples.flatMap((x) => x!).sort((a, b) => a - b);
}

function sameList(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

function some(xs: readonly number[]): string {
  const shown = xs.slice(0, 4).join(", ");
  return xs.length > 4 ? `${shown}, …` : shown;
}

/**
 * What differs at a resumed step against the original's, among what the
 * probe measures (the step's samples, the default generator's state, the
 * learning rate, the optimizer's state); null when all of them match.
 */
function measuredDifference(
  mine: CombinedStep,
  theirs: CombinedStep,
  label: string,
): string | null {
  const a = globalBatch(mine), b = globalBatch(theirs);
  if (a && b && !sameList(a, b)) {
    return `${label} trained on other samples than the original's (${some(a)} vs ${
      some(b)
    }): the data did not resume where it stopped — save the DataLoader's state (epoch, ` +
      "position) with the checkpoint and restore it (loader.loadState) before iterating";
  }
  if (mine.rng !== undefined && theirs.rng !== undefined && mine.rng !== theirs.rng) {
    return `the default generator's state at ${label} differs from the original's: the script ` +
      "draws random numbers during training and the resumed run did not restore them — save " +
      "getRngState(model) with the checkpoint and setRngState(state, model) after loading";
  }
  if (mine.lr !== undefined && theirs.lr !== undefined && mine.lr !== theirs.lr) {
    return `the learning rate at ${label} is ${mine.lr} vs the original's ${theirs.lr}: the ` +
      "schedule's position was not restored (LrScheduler.loadStateDict)";
  }
  if (
    mine.optimizer !== undefined && theirs.optimizer !== undefined &&
    mine.optimizer !== theirs.optimizer
  ) {
    return `the optimizer's state at ${label} differs from the original's (its moments or ` +
      "step counts): it was not restored from the checkpoint (optimizer.loadStateDict)";
  }
  return null;
}

/** The first step where the continuation leaves `limit`, explained by what was measured; null when it never does. */
function divergence(c: Continuation, j: number, limit: number): string | null {
  const bad = c.resumed.findIndex((_, i) => c.lossDiff[i]! > limit || c.normDiff[i]! > limit);
  if (bad < 0) return null;
  const p8 = (x: number) => x.toPrecision(8);
  const [mine, theirs] = [p8(c.resumed[bad]!.loss), p8(c.original[bad]!.loss)];
  const at = `step ${j + bad + 1}: loss ${mine} vs ${theirs}`;
  // The first resumed step shows what the load restored; a later one what the steps carried on.
  for (const i of bad === 0 ? [0] : [0, bad]) {
    const why = measuredDifference(c.resumed[i]!, c.original[i]!, `step ${j + i + 1}`);
    if (why !== null) {
      return bad === 0 ? `${at}: ${why}` : `step ${j + 1} matches but ${at}: ${why}`;
    }
  }
  const same = "the same samples" +
    (c.resumed[0]!.rng !== undefined ? ", random state, learning rate and optimizer state" : "");
  if (bad === 0) {
    return `${at}, with the saved parameters and ${same} as the original: the forward ` +
      "depends on something the checkpoint does not restore (state kept outside the " +
      "parameters, such as a buffer)";
  }
  return `step ${j + 1} matches but ${at}, with ${same} at step ${j + 1}: the update ` +
    "depends on something the checkpoint does not restore";
}

/**
 * The script resumed on the original N ranks: every rank's parameters after
 * the load equal its own at step j+1 of the original, and steps j+1..k repeat
 * the original's losses and gradient norms bit for bit.
 */
export function checkResumeOnRanks(c: ResumeComparison): Row {
  const j = c.plan.checkpoint.step;
  const check = `resume on ${c.world} ranks from step ${j}`;
  const cont = continuation(c, true);
  if (typeof cont === "string") return fail("state", check, `from step ${j}`, cont);
  const params = compareParams(cont.resumed[0]!, cont.original[0]!, c.world);
  const measured = `${params.measured}; ${cont.span}: loss max |diff| ` +
    `${maxText(cont.lossDiff)}, grad norm ${maxText(cont.normDiff)}`;
  if (params.problem) return fail("state", check, measured, params.problem(c.plan));
  const cause = divergence(cont, j, 0);
  return cause ? fail("state", check, measured, cause) : pass("state", check, measured);
}

/**
 * The script resumed as a single process (a plain model, no DDP wrapper):
 * one row for the load (parameters equal the saved ones bit for bit), one
 * for the continuation (within TOLERANCE of the N-rank run). The second is
 * skipped when stage 2 found the N-rank run differing from a single process,
 * since one process cannot then continue it identically.
 */
export function checkResumeInOneProcess(c: ResumeComparison, nRanksMatchOne: boolean): Row[] {
  const j = c.plan.checkpoint.step;
  const load = "load into 1 process";
  const resume = `resume in 1 process from step ${j}`;
  const cont = continuation(c, false);
  if (typeof cont === "string") return [fail("state", load, `from step ${j}`, cont)];
  const params = compareParams(cont.resumed[0]!, cont.original[0]!, 1);
  if (params.problem) return [fail("state", load, params.measured, params.problem(c.plan))];
  const loaded = params.measured.replace(" on 1/1 ranks", "");
  const loadRow = pass("state", load, `${loaded} (strict load, no DDP wrapper)`);
  const measured = `${cont.span}: loss max rel diff ${maxText(cont.lossDiff)}, ` +
    `grad norm ${maxText(cont.normDiff)}`;
  if (!nRanksMatchOne) {
    const why = "stage 2 found the distributed run differing from a single process, so one " +
      "process cannot continue it identically";
    return [loadRow, skip("state", resume, measured, why)];
  }
  const cause = divergence(cont, j, TOLERANCE);
  return [
    loadRow,
    cause ? fail("state", resume, measured, cause) : pass("state", resume, measured),
  ];
}

/** Parameters at the resumed run's first step against the original's at step j+1 (rank by rank; one process: rank 0's). */
function compareParams(
  resumed: CombinedStep,
  original: CombinedStep,
  world: number,
): { measured: string; problem?: (plan: ResumePlan) => string } {
  const ranks = Array.from({ length: world }, (_, r) => r);
  if (ranks.some((r) => resumed.params[r] === null || original.params[r] === null)) {
    return { measured: "parameters not recorded" };
  }
  const differ = ranks.filter((r) => resumed.params[r] !== original.params[r]);
  const measured = `parameters after load = saved on ${world - differ.length}/${world} ranks`;
  if (differ.length === 0) return { measured };
  if (differ[0] === 0) {
    const problem = (plan: ResumePlan) =>
      "the resumed run did not start from the checkpoint: its parameters at step " +
      `${plan.checkpoint.step + 1} are not the saved ones — does the script load the latest ` +
      `checkpoint in <run dir>/${plan.root} (CheckpointManager.loadLatest()) into the model ` +
      "before training?";
    return { measured, problem };
  }
  const problem = () =>
    `after loading, rank ${differ.join(", ")} holds parameters other than the ones it trained ` +
    "with: the ranks held different parameters when rank 0 saved, so only rank 0's survived " +
    "the checkpoint (a rank-dependent initialisation that is never broadcast?)";
  return { measured, problem };
}
