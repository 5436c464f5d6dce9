/**
 * The overlaid curves of `dtrain report runA runB …`: one plot per quantity
 * (loss by step and by samples seen, learning rate, gradient norm,
 * throughput, each evaluation metric) with one line per run in the run's
 * colour, plus the raw points the page's smoothing control redraws from.
 */
import { finalEvals, finalSteps, type MetricsRecord, type RunDir } from "../run_record/format.ts";
import type { LossScale } from "./report_panels.ts";
import { COLORS, linePlot, type Series } from "./svg_plot.ts";

/** A run on the comparison page: its label (A, B, …), directory as given, record and line style. */
export interface LabeledRun {
  label: string;
  dir: string;
  r: RunDir;
  color: string;
  /** stroke-dasharray for runs past the palette, else undefined */
  dash?: string;
}

/** What the page's script needs to redraw one series. */
export interface SeriesData {
  name: string;
  color: string;
  dash?: string;
  /** (x, y) with null for a non-finite y (JSON has no NaN) */
  points: Array<[number, number | null]>;
}

/** One plot of the comparison, or a note saying why it is absent. */
export interface ComparePanel {
  id: string;
  title: string;
  svg: string | null;
  /** why there is no plot, or which runs lack the quantity */
  note: string | null;
  /** raw series of a smoothed plot (for the page's script), else null */
  data: SeriesData[] | null;
}

/** Points kept per series; longer series keep every k-th point (and the last). */
export const MAX_POINTS = 5000;

/** Labels A…Z, then AA, AB, … like spreadsheet columns. */
export function runLabel(i: number): string {
  let s = "";
  for (let n = i + 1; n > 0; n = Math.floor((n - 1) / 26)) {
    s = String.fromCharCode(65 + ((n - 1) % 26)) + s;
  }
  return s;
}

/** Labels, colours and dash patterns for the runs, in the order given. */
export function labelRuns(runs: ReadonlyArray<{ dir: string; r: RunDir }>): LabeledRun[] {
  const dashes = ["6 3", "2 2", "8 3 2 3"];
  return runs.map((x, i) => {
    const lap = Math.floor(i / COLORS.length);
    const run: LabeledRun = { ...x, label: runLabel(i), color: COLORS[i % COLORS.length]! };
    if (lap > 0) run.dash = dashes[(lap - 1) % dashes.length]!;
    return run;
  });
}

/** Every k-th point (and the last) when there are more than `max`; k = 1 otherwise. */
export function thin<T>(points: readonly T[], max = MAX_POINTS): { points: T[]; every: number } {
  const every = Math.max(1, Math.ceil(points.length / max));
  if (every === 1) return { points: [...points], every };
  const kept = points.filter((_, i) => i % every === 0);
  if ((points.length - 1) % every !== 0) kept.push(points.at(-1)!);
  return { points: kept, every };
}

/**
 * The samples seen by the end of each step of a final trajectory: the
 * running sum of `samples`, or, for lines written before dtrain recorded
 * it, of samplesPerS × stepMs (what the writer derived samplesPerS from).
 */
export function samplesSeen(
  steps: readonly MetricsRecord[],
): { seen: number[]; estimated: boolean } {
  let total = 0;
  let estimated = false;
  const seen = steps.map((m) => {
    if (m.samples === undefined) estimated = true;
    total += m.samples ?? Math.round((m.samplesPerS * m.stepMs) / 1000);
    return total;
  });
  return { seen, estimated };
}

/** Whether the loss axis is logarithmic: as asked, or (auto) when every loss is > 0 and they span 10×. */
function logLoss(runs: readonly LabeledRun[], scale: LossScale): boolean {
  if (scale !== "auto") return scale === "log";
  const losses = runs.flatMap((x) => x.r.metrics.map((m) => m.loss)).filter(Number.isFinite);
  if (losses.length === 0 || losses.some((l) => l <= 0)) return false;
  return Math.max(...losses) / Math.min(...losses) >= 10;
}

/** Options of comparePanels(). */
export interface ComparePanelOptions {
  lossScale: LossScale;
  /** initial TensorBoard EMA weight of the smoothed plots */
  smoothing: number;
}

interface Quantity {
  id: string;
  title: string;
  xLabel: string;
  yLabel: string;
  /** each run's (x, y) points, or null when the run did not record it */
  pointsOf: (x: LabeledRun) => Array<readonly [number, number]> | null;
  absent: string;
  smooth: boolean;
  logY?: boolean;
  markers?: boolean;
  extraNote?: string | null;
}

