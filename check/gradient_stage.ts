/**
 * Stage 2 of `dtrain check`, the arithmetic: the first K steps' losses and
 * gradient norms of (a) a single process with global batch B, (b) the
 * launcher with one rank and (c) the launcher with N ranks must agree within
 * a relative 1e-4 (f32 reduction order moves them by ~1e-6), and the N ranks
 * must hold the same parameters and gradient norms at every step. A failure
 * names the cause the numbers point to.
 */
import type { StepRecord } from "./events.ts";
import { fail, pass, type Row } from "./verdict.ts";

/** Relative agreement required between runs (f32 reduction-order differences are ~1e-6). */
export const TOLERANCE = 1e-4;

/** Each rank's steps in one run, or why the run gave none. */
export type RunSteps = { ranks: Map<number, StepRecord[]> } | { failed: string };

/** One step of a run: the loss averaged over ranks, and what each rank saw. */
export interface CombinedStep {
  loss: number;
  /** rank 0's (all ranks agree after averaging; otherwise the sync row reports it) */
  gradNorm: number;
  gradNorms: number[];
  /** each rank's parameter digests joined, or null where a rank recorded none */
  params: (string | null)[];
}

/** The three runs the stage compares. */
export interface GradientRuns {
  single: RunSteps;
  world1: RunSteps;
  worldN: RunSteps;
}

/** Relative difference of x from the reference y. */
export function relDiff(x: number, y: number): number {
  if (x === y) return 0;
  return Math.abs(x - y) / Math.max(Math.abs(y), 1e-12);
}

function sci(x: number): string {
  return Number.isFinite(x) ? x.toExponential(1) : String(x);
}

/**
 * The first `k` steps of a run, combined over its `world` ranks; a string
 * says why they are not there (a failed run, a rank that stepped fewer times).
 */
export function combineSteps(run: RunSteps, world: number, k: number): CombinedStep[] | string {
  if ("failed" in run) return run.failed;
  const ranks = Array.from({ length: world }, (_, r) => r);
  for (const r of ranks) {
    const n = run.ranks.get(r)?.length ?? 0;
    if (n < k) {
      return `rank ${r} recorded ${n} of ${k} optimizer steps: the script must run at least ${k} steps ` +
        "(use --steps to ask for fewer)";
    }
  }
  return Array.from({ length: k }, (_, s) => {
    const at = ranks.map((r) => run.ranks.get(r)![s]!);
    return {
      loss: at.reduce((a, x) => a + x.loss, 0) / world,
      gradNorm: at[0]!.gradNorm,
      gradNorms: at.map((x) => x.gradNorm),
      params: at.map((x) => x.params?.join(",") ?? null),
    };
  });
}

/** The stage's verdict. */
export interface GradientVerdict {
  /** the N ranks in sync, then world 1 and world N each against the single process */
  rows: Row[];
  /** true when the N-rank run agrees with the single process (a single process can then continue its checkpoints) */
  distributedMatchesSingle: boolean;
}

/** Compares the three runs of stage 2 over their first `steps` optimizer steps. */
export function checkGradients(
  runs: GradientRuns,
  opts: { nproc: number; steps: number },
): GradientVerdict {
  const { nproc, steps: k } = opts;
  const single = combineSteps(runs.single, 1, k);
  const world1 = combineSteps(runs.world1, 1, k);
  const worldN = combineSteps(runs.worldN, nproc, k);
  const sync = syncRow(worldN, nproc);
  const distributed = compareRow(
    `world ${nproc} vs single process`,
    worldN,
    single,
    nproc,
    sync.outcome === "FAIL" ? sync : null,
  );
  return {
    rows: [sync, compareRow("world 1 vs single process", world1, single, 1, null), distributed],
    distributedMatchesSingle: distributed.outcome === "PASS",
  };
}

function syncRow(run: CombinedStep[] | string, nproc: number): Row {
  const check = `ranks in sync (${nproc} ranks)`;
  if (typeof run === "string") return fail("gradients", check, "no steps", run);
  const recorded = (s: CombinedStep) => s.params.every((p) => p !== null);
  const identical = run.filter((s) => recorded(s) && new Set(s.params).size === 1).length;
  const paramsFrom = run.findIndex((s) => recorded(s) && new Set(s.params).size > 1) + 1 || null;
  const spreads = run.map((s) => Math.max(...s.gradNorms.map((g) => relDiff(g, s.gradNorm))));
  const normAt = spreads.findIndex((x) => x > TOLERANCE) + 1 || null;
  const missing = run.length - run.filter(recorded).length;
  const measured = `parameters identical at ${identical}/${run.length} steps, ` +
    `grad norms max rel diff ${sci(Math.max(...spreads))}` +
    (missing ? ` (no backward before ${missing} steps)` : "");
  if (paramsFrom === 1) {
    const cause = "the parameters differ between ranks before the first update: the " +
      "initialisation depends on the rank and is never broadcast — seed every rank alike, or " +
      "wrap the model in DistributedDataParallel, which copies rank 0's parameters to all ranks";
    return fail("gradients", check, measured, cause);
  }
  if (normAt !== null) {
    const each = run[normAt - 1]!.gradNorms.map((g, r) => `rank ${r}: ${g.toPrecision(6)}`);
    const cause =
      `the gradient norms differ between ranks at step ${normAt} (${each.join(", ")}): ` +
      "the gradients are not averaged across ranks — use DistributedDataParallel, or " +
      'pg.allReduce each gradient with "avg" before optimizer.step()';
    return fail("gradients", check, measured, cause);
  }
  if (paramsFrom !== null) {
    const cause =
      `the parameters agree at step 1 but differ between ranks from step ${paramsFrom}: ` +
      "the ranks apply different updates (different optimizer settings, or an update that " +
      "reads rank-local state)";
    return fail("gradients", check, measured, cause);
  }
  return pass("gradients", check, measured);
}

