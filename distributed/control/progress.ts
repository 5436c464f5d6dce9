/**
 * Progress lines for long phases (loading a dataset, evaluating, saving a
 * checkpoint): silent for the first couple of seconds, then one line every
 * few seconds on rank 0 saying how far the phase is, and a closing line
 * with its time. The phase reports its own progress through update(), so it
 * works in synchronous code that never yields to timers.
 */
import { getWorld } from "./env.ts";

/** Options of a Progress. */
export interface ProgressOptions {
  /** what is done, e.g. the total bytes or batches; enables "x of y" and a percentage */
  total?: number;
  /** "bytes" prints sizes in MB/GB; any other text follows the counts ("batches") */
  unit?: string;
  /** stay silent while the phase is younger than this (default 2000 ms) */
  afterMs?: number;
  /** at most one line per this interval (default 5000 ms) */
  everyMs?: number;
  /** default: rank 0 only */
  enabled?: boolean;
  /** default console.log */
  print?: (line: string) => void;
  /** the clock, for tests (default performance.now) */
  now?: () => number;
}

/**
 * One long phase's progress reporter.
 *
 * @example
 * ```ts
 * const p = new Progress("evaluating", { total: batches, unit: "batches" });
 * for (let b = 0; b < batches; b++) { evaluateBatch(b); p.update(b + 1); }
 * p.done();
 * ```
 */
export class Progress {
  readonly #label: string;
  readonly #opts: Required<Omit<ProgressOptions, "total">> & { total: number | null };
  readonly #start: number;
  #lastPrint: number | null = null;
  #done = 0;

  constructor(label: string, opts: ProgressOptions = {}) {
    this.#label = label;
    const now = opts.now ?? (() => performance.now());
    this.#opts = {
      total: opts.total ?? null,
      unit: opts.unit ?? "",
      afterMs: opts.afterMs ?? 2000,
      everyMs: opts.everyMs ?? 5000,
      enabled: opts.enabled ?? getWorld().rank === 0,
      print: opts.print ?? ((line) => console.log(line)),
      now,
    };
    this.#start = now();
  }

  /** Sets the total once it is known (a phase that learns its size as it goes). */
  set total(total: number | null) {
    this.#opts.total = total;
  }

  /** Whether a line was printed (the phase took longer than afterMs). */
  get printed(): boolean {
    return this.#lastPrint !== null;
  }

  /** Reports `done` units finished; prints when the phase is old enough and the last line is. */
  update(done: number, detail?: string): void {
    this.#done = done;
    const o = this.#opts;
    if (!o.enabled) return;
    const t = o.now();
    if (t - this.#start < o.afterMs) return;
    if (this.#lastPrint !== null && t - this.#lastPrint < o.everyMs) return;
    this.#lastPrint = t;
    o.print(
      `${this.#label}: ${this.#amount(done)}${detail ? `, ${detail}` : ""} (${
        seconds(t - this.#start)
      })`,
    );
  }

  /** Ends the phase: a closing line with its time, when a progress line was printed. */
  done(detail?: string): void {
    const o = this.#opts;
    if (!o.enabled || this.#lastPrint === null) return;
    const t = o.now();
    o.print(`${this.#label}: done${detail ? `, ${detail}` : ""} in ${seconds(t - this.#start)}`);
  }

  #amount(done: number): string {
    const { total, unit } = this.#opts;
    const fmt = (n: number) => (unit === "bytes" ? bytesText(n) : String(n));
    const tail = unit && unit !== "bytes" ? ` ${unit}` : "";
    if (total === null || total <= 0) return `${fmt(done)}${tail}`;
    const pct = Math.min(100, (100 * done) / total).toFixed(0);
    return `${fmt(done)} of ${fmt(total)}${tail} (${pct}%)`;
  }
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

function bytesText(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  return `${(n / 1e6).toFixed(1)} MB`;
}