function panelOf(runs: readonly LabeledRun[], q: Quantity, smoothing: number): ComparePanel {
  const per = runs.map((x) => ({ x, pts: q.pointsOf(x) }));
  const lacking = per.filter((p) => p.pts === null || p.pts.length === 0).map((p) => p.x.label);
  if (lacking.length === runs.length) {
    return { id: q.id, title: q.title, svg: null, note: `${q.absent} in any run`, data: null };
  }
  const thinned = per.filter((p) => p.pts !== null && p.pts.length > 0).map((p) => ({
    x: p.x,
    ...thin(p.pts!),
  }));
  const series: Series[] = thinned.map((t) => {
    const s: Series = { name: t.x.label, points: t.points, color: t.x.color };
    if (t.x.dash) s.dash = t.x.dash;
    return s;
  });
  const notes: string[] = [];
  if (lacking.length > 0) notes.push(`${q.absent} in run ${lacking.join(", ")}`);
  for (const t of thinned.filter((t) => t.every > 1)) {
    notes.push(`run ${t.x.label}: 1 point in ${t.every} drawn (${MAX_POINTS} at most)`);
  }
  if (q.extraNote) notes.push(q.extraNote);
  return {
    id: q.id,
    title: q.title,
    svg: linePlot({
      id: q.id,
      title: q.title,
      xLabel: q.xLabel,
      yLabel: q.yLabel,
      series,
      logY: q.logY ?? false,
      markers: q.markers ?? false,
      ...(q.smooth ? { smoothing } : {}),
      width: 900,
      height: 300,
    }),
    note: notes.length > 0 ? notes.join("; ") : null,
    data: q.smooth
      ? series.map((s) => ({
        name: s.name,
        color: s.color!,
        ...(s.dash ? { dash: s.dash } : {}),
        points: s.points.map(([x, y]) => [x, Number.isFinite(y) ? y : null]),
      }))
      : null,
  };
}

/**
 * The comparison's panels, in order: loss by step, loss by samples seen,
 * learning rate, gradient norm, throughput, then one per evaluation metric
 * (a note when no run evaluated). Each run's line is its final trajectory.
 */
export function comparePanels(
  runs: readonly LabeledRun[],
  opts: ComparePanelOptions,
): ComparePanel[] {
  const steps = new Map(runs.map((x) => [x, finalSteps(x.r.metrics)]));
  const series = (pick: (m: MetricsRecord) => number | null) => (x: LabeledRun) => {
    const pts = steps.get(x)!.filter((m) => pick(m) !== null).map((m) =>
      [m.step, pick(m)!] as const
    );
    return pts.length > 0 ? pts : null;
  };
  const seen = new Map(runs.map((x) => [x, samplesSeen(steps.get(x)!)]));
  const estimated = runs.filter((x) => seen.get(x)!.estimated).map((x) => x.label);
  const tokens = runs.every((x) => x.r.metrics.some((m) => m.tokensPerS !== null));
  const logY = logLoss(runs, opts.lossScale);
  const quantities: Quantity[] = [
    {
      id: "loss-step",
      title: "Loss by step",
      xLabel: "step",
      yLabel: "loss",
      pointsOf: series((m) => m.loss),
      absent: "no loss logged",
      smooth: true,
      logY,
    },
    {
      id: "loss-samples",
      title: "Loss by samples seen",
      xLabel: "samples seen (all ranks)",
      yLabel: "loss",
      pointsOf: (x) => {
        const s = steps.get(x)!;
        const at = seen.get(x)!.seen;
        return s.length > 0 ? s.map((m, i) => [at[i]!, m.loss] as const) : null;
      },
      absent: "no loss logged",
      smooth: true,
      logY,
      extraNote: estimated.length > 0
        ? `run ${
          estimated.join(", ")
        }: samples per step estimated as samplesPerS × stepMs (older metrics.jsonl without "samples")`
        : null,
    },
    {
      id: "lr",
      title: "Learning rate",
      xLabel: "step",
      yLabel: "lr",
      pointsOf: series((m) => m.lr),
      absent: "no learning rate logged",
      smooth: false,
    },
    {
      id: "grad-norm",
      title: "Gradient norm",
      xLabel: "step",
      yLabel: "grad norm",
      pointsOf: series((m) => m.gradNorm),
      absent: "grad norm not recorded",
      smooth: true,
    },
    {
      id: "throughput",
      title: tokens ? "Throughput (tokens/s)" : "Throughput (samples/s)",
      xLabel: "step",
      yLabel: tokens ? "tokens/s" : "samples/s",
      pointsOf: series((m) => tokens ? m.tokensPerS : m.samplesPerS),
      absent: "no throughput logged",
      smooth: true,
    },
  ];
  const evals = new Map(runs.map((x) => [x, finalEvals(x.r.evals)]));
  const names = [...new Set(runs.flatMap((x) => [...evals.get(x)!.keys()]))];
  names.forEach((name, i) =>
    quantities.push({
      id: `eval-${i}`,
      title: `Evaluation: ${name}`,
      xLabel: "step",
      yLabel: name,
      pointsOf: (x) => evals.get(x)!.get(name) ?? null,
      absent: "not evaluated",
      smooth: false,
      markers: true,
    })
  );
  const panels = quantities.map((q) => panelOf(runs, q, opts.smoothing));
  if (names.length === 0) {
    panels.push({
      id: "eval",
      title: "Evaluation",
      svg: null,
      note: "no evaluation lines in any run's metrics.jsonl",
      data: null,
    });
  }
  return panels;
}
