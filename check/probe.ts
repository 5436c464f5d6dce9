/**
 * The probe `dtrain check` puts into a run of the user's script. The library
 * knows nothing of it: the probe installs itself on the library's hook
 * points (backward observer, optimizer-step, sampler-pass and loader-pass
 * hooks, the Trainer's config and checkpoint-saved hooks) and records what
 * the staged migration check compares — each sampler pass (epoch, rank,
 * indices), each backward loss and the parameters it saw, each optimizer
 * step's gradient norm, each checkpoint (kept aside from rotation) — as JSON
 * lines in <out>/rank-<r>.jsonl, and ends the process once a stage has what
 * it needs. In plain arithmetic it sets the process's numerics policy to
 * PLAIN_NUMERICS (no autocast, loss scaling, clipping or dropout; each said
 * once in the log), and a Trainer's config's `numerics` section to the same
 * (so config.json and run.json record it). Each step also records what a diagnosis needs measured rather than
 * guessed: the samples of its batches, its learning rate, and digests of the
 * default generator's state and the optimizer's state.
 */
import { createHash } from "node:crypto";
import { basename, join } from "node:path";
import { addBackwardObserver } from "../tensor/autograd.ts";
import { numericsOverrides, PLAIN_NUMERICS, setNumericsPolicy } from "../tensor/numerics_policy.ts";
import { scope } from "../tensor/tensor.ts";
import { addOptimizerStepHook, type Optimizer } from "../optim/optimizer.ts";
import { gradNorm } from "../optim/clip.ts";
import { ZeroRedundancyOptimizer } from "../distributed/zero.ts";
import { addSamplerPassHook } from "../data/distributed_sampler.ts";
import { addLoaderBatchHook, addLoaderPassHook } from "../data/dataloader.ts";
import { getDefaultGenerator } from "../nn/init.ts";
import { addCheckpointSavedHook, waitForCheckpoints } from "../train/checkpoint/manager.ts";
import { addTrainerConfigHook } from "../train/engine.ts";
import { CHECK_ENV } from "./env.ts";
import { addTrainedModelHook } from "../nn/trained_model_hook.ts";
import { snapshot, type SnapshotItem, TensorNames } from "./exact_snapshot.ts";
import { switchExactModeOn } from "./exact_switch.ts";

/** One recorded event. */
export type ProbeEvent =
  | {
    kind: "sampler";
    /** which DistributedSampler of the process (construction order) */
    sampler?: number;
    rank: number;
    epoch: number;
    datasetLength: number;
    numReplicas: number;
    indices: number[];
  }
  | { kind: "loss"; value: number }
  /** A batch a DataLoader yielded: its dataset indices. */
  | { kind: "batch"; indices: number[] }
  | {
    kind: "step";
    gradNorm: number;
    /** the first group's learning rate the step uses */
    lr?: number;
    /** digest of the default generator's state at the step */
    rng?: string;
    /** digest of the optimizer's state before the update */
    optimizer?: string;
    /** what the numerics policy turned off so far ("clipping", "dropout", …) */
    plainOff?: string[];
  }
  /** After each backward: a digest per parameter that got a gradient (its bytes as the forward used them). */
  | { kind: "params"; tensors: string[] }
  /**
   * `dtrain check --exact`: the hashed state where optimizer step `step`
   * starts (check/exact_snapshot.ts), or with `end` the state the run ended
   * with after `step` steps.
   */
  | { kind: "state"; step: number; end?: boolean; items: SnapshotItem[] }
  /** `copy` is where the probe hard-linked the checkpoint's files, out of the reach of rotation. */
  | { kind: "checkpoint"; dir: string; step: number; copy?: string };

/**
 * The sampler stage ends a process at the pass that would follow a
 * sampler's second pass that training used (a backward came after it): two
 * epochs to compare. A pass no backward follows (a setup pass, a peek at a
 * batch) does not count; SAMPLER_PASS_CAP passes of one sampler end it in any case.
 */
export const SAMPLER_TRAINING_PASSES = 2;
/** See SAMPLER_TRAINING_PASSES. */
export const SAMPLER_PASS_CAP = 6;
/**
 * The sampler stage also ends a process at its optimizer step after this
 * many: a loop that draws no sampler (random windows) would otherwise run
 * whole; one batch per loader pass makes an epoch a step or two.
 */
export const SAMPLER_STAGE_STEPS = 16;

