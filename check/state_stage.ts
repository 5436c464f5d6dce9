/**
 * Stage 3 of `dtrain check`, the saved state: the checkpoint the N-rank run
 * saved after step j verifies on load, holds the parameters the run trained
 * with (bit for bit, keys without a "module." prefix), and the script
 * resumed from it continues identically — on N ranks bit for bit, and in a
 * single process (a plain, unwrapped model) within the stage-2 tolerance.
 */
import { dirname, isAbsolute, join, relative } from "node:path";
import { CheckpointManager, LATEST_FILE } from "../train/checkpoint.ts";
import { type ProbeEvent, linkTree, tensorDigest } from "./probe.ts";
import { type CombinedStep, combineSteps, relDiff, type RunSteps, TOLERANCE } from "./gradient_stage.ts";
import { fail, pass, type Row, skip } from "./verdict.ts";

/** A checkpoint rank 0 saved, and where the probe kept its files. */
export interface SavedCheckpoint {
  step: number;
  /** where the script saved it */
  dir: string;
  /** the probe's hard-linked copy, safe from rotation */
  copy: string;
}

/** The checkpoint a resume starts from and the checkpoint root's place inside the run directory. */
export interface ResumePlan {
  checkpoint: SavedCheckpoint;
  /** the checkpoint root relative to the run directory ("checkpoints" for the Trainer) */
  root: string;
}

