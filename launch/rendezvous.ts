/**
 * The rendezvous of the nodes' launchers in the control store: each claims its node rank, node 0
 * publishes the run's facts (its id, the attempts earlier launches made), and every node checks
 * them against its own options, refusing the launch, with the reason for every node, when they
 * differ or a node does not join within --rdzv-timeout.
 */
import { type StoreClient, StoreError } from "../distributed/control/store.ts";
import { runKeys } from "../distributed/control/store_keys.ts";
import { type LaunchOptions, UsageError } from "./options.ts";
import { LaunchTimeout } from "./failure_report.ts";

/** Run facts node 0 publishes and every node checks against its own options. */
export interface RunInfo {
  runId: string;
  nnodes: number;
  nproc: number;
  maxRestarts: number;
  /** attempts that earlier launches into the run directory made (node 0 reads run.json) */
  attemptBase?: number;
}

/** Run facts every node must share: a difference is a refusal of the launch. */
const SHARED_FIELDS = ["nnodes", "nproc", "maxRestarts"] as const;
/** How long a launcher that refused the launch keeps node 0's store up for the others to read why. */
const REFUSAL_LINGER_MS = 5000;

/** A launch refused at rendezvous because the nodes were started with different options. */
export class RendezvousRefused extends UsageError {
  override name = "RendezvousRefused";
}

/** The first field in which `other` (node n) differs from `mine`, said as a sentence, or null. */
function mismatch(other: RunInfo & { host?: string }, n: number, mine: RunInfo, me: number) {
  for (const field of SHARED_FIELDS) {
    if (other[field] !== mine[field]) {
      return `node ${n}${other.host ? ` (${other.host})` : ""} runs with ${field}=${
        other[field]
      } but node ${me} with ${field}=${mine[field]}; ` +
        `every node must be given the same --nnodes, --nproc and --max-restarts`;
    }
  }
  return null;
}

/**
 * Claims this node's rank and publishes this launcher's run facts (node 0's are the run's):
 * returns them.
 */
async function publish(
  client: StoreClient,
  opts: LaunchOptions,
  runId: string | null,
  attemptBase: number,
): Promise<RunInfo> {
  const me = opts.nodeRank;
  const claims = await client.add(runKeys.nodeClaim(me), 1);
  if (claims > 1) {
    throw new Error(
      `Node rank ${me} was already claimed by another launcher of this run: give each node its own --node-rank`,
    );
  }
  const mine: RunInfo = {
    runId: runId ?? "",
    nnodes: opts.nnodes,
    nproc: opts.nproc,
    maxRestarts: opts.maxRestarts,
    attemptBase,
  };
  if (me === 0) await client.set(runKeys.info, JSON.stringify(mine));
  await client.set(
    runKeys.nodeInfo(me),
    JSON.stringify({ ...mine, host: Deno.hostname(), pid: Deno.pid }),
  );
  return mine;
}

/** Says why in the store (for every other launcher), then refuses the launch here. */
async function refuse(client: StoreClient, opts: LaunchOptions, why: string): Promise<never> {
  const me = opts.nodeRank;
  await client.set(runKeys.refused, JSON.stringify({ node: me, host: Deno.hostname(), why }))
    .catch(() => {});
  if (me === 0) {
    // This store is about to close: the nodes that joined read the refusal and say goodbye first.
    const others = Array.from({ length: opts.nnodes - 1 }, (_, i) => runKeys.nodeExit(i + 1));
    await client.wait(others, REFUSAL_LINGER_MS).catch(() => {});
  }
  throw new RendezvousRefused(`Rendezvous failed: ${why}`);
}

/** Another launcher refused: say so, and why, and leave. */
async function refusedElsewhere(client: StoreClient, me: number): Promise<never> {
  const raw = await client.getText(runKeys.refused).catch(() => null);
  const r = raw ? JSON.parse(raw) as { node: number; host: string; why: string } : null;
  await client.set(runKeys.nodeExit(me), "refused").catch(() => {});
  throw new RendezvousRefused(
    r
      ? `Rendezvous failed: node ${r.node} (${r.host}) refused the launch: ${r.why}`
      : "Rendezvous failed: another node refused the launch",
  );
}

/**
 * Nodes 1..: node 0's facts are in the store before its own node key, so they are compared at
 * once, not after a wait for nodes that will never come (a different --nnodes).
 */
async function compareWithNode0(
  client: StoreClient,
  opts: LaunchOptions,
  mine: RunInfo,
): Promise<void> {
  await client.wait([runKeys.info], opts.rdzvTimeoutS * 1000).catch(() => {});
  const info0 = await client.getText(runKeys.info).catch(() => null);
  const why = info0 ? mismatch(JSON.parse(info0) as RunInfo, 0, mine, opts.nodeRank) : null;
  if (why) await refuse(client, opts, why);
}

/**
 * Waits for every node's facts, up to --rdzv-timeout (a timeout that ends the run, naming the
 * nodes that did not join); a refusal by any launcher meanwhile ends the wait.
 */
async function waitForEveryNode(client: StoreClient, opts: LaunchOptions): Promise<void> {
  const me = opts.nodeRank;
  const timeoutMs = opts.rdzvTimeoutS * 1000;
  const nodes = Array.from({ length: opts.nnodes }, (_, n) => n);
  const refused = client.wait([runKeys.refused], timeoutMs).then(() => "refused" as const);
  refused.catch(() => {});
  try {
    const first = await Promise.race([
      client.wait(nodes.map(runKeys.nodeInfo), timeoutMs),
      refused,
    ]);
    if (first === "refused") await refusedElsewhere(client, me);
  } catch (e) {
    if (e instanceof RendezvousRefused) throw e;
    if (await client.get(runKeys.refused).catch(() => null) !== null) {
      await refusedElsewhere(client, me);
    }
    if (e instanceof StoreError && e.kind === "timeout") {
      const missing = nodes.filter((n) => e.missingKeys.includes(runKeys.nodeInfo(n)));
      throw new LaunchTimeout(
        `Rendezvous failed: node(s) ${
          missing.join(",") || "?"
        } did not join within ${opts.rdzvTimeoutS} s (--rdzv-timeout)`,
      );
    }
    throw new Error(
      `Rendezvous failed: the control store closed before every node joined (${
        (e as Error).message
      }): node 0's launcher has ended; its output says why`,
    );
  }
}

/** Every node's facts against this launcher's: the first difference refuses the launch. */
async function compareEveryNode(
  client: StoreClient,
  opts: LaunchOptions,
  mine: RunInfo,
): Promise<void> {
  for (let n = 0; n < opts.nnodes; n++) {
    const other = JSON.parse((await client.getText(runKeys.nodeInfo(n)))!) as RunInfo & {
      host: string;
    };
    const why = mismatch(other, n, mine, opts.nodeRank);
    if (why) await refuse(client, opts, why);
  }
}

/**
 * Meets every node's launcher in the store; returns node 0's run facts (its run id, attempt base).
 * In order: publish this node's facts, compare node 0's at once (nodes 1..), wait for every node,
 * compare them all.
 */
export async function rendezvous(
  client: StoreClient,
  opts: LaunchOptions,
  runId: string | null,
  attemptBase = 0,
): Promise<RunInfo> {
  const mine = await publish(client, opts, runId, attemptBase);
  if (opts.nodeRank !== 0) await compareWithNode0(client, opts, mine);
  await waitForEveryNode(client, opts);
  const info = JSON.parse((await client.getText(runKeys.info))!) as RunInfo;
  await compareEveryNode(client, opts, mine);
  return info;
}