/** What one run's probe does (from the check's variables, CHECK_ENV). */
export interface ProbeSettings {
  /** folder for rank-<r>.jsonl and the kept checkpoints */
  out: string;
  /** this process's rank (names its event file) */
  rank: number;
  /** no autocast, no loss scaling, no clipping */
  plain: boolean;
  /** the sampler stage: each loader pass yields one batch; the process ends after 2 training passes */
  samplerOnly: boolean;
  /** the process ends at the optimizer step after this many of its steps */
  stopAfter: number | null;
  /** a Trainer stops after this many optimizer steps in total */
  maxSteps: number | null;
  /** a Trainer checkpoints every this many steps */
  checkpointEvery: number | null;
  /** switch exact mode on with this many canonical shards (`dtrain check --exact`), or null */
  exact?: number | null;
  /** record the hashed state at every optimizer step and at the end */
  hashState?: boolean;
}

/** The probe settings the check asked for, or null when it did not (DTRAIN_CHECK_OUT unset). */
export function probeSettingsFromEnv(
  get: (name: string) => string | undefined = (n) => Deno.env.get(n),
): ProbeSettings | null {
  const out = get(CHECK_ENV.OUT);
  if (!out) return null;
  return {
    out,
    rank: Number(get("RANK") ?? 0),
    plain: get(CHECK_ENV.PLAIN) === "1",
    samplerOnly: get(CHECK_ENV.STAGE) === "sampler",
    stopAfter: positiveIntVar(get, CHECK_ENV.STOP_AFTER),
    maxSteps: positiveIntVar(get, CHECK_ENV.MAX_STEPS),
    checkpointEvery: positiveIntVar(get, CHECK_ENV.CKPT_EVERY),
    exact: positiveIntVar(get, CHECK_ENV.EXACT),
    hashState: get(CHECK_ENV.HASH_STATE) === "1",
  };
}

function positiveIntVar(get: (name: string) => string | undefined, name: string): number | null {
  const v = get(name);
  if (v === undefined || v === "") return null;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new RangeError(`${name} must be a positive integer, got "${v}"`);
  }
  return n;
}

let installed = false;

/** Installs the probe when the check asked for it (DTRAIN_CHECK_OUT); returns whether it did. */
export function installProbeFromEnv(): boolean {
  const settings = probeSettingsFromEnv();
  if (settings) installProbe(settings);
  return settings !== null;
}

/** Puts the probe on the library's hook points for the rest of this process (once). */
export function installProbe(s: ProbeSettings): void {
  if (installed) throw new Error("the dtrain check probe is already installed in this process");
  installed = true;
  const encoder = new TextEncoder();
  const file = Deno.openSync(join(s.out, `rank-${s.rank}.jsonl`), { append: true, create: true });
  const write = (e: ProbeEvent) => file.writeSync(encoder.encode(JSON.stringify(e) + "\n"));
  /** Ends the process the way a finished script ends (exit code 0); peers end at the same point. */
  const finish = (): never => {
    recordEnd();
    // A checkpoint still being written in the background is finished first: its hook writes here.
    const failed = waitForCheckpoints();
    file.close();
    for (const e of failed) console.error(`[dtrain] ${e.message}`);
    Deno.exit(failed.length === 0 ? 0 : 1);
  };
  let steps = 0;
  // --exact: the models DDP or a Trainer announce name the hashed tensors; the last optimizer to
  // step gives the state the run ends with (hashed once: at the probe's stop or at the exit).
  const names = new TensorNames();
  let lastOptimizer: Optimizer<{ lr: number }> | null = null;
  let ended = false;
  const recordEnd = () => {
    if (!s.hashState || ended || lastOptimizer === null) return;
    ended = true;
    try {
      write({
        kind: "state",
        step: steps,
        end: true,
        items: snapshot(lastOptimizer, names, false),
      });
    } catch (e) {
      // a script that freed its model before exiting: the comparison says the end is missing
      console.error(
        `[dtrain check] the state at the end could not be hashed: ${(e as Error).message}`,
      );
    }
  };
  if (s.hashState) {
    addTrainedModelHook((model) => names.addModel(model));
    globalThis.addEventListener("unload", recordEnd);
  }
  if (s.exact) switchExactModeOn(s.exact, addTrainerConfigHook);
  /** per sampler: its passes so far, and how many of them a backward followed */
  const samplers = new Map<number, { passes: number; trained: number; open: boolean }>();

  if (s.plain) setNumericsPolicy(PLAIN_NUMERICS, "dtrain check");
  addTrainerConfigHook((cfg) => {
    if (s.maxSteps !== null) cfg.maxSteps = Math.min(cfg.maxSteps ?? Infinity, s.maxSteps);
    if (s.checkpointEvery !== null) cfg.checkpoint.everySteps = s.checkpointEvery;
    if (s.plain) cfg.numerics = { ...PLAIN_NUMERICS };
  });
  addSamplerPassHook((pass) => {
    const id = pass.sampler;
    const seen = samplers.get(id) ?? { passes: 0, trained: 0, open: false };
    samplers.set(id, seen);
    if (
      s.samplerOnly &&
      (seen.trained >= SAMPLER_TRAINING_PASSES || seen.passes >= SAMPLER_PASS_CAP)
    ) finish();
    seen.passes++;
    seen.open = true;
    write({
      kind: "sampler",
      sampler: id,
      rank: pass.rank,
      epoch: pass.epoch,
      datasetLength: pass.datasetLength,
      numReplicas: pass.numReplicas,
      indices: [...pass.indices],
    });
  });
  // The sampler stage records every order computing one batch per pass (a script may use it).
  if (s.samplerOnly) addLoaderPassHook(() => 1);
  addLoaderBatchHook((b) => write({ kind: "batch", indices: [...b.indices] }));
  addBackwardObserver({
    onBackwardStart(output) {
      for (const seen of samplers.values()) {
        if (seen.open) {
          seen.trained++;
          seen.open = false;
        }
      }
      if (output.numel === 1) write({ kind: "loss", value: output.item() });
    },
    // Parameters are read when a backward ends: after the forward that used them, before any update.
    onBackwardEnd(received) {
      write({ kind: "params", tensors: [...received].map((t) => tensorDigest(t.toBytes())) });
    },
  });
  // The (K+1)-th step ends the process before it is recorded or applied, so a checkpoint saved
  // after step K is complete.
  addOptimizerStepHook((optimizer) => {
    if (s.stopAfter !== null && steps >= s.stopAfter) finish();
    if (s.samplerOnly && steps >= SAMPLER_STAGE_STEPS) finish();
    steps++;
    if (s.hashState) {
      lastOptimizer = optimizer;
      write({ kind: "state", step: steps, items: snapshot(optimizer, names, true) });
    }
    write({
      kind: "step",
      // a sharded optimizer's ranks hold their shares: its norm is taken across them
      gradNorm: optimizer instanceof ZeroRedundancyOptimizer
        ? optimizer.gradNorm()
        : gradNorm(optimizer.params()),
      lr: optimizer.lr,
      rng: jsonDigest(getDefaultGenerator().getState()),
      optimizer: optimizerDigest(optimizer),
      plainOff: numericsOverrides(),
    });
  });
  // Checkpoint files are hard-linked into <out>/checkpoints so rotation cannot delete the one the
  // check resumes from.
  addCheckpointSavedHook(({ dir, step }) => {
    write({ kind: "checkpoint", dir, step, copy: keepCheckpoint(s.out, dir) });
  });
}

