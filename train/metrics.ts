/**
 * Rank 0's step log: one JSON line per optimizer step appended to
 * metrics.jsonl in the run directory (the format of docs/RUN_DIR.md), and on
 * a terminal a progress line with rate and ETA, plain lines otherwise.
 */
import { appendMetrics } from "../run/record.ts";
import type { MetricsRecord } from "../run/format.ts";
import { section } from "../profile/profile.ts";

/** One optimizer step as metrics.jsonl records it (docs/RUN_DIR.md). */
export type StepMetrics = MetricsRecord;

/** Writes the step log; a null run directory keeps only the console output. */
export class MetricsLogger {
  readonly #runDir: string | null;
  readonly #tty: boolean;
  readonly #every: number;
  readonly #encoder = new TextEncoder();
  #lastLine = "";

  constructor(
    runDir: string | null,
    opts: { logEvery: number; enabled: boolean; totalSteps: number | null },
  ) {
    this.#every = opts.logEvery;
    this.totalSteps = opts.totalSteps;
    this.#tty = opts.enabled && Deno.stdout.isTerminal();
    this.enabled = opts.enabled;
    this.#runDir = opts.enabled ? runDir : null;
  }
  readonly enabled: boolean;
  totalSteps: number | null;

  /** Appends one step; prints progress every logEvery steps. */
  log(m: StepMetrics): void {
    section("bookkeeping", () => this.#log(m));
  }

  #log(m: StepMetrics): void {
    if (!this.enabled) return;
    if (this.#runDir) appendMetrics(this.#runDir, m);
    if (m.step % this.#every !== 0 && m.step !== this.totalSteps) return;
    const eta = this.totalSteps ? ((this.totalSteps - m.step) * m.stepMs) / 1000 : null;
    const parts = [
      `step ${m.step}${this.totalSteps ? `/${this.totalSteps}` : ""}`,
      `epoch ${m.epoch}`,
      `loss ${m.loss.toFixed(4)}`,
      `lr ${m.lr.toExponential(2)}`,
      m.gradNorm !== null ? `gnorm ${m.gradNorm.toFixed(3)}` : "",
      m.lossScale !== null ? `scale ${m.lossScale}` : "",
      `${Math.round(m.samplesPerS)} samples/s`,
      m.tokensPerS !== null ? `${Math.round(m.tokensPerS)} tok/s` : "",
      `${m.stepMs.toFixed(1)} ms/step`,
      eta !== null ? `ETA ${formatSeconds(eta)}` : "",
    ].filter(Boolean);
    const line = parts.join("  ");
    if (this.#tty) {
      const pad = Math.max(0, this.#lastLine.length - line.length);
      Deno.stdout.writeSync(this.#encoder.encode(`\r${line}${" ".repeat(pad)}`));
      this.#lastLine = line;
    } else {
      console.log(line);
    }
  }

  /** Prints a line of its own (ends a progress line first). */
  print(line: string): void {
    if (!this.enabled) return;
    if (this.#tty && this.#lastLine) {
      Deno.stdout.writeSync(this.#encoder.encode("\n"));
      this.#lastLine = "";
    }
    console.log(line);
  }

  close(): void {
    if (this.#tty && this.#lastLine) Deno.stdout.writeSync(this.#encoder.encode("\n"));
  }
}

function formatSeconds(s: number): string {
  if (s < 60) return `${Math.ceil(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.ceil(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
