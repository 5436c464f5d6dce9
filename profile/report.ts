/**
 * The text of a DTRAIN_PROFILE=1 report: one block per process with its
 * start-up (launcher: its module loading and its set-up, spawn, bootstrap — the runtime's clock starts to the
 * profiler's module evaluated —, then the parts up to the end of the first
 * optimizer step: module load, rendezvous, data generation, …) and the mean
 * breakdown of the steps after it.
 */
import type { Breakdown, Part, Unclaimed } from "./profile.ts";

/** What a report is made of (profile.ts's totals plus the launcher's clock). */
export interface ProfileInput {
  /** "rank 1", or "process" outside a launch */
  who: string;
  startup: Breakdown;
  steps: Breakdown;
  stepCount: number;
  /** CPU time (user + system, ms) the process used over the steps after the first; null: unknown */
  stepCpuMs?: number | null;
  /** ms since the process started: library loaded, first step done */
  loadedAtMs: number;
  /** CPU time (user + system, ms) of this process: to the library loaded, and per start-up part; null/absent: not measured */
  bootstrapCpuMs?: number | null;
  startupCpu?: Breakdown;
  /** the launcher's CPU time (ms): loading its modules, and its set-up to this rank's spawn */
  launcherCpuMs?: { load: number; setup: number } | null;
  firstStepAtMs: number | null;
  /** epoch ms: this process started (performance.timeOrigin) */
  processStartEpochMs: number;
  /** epoch ms: the `dtrain` command started (its wrapper script), when known */
  commandEpochMs: number | null;
  /** epoch ms: the launcher started, and spawned this rank (absent outside a launch) */
  launchEpochMs: number | null;
  spawnEpochMs: number | null;
  /** epoch ms: the launcher's modules were loaded (its command line about to be read), when known */
  launcherLoadedEpochMs?: number | null;
}

const STARTUP_ORDER: (Part | Unclaimed)[] = [
  "module load",
  "rendezvous",
  "data generation",
  "ddp setup",
  "script",
  "first step",
  "data wait",
  "forward",
  "backward",
  "reduction wait",
  "optimizer",
  "checkpoint",
  "bookkeeping",
];

const STEP_ORDER: (Part | Unclaimed)[] = [
  "data wait",
  "forward",
  "backward",
  "reduction wait",
  "optimizer",
  "bookkeeping",
  "checkpoint",
  "other",
  "rendezvous",
  "data generation",
  "ddp setup",
];

const ms = (x: number) => x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
const us = (x: number) => (x * 1000).toFixed(x * 1000 >= 100 ? 0 : 1);

/**
 * The start-up's CPU time (user + system of the launcher and of this rank, all threads) by the same
 * stages: on a shared machine the wall times wait for the CPU, the CPU times are the work itself.
 */
function startupCpuLine(p: ProfileInput): string | null {
  if (p.bootstrapCpuMs == null || p.startupCpu === undefined) return null;
  const parts: string[] = [];
  let total = 0;
  if (p.launcherCpuMs) {
    parts.push(`launcher load ${ms(p.launcherCpuMs.load)}`);
    parts.push(`launcher set-up ${ms(p.launcherCpuMs.setup)}`);
    total += p.launcherCpuMs.load + p.launcherCpuMs.setup;
  }
  parts.push(`bootstrap ${ms(p.bootstrapCpuMs)}`);
  total += p.bootstrapCpuMs;
  for (const k of STARTUP_ORDER) {
    const v = p.startupCpu.get(k);
    if (v === undefined) continue;
    total += v;
    if (v >= 0.005) parts.push(`${k} ${ms(v)}`);
  }
  const whose = p.launcherCpuMs ? "launcher + this process" : "this process";
  return `[profile]   CPU ${ms(total)} ms (${whose}): ${parts.join(" | ")} (ms)`;
}

/** The report's lines. */
export function formatProfile(p: ProfileInput): string[] {
  const lines: string[] = [];
  const parts: string[] = [];
  if (p.launchEpochMs !== null && p.spawnEpochMs !== null) {
    if (p.commandEpochMs !== null) parts.push(`command ${ms(p.launchEpochMs - p.commandEpochMs)}`);
    const loaded = p.launcherLoadedEpochMs ?? null;
    if (loaded !== null && loaded >= p.launchEpochMs && loaded <= p.spawnEpochMs) {
      parts.push(`launcher load ${ms(loaded - p.launchEpochMs)}`);
      parts.push(`launcher set-up ${ms(p.spawnEpochMs - loaded)}`);
    } else {
      parts.push(`launcher ${ms(p.spawnEpochMs - p.launchEpochMs)}`);
    }
    parts.push(`spawn ${ms(p.processStartEpochMs - p.spawnEpochMs)}`);
  }
  parts.push(`bootstrap ${ms(p.loadedAtMs)}`);
  for (const k of STARTUP_ORDER) {
    const v = p.startup.get(k);
    if (v !== undefined && v >= 0.005) parts.push(`${k} ${ms(v)}`);
  }
  const origin = p.commandEpochMs ?? p.launchEpochMs ?? p.processStartEpochMs;
  const from = p.commandEpochMs !== null
    ? "command"
    : p.launchEpochMs !== null
    ? "launch"
    : "process start";
  const end = p.firstStepAtMs === null
    ? "no optimizer step yet"
    : `${from} → first optimizer step ${ms(p.processStartEpochMs + p.firstStepAtMs - origin)} ms`;
  lines.push(`[profile] ${p.who} start-up, ${end}:`);
  lines.push(`[profile]   ${parts.join(" | ")} (ms)`);
  const cpuLine = startupCpuLine(p);
  if (cpuLine !== null) lines.push(cpuLine);
  if (p.stepCount > 0) {
    const total = [...p.steps.values()].reduce((a, b) => a + b, 0);
    const per = total / p.stepCount;
    const cpu = p.stepCpuMs != null ? `, CPU ${us(p.stepCpuMs / p.stepCount)} µs per step` : "";
    lines.push(
      `[profile] ${p.who} ${p.stepCount} steps after the first, ${us(per)} µs per step${cpu}:`,
    );
    const cells: string[] = [];
    for (const k of STEP_ORDER) {
      const v = p.steps.get(k);
      if (v === undefined || v / total < 0.0005) continue;
      cells.push(`${k} ${us(v / p.stepCount)} (${((100 * v) / total).toFixed(1)}%)`);
    }
    lines.push(`[profile]   ${cells.join(" | ")} (µs per step)`);
  }
  return lines;
}
