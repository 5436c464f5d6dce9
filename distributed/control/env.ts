/**
 * The environment contract between launcher and ranks, both ways: `rankEnv()` builds what the
 * launcher sets (torchrun's RANK, LOCAL_RANK, WORLD_SIZE, … plus DTRAIN_*), `getWorld()` reads it
 * back into one validated object (a world of one outside a launcher).
 */

/** Where this process sits in the job. Rank 0 is the process that logs and saves. */
export interface World {
  /** global rank, 0 … worldSize-1 */
  rank: number;
  /** rank within this node, 0 … localWorldSize-1 */
  localRank: number;
  /** number of ranks in the job (torchrun's WORLD_SIZE) */
  worldSize: number;
  /** ranks on this node */
  localWorldSize: number;
  /** this node's index (torchrun's GROUP_RANK), 0 … nnodes-1 */
  groupRank: number;
  /** number of nodes in the job */
  nnodes: number;
  /** address of node 0, where the control store listens */
  masterAddr: string;
  /** port of the control store on node 0 */
  masterPort: number;
  /** the run's id ("" outside a launcher) */
  runId: string;
  /** the run directory (null outside a launcher) */
  runDir: string | null;
  /** true when started by the dtrain launcher (DTRAIN_RUN_ID is set) */
  isLauncher: boolean;
}

/** The launcher's settings that ranks read (DTRAIN_*), besides the world. */
export interface RankSettings {
  /** native threads for this rank's kernels */
  numThreads: number;
  /** seconds a collective may wait before the launcher prints the hang table */
  hangWarnS: number;
  /** seconds a collective may wait before the launcher fails the run */
  timeoutS: number;
  /** how many times the launcher restarted the ranks so far */
  restartCount: number;
  /** "0" (rank 0 only), "all", or a comma list of ranks whose info output is shown */
  logRanks: string;
  /** --resume: the folder a Trainer resumes from when its own run has no checkpoint yet */
  resume: string | null;
  /** --allow-config-change: a resume may change the data order or the global batch */
  allowConfigChange: boolean;
}

/** Everything the launcher needs to describe one rank's environment. */
export interface RankEnvInput extends Omit<RankSettings, "resume" | "allowConfigChange"> {
  /** --resume's folder (absent: none) */
  resume?: string | null;
  /** --allow-config-change (absent: false) */
  allowConfigChange?: boolean;
  world: World;
  /** the run's store secret */
  storeToken: string;
  /** pid of the launcher, so a rank can notice it died before it could watch it */
  launcherPid: number;
  /** "auto", "cpu", "cuda" or "cuda-emu" */
  device?: string;
}

/** Names of the variables this contract sets; the token's is listed so logs can redact it. */
export const ENV = {
  RANK: "RANK",
  LOCAL_RANK: "LOCAL_RANK",
  WORLD_SIZE: "WORLD_SIZE",
  LOCAL_WORLD_SIZE: "LOCAL_WORLD_SIZE",
  GROUP_RANK: "GROUP_RANK",
  MASTER_ADDR: "MASTER_ADDR",
  MASTER_PORT: "MASTER_PORT",
  RUN_ID: "DTRAIN_RUN_ID",
  RUN_DIR: "DTRAIN_RUN_DIR",
  STORE_TOKEN: "DTRAIN_STORE_TOKEN",
  NUM_THREADS: "DTRAIN_NUM_THREADS",
  NNODES: "DTRAIN_NNODES",
  HANG_WARN: "DTRAIN_HANG_WARN",
  TIMEOUT: "DTRAIN_TIMEOUT",
  RESTART_COUNT: "DTRAIN_RESTART_COUNT",
  LOG_RANKS: "DTRAIN_LOG_RANKS",
  LAUNCHER_PID: "DTRAIN_LAUNCHER_PID",
  DEVICE: "DTRAIN_DEVICE",
  RESUME: "DTRAIN_RESUME",
  ALLOW_CONFIG_CHANGE: "DTRAIN_ALLOW_CONFIG_CHANGE",
} as const;

