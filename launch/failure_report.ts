/**
 * Why a launch attempt is being stopped (the abort record that launchers
 * share through the store) and the summary printed when it happens: which
 * rank failed, how it ended, its error and stack (from its failure notice,
 * or the tail of its stderr), and what every other rank was doing.
 */
import type { FailureNotice } from "../distributed/control/rank_state.ts";

/** What stopped an attempt. */
export type AbortReason =
  /** a rank exited non-zero or was killed */
  | "rank-failed"
  /** a collective waited longer than --timeout */
  | "timeout"
  /** a launcher got SIGTERM or SIGINT (preemption, Ctrl-C) */
  | "signal"
  /** a node's launcher stopped answering or lost the store */
  | "node-lost"
  /** a launcher could not start a rank process */
  | "launch-error";

/** The first reason to stop an attempt, written once to the store. */
export interface AbortRecord {
  reason: AbortReason;
  /** the node whose launcher wrote the record */
  node: number;
  /** the rank whose failure came first (rank-failed, or a timeout a rank reported) */
  rank?: number;
  /** that rank's node */
  rankNode?: number;
  pid?: number;
  /** the exit code every launcher exits with */
  code: number;
  /** the signal that killed the rank, or that the launcher received */
  signal?: string;
  /** one line saying what happened */
  detail: string;
  /** how long ranks get between SIGTERM and SIGKILL */
  graceMs: number;
  notice?: FailureNotice;
  /** the rank's last stderr lines when it left no notice */
  stderrTail?: string[];
  /** the hang sentence and table (timeout) */
  table?: string;
}

/** Exit code of a launcher whose run ended because a timeout fired (as coreutils `timeout`). */
export const TIMEOUT_EXIT_CODE = 124;

/** A launch that could not go on because a timeout fired before any rank ran (rendezvous). */
export class LaunchTimeout extends Error {
  override name = "LaunchTimeout";
}

/** The summary printed by every launcher when an attempt is aborted. */
export function failureSummary(abort: AbortRecord, table: string): string {
  const lines: string[] = [];
  if (abort.rank !== undefined && (abort.reason === "rank-failed" || abort.reason === "timeout")) {
    const where = `rank ${abort.rank} (node ${abort.rankNode ?? abort.node}${
      abort.pid ? `, pid ${abort.pid}` : ""
    })`;
    lines.push(
      `${where} ${abort.reason === "timeout" ? "timed out" : "failed"} first: ${abort.detail}`,
    );
    if (abort.notice) {
      lines.push(`error: ${abort.notice.message}`);
      const stack = abort.notice.stack.split("\n").filter((l) => l.trim() !== "");
      // The stack's first line repeats the message.
      lines.push(
        ...(stack[0]?.includes(abort.notice.message.replace(/^\w+: /, ""))
          ? stack.slice(1)
          : stack),
      );
    } else if (abort.stderrTail && abort.stderrTail.length > 0) {
      lines.push(`it left no error report; the last lines of its stderr:`);
      lines.push(...abort.stderrTail.map((l) => `  | ${l}`));
    } else {
      lines.push("it left no error report and wrote nothing to stderr");
    }
  } else {
    lines.push(abort.detail);
  }
  if (abort.table) lines.push(abort.table);
  else lines.push("every rank at that moment:", table);
  return lines.join("\n");
}
