/**
 * How the store reports connections it refused: anything a peer sent before
 * proving it holds the token (its claimed identity, a malformed frame) is
 * escaped and cut short before it reaches a terminal or log, and a flood of
 * refusals is summarised once per interval instead of a line each.
 */
import { printable } from "../../io/_untrusted_text.ts";

/** Longest piece of peer-supplied text shown in a line. */
export const MAX_PEER_TEXT = 80;
/** Default interval between summaries of refused connections. */
export const REFUSAL_INTERVAL_MS = 10_000;

/** Text that came from an unauthenticated peer, safe to print. */
export function peerText(s: string, limit = MAX_PEER_TEXT): string {
  return printable(s, limit);
}

/**
 * Logs the first refusal of each interval in full and counts the rest by
 * reason; at the end of an interval in which refusals were held back, one
 * line says how many, why, and from where.
 */
export class RefusalLog {
  readonly #log: (line: string) => void;
  readonly #intervalMs: number;
  /** reasons of refusals held back in the current interval, with counts */
  #held = new Map<string, number>();
  #heldTotal = 0;
  #peers = new Set<string>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(log: (line: string) => void, intervalMs = REFUSAL_INTERVAL_MS) {
    this.#log = log;
    this.#intervalMs = intervalMs;
  }

  /**
   * One refused connection. `kind` groups it in summaries ("wrong token");
   * `detail` is the whole (already escaped) sentence for a line of its own.
   */
  refused(peer: string, kind: string, detail: string): void {
    if (this.#intervalMs <= 0 || this.#timer === undefined) {
      this.#log(`store: refused connection from ${peer}: ${detail}`);
      if (this.#intervalMs <= 0) return;
      this.#timer = setTimeout(() => this.#flush(), this.#intervalMs);
      Deno.unrefTimer(this.#timer);
      return;
    }
    this.#held.set(kind, (this.#held.get(kind) ?? 0) + 1);
    this.#heldTotal++;
    if (this.#peers.size < 3) this.#peers.add(peer.replace(/:\d+$/, ""));
  }

  /** Writes the summary of what was held back, if anything, and starts a quiet interval. */
  #flush(): void {
    this.#timer = undefined;
    if (this.#heldTotal === 0) return;
    const why = [...this.#held].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k}: ${n}`);
    const from = [...this.#peers].join(", ") + (this.#peers.size >= 3 ? ", …" : "");
    this.#log(
      `store: refused ${this.#heldTotal} more connection(s) in the last ${
        Math.round(this.#intervalMs / 1000)
      } s (${why.join(", ")}; from ${from})`,
    );
    this.#held = new Map();
    this.#heldTotal = 0;
    this.#peers = new Set();
    // The next refusal may again be logged only after another interval.
    this.#timer = setTimeout(() => this.#flush(), this.#intervalMs);
    Deno.unrefTimer(this.#timer);
  }

  /** Writes any held-back summary now and stops the timer (the store is closing). */
  close(): void {
    clearTimeout(this.#timer);
    if (this.#heldTotal > 0) this.#flush();
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