/** The variables the launcher sets for one rank. */
export function rankEnv(input: RankEnvInput): Record<string, string> {
  const w = input.world;
  return {
    [ENV.RANK]: String(w.rank),
    [ENV.LOCAL_RANK]: String(w.localRank),
    [ENV.WORLD_SIZE]: String(w.worldSize),
    [ENV.LOCAL_WORLD_SIZE]: String(w.localWorldSize),
    [ENV.GROUP_RANK]: String(w.groupRank),
    [ENV.MASTER_ADDR]: w.masterAddr,
    [ENV.MASTER_PORT]: String(w.masterPort),
    [ENV.RUN_ID]: w.runId,
    [ENV.RUN_DIR]: w.runDir ?? "",
    [ENV.STORE_TOKEN]: input.storeToken,
    [ENV.NUM_THREADS]: String(input.numThreads),
    [ENV.NNODES]: String(w.nnodes),
    [ENV.HANG_WARN]: String(input.hangWarnS),
    [ENV.TIMEOUT]: String(input.timeoutS),
    [ENV.RESTART_COUNT]: String(input.restartCount),
    [ENV.LOG_RANKS]: input.logRanks,
    [ENV.LAUNCHER_PID]: String(input.launcherPid),
    [ENV.DEVICE]: input.device ?? "auto",
    ...(input.resume ? { [ENV.RESUME]: input.resume } : {}),
    ...(input.allowConfigChange ? { [ENV.ALLOW_CONFIG_CHANGE]: "1" } : {}),
  };
}

/** Reads an environment variable by name (`Deno.env.get` unless a test passes its own). */
export type Lookup = (name: string) => string | undefined;

function intVar(get: Lookup, name: string, fallback: number, min: number): number {
  const raw = get(name);
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < min || !Number.isSafeInteger(Number(raw))) {
    throw new RangeError(
      `Invalid environment variable ${name}=${JSON.stringify(raw)}: expected an integer >= ${min}`,
    );
  }
  return Number(raw);
}

function numberVar(get: Lookup, name: string, fallback: number): number {
  const raw = get(name);
  if (raw === undefined || raw === "") return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v <= 0) {
    throw new RangeError(
      `Invalid environment variable ${name}=${
        JSON.stringify(raw)
      }: expected a number of seconds > 0`,
    );
  }
  return v;
}

let processWorld: World | undefined;

/**
 * This process's place in the job, validated from its environment (read
 * once, then cached: the launcher never changes a rank's environment), or,
 * given `get`, the world those variables describe. Outside a launcher, with
 * none of them set, a world of one. Inconsistent values throw an error
 * naming the variables involved.
 * The counterpart of torch.distributed.get_rank() and get_world_size() and of torchrun's
 * environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, …).
 *
 * @example
 * ```ts
 * const { rank, worldSize } = getWorld();
 * if (rank === 0) console.log(`training on ${worldSize} ranks`);
 * ```
 */
export function getWorld(get?: Lookup): World {
  if (get) return readWorld(get);
  processWorld ??= readWorld((n) => Deno.env.get(n));
  return processWorld;
}

