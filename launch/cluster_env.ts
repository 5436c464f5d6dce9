/**
 * What a cluster launcher's environment says about this node: Slurm's srun
 * (node rank, node count, the first host of the node list, the GPUs given),
 * Open MPI's mpirun, MPICH's Hydra and a bare PMIx launcher (rank and size,
 * one dtrain launcher per node). The launcher's options take what a flag did
 * not set from here; a flag that contradicts the scheduler is an error.
 */
import { firstHost, hostCount } from "./nodelist.ts";

type Env = (name: string) => string | undefined;

/** The launcher environment found, and what it gives. */
export interface ClusterEnv {
  kind: "slurm" | "openmpi" | "mpich" | "pmix";
  /** e.g. "Slurm job 1234 step 0" */
  label: string;
  nodeRank: number;
  /** null where the launcher does not say (PMIx) */
  nnodes: number | null;
  /** node 0's host, or null where the launcher does not say (MPI: MASTER_ADDR, if set) */
  masterAddr: string | null;
  /** where masterAddr came from, for messages */
  masterFrom: string;
  /** GPUs the scheduler gave this node, or null where it does not say */
  gpus: number | null;
  gpusFrom: string;
  /** the variables read, for messages */
  from: string;
}

/** A launcher environment that cannot be used as it is; a bad command line (exit 2). */
export class ClusterEnvError extends RangeError {
  override name = "ClusterEnvError";
}

function int(env: Env, name: string, min = 0): number | undefined {
  const raw = env(name);
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d{1,9}$/.test(raw.trim()) || Number(raw) < min) {
    throw new ClusterEnvError(`${name}=${JSON.stringify(raw)} is not an integer >= ${min}`);
  }
  return Number(raw);
}

/**
 * GPUs Slurm gave this node: SLURM_GPUS_ON_NODE (a count), else
 * SLURM_GPUS_PER_NODE (`4`, `a100:4`, `a100:2,v100:2`), else the entries of
 * CUDA_VISIBLE_DEVICES (which Slurm sets for a GPU allocation).
 */
export function slurmGpus(env: Env): { gpus: number | null; from: string } {
  const on = int(env, "SLURM_GPUS_ON_NODE");
  if (on !== undefined) return { gpus: on, from: "SLURM_GPUS_ON_NODE" };
  const per = env("SLURM_GPUS_PER_NODE");
  if (per !== undefined && per !== "") {
    let sum = 0;
    for (const item of per.split(",")) {
      const count = item.replace(/\(.*\)$/, "").split(":").at(-1)!;
      if (!/^\d{1,6}$/.test(count)) {
        throw new ClusterEnvError(
          `SLURM_GPUS_PER_NODE=${JSON.stringify(per)}: ${JSON.stringify(item)} is not [type:]count`,
        );
      }
      sum += Number(count);
    }
    return { gpus: sum, from: "SLURM_GPUS_PER_NODE" };
  }
  const visible = env("CUDA_VISIBLE_DEVICES");
  if (visible !== undefined) {
    const ids = visible.split(",").map((s) => s.trim()).filter((s) =>
      s !== "" && s !== "NoDevFiles"
    );
    return { gpus: ids.length, from: "CUDA_VISIBLE_DEVICES" };
  }
  return { gpus: null, from: "" };
}

