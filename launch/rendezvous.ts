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

/** Meets every node's launcher in the store; returns node 0's run facts (its run id, attempt base). */
export async function rendezvous(
  client: StoreClient,
  opts: LaunchOptions,
  runId: string | null,
  attemptBase = 0,
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
  const timeoutMs = opts.rdzvTimeoutS * 1000;
  /** Says why in the store (for every other launcher), then refuses here. */
  const refuse = async (why: string): Promise<never> => {
    await client.set(runKeys.refused, JSON.stringify({ node: me, host: Deno.hostname(), why }))
      .catch(() => {});
    if (me === 0) {
      // This store is about to close: the nodes that joined read the refusal and say goodbye first.
      const others = Array.from({ length: opts.nnodes - 1 }, (_, i) => runKeys.nodeExit(i + 1));
      await client.wait(others, REFUSAL_LINGER_MS).catch(() => {});
    }
    throw new RendezvousRefused(`Rendezvous failed: ${why}`);
  };
  /** Another launcher refused: say so, and why, and leave. */
  const refusedElsewhere = async (): Promise<never> => {
    const raw = await client.getText(runKeys.refused).catch(() => null);
    const r = raw ? JSON.parse(raw) as { node: number; host: string; why: string } : null;
    await client.set(runKeys.nodeExit(me), "refused").catch(() => {});
    throw new RendezvousRefused(
      r
        ? `Rendezvous failed: node ${r.node} (${r.host}) refused the launch: ${r.why}`
        : "Rendezvous failed: another node refused the launch",
    );
  };
  if (me !== 0) {
    // Node 0's facts are in the store before its own node key: compared at once, not after a wait
    // for nodes that will never come (a different --nnodes).
    await client.wait([runKeys.info], timeoutMs).catch(() => {});
    const info0 = await client.getText(runKeys.info).catch(() => null);
    const why = info0 ? mismatch(JSON.parse(info0) as RunInfo, 0, mine, me) : null;
    if (why) await refuse(why);
  }
  const nodes = Array.from({ length: opts.nnodes }, (_, n) => n);
  const refused = client.wait([runKeys.refused], timeoutMs).then(() => "refused" as const);
  refused.catch(() => {});
  try {
    const first = await Promise.race([
      client.wait(nodes.map(runKeys.nodeInfo), timeoutMs),
      refused,
    ]);
    if (first === "refused") await refusedElsewhere();
  } catch (e) {
    if (e instanceof RendezvousRefused) throw e;
    if (await client.get(runKeys.refused).catch(() => null) !== null) await refusedElsewhere();
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
  const info = JSON.parse((await client.getText(runKeys.info))!) as RunInfo;
  for (const n of nodes) {
    const other = JSON.parse((await client.getText(runKeys.nodeInfo(n)))!) as RunInfo & {
      host: string;
    };
    const why = mismatch(other, n, mine, me);
    if (why) await refuse(why);
  }
  return info;
}
