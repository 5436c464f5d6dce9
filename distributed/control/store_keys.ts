/**
 * The control store's key namespace, in one place for the launchers and the
 * ranks. Everything a launch attempt writes lives under its own prefix, so
 * the keys of a failed attempt (barrier counts, bootstrap data, failure
 * notices) can never be mistaken for those of the restart that follows.
 */

const ROOT = "dtrain";

/** Keys of the whole run (they outlive restarts). */
export const runKeys = {
  /** node 0's description of the run: JSON RunInfo */
  info: `${ROOT}/run`,
  /** counter: how many launchers claimed node rank n (must end at 1) */
  nodeClaim: (n: number) => `${ROOT}/node/${n}/claim`,
  /** JSON NodeInfo of node n's launcher */
  nodeInfo: (n: number) => `${ROOT}/node/${n}/info`,
  /** node n's launcher heartbeat (its clock, ms) */
  nodeBeat: (n: number) => `${ROOT}/node/${n}/beat`,
  /** JSON {node, host, why}: the first launcher that refused the launch (its options differ) */
  refused: `${ROOT}/refused`,
  /** node n's launcher is leaving; node 0 may close the store once all have */
  nodeExit: (n: number) => `${ROOT}/node/${n}/exit`,
} as const;

/** Keys of one launch attempt (0 for the first run, k after k restarts). */
export function attemptKeys(attempt: number) {
  const a = `${ROOT}/a${attempt}`;
  return {
    prefix: `${a}/`,
    /** node n is ready to start its ranks */
    nodeReady: (n: number) => `${a}/node/${n}/ready`,
    /** every local rank of node n exited 0 */
    nodeDone: (n: number) => `${a}/node/${n}/done`,
    /** node n has no rank of this attempt left running */
    nodeStopped: (n: number) => `${a}/node/${n}/stopped`,
    /** prefix of the node views: what each node's launcher sees of its ranks (launch/node_view.ts) */
    nodeViewPrefix: `${a}/view/`,
    /** JSON NodeView of node n, rewritten by its launcher's own timer */
    nodeView: (n: number) => `${a}/view/${n}`,
    /** prefix of every rank state record */
    rankStatePrefix: `${a}/rank/`,
    /** JSON RankState of rank r */
    rankState: (r: number) => `${a}/rank/${r}/state`,
    /** JSON FailureNotice written by rank r before it exits on an error */
    rankFailure: (r: number) => `${a}/rank/${r}/failure`,
    /** counter: the first launcher to take ticket 1 writes the abort record */
    abortTicket: `${a}/abort-ticket`,
    /** JSON AbortRecord: why this attempt is being stopped */
    abort: `${a}/abort`,
    /** arrivals at barrier `name`, generation `gen` */
    barrierCount: (name: string, gen: number) => `${a}/barrier/${name}/${gen}/count`,
    /** set by the last arrival at barrier `name`, generation `gen` */
    barrierDone: (name: string, gen: number) => `${a}/barrier/${name}/${gen}/done`,
    /** JSON: the process group rank 0 made (backend, world size, device), for run.json */
    processGroup: `${a}/process-group`,
    /** JSON: the numerics policy rank 0 trains under (the latest one set), for run.json */
    numerics: `${a}/numerics`,
    /** JSON: what rank 0's Trainer resumed from (checkpoint, whose state, config changes), for run.json */
    resume: `${a}/resume`,
    /** a key of the user's (or a backend's) own, scoped to this attempt */
    user: (name: string) => `${a}/user/${name}`,
  };
}

/** The keys of one attempt. */
export type AttemptKeys = ReturnType<typeof attemptKeys>;
