/**
 * The process group's settings: the world as distributed/control/env.ts reads it from
 * the launcher's environment, plus DTRAIN_TIMEOUT, DTRAIN_DISTRIBUTED_DEBUG
 * and the shared-memory tuning variables, checked; and the CPU backend: shared
 * memory for ranks on one machine, Gloo for ranks on several.
 */
import { getRankSettings, getWorld, type World } from "./control/env.ts";

type Lookup = (name: string) => string | undefined;

/** The CPU backends a group of several ranks can use. */
export type CpuBackend = "shm" | "gloo";

/** Options of initProcessGroup that override the environment. */
export interface ProcessGroupOptions {
  /** Default timeout of every call (and of the rendezvous), in ms. Default:
   *  DTRAIN_TIMEOUT seconds when set, else 1800 s (as torch's default). */
  timeoutMs?: number;
  /** Bytes of each of a rank's two shared-memory data buffers (a multiple of
   *  64). Default: DTRAIN_SHM_CHUNK_BYTES, else 1 MiB. Rank 0's value wins. */
  chunkBytes?: number;
  /** Bytes of each rank's shared region (a multiple of 4096), reserved in the segment at
   *  open: allocShared() places arrays there, and an allReduce of such arrays reads and writes
   *  the ranks' arrays directly instead of copying through the data buffers. Default:
   *  DTRAIN_SHM_SHARED_BYTES; unset, none at open, and users such as DDP reserve one on demand
   *  (reserveShared); 0: none, and none on demand either. Rank 0's value wins. */
  sharedBytes?: number;
  /** The most bytes per rank reserveShared() may reserve on this rank (a larger request fails
   *  on every rank with SharedReserveError). Default: DTRAIN_SHM_SHARED_LIMIT_BYTES, else none. */
  sharedLimitBytes?: number;
  /** Microseconds a waiting rank spins before it sleeps on a futex. Default:
   *  DTRAIN_SHM_SPIN_US, else 50, or 0 when this machine runs more ranks than it has cores. */
  spinUs?: number;
  /** The backend, instead of the default: NCCL on a GPU rank; on the CPU DTRAIN_CPU_BACKEND,
   *  else shm on one machine and gloo across machines (shm cannot span machines); "single"
   *  alone. "nccl" also makes a one-rank NCCL group (a check of NCCL itself). */
  backend?: CpuBackend | "nccl" | "single";
  /** The environment to read; default Deno.env (tests pass their own). */
  env?: Record<string, string | undefined>;
  /** The rank's device (initProcessGroup passes it): GPU ranks use NCCL, also across machines. */
  device?: "cpu" | "cuda";
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
  /** bytes of each rank's shared region at open (absent or 0: none) */
  sharedBytes?: number;
  /** no fixed region was asked for (sharedBytes and DTRAIN_SHM_SHARED_BYTES unset): users such
   *  as DDP reserve one on demand (absent: false) */
  sharedOnDemand?: boolean;
  /** the most bytes per rank reserveShared may reserve on this rank (absent: no limit) */
  sharedLimitBytes?: number;
  spinUs: number;
}

/** What resolveProcessGroupConfig() returns: the settings plus what chooses and configures the backend. */
export interface ResolvedProcessGroupConfig extends ProcessGroupConfig {
  /** the backend of a group of several ranks */
  backend: CpuBackend;
  /** the whole world, as the launcher described it */
  world: World;
  /** the environment the settings were read from (backends read their own variables) */
  lookup: Lookup;
}

/** Default data-buffer size (see scripts/bench_allreduce.ts for the choice). */
export const DEFAULT_CHUNK_BYTES = 1 << 20;
/** Default spin before sleeping: a few barrier round trips. */
export const DEFAULT_SPIN_US = 50;

/**
 * The spin before sleeping when nobody set one: DEFAULT_SPIN_US while every
 * rank of this machine can have a core, none when there are more ranks than
 * cores (a spinning rank would take the core the rank it waits for needs).
 */
export function defaultSpinUs(
  localRanks: number,
  cores = navigator.hardwareConcurrency || 1,
): number {
  return localRanks > cores ? 0 : DEFAULT_SPIN_US;
}

const RUN_ID = /^[A-Za-z0-9._-]{1,160}$/;

function intVar(get: Lookup, name: string): number | undefined {
  const raw = get(name);
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw.trim())) {
    throw new RangeError(
      `Environment variable ${name}=${JSON.stringify(raw)} is not a non-negative integer`,
    );
  }
  const n = Number(raw.trim());
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`Environment variable ${name}=${JSON.stringify(raw)} is too large`);
  }
  return n;
}

