/**
 * The comparisons of what two runs did: the data order (first epoch and
 * rank whose digest differs), the losses (first step beyond the tolerance)
 * and the outcome (status and logged steps). Each reports into a Sink.
 */
import {
  type DataOrderRecord,
  finalSteps,
  type MetricsRecord,
  type RunDir,
} from "../run_record/format.ts";
import { short, type Sink, tolText, WEIGHT } from "./findings.ts";

/** Relative difference of two losses; equal non-finite values (NaN and NaN) count as equal. */
export function relDiff(a: number, b: number): number {
  if (Object.is(a, b) || a === b) return 0;
  if (!Number.isFinite(a) || !Number.isFinite(b)) return Infinity;
  return Math.abs(a - b) / Math.max(Math.abs(a), Math.abs(b));
}

/** The first (epoch, rank), in that order, present in both runs whose digest differs. */
export function firstOrderDifference(
  a: readonly DataOrderRecord[],
  b: readonly DataOrderRecord[],
): { a: DataOrderRecord; b: DataOrderRecord } | null {
  const key = (d: DataOrderRecord) => `${d.epoch}/${d.rank}`;
  const inB = new Map(b.map((d) => [key(d), d]));
  const common = a.filter((d) => inB.has(key(d))).sort((x, y) =>
    x.epoch - y.epoch || x.rank - y.rank
  );
  for (const da of common) {
    const db = inB.get(key(da))!;
    if (da.sha256 !== db.sha256 || da.count !== db.count) {
      return { a: da, b: db };
    }
  }
  return null;
}

/**
 * The first epoch and rank whose order digest differs; marked as a likely
 * consequence of any setup finding already in the sink (call it after those).
 */
export function compareDataOrder(a: RunDir, b: RunDir, sink: Sink): void {
  const lacking = [a, b].flatMap((r, i) =>
    r.missing.includes("data_order.jsonl") ? [i === 0 ? "a" : "b"] : []
  );
  if (lacking.length > 0) {
    sink.notes.push(
      `data order not compared: data_order.jsonl is missing in run ${lacking.join(" and ")}`,
    );
    return;
  }
  sink.compared.push("data order");
  const d = firstOrderDifference(a.dataOrder, b.dataOrder);
  if (d === null) return;
  const explained = sink.findings.filter((f) => f.weight < WEIGHT.dataOrder).map((f) => f.topic);
  const counts = d.a.count !== d.b.count ? `count ${d.a.count} vs ${d.b.count}; ` : "";
  sink.findings.push({
    weight: WEIGHT.dataOrder,
    topic: "data order",
    headline:
      `data order differs first at epoch ${d.a.epoch}, rank ${d.a.rank} (${counts}sha256 ${
        short(d.a.sha256)
      } vs ${short(d.b.sha256)}; ` +
      `first indices [${d.a.first.join(",")}] vs [${d.b.first.join(",")}])`,
    evidence: explained.length > 0
      ? [`may follow from the differences above (${explained.join(", ")})`]
      : [],
    check: explained.length > 0
      ? "expected given the differences above"
      : "the sampler or the dataset changed: check the dataset files, the sampler's seed and that set_epoch() is called every epoch",
  });
}

/** Digits enough to show a relative difference `rel` between two printed numbers. */
function digitsFor(rel: number): number {
  return Math.min(
    17,
    Math.max(5, Number.isFinite(rel) && rel > 0 ? Math.ceil(-Math.log10(rel)) + 2 : 5),
  );
}

/** The first common step whose losses differ by more than `tol` (relative). */
export function compareLosses(a: RunDir, b: RunDir, tol: number, sink: Sink): void {
  const lacking = [a, b].flatMap((r, i) =>
    r.missing.includes("metrics.jsonl") ? [i === 0 ? "a" : "b"] : []
  );
  if (lacking.length > 0) {
    sink.notes.push(
      `losses not compared: metrics.jsonl is missing in run ${lacking.join(" and ")}`,
    );
    return;
  }
  const sa = finalSteps(a.metrics), sb = finalSteps(b.metrics);
  const inB = new Map(sb.map((m) => [m.step, m]));
  const common = sa.filter((m) => inB.has(m.step));
  if (common.length === 0) {
    sink.notes.push(
      `losses not compared: the runs share no logged step (a: ${stepRange(sa)}, b: ${
        stepRange(sb)
      })`,
    );
    return;
  }
  sink.compared.push(`losses (${common.length} steps, rel tol ${tolText(tol)})`);
  let prev: MetricsRecord | null = null;
  for (const ma of common) {
    const mb = inB.get(ma.step)!;
    const rel = relDiff(ma.loss, mb.loss);
    if (rel > tol) {
      const d = digitsFor(rel);
      const agreed = prev === null
        ? `losses differ from the first common step`
        : `losses agree to ${tolText(tol)} up to step ${prev.step}`;
      sink.findings.push({
        weight: WEIGHT.loss,
        topic: "loss",
        headline: `${agreed}; first difference at step ${ma.step}: ${ma.loss.toPrecision(d)} vs ${
          mb.loss.toPrecision(d)
        } (rel ${rel.toExponential(1)})`,
        evidence: [`lr at that step: ${ma.lr} vs ${mb.lr}`],
        check: "the symptom; the other differences listed are its candidate causes",
      });
      return;
    }
    prev = ma;
  }
  if (sa.length !== sb.length) sink.notes.push(`losses agree on the ${common.length} common steps`);
}

function stepRange(steps: readonly MetricsRecord[]): string {
  return steps.length === 0 ? "no steps" : `steps ${steps[0]!.step}–${steps.at(-1)!.step}`;
}

/** A different status or logged step range; a different attempt count is a note. */
export function compareOutcome(a: RunDir, b: RunDir, sink: Sink): void {
  const describe = (r: RunDir) => {
    const last = r.run.attempts.at(-1);
    if (last === undefined || r.run.status === "succeeded" || r.run.status === "running") {
      return r.run.status;
    }
    const how = last.signal ?? `exit ${last.exitCode}`;
    const rank = last.failingRank === null ? "" : `, rank ${last.failingRank}`;
    return `${r.run.status} (attempt ${last.attempt}: ${how}${rank}${
      last.reason ? `: ${last.reason}` : ""
    })`;
  };
  const ra = stepRange(finalSteps(a.metrics)), rb = stepRange(finalSteps(b.metrics));
  if (a.run.status !== b.run.status || ra !== rb) {
    sink.findings.push({
      weight: WEIGHT.outcome,
      topic: "outcome",
      headline: `outcome: run a ${describe(a)}, logged ${ra}; run b ${describe(b)}, logged ${rb}`,
      evidence: [],
      check: "read the failing run's rank logs (rank-<r>.log)",
    });
  }
  const na = a.run.attempts.length, nb = b.run.attempts.length;
  if (na !== nb) sink.notes.push(`attempts: run a made ${na}, run b ${nb}`);
}
