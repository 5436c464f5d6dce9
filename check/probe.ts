/**
 * The probe `dtrain check` puts into a user's script: when DTRAIN_CHECK_OUT
 * names a folder, the library's parts record what the staged migration
 * check compares — each sampler pass (epoch, rank, indices), each backward
 * loss and the parameters it saw, each optimizer step's gradient norm, each
 * checkpoint (kept aside from rotation) — as JSON lines in
 * <folder>/rank-<r>.jsonl, and ends the process once a stage has what it
 * needs. DTRAIN_CHECK_PLAIN=1 turns autocast, loss scaling and gradient
 * clipping off. Without DTRAIN_CHECK_OUT every hook is a no-op.
 */
import { createHash } from "node:crypto";
import { basename, join } from "node:path";
import { addBackwardObserver } from "../tensor/autograd.ts";

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

/** The environment variables through which `dtrain check` drives a run of the user's script. */
export const CHECK_ENV = {
  /** folder for rank-<r>.jsonl and the kept checkpoints; turns the probe on */
  OUT: "DTRAIN_CHECK_OUT",
  /** "sampler" (loaders yield nothing; the process ends after 2 sampler passes) or a label for the logs */
  STAGE: "DTRAIN_CHECK_STAGE",
  /** "1": no autocast, no loss scaling, no clipping */
  PLAIN: "DTRAIN_CHECK_PLAIN",
  /** the Trainer stops after this many optimizer steps in total */
  MAX_STEPS: "DTRAIN_CHECK_MAX_STEPS",
  /** the Trainer checkpoints every this many steps */
  CKPT_EVERY: "DTRAIN_CHECK_CKPT_EVERY",
  /** the probe ends the process at the next optimizer step after this many steps of this process */
  STOP_AFTER: "DTRAIN_CHECK_STOP_AFTER",
} as const;

/** Sampler passes each rank records in the sampler stage before the probe ends the process. */
export const SAMPLER_PASSES = 2;

interface ProbeState {
  file: Deno.FsFile;
  out: string;
  plain: boolean;
  samplerOnly: boolean;
  stopAfter: number | null;
  samplerPasses: number;
  steps: number;
}

const encoder = new TextEncoder();
let state: ProbeState | null | undefined;

function probe(): ProbeState | null {
  if (state !== undefined) return state;
  const out = Deno.env.get(CHECK_ENV.OUT);
  if (!out) return (state = null);
  const rank = Number(Deno.env.get("RANK") ?? 0);
  const file = Deno.openSync(join(out, `rank-${rank}.jsonl`), { append: true, create: true });
  state = {
    file,
    out,
    plain: Deno.env.get(CHECK_ENV.PLAIN) === "1",
    samplerOnly: Deno.env.get(CHECK_ENV.STAGE) === "sampler",
    stopAfter: positiveIntVar(CHECK_ENV.STOP_AFTER),
    samplerPasses: 0,
    steps: 0,
  };
  // Parameters are read when a backward ends: after the forward that used them, before any update.
  addBackwardObserver({
    onLeafGrad() {},
    onBackwardEnd(received) {
      write({ kind: "params", tensors: [...received].map((t) => tensorDigest(t.toBytes())) });
    },
  });
  return state;
}

function positiveIntVar(name: string): number | null {
  const v = Deno.env.get(name);
  if (v === undefined || v === "") return null;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new RangeError(`${name} must be a positive integer, got "${v}"`);
  }
  return n;
}

function write(e: ProbeEvent): void {
  probe()?.file.writeSync(encoder.encode(JSON.stringify(e) + "\n"));
}

/** Ends the process the way a finished script ends (exit code 0); peers end at the same point. */
function finish(p: ProbeState): never {
  p.file.close();
  Deno.exit(0);
}

/**
 * A tensor's digest as the check compares them: the first 32 hex digits
 * (128 bits) of the SHA-256 of its raw bytes. The state stage hashes the
 * checkpoint's tensors the same way.
 */
export function tensorDigest(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex").slice(0, 32);
}

/** True while `dtrain check` records this process. */
export function probing(): boolean {
  return probe() !== null;
}

/** True when the check asked for plain arithmetic (no autocast, no clipping). */
export function plainArithmetic(): boolean {
  return probe()?.plain ?? false;
}

/**
 * Records one event (no-op outside `dtrain check`). In the sampler stage the
 * second sampler pass ends the process; with DTRAIN_CHECK_STOP_AFTER=K the
 * (K+1)-th optimizer step ends it before it is recorded or applied (so a
 * checkpoint saved after step K is complete); a checkpoint's files are
 * hard-linked into <DTRAIN_CHECK_OUT>/checkpoints so rotation cannot delete
 * the one the check resumes from.
 */
export function record(e: ProbeEvent): void {
  const p = probe();
  if (!p) return;
  if (e.kind === "step") {
    if (p.stopAfter !== null && p.steps >= p.stopAfter) finish(p);
    p.steps++;
  }
  write(e.kind === "checkpoint" ? { ...e, copy: keepCheckpoint(p.out, e.dir) } : e);
  if (e.kind === "sampler" && p.samplerOnly && ++p.samplerPasses >= SAMPLER_PASSES) finish(p);
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

/** Settings `dtrain check` imposes on a Trainer run through the environment. */
export interface CheckOverrides {
  /** stop after this many optimizer steps (DTRAIN_CHECK_MAX_STEPS) */
  maxSteps: number | null;
  /** checkpoint every N steps (DTRAIN_CHECK_CKPT_EVERY) */
  checkpointEvery: number | null;
}

/** The overrides of the current `dtrain check` stage (all null outside a check). */
export function checkOverrides(): CheckOverrides {
  return {
    maxSteps: positiveIntVar(CHECK_ENV.MAX_STEPS),
    checkpointEvery: positiveIntVar(CHECK_ENV.CKPT_EVERY),
  };
}

/** True in the sampler stage of `dtrain check` (DTRAIN_CHECK_STAGE=sampler): loaders yield nothing. */
export function samplerOnlyStage(): boolean {
  return probe()?.samplerOnly ?? false;
}