function slurm(env: Env): ClusterEnv | null {
  // Only inside an srun step (a numbered one): a batch script, an salloc shell or the "extern"
  // step of an ssh login run on one node only.
  if (!/^\d+$/.test(env("SLURM_STEP_ID") ?? "") || env("SLURM_NODEID") === undefined) return null;
  const listVar = env("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const nnVar = env("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const list = env(listVar);
  const nnodes = int(env, nnVar, 1);
  const nodeRank = int(env, "SLURM_NODEID")!;
  if (list === undefined || nnodes === undefined) {
    throw new ClusterEnvError(
      `inside a Slurm step (SLURM_STEP_ID is set) but ${
        list === undefined ? listVar : nnVar
      } is not`,
    );
  }
  const listed = hostCount(list);
  if (listed !== nnodes) {
    throw new ClusterEnvError(
      `${listVar}=${list} names ${listed} host(s) but ${nnVar}=${nnodes}`,
    );
  }
  if (nodeRank >= nnodes) {
    throw new ClusterEnvError(`SLURM_NODEID=${nodeRank} is not below ${nnVar}=${nnodes}`);
  }
  const tasks = int(env, "SLURM_STEP_NUM_TASKS") ?? int(env, "SLURM_NTASKS");
  if (tasks !== undefined && tasks !== nnodes) {
    throw new ClusterEnvError(
      `srun started ${tasks} tasks on ${nnodes} node(s); dtrain runs one launcher per node, which ` +
        `starts the ranks itself: use \`srun --ntasks-per-node=1 ./dtrain --nproc N script.ts\``,
    );
  }
  const { gpus, from: gpusFrom } = slurmGpus(env);
  const job = env("SLURM_JOB_ID");
  return {
    kind: "slurm",
    label: `Slurm${job ? ` job ${job}` : ""} step ${env("SLURM_STEP_ID")}`,
    nodeRank,
    nnodes,
    masterAddr: firstHost(list),
    masterFrom: `the first host of ${listVar}`,
    gpus,
    gpusFrom,
    from: `SLURM_NODEID, ${nnVar}, ${listVar}`,
  };
}

/** MPI launchers give a rank and a size; with one launcher per node they are the node's. */
function mpi(env: Env): ClusterEnv | null {
  const kinds = [
    {
      kind: "openmpi" as const,
      label: "Open MPI (mpirun)",
      rank: "OMPI_COMM_WORLD_RANK",
      size: "OMPI_COMM_WORLD_SIZE",
      local: "OMPI_COMM_WORLD_LOCAL_SIZE",
    },
    {
      kind: "mpich" as const,
      label: "MPICH/Hydra (mpiexec)",
      rank: "PMI_RANK",
      size: "PMI_SIZE",
      local: "MPI_LOCALNRANKS",
    },
    { kind: "pmix" as const, label: "PMIx", rank: "PMIX_RANK", size: "", local: "" },
  ];
  const k = kinds.find((c) => env(c.rank) !== undefined);
  if (!k) return null;
  const nodeRank = int(env, k.rank)!;
  const nnodes = k.size ? int(env, k.size, 1) ?? null : null;
  const perNode = k.local ? int(env, k.local) : undefined;
  if (perNode !== undefined && perNode > 1) {
    throw new ClusterEnvError(
      `${k.label} started ${perNode} processes on this node (${k.local}); dtrain runs one launcher ` +
        `per node, which starts the ranks itself: map one process per node ` +
        `(Open MPI: --map-by ppr:1:node; MPICH: -ppn 1)`,
    );
  }
  if (nnodes !== null && nodeRank >= nnodes) {
    throw new ClusterEnvError(`${k.rank}=${nodeRank} is not below ${k.size}=${nnodes}`);
  }
  const master = env("MASTER_ADDR");
  return {
    kind: k.kind,
    label: k.label,
    nodeRank,
    nnodes,
    masterAddr: master || null,
    masterFrom: "MASTER_ADDR",
    gpus: null,
    gpusFrom: "",
    from: k.size ? `${k.rank}, ${k.size}` : k.rank,
  };
}

/**
 * The launcher environment this process runs in, or null for a plain shell.
 * An srun step wins over MPI variables (srun --mpi=pmix sets both).
 * DTRAIN_CLUSTER_ENV=off ignores them all.
 */
export function detectClusterEnv(env: Env): ClusterEnv | null {
  if (env("DTRAIN_CLUSTER_ENV") === "off") return null;
  return slurm(env) ?? mpi(env);
}

/** One line for `dtrain doctor` and the launcher's start message. */
export function describeClusterEnv(c: ClusterEnv | null): string {
  if (c === null) {
    return "none (a plain shell: --nnodes, --node-rank and --master-addr come from flags)";
  }
  const nodes = c.nnodes === null
    ? `node ${c.nodeRank} (node count not given: --nnodes)`
    : `node ${c.nodeRank} of ${c.nnodes}`;
  const master = c.masterAddr
    ? `rendezvous host ${c.masterAddr} (${c.masterFrom})`
    : `no rendezvous host (set ${c.masterFrom} or --master-addr)`;
  const gpus = c.gpus === null ? "" : `, ${c.gpus} GPU(s) given (${c.gpusFrom})`;
  return `${c.label}: ${nodes}, ${master}${gpus}`;
}

/** The launcher settings a cluster environment decides. */
export interface ClusterSettings {
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  nproc: number;
}

/**
 * Fills the settings no flag gave (`explicit` names the flags given) from the
 * environment, and refuses a flag that contradicts it: a wrong --nnodes or
 * --node-rank would leave the job waiting for nodes that never come.
 * --master-addr and --nproc may differ (another interface, fewer GPUs).
 */
export function applyClusterEnv(
  c: ClusterEnv,
  opts: ClusterSettings,
  explicit: ReadonlySet<string>,
): ClusterSettings {
  const out = { ...opts };
  if (c.nnodes !== null) {
    if (explicit.has("nnodes") && opts.nnodes !== c.nnodes) {
      throw new ClusterEnvError(
        `--nnodes ${opts.nnodes} contradicts ${c.label}, which runs on ${c.nnodes} node(s) ` +
          `(${c.from}); leave --nnodes out, or run with that many nodes`,
      );
    }
    out.nnodes = c.nnodes;
  } else if (!explicit.has("nnodes")) {
    throw new ClusterEnvError(
      `${c.label} gives this node's rank (${c.from}) but not the node count: give --nnodes`,
    );
  }
  if (explicit.has("node-rank") && opts.nodeRank !== c.nodeRank) {
    throw new ClusterEnvError(
      `--node-rank ${opts.nodeRank} contradicts ${c.label}, which says this is node ${c.nodeRank} (${c.from})`,
    );
  }
  out.nodeRank = c.nodeRank;
  if (out.nodeRank >= out.nnodes) {
    throw new ClusterEnvError(
      `node rank ${out.nodeRank} (${c.from}) is not below --nnodes ${out.nnodes}`,
    );
  }
  if (!explicit.has("master-addr")) {
    if (c.masterAddr !== null) out.masterAddr = c.masterAddr;
    else if (out.nnodes > 1) {
      throw new ClusterEnvError(
        `${c.label} does not say which host runs node 0: set MASTER_ADDR for every process ` +
          `(e.g. \`mpirun -x MASTER_ADDR=$(hostname) …\`) or give --master-addr`,
      );
    }
  }
  if (!explicit.has("nproc") && c.gpus !== null && c.gpus > 0) out.nproc = c.gpus;
  return out;
}

/** The doctor's line: the launcher environment of this process, or why it cannot be used. */
export function clusterEnvLine(env: Env = (n) => Deno.env.get(n)): string {
  try {
    return describeClusterEnv(detectClusterEnv(env));
  } catch (e) {
    return `unusable: ${(e as Error).message}`;
  }
}
