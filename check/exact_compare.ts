/**
 * The comparison of `dtrain check --exact`: the hashed states that runs of
 * one script recorded at their optimizer steps (check/exact_snapshot.ts),
 * compared rank against rank within a run and run against the single
 * process, down to the first step and the first item whose bits part.
 */
import type { ProbeEvent } from "./probe.ts";
import type { SnapshotItem } from "./exact_snapshot.ts";

/** One rank's hashed states: one per optimizer step, then the state it ended with (if recorded). */
export interface RankStates {
  /** steps[s-1]: the state where optimizer step s started */
  steps: SnapshotItem[][];
  /** the state after the last step, or null when the run did not record one */
  end: SnapshotItem[] | null;
}

/** The hashed states of one rank's events. */
export function statesOf(events: readonly ProbeEvent[]): RankStates {
  const out: RankStates = { steps: [], end: null };
  for (const e of events) {
    if (e.kind !== "state") continue;
    if (e.end) out.end = e.items;
    else out.steps.push(e.items);
  }
  return out;
}

/** Where two runs' bits first part. */
export interface Divergence {
  /**
   * The optimizer step that produced the first differing item: the step
   * whose gradients, rate or forward buffers differ, or whose update left
   * differing parameters or optimizer state (0: before the first step)
   */
  step: number;
  /** the item, e.g. "parameter fc1.weight after step 2" */
  what: string;
  /** its value in each run (a digest's first 12 digits, or a number) */
  a: string;
  b: string;
  /** when the first item is not a tensor (a learning rate): the first tensor that differs, if any */
  firstTensor?: { step: number; what: string };
  /** the two runs made different numbers of optimizer steps */
  stepCounts?: [number, number];
}

/** The step an item at snapshot `s` belongs to, and how it is described ("… after step 2"). */
function placeOf(label: string, s: number, end: boolean): { step: number; what: string } {
  if (end) return { step: s, what: `${label} after step ${s}` };
  if (label.startsWith("parameter ") || label.startsWith("optimizer ")) {
    return {
      step: s - 1,
      what: s === 1 ? `${label} before step 1` : `${label} after step ${s - 1}`,
    };
  }
  if (label.startsWith("buffer ")) return { step: s, what: `${label} in step ${s}'s forward` };
  return { step: s, what: `${label} in step ${s}` };
}

const isTensor = (label: string) => !label.startsWith("hyperparameter ");

function short(value: string): string {
  return /^[0-9a-f]{32}$/.test(value) ? value.slice(0, 12) : value;
}

/**
 * The first place two ranks' (or runs') states differ, or null when they
 * hold the same bits at every step they both made and made the same number
 * of steps. Items are compared by label: a label one side lacks counts as a
 * difference.
 */
export function firstDivergence(a: RankStates, b: RankStates): Divergence | null {
  const snaps = (r: RankStates) => [
    ...r.steps.map((items, i) => ({ items, s: i + 1, end: false })),
    ...(r.end ? [{ items: r.end, s: r.steps.length, end: true }] : []),
  ];
  const sa = snaps(a), sb = snaps(b);
  let found: Divergence | null = null;
  for (let i = 0; i < Math.min(sa.length, sb.length); i++) {
    const x = sa[i]!, y = sb[i]!;
    if (x.end !== y.end) break; // one ended where the other stepped on: the step counts say so
    const other = new Map(y.items);
    const labels = [
      ...x.items.map(([l]) => l),
      ...y.items.map(([l]) => l).filter((l) => !x.items.some(([m]) => m === l)),
    ];
    const mine = new Map(x.items);
    for (const label of labels) {
      const va = mine.get(label) ?? "absent", vb = other.get(label) ?? "absent";
      if (va === vb) continue;
      const place = placeOf(label, x.s, x.end);
      if (found === null) {
        found = { ...place, a: short(va), b: short(vb) };
        if (isTensor(label)) return found;
      } else if (isTensor(label)) {
        found.firstTensor = place;
        return found;
      }
    }
  }
  if (a.steps.length !== b.steps.length) {
    const counts: [number, number] = [a.steps.length, b.steps.length];
    if (found) return { ...found, stepCounts: counts };
    const s = Math.min(...counts);
    return {
      step: s + 1,
      what: `the number of optimizer steps`,
      a: String(counts[0]),
      b: String(counts[1]),
      stepCounts: counts,
    };
  }
  return found;
}

/** The most tensors a rank hashed at one step (an optimizer's state appears at its first step). */
export function tensorsPerStep(r: RankStates): number {
  return Math.max(0, ...r.steps.map((items) => items.filter(([l]) => isTensor(l)).length));
}

/** A divergence as a sentence naming the two runs. */
export function describeDivergence(d: Divergence, nameA: string, nameB: string): string {
  if (d.what === "the number of optimizer steps") {
    return `${nameA} made ${d.a} optimizer steps, ${nameB} ${d.b}; the steps both made hold the same bits`;
  }
  let text = `step ${d.step}: ${d.what} differs — ${d.a} (${nameA}) vs ${d.b} (${nameB})`;
  if (d.firstTensor) text += `; the first tensor to differ: ${d.firstTensor.what}`;
  else if (!isTensor(d.what)) text += "; no tensor differs in the steps compared";
  if (d.stepCounts) {
    text += `; and ${nameA} made ${d.stepCounts[0]} optimizer steps, ${nameB} ${d.stepCounts[1]}`;
  }
  return text;
}
