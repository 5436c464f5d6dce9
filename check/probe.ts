/**
 * The probe `dtrain check` puts into a run of the user's script. The library
 * knows nothing of it: the probe installs itself on the library's hook
 * points (backward observer, optimizer-step, sampler-pass and loader-pass
 * hooks, the Trainer's config and checkpoint-saved hooks) and records what
 * the staged migration check compares — each sampler pass (epoch, rank,
 * indices), each backward loss and the parameters it saw, each optimizer
 * step's gradient norm, each checkpoint (kept aside from rotation) — as JSON
 * lines in <out>/rank-<r>.jsonl, and ends the process once a stage has what
 * it needs. Plain arithmetic turns autocast, loss scaling and clipping off,
 * for a Trainer through its config (so config.json shows it).
 */
import { createHash } from "node:crypto";
import { basename, join } from "node:path";
import { addBackwardObserver } from "../tensor/autograd.ts";
import { setPlainArithmetic } from "../tensor/plain_arithmetic.ts";
import { addOptimizerStepHook } from "../optim/optimizer.ts";
import { gradNorm } from "../optim/clip.ts";
import { addSamplerPassHook } from "../data/distributed_sampler.ts";
import { addLoaderPassHook } from "../data/dataloader.ts";
import { addCheckpointSavedHook } from "../train/checkpoint/manager.ts";
import { addTrainerConfigHook } from "../train/engine.ts";
import { CHECK_ENV } from "./env.ts";

/** One recorded event. */
export type ProbeEvent =
  | {
    kind: "sampler";
    rank: number;
    epoch: number;
    datasetLength: number;
    numReplicas: number;
    indices: number[];
  }
  | { kind: "loss"; value: number }
  | { kind: "step"; gradNorm: number }
  /** After each backward: a digest per parameter that got a gradient (its bytes as the forward used them). */
  | { kind: "params"; tensors: string[] }
  /** `copy` is where the probe hard-linked the checkpoint's files, out of the reach of rotation. */
  | { kind: "checkpoint"; dir: string; step: number; copy?: string };

/** Sampler passes each rank records in the sampler stage before the probe ends the process. */
export const SAMPLER_PASSES = 2;

/** What one run's probe does (from the check's variables, CHECK_ENV). */
export interface ProbeSettings {
  /** folder for rank-<r>.jsonl and the kept checkpoints */
  out: string;
  /** this process's rank (names its event file) */
  rank: number;
  /** no autocast, no loss scaling, no clipping */
  plain: boolean;
  /** the sampler stage: loaders yield nothing; the process ends after SAMPLER_PASSES passes */
  samplerOnly: boolean;
  /** the process ends at the optimizer step after this many of its steps */
  stopAfter: number | null;
  /** a Trainer stops after this many optimizer steps in total */
  maxSteps: number | null;
  /** a Trainer checkpoints every this many steps */
  checkpointEvery: number | null;
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
    file.close();
    Deno.exit(0);
  };
  let samplerPasses = 0, steps = 0;

  if (s.plain) setPlainArithmetic(true);
  addTrainerConfigHook((cfg) => {
    if (s.maxSteps !== null) cfg.maxSteps = Math.min(cfg.maxSteps ?? Infinity, s.maxSteps);
    if (s.checkpointEvery !== null) cfg.checkpoint.everySteps = s.checkpointEvery;
    if (s.plain) {
      cfg.precision.autocast = "f32";
      cfg.precision.gradScaler = false;
      cfg.clipGradNorm = null;
    }
  });
  addSamplerPassHook((pass) => {
    write({
      kind: "sampler",
      rank: pass.rank,
      epoch: pass.epoch,
      datasetLength: pass.datasetLength,
      numReplicas: pass.numReplicas,
      indices: [...pass.indices],
    });
    if (s.samplerOnly && ++samplerPasses >= SAMPLER_PASSES) finish();
  });
  // The sampler stage records the order (through the sampler) without computing anything.
  if (s.samplerOnly) addLoaderPassHook(() => false);
  addBackwardObserver({
    onBackwardStart(output) {
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
    steps++;
    write({ kind: "step", gradNorm: gradNorm(optimizer.params()) });
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
