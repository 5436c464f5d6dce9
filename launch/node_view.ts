/**
 * A node's view of its own ranks, as its launcher forwards it to the store (launch/page_forwarder.ts)
 * and as the other launchers read it: each rank's state page, process state (/proc) and exit, which
 * only that node can see. Node 0's hang report uses it for other nodes' ranks exactly as it uses its
 * own ranks' pages and /proc; a node whose view has stopped coming has a silent launcher.
 */
import { type RankView, toRankView } from "../distributed/control/rank_state.ts";
import type { StoreEntry } from "../distributed/control/store.ts";
import { SILENT_S, type SilentNode } from "./hang_report.ts";

/** What a node forwards of one of its ranks. */
export interface ForwardedRank {
  rank: number;
  pid: number;
  /** the rank's state page (RankState JSON) as this pid last wrote it; null when it has none */
  page: string | null;
  /** the page's age when forwarded, ms, by the node's own clock (the page's writer's clock) */
  pageAgeMs: number;
  /** its /proc state letter ("T": stopped by a signal); null once it has exited */
  state: string | null;
  /** how it ended ("exit code 1", "killed by SIGKILL"); null while it runs */
  exit: string | null;
}

/** What a node's launcher forwards (JSON at `attemptKeys(a).nodeView(node)`). */
export interface NodeView {
  node: number;
  ranks: ForwardedRank[];
}

/** How often a launcher forwards its view; on its own timer, which runs while its ranks are stopped. */
export const FORWARD_MS = 500;
/**
 * A view older than this means its launcher is silent (it forwards every FORWARD_MS): what it said
 * of its ranks is no longer current. Generous, so a loaded machine's late timer is not a silence.
 */
export const NODE_SILENT_S = 5;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null;
}

/** Parses a forwarded view; null when it is not one. */
export function parseNodeView(value: Uint8Array): NodeView | null {
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(value));
  } catch {
    return null;
  }
  if (!isObject(v) || typeof v.node !== "number" || !Array.isArray(v.ranks)) return null;
  const ranks: ForwardedRank[] = [];
  for (const r of v.ranks) {
    if (!isObject(r) || typeof r.rank !== "number" || typeof r.pid !== "number") continue;
    ranks.push({
      rank: r.rank,
      pid: r.pid,
      page: typeof r.page === "string" ? r.page : null,
      pageAgeMs: typeof r.pageAgeMs === "number" && r.pageAgeMs >= 0 ? r.pageAgeMs : 0,
      state: typeof r.state === "string" ? r.state : null,
      exit: typeof r.exit === "string" ? r.exit : null,
    });
  }
  return { node: v.node, ranks };
}

/** One node's latest view with its age by the store's clock. */
interface Received {
  view: NodeView;
  ageMs: number;
}

/**
 * What one launcher knows of the other nodes' ranks from their forwarded views. `update()` takes
 * the store's listing of the views; the launcher then merges the ranks' pages into its views,
 * asks for their process states, and learns which nodes went silent.
 */
export class RemoteRanks {
  readonly #ownNode: number;
  readonly #nproc: number;
  #nodes = new Map<number, Received>();

  constructor(ownNode: number, nproc: number) {
    this.#ownNode = ownNode;
    this.#nproc = nproc;
  }

  /** Takes the store's entries under `nodeViewPrefix` (the latest of every node). */
  update(entries: readonly StoreEntry[]): void {
    const nodes = new Map<number, Received>();
    for (const e of entries) {
      const view = parseNodeView(e.value);
      if (view && view.node !== this.#ownNode) nodes.set(view.node, { view, ageMs: e.ageMs });
    }
    this.#nodes = nodes;
  }

  /** The forwarded ranks of nodes whose launcher is not silent, with their view's age. */
  *#current(): Generator<[ForwardedRank, number]> {
    for (const { view, ageMs } of this.#nodes.values()) {
      if (ageMs > NODE_SILENT_S * 1000) continue;
      for (const r of view.ranks) yield [r, ageMs];
    }
  }

  /**
   * Replaces a remote rank's store record by its forwarded page when the page is newer (the rule
   * for this node's own pages), and marks a rank whose process has ended as exited. A silent node's
   * pages are merged too: an old page is still the newest account of where a rank was.
   */
  merge(byRank: Map<number, RankView>): void {
    for (const { view, ageMs } of this.#nodes.values()) {
      for (const r of view.ranks) {
        const page = r.page === null ? null : toRankView({
          key: "",
          value: new TextEncoder().encode(r.page),
          ageMs: r.pageAgeMs + ageMs,
        });
        const known = byRank.get(r.rank);
        let best = known;
        if (page && page.rank === r.rank && page.pid === r.pid) {
          if (!known || page.heardS <= known.heardS) best = page;
        }
        if (best && r.exit !== null && best.pid === r.pid) {
          best = { ...best, status: "exited", inColl: false };
        }
        if (best) byRank.set(r.rank, best);
      }
    }
  }

  /** A remote rank's process state as its node last saw it; null when not known now. */
  processState(rank: number, pid: number): string | null {
    for (const [r] of this.#current()) {
      if (r.rank === rank && r.pid === pid) return r.state;
    }
    return null;
  }

  /**
   * The nodes whose launcher has been silent for NODE_SILENT_S and their ranks that are silent too
   * (or never reported): where those are is not known, so no hang is blamed on them.
   */
  silentNodes(views: readonly RankView[]): SilentNode[] {
    const byRank = new Map(views.map((v) => [v.rank, v]));
    const out: SilentNode[] = [];
    for (const [node, { ageMs }] of [...this.#nodes].sort(([a], [b]) => a - b)) {
      if (ageMs <= NODE_SILENT_S * 1000) continue;
      const ranks: number[] = [];
      for (let r = node * this.#nproc; r < (node + 1) * this.#nproc; r++) {
        const v = byRank.get(r);
        if (!v || (v.status === "running" && v.heardS >= SILENT_S)) ranks.push(r);
      }
      if (ranks.length > 0) out.push({ node, ranks, heardS: ageMs / 1000 });
    }
    return out;
  }
}
