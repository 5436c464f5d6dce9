/**
 * Which rank's failure a launcher reports as the cause of a failed attempt:
 * the earliest failure that is not a consequence of another. Ranks publish
 * failure notices (own error, timeout, or "peer": a collective that broke
 * because another rank closed, left or aborted the group) before they close
 * anything; a rank killed by a signal leaves none. Notices are ordered by
 * when the store received them (one clock for every machine).
 */
import type { FailureNotice } from "../distributed/control/rank_state.ts";

/** A notice as read from the store, with its age by the store's clock. */
export interface StoredNotice {
  notice: FailureNotice;
  /** ms since the store received it: larger is earlier */
  ageMs: number;
}

/** A local rank that exited non-zero, in the order the launcher saw the exits. */
export interface FailedExit {
  rank: number;
  order: number;
}

/** The chosen cause. */
export type FirstFailure =
  | { rank: number; kind: "error" | "timeout" | "peer"; notice: FailureNotice }
  | { rank: number; kind: "died" };

const earliest = (a: StoredNotice, b: StoredNotice) =>
  b.ageMs - a.ageMs || a.notice.at - b.notice.at || a.notice.rank - b.notice.rank;

/**
 * The cause, in this order: the earliest own error or timeout any rank
 * reported; else the first local rank that exited non-zero without a notice
 * (killed, or exited on its own); else the earliest consequence ("peer"),
 * which then is all anyone knows. Null when nothing failed yet.
 */
export function firstFailure(
  notices: readonly StoredNotice[],
  exits: readonly FailedExit[],
): FirstFailure | null {
  const primary = notices.filter((n) => n.notice.kind !== "peer").sort(earliest)[0];
  if (primary) {
    return { rank: primary.notice.rank, kind: primary.notice.kind, notice: primary.notice };
  }
  const noticed = new Set(notices.map((n) => n.notice.rank));
  const died = exits.filter((e) => !noticed.has(e.rank)).sort((a, b) => a.order - b.order)[0];
  if (died) return { rank: died.rank, kind: "died" };
  const peer = [...notices].sort(earliest)[0];
  return peer ? { rank: peer.notice.rank, kind: "peer", notice: peer.notice } : null;
}