function readWorld(get: Lookup): World {
  const runId = get(ENV.RUN_ID) ?? "";
  const isLauncher = runId !== "";
  const has = (n: string) => (get(n) ?? "") !== "";
  if (has(ENV.RANK) !== has(ENV.WORLD_SIZE)) {
    const [set, unset] = has(ENV.RANK) ? [ENV.RANK, ENV.WORLD_SIZE] : [ENV.WORLD_SIZE, ENV.RANK];
    throw new RangeError(
      `Inconsistent environment: ${set} is set but ${unset} is not; set both, or neither for a single process`,
    );
  }
  const worldSize = intVar(get, ENV.WORLD_SIZE, 1, 1);
  const rank = intVar(get, ENV.RANK, 0, 0);
  const localWorldSize = intVar(
    get,
    ENV.LOCAL_WORLD_SIZE,
    has(ENV.WORLD_SIZE) && !has(ENV.LOCAL_WORLD_SIZE) ? worldSize : 1,
    1,
  );
  const localRank = intVar(get, ENV.LOCAL_RANK, rank % localWorldSize, 0);
  const groupRank = intVar(get, ENV.GROUP_RANK, Math.floor(rank / localWorldSize), 0);
  const nnodes = intVar(get, ENV.NNODES, Math.ceil(worldSize / localWorldSize), 1);
  const masterPort = intVar(get, ENV.MASTER_PORT, 0, 0);
  const masterAddr = get(ENV.MASTER_ADDR) || "127.0.0.1";
  const runDir = get(ENV.RUN_DIR) || null;

  const fail = (what: string) => {
    throw new RangeError(`Inconsistent environment: ${what}`);
  };
  if (rank >= worldSize) fail(`RANK=${rank} is not below WORLD_SIZE=${worldSize}`);
  if (localRank >= localWorldSize) {
    fail(`LOCAL_RANK=${localRank} is not below LOCAL_WORLD_SIZE=${localWorldSize}`);
  }
  if (localWorldSize > worldSize) {
    fail(`LOCAL_WORLD_SIZE=${localWorldSize} exceeds WORLD_SIZE=${worldSize}`);
  }
  if (groupRank >= nnodes) fail(`GROUP_RANK=${groupRank} is not below ${ENV.NNODES}=${nnodes}`);
  if (masterPort > 65535) fail(`MASTER_PORT=${masterPort} is not a TCP port (0 … 65535)`);
  if (isLauncher) {
    // The dtrain launcher gives every node the same number of ranks, in node order.
    if (worldSize !== nnodes * localWorldSize) {
      fail(
        `WORLD_SIZE=${worldSize} != ${ENV.NNODES}=${nnodes} × LOCAL_WORLD_SIZE=${localWorldSize}`,
      );
    }
    if (rank !== groupRank * localWorldSize + localRank) {
      fail(
        `RANK=${rank} != GROUP_RANK=${groupRank} × LOCAL_WORLD_SIZE=${localWorldSize} + LOCAL_RANK=${localRank}`,
      );
    }
    if (masterPort === 0) fail(`MASTER_PORT is unset or 0 inside a dtrain launch (run ${runId})`);
  }
  return {
    rank,
    localRank,
    worldSize,
    localWorldSize,
    groupRank,
    nnodes,
    masterAddr,
    masterPort,
    runId,
    runDir,
    isLauncher,
  };
}

/** Reads the launcher's DTRAIN_* settings (defaults outside a launcher). */
export function getRankSettings(get: Lookup = (n) => Deno.env.get(n)): RankSettings {
  return {
    numThreads: intVar(get, ENV.NUM_THREADS, navigator.hardwareConcurrency || 1, 1),
    hangWarnS: numberVar(get, ENV.HANG_WARN, 60),
    timeoutS: numberVar(get, ENV.TIMEOUT, 1800),
    restartCount: intVar(get, ENV.RESTART_COUNT, 0, 0),
    logRanks: get(ENV.LOG_RANKS) || "0",
    resume: get(ENV.RESUME) || null,
    allowConfigChange: get(ENV.ALLOW_CONFIG_CHANGE) === "1",
  };
}

/** The store secret handed to this rank, or null outside a launcher. */
export function storeToken(get: Lookup = (n) => Deno.env.get(n)): string | null {
  return get(ENV.STORE_TOKEN) || null;
}

/** The launcher's pid, or null outside a launcher. */
export function launcherPid(get: Lookup = (n) => Deno.env.get(n)): number | null {
  const raw = get(ENV.LAUNCHER_PID);
  return raw ? intVar(get, ENV.LAUNCHER_PID, 0, 1) : null;
}
