/**
 * Rank 0's run log: the config (config.json), one line per optimizer step
 * and one per evaluation in metrics.jsonl (docs/RUN_DIR.md), the same as
 * TensorBoard events in tb/ (train/tensorboard.ts), and on a terminal a
 * progress line with rate and ETA, plain lines otherwise.
 */
import { appendEval, appendMetrics, writeConfigRecord } from "../run_record/record.ts";
import type { ConfigRecord, EvalRecord, MetricsRecord } from "../run_record/format.ts";
import { TensorBoardLog } from "./tensorboard.ts";
import { section } from "../profile/profile.ts";

/** One optimizer step as metrics.jsonl records it (docs/RUN_DIR.md). */
export type StepMetrics = MetricsRecord;

/** One evaluation as metrics.jsonl records it, without its `kind`. */
export type EvalMetrics = Omit<EvalRecord, "kind">;

/** Options of MetricsLogger. */
export interface MetricsLoggerOptions {
  /** print a progress line every this many steps */
  logEvery: number;
  /** false on every rank but 0: the logger then does nothing */
  enabled: boolean;
  /** for the ETA; null when unknown */
  totalSteps: number | null;
  /** write TensorBoard event files in <runDir>/tb (default true) */
  tensorboard?: boolean;
}

/**
 * Writes the run log; a null run directory keeps only the console output.
 *
 * @example
 * ```ts
 * const log = new MetricsLogger(runDir, { logEvery: 10, enabled: rank === 0, totalSteps: 500 });
 * log.begin({ config: { config: cfg, seed: 1, worldSize: 2, device: "cpu" }, step: 0 });
 * log.log({ step: 1, epoch: 0, attempt: 0, loss: 2.3, lr: 1e-3, … });
 * log.logEval({ step: 100, epoch: 0, attempt: 0, metrics: { accuracy: 0.81 } });
 * log.close();
 * ```
 */
export class MetricsLogger {
  readonly #runDir: string | null;
  readonly #tb: TensorBoardLog | null;
  readonly #tty: boolean;
  readonly #every: number;
  readonly #encoder = new TextEncoder();
  #lastLine = "";

  constructor(runDir: string | null, opts: MetricsLoggerOptions) {
    this.#every = opts.logEvery;
    this.totalSteps = opts.totalSteps;
    this.#tty = opts.enabled && Deno.stdout.isTerminal();
    this.enabled = opts.enabled;
    this.#runDir = opts.enabled ? runDir : null;
    this.#tb = this.#runDir && (opts.tensorboard ?? true) ? new TensorBoardLog(this.#runDir) : null;
  }
  readonly enabled: boolean;
  totalSteps: number | null;

  /** The TensorBoard event file being written, or null (none yet, disabled, or off after an error). */
  get tensorboardFile(): string | null {
    return this.#tb?.path ?? null;
  }

  /**
   * Starts an attempt that continues after `step` completed steps (0 for a
   * fresh run): writes config.json (once per run; a restart keeps the first)
   * and tells TensorBoard that what an earlier attempt logged past `step` is
   * superseded, and what the config is.
   */
  begin(start: { config: ConfigRecord | null; step: number }): void {
    if (!this.#runDir) return;
    if (start.config) writeConfigRecord(this.#runDir, start.config);
    this.#tb?.begin(start.step, start.config);
  }

  /** Appends one step; prints progress every logEvery steps. */
  log(m: StepMetrics): void {
    section("bookkeeping", () => this.#log(m));
  }

  #log(m: StepMetrics): void {
    if (!this.enabled) return;
    if (this.#runDir) appendMetrics(this.#runDir, m);
    this.#tb?.step(m);
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

  /**
   * Records an evaluation (metrics.jsonl and TensorBoard's `eval/<name>`)
   * and prints its values. Names must be printable text of at most 200
   * characters; values may be non-finite. An evaluation without metrics
   * records nothing.
   */
  logEval(e: EvalMetrics): void {
    if (!this.enabled || Object.keys(e.metrics).length === 0) return;
    const record: EvalRecord = { kind: "eval", ...e };
    if (this.#runDir) appendEval(this.#runDir, record);
    this.#tb?.eval(record);
    const values = Object.entries(e.metrics).map(([n, v]) => `${n} ${v.toFixed(4)}`);
    this.print(`epoch ${e.epoch}: ${values.join(", ")}`);
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

  /** Ends the progress line and closes the TensorBoard file. */
  close(): void {
    this.#tb?.close();
    if (this.#tty && this.#lastLine) Deno.stdout.writeSync(this.#encoder.encode("\n"));
  }
}

function formatSeconds(s: number): string {
  if (s < 60) return `${Math.ceil(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.ceil(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