/** DTRAIN_SHM_SHARED_BYTES (or the option): a multiple of 4096, or unset (undefined: on demand). */
function sharedBytesVar(get: Lookup, opt: number | undefined): number | undefined {
  const bytes = opt ?? intVar(get, "DTRAIN_SHM_SHARED_BYTES");
  if (bytes === undefined) return undefined;
  if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes % 4096 !== 0) {
    const what = opt !== undefined ? "sharedBytes" : "Environment variable DTRAIN_SHM_SHARED_BYTES";
    throw new RangeError(
      `${what}=${bytes} must be a multiple of 4096: the bytes of each rank's shared region at ` +
        `open (0: none, and none reserved on demand; unset: reserved on demand by DDP)`,
    );
  }
  return bytes;
}

/** DTRAIN_SHM_SHARED_LIMIT_BYTES (or the option): a non-negative integer, or none. */
function sharedLimit(get: Lookup, opt: number | undefined): number | undefined {
  if (opt === undefined) return intVar(get, "DTRAIN_SHM_SHARED_LIMIT_BYTES");
  if (!Number.isSafeInteger(opt) || opt < 0) {
    throw new RangeError(`sharedLimitBytes=${opt} must be a non-negative integer`);
  }
  return opt;
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
export function resolveProcessGroupConfig(
  opts: ProcessGroupOptions = {},
): ResolvedProcessGroupConfig {
  const env = opts.env;
  const get: Lookup = env ? (name) => env[name] : (name) => Deno.env.get(name);
  const world = getWorld(get);
  const timeoutMs = opts.timeoutMs ?? getRankSettings(get).timeoutS * 1000;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError(`timeoutMs must be a positive number, got ${timeoutMs}`);
  }
  const fixedShared = sharedBytesVar(get, opts.sharedBytes);
  const common = {
    timeoutMs,
    detail: debugDetail(get),
    chunkBytes: opts.chunkBytes ?? intVar(get, "DTRAIN_SHM_CHUNK_BYTES") ?? DEFAULT_CHUNK_BYTES,
    sharedBytes: fixedShared ?? 0,
    sharedOnDemand: fixedShared === undefined,
    sharedLimitBytes: sharedLimit(get, opts.sharedLimitBytes),
    spinUs: opts.spinUs ?? intVar(get, "DTRAIN_SHM_SPIN_US") ?? defaultSpinUs(world.localWorldSize),
  };
  const { rank, worldSize: size, localWorldSize: localSize, nnodes } = world;
  const spansMachines = nnodes > 1 || localSize !== size;
  const cpuRequest = opts.backend === "shm" || opts.backend === "gloo"
    ? opts.backend
    : get("DTRAIN_CPU_BACKEND");
  // GPU ranks use NCCL whatever DTRAIN_CPU_BACKEND says: the CPU backend matters on the CPU only
  const backend = (opts.device ?? "cpu") === "cpu"
    ? cpuBackend(cpuRequest, spansMachines)
    : spansMachines
    ? "gloo"
    : "shm";
  const base = { ...common, backend, world, lookup: get };
  if (size === 1) return { rank: 0, size: 1, runId: world.runId, ...base };
  if (!RUN_ID.test(world.runId)) {
    throw new RangeError(
      `DTRAIN_RUN_ID=${
        JSON.stringify(world.runId)
      } must be 1-160 characters of A-Z a-z 0-9 . _ - : the launcher ` +
        `sets it to a value unique per run, and it names the shared-memory segment /dev/shm/dtrain-<run id>-a<attempt>-pg`,
    );
  }
  return { rank, size, runId: world.runId, ...base };
}

/**
 * The backend initProcessGroup() chooses for CPU ranks laid out as `nnodes` x
 * `nprocPerNode` (the launcher records it in run.json before any rank runs).
 *
 * @example
 * ```ts
 * plannedCpuBackend(2, 4); // "gloo"
 * ```
 */
export function plannedCpuBackend(
  nnodes: number,
  nprocPerNode: number,
  requested?: string,
): "single" | CpuBackend {
  if (nnodes * nprocPerNode === 1) return "single";
  return cpuBackend(requested, nnodes > 1);
}

/** The backend for `requested` ("" or undefined: choose), refusing shm across machines. */
function cpuBackend(requested: string | undefined, spansMachines: boolean): CpuBackend {
  const want = (requested ?? "").trim().toLowerCase();
  if (want !== "" && want !== "shm" && want !== "gloo") {
    throw new RangeError(
      `DTRAIN_CPU_BACKEND=${
        JSON.stringify(requested)
      }: expected shm, gloo, or unset (shm on one machine, gloo ` +
        `across machines)`,
    );
  }
  if (want === "shm" && spansMachines) {
    throw new Error(
      "Cannot use the shared-memory backend across machines (DTRAIN_CPU_BACKEND=shm with DTRAIN_NNODES > 1): " +
        "shared memory connects ranks on one machine only; leave DTRAIN_CPU_BACKEND unset to use Gloo",
    );
  }
  if (want !== "") return want as CpuBackend;
  return spansMachines ? "gloo" : "shm";
}
