/**
 * The process group's settings: the world as distributed/control/env.ts reads it from
 * the launcher's environment, plus DTRAIN_TIMEOUT, DTRAIN_DISTRIBUTED_DEBUG
 * and the shared-memory tuning variables, checked; CPU groups that would span
 * machines are refused here.
 */
import { getRankSettings, getWorld } from "./control/env.ts";

type Lookup = (name: string) => string | undefined;

/** Options of initProcessGroup that override the environment. */
export interface ProcessGroupOptions {
  /** Default timeout of every call (and of the rendezvous), in ms. Default:
   *  DTRAIN_TIMEOUT seconds when set, else 1800 s (as torch's default). */
  timeoutMs?: number;
  /** Bytes of each of a rank's two shared-memory data buffers (a multiple of
   *  64). Default: DTRAIN_SHM_CHUNK_BYTES, else 1 MiB. Rank 0's value wins. */
  chunkBytes?: number;
  /** Microseconds a waiting rank spins before it sleeps on a futex. Default:
   *  DTRAIN_SHM_SPIN_US, else 50. */
  spinUs?: number;
  /** The environment to read; default Deno.env (tests pass their own). */
  env?: Record<string, string | undefined>;
  /** The rank's device (initProcessGroup passes it): GPU ranks may span machines (NCCL). */
  device?: "cpu" | "cuda";
  /** The backend, instead of the device's: "nccl" also in a world of one rank (a check of
   *  NCCL itself), "shm", or "single". Default: NCCL on a GPU, shm on the CPU, single alone. */
  backend?: "nccl" | "shm" | "single";
}

/** Everything a backend needs, resolved. */
export interface ProcessGroupConfig {
  rank: number;
  size: number;
  /** unique per run; names the shared-memory segment */
  runId: string;
  timeoutMs: number;
  /** DTRAIN_DISTRIBUTED_DEBUG=DETAIL: compare every field of every collective */
  detail: boolean;
  chunkBytes: number;
  spinUs: number;
}

/** Default data-buffer size (see scripts/bench_allreduce.ts for the choice). */
export const DEFAULT_CHUNK_BYTES = 1 << 20;
/** Default spin before sleeping: a few barrier round trips. */
export const DEFAULT_SPIN_US = 50;

const RUN_ID = /^[A-Za-z0-9._-]{1,160}$/;

function intVar(get: Lookup, name: string): number | undefined {
  const raw = get(name);
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw.trim())) {
    throw new RangeError(
      `Environment variable ${name}=${JSON.stringify(raw)} is not a non-negative integer`,
    );
  }
  return Number(raw.trim());
}

function debugDetail(get: Lookup): boolean {
  const raw = get("DTRAIN_DISTRIBUTED_DEBUG") ?? "";
  if (!["", "OFF", "INFO", "DETAIL"].includes(raw.toUpperCase())) {
    throw new RangeError(
      `DTRAIN_DISTRIBUTED_DEBUG=${JSON.stringify(raw)}: expected OFF, INFO or DETAIL`,
    );
  }
  return raw.toUpperCase() === "DETAIL";
}

/**
 * Reads and checks the process-group settings. Without RANK and WORLD_SIZE
 * the world is this one process (size 1).
 *
 * @example
 * ```ts
 * const cfg = resolveProcessGroupConfig({ env: { RANK: "1", WORLD_SIZE: "2" } });
 * // throws: DTRAIN_RUN_ID is needed to name the segment
 * ```
 */
export function resolveProcessGroupConfig(opts: ProcessGroupOptions = {}): ProcessGroupConfig {
  const env = opts.env;
  const get: Lookup = env ? (name) => env[name] : (name) => Deno.env.get(name);
  const world = getWorld(get);
  const timeoutMs = opts.timeoutMs ?? getRankSettings(get).timeoutS * 1000;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError(`timeoutMs must be a positive number, got ${timeoutMs}`);
  }
  const common = {
    timeoutMs,
    detail: debugDetail(get),
    chunkBytes: opts.chunkBytes ?? intVar(get, "DTRAIN_SHM_CHUNK_BYTES") ?? DEFAULT_CHUNK_BYTES,
    spinUs: opts.spinUs ?? intVar(get, "DTRAIN_SHM_SPIN_US") ?? DEFAULT_SPIN_US,
  };
  const { rank, worldSize: size, localWorldSize: localSize, nnodes } = world;
  if (size === 1) return { rank: 0, size: 1, runId: world.runId, ...common };
  if ((opts.device ?? "cpu") === "cpu" && (nnodes > 1 || localSize !== size)) {
    throw new Error(
      `Cannot create a CPU process group across machines: WORLD_SIZE=${size}, LOCAL_WORLD_SIZE=${localSize}, ` +
        `DTRAIN_NNODES=${nnodes}. The CPU backend connects ranks on one machine through shared memory only; ` +
        `collectives between machines need the Gloo backend, which dtrain does not have yet. Run every rank on ` +
        `one machine (one node), or train on GPUs (NCCL).`,
    );
  }
  if (!RUN_ID.test(world.runId)) {
    throw new RangeError(
      `DTRAIN_RUN_ID=${
        JSON.stringify(world.runId)
      } must be 1-160 characters of A-Z a-z 0-9 . _ - : the launcher ` +
        `sets it to a value unique per run, and it names the shared-memory segment /dev/shm/dtrain-<run id>-a<attempt>-pg`,
    );
  }
  return { rank, size, runId: world.runId, ...common };
}
