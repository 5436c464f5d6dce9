/**
 * DTRAIN_COUNT_CALLS=1: native calls (counted where ffi/calls.ts calls a
 * kernel symbol) and device work (the CUDA library's own count of kernel
 * launches, cuBLASLt matmuls and memsets/copies) per optimizer step, and per
 * layer: a model marks its layers (`inLayer`), autograd runs each node's
 * backward under the layer its forward ran in, so a layer's count is its
 * forward and its backward. One line per step on stderr. Off (the default),
 * every hook is one untaken branch and the call wrappers are the plain ones.
 *
 * @module
 */

function readFlag(): boolean {
  try {
    return Deno.env.get("DTRAIN_COUNT_CALLS") === "1";
  } catch {
    return false; // no permission to read the environment: counting stays off
  }
}

/** True when DTRAIN_COUNT_CALLS=1 was set when the library was loaded. */
export const countingCalls: boolean = readFlag();

/** Device work queued so far: [kernel launches, matmuls, copies]; null when the backend has no count. */
type WorkReader = () => [number, number, number] | null;

/** Counts of one part of a step (a layer, or what is outside every layer). */
export interface Counts {
  calls: number;
  launches: number;
  matmuls: number;
  copies: number;
}

const zero = (): Counts => ({ calls: 0, launches: 0, matmuls: 0, copies: 0 });

/** Native calls so far in this process (only counted while counting). */
let calls = 0;
let readWork: WorkReader = () => null;
/** The layer the counts go to now (-1: outside every layer). */
let layer = -1;
/** Where the counts stood when `layer` took over. */
let mark: Counts = zero();
/** This step's counts so far, by layer (-1: outside). */
let step = new Map<number, Counts>();
let stepIndex = 0;
/** Native calls per symbol this step. */
let bySymbol = new Map<string, number>();

/** Called by ffi/calls.ts for every native kernel call while counting. */
export function noteCall(symbol: string): void {
  calls++;
  bySymbol.set(symbol, (bySymbol.get(symbol) ?? 0) + 1);
}

/** The device backend's count of queued work (the CPU has none). */
export function setWorkReader(reader: WorkReader): void {
  readWork = reader;
}

function now(): Counts {
  const w = readWork();
  return { calls, launches: w?.[0] ?? 0, matmuls: w?.[1] ?? 0, copies: w?.[2] ?? 0 };
}

/** Charges what happened since the last change to the current layer. */
function charge(): void {
  const n = now();
  const into = step.get(layer) ?? zero();
  into.calls += n.calls - mark.calls;
  into.launches += n.launches - mark.launches;
  into.matmuls += n.matmuls - mark.matmuls;
  into.copies += n.copies - mark.copies;
  step.set(layer, into);
  mark = n;
}

/** The layer counts go to now (-1: none); for autograd to tag the nodes it records. */
export function currentLayer(): number {
  return layer;
}

/** Makes `to` the current layer; returns the previous one, for restoreLayer. */
export function switchLayer(to: number): number {
  const prev = layer;
  if (!countingCalls || to === prev) return prev;
  charge();
  layer = to;
  return prev;
}

/** Runs fn with its native calls and device work counted as layer `index`'s. */
export function inLayer<T>(index: number, fn: () => T): T {
  if (!countingCalls) return fn();
  const prev = switchLayer(index);
  try {
    return fn();
  } finally {
    switchLayer(prev);
  }
}

/** What the step that just ended counted (for tests; null before the first). */
export let lastStep: {
  index: number;
  total: Counts;
  layers: Map<number, Counts>;
  symbols: Map<string, number>;
} | null = null;

/** Called at the end of every optimizer step: prints the step's line and starts the next count. */
export function countStepDone(): void {
  if (!countingCalls) return;
  charge();
  const total = zero();
  for (const c of step.values()) {
    total.calls += c.calls;
    total.launches += c.launches;
    total.matmuls += c.matmuls;
    total.copies += c.copies;
  }
  lastStep = { index: stepIndex, total, layers: step, symbols: bySymbol };
  console.error(formatStep(stepIndex, total, step, bySymbol, readWork() !== null));
  step = new Map();
  bySymbol = new Map();
  stepIndex++;
}

/** "device work" of counts: launches + matmuls + copies. */
const work = (c: Counts) => c.launches + c.matmuls + c.copies;

/**
 * One step's line: totals, the mean per layer (with the spread when layers
 * differ), what is outside the layers, and the most called symbols.
 */
export function formatStep(
  index: number,
  total: Counts,
  layers: ReadonlyMap<number, Counts>,
  symbols: ReadonlyMap<string, number>,
  device: boolean,
): string {
  const desc = (c: Counts) =>
    device
      ? `${c.calls} native calls, ${
        work(c)
      } device launches (${c.launches} kernels, ${c.matmuls} matmuls, ${c.copies} copies)`
      : `${c.calls} native calls`;
  const inside = [...layers.entries()].filter(([i]) => i >= 0).map(([, c]) => c);
  let line = `dtrain calls: step ${index}: ${desc(total)}`;
  if (inside.length > 0) {
    const mean = (f: (c: Counts) => number) => inside.reduce((s, c) => s + f(c), 0) / inside.length;
    const per: Counts = {
      calls: mean((c) => c.calls),
      launches: mean((c) => c.launches),
      matmuls: mean((c) => c.matmuls),
      copies: mean((c) => c.copies),
    };
    const fmt = (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(1));
    const ws = inside.map(work);
    const spread = Math.min(...ws) === Math.max(...ws)
      ? ""
      : ` (layers ${Math.min(...ws)}-${Math.max(...ws)})`;
    line += `; per layer (${inside.length}): ${fmt(per.calls)} native calls` +
      (device ? `, ${fmt(work(per))} device launches${spread}` : "");
    const out = layers.get(-1);
    if (out) line += `; outside the layers: ${desc(out)}`;
  }
  const top = [...symbols.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(
    0,
    8,
  );
  if (top.length > 0) line += `; most called: ${top.map(([s, n]) => `${s} ${n}`).join(", ")}`;
  return line;
}
