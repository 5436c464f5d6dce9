/**
 * Rank processes of a job laid out on several simulated nodes of this
 * machine, for the Gloo process-group tests: a control store in the test
 * process (as node 0's launcher would host it) and each rank's environment as
 * the launcher of its node would set it. withGlooRanks() closes the store and
 * kills every rank when the test body ends, also when it throws.
 */
import { StoreServer } from "../../../distributed/control/store_server.ts";
import { RankProcess, TEST_DEFAULTS, uniqueRunId } from "./_ranks.ts";

/** The job's layout and what each rank runs. */
export interface GlooJob {
  nodes: number;
  perNode: number;
  tag: string;
  /** pg_rank.ts arguments, or a function of the rank giving them */
  args: string[] | ((rank: number) => string[]);
  /** which ranks to start (default all) */
  ranks?: number[];
  /** extra environment of each rank */
  env?: (rank: number) => Record<string, string>;
}

/** What the test body gets besides the ranks. */
export interface GlooJobContext {
  runId: string;
  token: string;
  store: StoreServer;
  /** lines the store logged (refused connections and the like) */
  storeLog: string[];
  /** starts a rank that `ranks` left out (it is stopped with the others) */
  start(rank: number): RankProcess;
}

/** The variables a launcher sets for `rank` of the job (store on 127.0.0.1:port). */
export function nodeEnv(
  job: Pick<GlooJob, "nodes" | "perNode">,
  rank: number,
  runId: string,
  port: number,
  token: string,
): Record<string, string> {
  const world = job.nodes * job.perNode;
  return {
    RANK: String(rank),
    LOCAL_RANK: String(rank % job.perNode),
    WORLD_SIZE: String(world),
    LOCAL_WORLD_SIZE: String(job.perNode),
    GROUP_RANK: String(Math.floor(rank / job.perNode)),
    DTRAIN_NNODES: String(job.nodes),
    DTRAIN_RUN_ID: runId,
    MASTER_ADDR: "127.0.0.1",
    MASTER_PORT: String(port),
    DTRAIN_STORE_TOKEN: token,
    DTRAIN_RESTART_COUNT: "0",
    GLOO_SOCKET_IFNAME: "",
    DTRAIN_GLOO_HOST: "",
    DTRAIN_GLOO_HIERARCHY: "",
    DTRAIN_CPU_BACKEND: "",
  };
}

/** Starts the job's store and ranks, runs `body`, then stops everything. */
export async function withGlooRanks<T>(
  job: GlooJob,
  body: (procs: RankProcess[], ctx: GlooJobContext) => Promise<T>,
): Promise<T> {
  const token = crypto.randomUUID();
  const storeLog: string[] = [];
  const store = StoreServer.listen({
    hostname: "127.0.0.1",
    port: 0,
    token,
    log: (line) => storeLog.push(line),
  });
  const runId = uniqueRunId(job.tag);
  const all: RankProcess[] = [];
  const start = (r: number) => {
    const args = typeof job.args === "function" ? job.args(r) : job.args;
    const p = new RankProcess(r, args, {
      ...TEST_DEFAULTS,
      ...nodeEnv(job, r, runId, store.port, token),
      ...job.env?.(r),
    });
    all.push(p);
    return p;
  };
  try {
    const ranks = job.ranks ?? Array.from({ length: job.nodes * job.perNode }, (_, r) => r);
    const procs = ranks.map(start);
    return await body(procs, { runId, token, store, storeLog, start });
  } finally {
    await Promise.all(all.map((p) => p.kill()));
    await store.close();
  }
}
