/**
 * The per-step panels of `dtrain report`: one plot per quantity (loss,
 * learning rate, grad norm, loss scale, throughput, step-time spread across
 * ranks, each evaluation metric) with one line per attempt, or a note
 * saying why a plot is absent.
 */
import { finalSteps, type MetricsRecord, type RunDir } from "../run_record/format.ts";
import { linePlot, type Series } from "./svg_plot.ts";

/** One panel of the report: a plot, or a note saying why there is none. */
export interface Panel {
  id: string;
  title: string;
  /** the `<svg>` element, or null when `note` says why it is absent */
  svg: string | null;
  note: string | null;
}

/** How the loss axis is scaled: auto = log when all losses are > 0 and span at least 10×. */
export type LossScale = "auto" | "log" | "linear";

/** Points of one quantity, one series per attempt (a resumed run repeats steps). */
function perAttempt(
  metrics: readonly MetricsRecord[],
  name: string,
  y: (m: MetricsRecord) => number | null,
): Series[] {
  const attempts = [...new Set(metrics.map((m) => m.attempt))].sort((p, q) => p - q);
  return attempts.map((k) => ({
    name: attempts.length === 1 ? name : `${name}, attempt ${k}`,
    points: metrics.filter((m) => m.attempt === k && y(m) !== null).map((m) =>
      [m.step, y(m)!] as const
    ),
  }));
}

function median(sorted: readonly number[]): number {
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function useLogLoss(metrics: readonly MetricsRecord[], scale: LossScale): boolean {
  if (scale !== "auto") return scale === "log";
  const losses = metrics.map((m) => m.loss).filter(Number.isFinite);
  if (losses.length === 0 || losses.some((l) => l <= 0)) return false;
  return Math.max(...losses) / Math.min(...losses) >= 10;
}

/** One panel per evaluation metric (one line per attempt, a dot per evaluation), or a note when there are none. */
function evalPanels(r: RunDir): Panel[] {
  const names = [...new Set(r.evals.flatMap((e) => Object.keys(e.metrics)))];
  if (names.length === 0) {
    const note = r.missing.includes("metrics.jsonl")
      ? "metrics.jsonl is missing"
      : "no evaluation lines in metrics.jsonl";
    return [{ id: "eval", title: "Evaluation", svg: null, note }];
  }
  const attempts = [...new Set(r.evals.map((e) => e.attempt))].sort((p, q) => p - q);
  return names.map((name, i) => {
    const series: Series[] = attempts.map((k) => ({
      name: attempts.length === 1 ? name : `${name}, attempt ${k}`,
      points: r.evals.filter((e) => e.attempt === k && name in e.metrics).map((e) =>
        [e.step, e.metrics[name]!] as const
      ),
    })).filter((s) => s.points.length > 0);
    const id = `eval-${i}`;
    const title = `Evaluation: ${name}`;
    return {
      id,
      title,
      svg: linePlot({ id, title, xLabel: "step", yLabel: name, series, markers: true }),
      note: null,
    };
  });
}

/**
 * The report's panels, in order: loss, learning rate, grad norm, loss
 * scale, throughput, the spread of step time across ranks, and the
 * evaluation metrics.
 */
export function reportPanels(r: RunDir, lossScale: LossScale = "auto"): Panel[] {
  const m = r.metrics;
  const panel = (
    id: string,
    title: string,
    yLabel: string,
    series: Series[],
    absent: string,
    logY = false,
  ): Panel => {
    const empty = series.every((s) => s.points.length === 0);
    if (empty) return { id, title, svg: null, note: m.length === 0 ? noMetrics(r) : absent };
    return {
      id,
      title,
      svg: linePlot({ id, title, xLabel: "step", yLabel, series, logY }),
      note: null,
    };
  };
  const tokens = m.some((x) => x.tokensPerS !== null);
  const withRanks = finalSteps(m).filter((x) =>
    x.stepMsByRank !== undefined && x.stepMsByRank.length > 0
  );
  const spread = (pick: (sorted: number[]) => number) =>
    withRanks.map((x) => [x.step, pick([...x.stepMsByRank!].sort((p, q) => p - q))] as const);
  return [
    panel(
      "loss",
      "Loss",
      "loss",
      perAttempt(m, "loss", (x) => x.loss),
      "no loss values",
      useLogLoss(m, lossScale),
    ),
    panel("lr", "Learning rate", "lr", perAttempt(m, "lr", (x) => x.lr), "no learning-rate values"),
    panel(
      "grad-norm",
      "Gradient norm",
      "grad norm",
      perAttempt(m, "grad norm", (x) => x.gradNorm),
      "grad norm not recorded (null in every step)",
    ),
    panel(
      "loss-scale",
      "Loss scale",
      "loss scale",
      perAttempt(m, "loss scale", (x) => x.lossScale),
      "loss scale not recorded (null in every step: no mixed-precision scaler)",
      true,
    ),
    tokens
      ? panel(
        "throughput",
        "Throughput",
        "tokens/s",
        perAttempt(m, "tokens/s", (x) => x.tokensPerS),
        "no throughput values",
      )
      : panel(
        "throughput",
        "Throughput",
        "samples/s",
        perAttempt(m, "samples/s", (x) => x.samplesPerS),
        "no throughput values",
      ),
    panel("step-time", "Step time across ranks", "ms", [
      { name: "max", points: spread((s) => s.at(-1)!) },
      { name: "median", points: spread(median) },
      { name: "min", points: spread((s) => s[0]!) },
    ], "step time per rank not recorded (no stepMsByRank in metrics.jsonl)"),
    ...evalPanels(r),
  ];
}

function noMetrics(r: RunDir): string {
  return r.missing.includes("metrics.jsonl")
    ? "metrics.jsonl is missing"
    : "no steps logged in metrics.jsonl";
}
