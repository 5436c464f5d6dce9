/**
 * Forwards this node's view of its ranks (launch/node_view.ts) to the store on the launcher's own
 * timer: each rank's state page, /proc state and exit. A rank stopped by a signal or blocked in
 * native code sends nothing itself; its launcher keeps running, so the other nodes still learn
 * where it is and that it is stopped.
 */
import type { StoreClient } from "../distributed/control/store.ts";
import { readStatePage, statePagePath } from "../distributed/control/state_page.ts";
import { FORWARD_MS, type ForwardedRank, type NodeView } from "./node_view.ts";

/** A local rank as the forwarder needs it (a RankProcess). */
export interface LocalRank {
  readonly rank: number;
  readonly pid: number;
  readonly exit: { code: number; signal: Deno.Signal | null } | null;
}

/** What to forward, and where. */
export interface ForwarderOptions {
  client: StoreClient;
  /** the store key of this node's view */
  key: string;
  node: number;
  runDir: string;
  /** this node's ranks started so far */
  ranks: () => readonly LocalRank[];
  /** the /proc state letter of each running local rank, now */
  processStates: () => ReadonlyMap<number, string>;
}

/** This node's view now: every local rank's page (written by its own pid), state and exit. */
export function nodeView(opts: ForwarderOptions): NodeView {
  const states = opts.processStates();
  const ranks: ForwardedRank[] = opts.ranks().map((p) => {
    const read = readStatePage(statePagePath(opts.runDir, p.rank));
    let page: string | null = null;
    if (read) {
      const text = new TextDecoder().decode(read.value).trimEnd();
      // A page left by an earlier attempt's process of this rank says nothing about this one.
      if ((JSON.parse(text) as { pid?: unknown }).pid === p.pid) page = text;
    }
    return {
      rank: p.rank,
      pid: p.pid,
      page,
      pageAgeMs: page === null ? 0 : read!.ageMs,
      state: p.exit ? null : states.get(p.rank) ?? null,
      exit: p.exit
        ? p.exit.signal ? `killed by ${p.exit.signal}` : `exit code ${p.exit.code}`
        : null,
    };
  });
  return { node: opts.node, ranks };
}

/** Starts forwarding now and every FORWARD_MS; the returned function stops it. */
export function forwardNodeView(opts: ForwarderOptions): () => void {
  const send = () => opts.client.post(opts.key, JSON.stringify(nodeView(opts)));
  send();
  const timer = setInterval(send, FORWARD_MS);
  // The attempt stops it when it ends; it never keeps the launcher alive by itself.
  Deno.unrefTimer(timer);
  return () => clearInterval(timer);
}