/**
 * A tensor's digest as the check compares them: the first 32 hex digits
 * (128 bits) of the SHA-256 of its raw bytes. The state stage hashes the
 * checkpoint's tensors the same way.
 */
export function tensorDigest(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex").slice(0, 32);
}

function jsonDigest(value: unknown): string {
  return tensorDigest(new TextEncoder().encode(JSON.stringify(value)));
}

/** One digest of an optimizer's state: its groups' settings and every state tensor's bytes. */
function optimizerDigest(optimizer: Optimizer<{ lr: number }>): string {
  return scope(() => {
    // a sharded optimizer: this rank's share (its whole state is on no rank between saves)
    const state = optimizer instanceof ZeroRedundancyOptimizer
      ? optimizer.local.stateDict()
      : optimizer.stateDict();
    const hash = createHash("sha256");
    for (const [name, t] of [...state.tensors].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)) {
      hash.update(name).update(t.toBytes());
    }
    // The rate changes every step under a schedule: it is recorded on its own (lr).
    const groups = state.paramGroups.map(({ lr: _lr, ...rest }) => rest);
    return hash.update(JSON.stringify(groups)).digest("hex").slice(0, 32);
  });
}

/** Hard-links (or copies, across file systems) every file of a checkpoint directory into <out>/checkpoints. */
function keepCheckpoint(out: string, dir: string): string {
  const dest = join(out, "checkpoints", basename(dir));
  try {
    Deno.removeSync(dest, { recursive: true }); // a re-save of a step replaces the kept copy
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  linkTree(dir, dest);
  return dest;
}

/** Recreates the files under `from` at `to` as hard links (copies across file systems). */
export function linkTree(from: string, to: string): void {
  Deno.mkdirSync(to, { recursive: true });
  for (const entry of Deno.readDirSync(from)) {
    const [src, dst] = [join(from, entry.name), join(to, entry.name)];
    if (entry.isDirectory) linkTree(src, dst);
    else {
      try {
        Deno.linkSync(src, dst); // checkpoint files are never rewritten in place, so a link is a snapshot
      } catch {
        Deno.copyFileSync(src, dst);
      }
    }
  }
}
