/**
 * Stage 3 of `dtrain check`, the saved state: which checkpoint of the N-rank
 * run a resume starts from, putting it into a fresh run directory where the
 * script finds it, and the checkpoint itself — it verifies on load, its keys
 * carry no "module." prefix, and it holds bit for bit the parameters the run
 * trained with. (The resumed runs are judged in check/resume_check.ts.)
 */
import { basename, dirname, isAbsolute, join, relative } from "node:path";
import { CheckpointManager, LATEST_FILE } from "../train/checkpoint/manager.ts";
import { linkTree, type ProbeEvent, tensorDigest } from "./probe.ts";
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
    if (e.kind === "checkpoint" && e.copy) {
      byStep.set(e.step, { step: e.step, dir: e.dir, copy: e.copy });
    }
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
export function planResume(
  saved: readonly SavedCheckpoint[],
  k: number,
  runDir: string,
): ResumePlan | Row {
  const check = "checkpoint to resume from";
  if (saved.length === 0) {
    // Saving less often than the check runs (once an epoch, say) is not a fault of the script:
    // resuming is then not checked, which the row says, rather than failed.
    const cause = `the script saved no checkpoint within ${k} steps, so resuming was not checked ` +
      "(DTRAIN_CHECK_CKPT_EVERY=1 makes the Trainer save every step; a loop of your own must " +
      "call CheckpointManager.save within the check's steps, or run the check with more --steps)";
    return skip("state", check, `no checkpoint in ${k} steps`, cause);
  }
  const step = chooseResumeStep(saved.map((c) => c.step), k);
  if (step === null) {
    const cause = `no checkpoint before step ${k}, so resuming was not checked: save more often ` +
      "or run the check with more --steps";
    return skip("state", check, `saved at steps ${saved.map((c) => c.step).join(", ")}`, cause);
  }
  const checkpoint = saved.find((c) => c.step === step)!;
  const where = dirname(checkpoint.dir);
  const root = relative(runDir, where);
  if (root.startsWith("..") || isAbsolute(root)) {
    const why = `the checkpoints are saved outside the run directory ${runDir}, so the check ` +
      "cannot stage a resume without touching them: save under the run directory " +
      "(getWorld().runDir) to have resuming checked";
    return skip("state", check, `step ${step} in ${where}`, why);
  }
  return { checkpoint, root };
}

/** Puts the plan's checkpoint into `runDir` where the script looks for it, with `latest` naming it. */
export function stageResume(plan: ResumePlan, runDir: string): void {
  const root = join(runDir, plan.root);
  const name = basename(plan.checkpoint.copy);
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
    const manager = new CheckpointManager(dirname(copy), { rank: 0, onWarning: () => {} });
    const loaded = manager.load(copy);
    model = loaded.files.get("model");
    if (!model) {
      const files = `step ${step}: files ${[...loaded.files.keys()].join(", ") || "none"}`;
      const cause = 'the checkpoint has no "model" file: save the model\'s state dict as the ' +
        'file "model" (the Trainer does)';
      return [fail("state", check, files, cause)];
    }
  } catch (e) {
    return [fail("state", check, `step ${step}: does not load`, (e as Error).message)];
  }
  const keys = [...model.tensors.keys()];
  const prefixed = keys.filter((k) => k.startsWith("module."));
  const measured = `step ${step}: manifest hashes verify, ${keys.length} model tensors, ` +
    `${prefixed.length} "module." keys`;
  const prefixCause = `${prefixed.length} model keys start with "module." (e.g. ${prefixed[0]}): ` +
    "save the unwrapped model's state dict so that a single-process model loads it without " +
    "prefix handling";
  const rows: Row[] = [
    prefixed.length ? fail("state", check, measured, prefixCause) : pass("state", check, measured),
  ];
  const title = "saved = trained parameters";
  if (paramsAfter === null) {
    const why = `no backward pass was recorded after step ${step} to compare with`;
    return [...rows, skip("state", title, `step ${step}`, why)];
  }
  const inFile = new Set([...model.tensors.values()].map((t) => tensorDigest(t.data)));
  const found = paramsAfter.filter((d) => inFile.has(d)).length;
  const same = `${found}/${paramsAfter.length} parameter tensors bit-identical to rank 0's ` +
    `after step ${step}`;
  if (found === paramsAfter.length) return [...rows, pass("state", title, same)];
  const cause = `the checkpoint does not hold the parameters rank 0 was training with after ` +
    `step ${step}: is the saved state dict taken from the trained model at save time?`;
  return [...rows, fail("state", title, same, cause)];
}
