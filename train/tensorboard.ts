/**
 * What of the run log goes to TensorBoard, and under which tags: every
 * numeric field of a step line as a scalar, every evaluation metric as
 * `eval/<name>`, the resolved config as text, and a session start per
 * attempt, in `<run dir>/tb/events.out.tfevents.*` (io/tfevents.ts).
 */
import { join } from "node:path";
import { EventFileWriter, MAX_TEXT_BYTES, type SummaryValue } from "../io/tfevents.ts";
import type { ConfigRecord, EvalRecord, MetricsRecord } from "../run_record/format.ts";

/** The folder of the event files inside a run directory. */
export const TB_DIR = "tb";

/**
 * Tags of the step-line fields; any other numeric field (one added later)
 * goes to `train/<field>`. `step` is TensorBoard's x axis, not a scalar.
 */
export const STEP_TAGS: Readonly<Record<string, string>> = {
  loss: "train/loss",
  lr: "train/lr",
  gradNorm: "train/gradNorm",
  lossScale: "train/lossScale",
  skipped: "train/skipped",
  epoch: "train/epoch",
  attempt: "train/attempt",
  samples: "train/samples",
  samplesPerS: "perf/samplesPerS",
  tokensPerS: "perf/tokensPerS",
  stepMs: "perf/stepMs",
  dataWaitMs: "perf/dataWaitMs",
  memBytes: "perf/memBytes",
};

/** The tag of evaluation metric `name`. */
export const evalTag = (name: string) => `eval/${name}`;

/** The scalars of one step line: null fields are left out, stepMsByRank becomes max/median/min. */
export function stepScalars(m: MetricsRecord): SummaryValue[] {
  const out: SummaryValue[] = [];
  for (const [field, value] of Object.entries(m)) {
    if (field === "step" || typeof value !== "number") continue;
    out.push({ tag: STEP_TAGS[field] ?? `train/${field}`, scalar: value });
  }
  const ranks = m.stepMsByRank;
  if (ranks !== undefined && ranks.length > 0) {
    const s = [...ranks].sort((a, b) => a - b);
    const mid = s.length >> 1;
    const median = s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
    out.push(
      { tag: "perf/stepMsByRank/max", scalar: s.at(-1)! },
      { tag: "perf/stepMsByRank/median", scalar: median },
      { tag: "perf/stepMsByRank/min", scalar: s[0]! },
    );
  }
  return out;
}

/**
 * The config as TensorBoard's text plugin shows it: Markdown, the JSON in an
 * indented code block, so its text is shown verbatim (never read as markup).
 */
export function configText(c: ConfigRecord): string {
  const block = (json: string) =>
    "The run's resolved config (config.json):\n\n" +
    json.split("\n").map((l) => `    ${l}`).join("\n");
  const json = JSON.stringify(c, null, 2);
  const text = block(json);
  if (new TextEncoder().encode(text).length <= MAX_TEXT_BYTES) return text;
  // A UTF-16 code unit takes at most 3 UTF-8 bytes, and the indent at most 4 per 2 units.
  const keep = Math.floor(MAX_TEXT_BYTES / 5) - 100;
  return block(
    `${json.slice(0, keep).toWellFormed()}\n… (cut: the whole config is in config.json)`,
  );
}

/**
 * Rank 0's TensorBoard events for one attempt. The file is created at the
 * first event. A failure to write (disk full, permissions) is reported once
 * and turns the events off: metrics.jsonl stays the run's record.
 */
export class TensorBoardLog {
  readonly #dir: string;
  #writer: EventFileWriter | null = null;
  #failed = false;

  constructor(runDir: string) {
    this.#dir = join(runDir, TB_DIR);
  }

  /** The event file being written, or null before the first event or after a failure. */
  get path(): string | null {
    return this.#writer?.path ?? null;
  }

  /**
   * Marks an attempt's start after `step` completed steps: TensorBoard then
   * drops what earlier attempts logged past that step (a resumed run repeats
   * those steps), and shows the config.
   */
  begin(step: number, config: ConfigRecord | null): void {
    this.#write((w) => {
      w.add(step + 1, { sessionStart: true });
      if (config !== null) w.add(step, { summary: [{ tag: "config", text: configText(config) }] });
    });
  }

  step(m: MetricsRecord): void {
    this.#write((w) => w.add(m.step, { summary: stepScalars(m) }));
  }

  eval(e: EvalRecord): void {
    const values = Object.entries(e.metrics).map(([name, v]) => ({
      tag: evalTag(name),
      scalar: v,
    }));
    this.#write((w) => w.add(e.step, { summary: values }));
  }

  close(): void {
    const w = this.#writer;
    this.#writer = null;
    if (w) this.#guard(() => w.close());
  }

  #write(f: (w: EventFileWriter) => void): void {
    if (this.#failed) return;
    this.#guard(() => f(this.#writer ??= new EventFileWriter(this.#dir)));
  }

  #guard(f: () => void): void {
    try {
      f();
    } catch (e) {
      this.#failed = true;
      console.warn(
        `dtrain: TensorBoard event files in ${this.#dir} are off from here on: ${
          (e as Error).message
        } (metrics.jsonl still records every step)`,
      );
    }
  }
}
