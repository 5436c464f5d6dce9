/**
 * The probe `dtrain check` puts into a user's script: when DTRAIN_CHECK_OUT
 * names a folder, the library's parts record what the staged migration
 * check compares — each sampler pass (epoch, rank, indices), each backward
 * loss, each optimizer step's gradient norm, each checkpoint — as JSON lines
 * in <folder>/rank-<r>.jsonl, and DTRAIN_CHECK_PLAIN=1 turns autocast and
 * gradient clipping off. Without the variable every hook is a no-op.
 */
import { join } from "node:path";

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
  | { kind: "checkpoint"; dir: string; step: number };

interface ProbeState {
  file: Deno.FsFile;
  plain: boolean;
}

const encoder = new TextEncoder();
let state: ProbeState | null | undefined;

function probe(): ProbeState | null {
  if (state !== undefined) return state;
  const dir = Deno.env.get("DTRAIN_CHECK_OUT");
  if (!dir) return (state = null);
  const rank = Number(Deno.env.get("RANK") ?? 0);
  const file = Deno.openSync(join(dir, `rank-${rank}.jsonl`), { append: true, create: true });
  return (state = { file, plain: Deno.env.get("DTRAIN_CHECK_PLAIN") === "1" });
}

/** True while `dtrain check` records this process. */
export function probing(): boolean {
  return probe() !== null;
}

/** True when the check asked for plain arithmetic (no autocast, no clipping). */
export function plainArithmetic(): boolean {
  return probe()?.plain ?? false;
}

/** Records one event (no-op outside `dtrain check`). */
export function record(e: ProbeEvent): void {
  const p = probe();
  if (p) p.file.writeSync(encoder.encode(JSON.stringify(e) + "\n"));
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
  const num = (name: string) => {
    const v = Deno.env.get(name);
    if (v === undefined || v === "") return null;
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n <= 0) {
      throw new RangeError(`${name} must be a positive integer, got "${v}"`);
    }
    return n;
  };
  return {
    maxSteps: num("DTRAIN_CHECK_MAX_STEPS"),
    checkpointEvery: num("DTRAIN_CHECK_CKPT_EVERY"),
  };
}

/** True in the sampler stage of `dtrain check` (DTRAIN_CHECK_STAGE=sampler): loaders yield nothing. */
export function samplerOnlyStage(): boolean {
  return probing() && Deno.env.get("DTRAIN_CHECK_STAGE") === "sampler";
}
