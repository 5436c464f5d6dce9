/**
 * What the allocated memory holds, per device: every block of the caching
 * allocator is counted under one kind (weights, gradients, optimizer state,
 * activations, communication buffers), live bytes and each kind's peak, and
 * the breakdown at the moment of the highest total. The library says what it
 * allocates (autograd's leaf gradients, DDP's buckets, the optimizers' state,
 * the sharded optimizer's buffers; a module's parameters and buffers are
 * counted as weights when registered); everything else, a forward's and a
 * backward's tensors first of all, counts as activations. The cache of freed
 * blocks is not live memory and is left out.
 */
import type { Device } from "./backend.ts";
import { profiling } from "../profile/profile.ts";

/** What a block of memory holds. */
export type MemoryKind = "weights" | "gradients" | "optimizer" | "activations" | "communication";

export const MEMORY_KINDS: readonly MemoryKind[] = [
  "weights",
  "gradients",
  "optimizer",
  "activations",
  "communication",
];

/** One device's counts: live bytes and peaks by kind, and the total's peak with its breakdown. */
export interface DeviceMemory {
  /** bytes held now, by kind */
  live: Record<MemoryKind, number>;
  /** each kind's own highest live bytes */
  peak: Record<MemoryKind, number>;
  /** the highest live total, and what it was made of at that moment */
  peakTotal: number;
  /** the live bytes of each kind when the total peaked */
  atPeak: Record<MemoryKind, number>;
}

const zero = (): Record<MemoryKind, number> => ({
  weights: 0,
  gradients: 0,
  optimizer: 0,
  activations: 0,
  communication: 0,
});

const byDevice = new Map<Device, DeviceMemory & { total: number }>();
let current: MemoryKind = "activations";

function countsOf(device: Device): DeviceMemory & { total: number } {
  let c = byDevice.get(device);
  if (!c) {
    byDevice.set(
      device,
      c = { live: zero(), peak: zero(), peakTotal: 0, atPeak: zero(), total: 0 },
    );
  }
  return c;
}

/** The kind that new blocks are counted under now. */
export function currentMemoryKind(): MemoryKind {
  return current;
}

/** Runs fn with its allocations counted as `kind` (synchronous code). */
export function asMemoryKind<T>(kind: MemoryKind, fn: () => T): T {
  const prev = current;
  current = kind;
  try {
    return fn();
  } finally {
    current = prev;
  }
}

/** The allocator's report: `bytes` more (or fewer, negative) of `kind` live on `device`. */
export function countMemory(device: Device, kind: MemoryKind, bytes: number): void {
  const c = countsOf(device);
  c.live[kind] += bytes;
  c.total += bytes;
  if (c.live[kind] > c.peak[kind]) c.peak[kind] = c.live[kind];
  if (c.total > c.peakTotal) {
    c.peakTotal = c.total;
    Object.assign(c.atPeak, c.live);
  }
}

/** Every device's counts so far (copies). */
export function memoryByKind(): Map<Device, DeviceMemory> {
  const out = new Map<Device, DeviceMemory>();
  for (const [d, c] of byDevice) {
    out.set(d, {
      live: { ...c.live },
      peak: { ...c.peak },
      peakTotal: c.peakTotal,
      atPeak: { ...c.atPeak },
    });
  }
  return out;
}

/** Starts the peaks again from what is live now (e.g. after set-up, to measure the steps). */
export function resetMemoryPeaks(): void {
  for (const c of byDevice.values()) {
    c.peak = { ...c.live };
    c.peakTotal = c.total;
    c.atPeak = { ...c.live };
  }
}

/** Bytes as people read them: KiB below a MiB, MiB below a GiB, else GiB. */
export function formatBytes(n: number): string {
  if (Math.abs(n) < 2 ** 20) return `${(n / 2 ** 10).toFixed(1)} KiB`;
  if (Math.abs(n) < 2 ** 30) return `${(n / 2 ** 20).toFixed(2)} MiB`;
  return `${(n / 2 ** 30).toFixed(2)} GiB`;
}
const MiB = formatBytes;

/** The report's lines: per device, the peak total and its breakdown, and each kind's own peak. */
export function formatMemoryReport(who: string): string[] {
  const lines: string[] = [];
  for (const [device, c] of memoryByKind()) {
    const where = device === "cuda" ? "GPU" : "CPU";
    lines.push(
      `[memory] ${who}, ${where}: peak ${MiB(c.peakTotal)} live = ` +
        MEMORY_KINDS.map((k) => `${k} ${MiB(c.atPeak[k])}`).join(" + "),
      `[memory] ${who}, ${where}: each kind's own peak: ` +
        MEMORY_KINDS.map((k) => `${k} ${MiB(c.peak[k])}`).join(", "),
    );
  }
  return lines;
}

/** This process's report on stderr: at the end of a Trainer run, and at exit under DTRAIN_PROFILE=1. */
export function printMemoryReport(): void {
  if (byDevice.size === 0) return;
  const rank = Deno.env.get("RANK");
  console.error(formatMemoryReport(rank !== undefined ? `rank ${rank}` : "process").join("\n"));
}

if (profiling) globalThis.addEventListener("unload", printMemoryReport);