/** The checkpoints in rank 0's events, one per step (a re-save of a step replaces it), by step. */
export function savedCheckpoints(events: readonly ProbeEvent[]): SavedCheckpoint[] {
  const byStep = new Map<number, SavedCheckpoint>();
  for (const e of events) {
    if (e.kind === "checkpoint" && e.copy) byStep.set(e.step, { step: e.step, dir: e.dir, copy: e.copy });
  }
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

/** j = floor(k / 2) when saved; else the latest saved step before it; else the latest before k; else null. */
export function chooseResumeStep(saved: readonly number[], k: number): number | null {
  const mid = Math.floor(k / 2);
  const before = (limit: number) => saved.filter((s) => s >= 1 && s <= limit);
  const early = before(mid);
  if (early.length) return Math.max(...early);
  const late = before(k - 1);
  return late.length ? Math.max(...late) : null;
}

/** Picks the resume checkpoint of a K-step run, or returns the row saying why none can be used. */
export function planResume(saved: readonly SavedCheckpoint[], k: number, runDir: string): ResumePlan | Row {
  const check = "checkpoint to resume from";
  if (saved.length === 0) {
    return fail(
      "state",
      check,
      `no checkpoint in ${k} steps`,
      `the script saved no checkpoint within ${k} steps (DTRAIN_CHECK_CKPT_EVERY=1 makes the Trainer save every step; ` +
        "a loop of your own must call CheckpointManager.save often enough, or run the check with more --steps)",
    );
  }
  const step = chooseResumeStep(saved.map((c) => c.step), k);
  if (step === null) {
    return fail(
      "state",
      check,
      `saved at steps ${saved.map((c) => c.step).join(", ")}`,
      `no checkpoint before step ${k}, so nothing is left to resume: save more often or run the check with more --steps`,
    );
  }
  const checkpoint = saved.find((c) => c.step === step)!;
  const root = relative(runDir, dirname(checkpoint.dir));
  if (root.startsWith("..") || isAbsolute(root)) {
    return skip(
      "state",
      check,
      `step ${step} in ${dirname(checkpoint.dir)}`,
      `the checkpoints are saved outside the run directory ${runDir}, so the check cannot stage a resume without ` +
        "touching them: save under the run directory (getWorld().runDir) to have resuming checked",
    );
  }
  return { checkpoint, root };
}

/** Puts the plan's checkpoint into `runDir` where the script looks for it, with `latest` naming it. */
export function stageResume(plan: ResumePlan, runDir: string): void {
  const root = join(runDir, plan.root);
  const name = plan.checkpoint.copy.split("/").pop()!;
  linkTree(plan.checkpoint.copy, join(root, name));
  Deno.writeTextFileSync(join(root, LATEST_FILE), `${name}\n`);
}

/**
 * The saved checkpoint itself: it loads with its manifest hashes verified,
 * its model keys carry no "module." prefix, and its tensors are bit for bit
 * the parameters rank 0 trained with after the step (`paramsAfter`: the
 * digests recorded at the next step's first backward).
 */
export function checkSaved(plan: ResumePlan, paramsAfter: string[] | null): Row[] {
  const { step, copy } = plan.checkpoint;
  const check = "checkpoint verifies";
  let model;
  try {
    const loaded = new CheckpointManager(dirname(copy), { rank: 0, onWarning: () => {} }).load(copy);
    model = loaded.files.get("model");
    if (!model) {
      return [fail(
        "state",
        check,
        `step ${step}: files ${[...loaded.files.keys()].join(", ") || "none"}`,
        "the checkpoint has no \"model\" file: save the model's state dict as the file \"model\" (the Trainer does)",
      )];
    }
  } catch (e) {
    return [fail("state", check, `step ${step}: does not load`, (e as Error).message)];
  }
  const keys = [...model.tensors.keys()];
  const prefixed = keys.filter((k) => k.startsWith("module."));
  const measured = `step ${step}: manifest hashes verify, ${keys.length} model tensors, ${prefixed.length} "module." keys`;
  const rows: Row[] = [
    prefixed.length
      ? fail(
        "state",
        check,
        measured,
        `${prefixed.length} model keys start with "module." (e.g. ${prefixed[0]}): save the unwrapped model's state dict ` +
          "so that a single-process model loads it without prefix handling",
      )
      : pass("state", check, measured),
  ];
  const title = "saved = trained parameters";
  if (paramsAfter === null) {
    rows.push(skip("state", title, `step ${step}`, `no backward pass was recorded after step ${step} to compare with`));
    return rows;
  }
  const inFile = new Set([...model.tensors.values()].map((t) => tensorDigest(t.data)));
  const found = paramsAfter.filter((d) => inFile.has(d)).length;
  const measuredParams = `${found}/${paramsAfter.length} parameter tensors bit-identical to rank 0's after step ${step}`;
  rows.push(
    found === paramsAfter.length ? pass("state", title, measuredParams) : fail(
      "state",
      title,
      measuredParams,
      `the checkpoint does not hold the parameters rank 0 was training with after step ${step}: ` +
        "is the saved state dict taken from the trained model at save time?",
    ),
  );
  return rows;
}

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

/** The first step where the continuation leaves `limit`, explained; null when it never does. */
function divergence(c: Continuation, j: number, limit: number): string | null {
  const bad = c.resumed.findIndex((_, i) => c.lossDiff[i]! > limit || c.normDiff[i]! > limit);
  if (bad < 0) return null;
  const at = `step ${j + bad + 1}: loss ${c.resumed[bad]!.loss.toPrecision(8)} vs ${c.original[bad]!.loss.toPrecision(8)}`;
  return bad === 0
    ? `the resumed run starts from the saved parameters but ${at}: the data did not resume where it stopped — save the ` +
      "DataLoader's state (epoch, position) with the checkpoint and restore it (loader.loadState) before iterating"
    : `step ${j + 1} matches but ${at}: the optimizer state, the learning-rate schedule or the RNG state was not ` +
      "restored from the checkpoint";
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
  const measured = `${params.measured}; ${cont.span}: loss max |diff| ${maxText(cont.lossDiff)}, grad norm ${maxText(cont.normDiff)}`;
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
  const measured = `${cont.span}: loss max rel diff ${maxText(cont.lossDiff)}, grad norm ${maxText(cont.normDiff)}`;
  const loadRow = pass("state", load, `${params.measured.replace(" on 1/1 ranks", "")} (strict load, no DDP wrapper)`);
  if (!nRanksMatchOne) {
    return [loadRow, skip("state", resume, measured, `stage 2 found ${c.original.length && "the N-rank run"} differing from a single process, so one process cannot continue it identically`)];
  }
  const cause = divergence(cont, j, TOLERANCE);
  return [loadRow, cause ? fail("state", resume, measured, cause) : pass("state", resume, measured)];
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
    return {
      measured,
      problem: (plan) =>
        `the resumed run did not start from the checkpoint: its parameters at step ${plan.checkpoint.step + 1} are not ` +
        `the saved ones — does the script load the latest checkpoint in <run dir>/${plan.root} ` +
        "(CheckpointManager.loadLatest()) into the model before training?",
    };
  }
  return {
    measured,
    problem: () =>
      `after loading, rank ${differ.join(", ")} holds parameters other than the ones it trained with: the ranks held ` +
      "different parameters when rank 0 saved, so only rank 0's survived the checkpoint (a rank-dependent " +
      "initialisation that is never broadcast?)",
  };
}
