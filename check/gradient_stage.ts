/**
 * Stage 2 of `dtrain check`, the arithmetic: the first K steps' losses and
 * gradient norms of (a) a single process with global batch B, (b) the
 * launcher with one rank and (c) the launcher with N ranks must agree within
 * a relative 1e-4 (f32 reduction order moves them by ~1e-6), and the N ranks
 * must hold the same parameters and gradient norms at every step. A failure
 * names what was measured to differ: the samples of step 1 (count and
 * which), the loss with the same samples and parameters, or the gradients.
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
  /** each rank's samples of the step (DataLoader batches a backward used), or null */
  samples: (number[] | null)[];
  /** rank 0's learning rate, generator-state and optimizer-state digests, when recorded */
  lr?: number;
  rng?: string;
  optimizer?: string;
  /** what plain arithmetic turned off on any rank (dropout) */
  plainOff: string[];
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
    const step: CombinedStep = {
      loss: at.reduce((a, x) => a + x.loss, 0) / world,
      gradNorm: at[0]!.gradNorm,
      gradNorms: at.map((x) => x.gradNorm),
      params: at.map((x) => x.params?.join(",") ?? null),
      samples: at.map((x) => x.samples ?? null),
      plainOff: [...new Set(at.flatMap((x) => x.plainOff ?? []))].sort(),
    };
    const first = at[0]!;
    if (first.lr !== undefined) step.lr = first.lr;
    if (first.rng !== undefined) step.rng = first.rng;
    if (first.optimizer !== undefined) step.optimizer = first.optimizer;
    return step;
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
  const off = [...new Set([...run, ...ref].flatMap((x) => x.plainOff))].sort();
  const measured = `loss max rel diff ${sci(lossRel)}, grad norm ${sci(normRel)} ` +
    `over ${run.length} steps` +
    (off.includes("dropout")
      ? " (dropout off: its masks cannot match between 1 and N processes)"
      : "");
  if (lossRel <= TOLERANCE && normRel <= TOLERANCE) return pass("gradients", check, measured);
  return fail("gradients", check, measured, diagnose(run, ref, world, outOfSync));
}

/** "3, 17, 42, … (n in all)": a few indices of a list. */
function some(xs: readonly number[]): string {
  const shown = xs.slice(0, 5).join(", ");
  return xs.length > 5 ? `${shown}, … (${xs.length} in all)` : shown;
}

/**
 * What step 1's recorded samples say: null when the N ranks together used
 * exactly the single process's samples (or a side recorded none); else the
 * measured difference in the number of samples or in which.
 */
function compareSamples(
  run: CombinedStep,
  ref: CombinedStep,
  world: number,
  step = 1,
): string | null {
  const single = ref.samples[0];
  if (!single || run.samples.some((x) => x === null)) return null;
  const per = run.samples.map((x) => x!.length);
  const total = per.reduce((a, b) => a + b, 0);
  if (total !== single.length) {
    return `the ${world} ranks trained on ${total} samples in step ${step} together (` +
      per.map((n, r) => `rank ${r}: ${n}`).join(", ") + `), the single process on ` +
      `${single.length}: the global batch changes with the world size — give each rank ` +
      `B/${world} samples (DataLoader batchSize: B / pg.size) to train as one process does`;
  }
  const mine = run.samples.flatMap((x) => x!).sort((a, b) => a - b);
  const theirs = [...single].sort((a, b) => a - b);
  if (mine.every((v, i) => v === theirs[i])) return null;
  const only = mine.filter((v) => !theirs.includes(v));
  return `step ${step} of the ${world} ranks trained on other samples than the single ` +
    `process's step ${step} (${only.length} of ${total} differ, e.g. ${
      some(only)
    }): the ranks must draw ` +
    "from the same full dataset through DistributedSampler (same seed on every rank), which " +
    "splits the single process's order among them";
}

/** What the measured differences against the single process point to. */
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
  const data = compareSamples(first, base, world);
  if (data !== null) return `${data} (${at1})`;
  const sameData = first.samples.every((x) => x !== null) && base.samples[0] !== null;
  if (Math.abs(lossRatio * world - 1) < 1e-3 && Math.abs(normRatio * world - 1) < 1e-3) {
    return `loss and gradient norm are 1/${world} of the single process's (${at1}): the loss ` +
      `is summed over the batch instead of averaged — each rank sums B/${world} samples, so ` +
      "the mean over ranks shrinks with the world size; use the mean";
  }
  if (relDiff(first.loss, base.loss) > TOLERANCE) {
    if (sameData) {
      return `at step 1 the ${world} ranks together trained on exactly the single process's ` +
        `samples, from the same parameters, yet the mean loss is x${lossRatio.toFixed(4)} of ` +
        `its (${at1}): the loss of a rank's share is not the mean over its samples, or the ` +
        "forward computes something over the batch that depends on how it is split across " +
        "ranks (batch statistics: BatchNorm needs SyncBatchNorm to match one process)";
    }
    return `the loss differs already at step 1 although every rank starts from the same ` +
      `parameters (${at1}); the samples of the steps were not recorded (no DataLoader fed ` +
      "them), so the check cannot tell whether the ranks together computed the single " +
      `process's batch: each rank should take B/${world} samples of the same full dataset, ` +
      "split by DistributedSampler";
  }
  if (relDiff(first.gradNorm, base.gradNorm) > TOLERANCE) {
    const summed = Math.abs(normRatio - world) < 0.05 * world;
    const why = summed
      ? `the gradients are summed over the ${world} ranks instead of averaged ` +
        '(allReduce with "sum"; use "avg")'
      : "the gradients are not the average over ranks of per-rank means " +
        `(a sum over the ranks would be x${world}` +
        (sameData ? ")" : `; a changed global batch about x${sqrtRatio})`);
    return `the step-1 loss agrees but the gradient norm is x${normRatio.toFixed(3)} of the ` +
      `single process's (${at1}): ${why}`;
  }
  const s = run.findIndex((x, i) =>
    relDiff(x.loss, ref[i]!.loss) > TOLERANCE || relDiff(x.gradNorm, ref[i]!.gradNorm) > TOLERANCE
  );
  const at = `step ${s + 1}: loss ${p6(run[s]!.loss)} vs ${p6(ref[s]!.loss)}`;
  const lrAt = run.findIndex((x, i) =>
    x.lr !== undefined && ref[i]!.lr !== undefined && x.lr !== ref[i]!.lr
  );
  if (lrAt >= 0 && lrAt < s) {
    return `step 1 agrees but ${at}: the learning rate of step ${lrAt + 1} is ` +
      `${run[lrAt]!.lr} on ${world} ranks and ${ref[lrAt]!.lr} in one process — the rate or ` +
      "its schedule depends on the world size (scaled by it, or stepped per rank)";
  }
  const later = compareSamples(run[s]!, ref[s]!, world, s + 1);
  if (later !== null) return `step 1 agrees but ${at}: ${later}`;
  return `step 1 agrees but ${at}, with the same samples` +
    (lrAt < 0 && run[0]!.lr !== undefined ? " and learning rates" : "") +
    ": the update of the steps before differs with the world size (the optimizer's settings, " +
    "or state kept per rank)";
}