function compareRow(
  check: string,
  run: CombinedStep[] | string,
  ref: CombinedStep[] | string,
  world: number,
  outOfSync: Row | null,
): Row {
  if (typeof run === "string") return fail("gradients", check, "no steps", run);
  if (typeof ref === "string") {
    return fail("gradients", check, "no steps", `single process: ${ref}`);
  }
  const lossRel = Math.max(...run.map((s, i) => relDiff(s.loss, ref[i]!.loss)));
  const normRel = Math.max(...run.map((s, i) => relDiff(s.gradNorm, ref[i]!.gradNorm)));
  const measured = `loss max rel diff ${sci(lossRel)}, grad norm ${sci(normRel)} ` +
    `over ${run.length} steps`;
  if (lossRel <= TOLERANCE && normRel <= TOLERANCE) return pass("gradients", check, measured);
  return fail("gradients", check, measured, diagnose(run, ref, world, outOfSync));
}

/** What the pattern of differences against the single process points to. */
function diagnose(
  run: CombinedStep[],
  ref: CombinedStep[],
  world: number,
  outOfSync: Row | null,
): string {
  const first = run[0]!, base = ref[0]!;
  const lossRatio = first.loss / base.loss, normRatio = first.gradNorm / base.gradNorm;
  const p6 = (x: number) => x.toPrecision(6);
  const at1 = `step 1: loss ${p6(first.loss)} vs ${p6(base.loss)}, ` +
    `grad norm ${p6(first.gradNorm)} vs ${p6(base.gradNorm)}`;
  const sqrtRatio = (1 / Math.sqrt(world)).toFixed(2);
  if (world === 1) {
    return `under the launcher with one rank the script computes something other than alone ` +
      `(${at1}): does it change the model, data, seed or batch size depending on RANK, ` +
      "WORLD_SIZE or DTRAIN_* variables?";
  }
  if (outOfSync) {
    return `the ranks are out of sync (see 'ranks in sync'), so ${world} ranks train a ` +
      `different model (${at1})`;
  }
  if (Math.abs(lossRatio * world - 1) < 1e-3 && Math.abs(normRatio * world - 1) < 1e-3) {
    return `loss and gradient norm are 1/${world} of the single process's (${at1}): the loss ` +
      `is summed over the batch instead of averaged — each rank sums B/${world} samples, so ` +
      "the mean over ranks shrinks with the world size; use the mean";
  }
  if (relDiff(first.loss, base.loss) > TOLERANCE) {
    return `the loss differs already at step 1 although every rank starts from the same ` +
      `parameters (${at1}): the ranks together did not compute the single process's batch — ` +
      "every rank must hold the same full dataset, split by DistributedSampler, and take " +
      `B/${world} samples per step; a per-rank batch that does not shrink with N makes the ` +
      `global batch ${world}x larger, which lowers the grad norm by about ` +
      `1/sqrt(${world}) = ${sqrtRatio} (measured: x${normRatio.toFixed(2)})`;
  }
  if (relDiff(first.gradNorm, base.gradNorm) > TOLERANCE) {
    const summed = Math.abs(normRatio - world) < 0.05 * world;
    const why = summed
      ? `the gradients are summed over the ${world} ranks instead of averaged ` +
        '(allReduce with "sum"; use "avg")'
      : "the gradients are not the average over ranks of per-rank means " +
        `(summed: x${world}; a changed global batch: about x${sqrtRatio})`;
    return `the step-1 loss agrees but the gradient norm is x${normRatio.toFixed(3)} of the ` +
      `single process's (${at1}): ${why}`;
  }
  const s = run.findIndex((x, i) =>
    relDiff(x.loss, ref[i]!.loss) > TOLERANCE || relDiff(x.gradNorm, ref[i]!.gradNorm) > TOLERANCE
  );
  return `step 1 agrees but step ${s + 1} differs (loss ${p6(run[s]!.loss)} vs ` +
    `${p6(ref[s]!.loss)}): the update differs with the world size — e.g. a learning rate ` +
    "scaled by the world size, or a schedule stepped per rank";
}
