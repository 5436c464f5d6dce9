/**
 * DTRAIN_PROFILE=1: where a process's wall time goes, as exclusive time per
 * part. The library marks its own sections (waiting for data, backward, the
 * reduction, the optimizer, bookkeeping, …); time outside every section is
 * the script's own (a training loop's forward pass, mostly). Start-up is
 * everything up to the end of the first optimizer step; each later step is
 * counted separately. Off (the default), every hook is one untaken branch.
 *
 * @module
 */
import { formatProfile } from "./report.ts";

/** Parts of the time line. Start-up and steps use the same names. */
export type Part =
  | "data wait"
  | "forward"
  | "backward"
  | "reduction wait"
  | "optimizer"
  | "bookkeeping"
  | "checkpoint"
  | "rendezvous"
  | "data generation"
  | "ddp setup"
  | "module load"
  | "script";

/** Parts that keep the clock for everything they call (a DDP set-up's broadcasts are its own). */
const ABSORBING: ReadonlySet<Part> = new Set([
  "ddp setup",
  "rendezvous",
  "checkpoint",
  "data generation",
]);

/** Parts that belong to a training step: the first of them entered ends the script's set-up. */
const STEP_PARTS: ReadonlySet<Part> = new Set([
  "data wait",
  "forward",
  "backward",
  "reduction wait",
  "optimizer",
]);

function readFlag(): boolean {
  try {
    return Deno.env.get("DTRAIN_PROFILE") === "1";
  } catch {
    return false; // no permission to read the environment: profiling stays off
  }
}

/** True when DTRAIN_PROFILE=1 was set when the library was loaded. */
export const profiling: boolean = readFlag();

/** node:process, for its cpuUsage(): loaded only when profiling (its loading costs a start-up). */
const nodeProcess = profiling ? (await import("node:process")).default : null;

/** Time nobody claimed: the script's own before its first step, then "first step", then "other". */
export type Unclaimed = "first step" | "other";

/** Milliseconds per part. */
export type Breakdown = Map<Part | Unclaimed, number>;

interface Totals {
  startup: Breakdown;
  steps: Breakdown;
  /** optimizer steps after the first */
  stepCount: number;
  /** ms from the process's start to the end of its first optimizer step (null: none yet) */
  firstStepAtMs: number | null;
  /** set-up marks, ms since the process started */
  marks: Map<string, number>;
  /** this process's CPU time (user + system, ms) at each set-up mark */
  markCpu: Map<string, number>;
  /** CPU time (user + system, ms) per start-up part, as `startup` has wall time */
  startupCpu: Breakdown;
  /** this process's CPU time (user + system, ms) at the end of the first and of the last step */
  cpuAtFirstStepMs: number | null;
  cpuAtLastStepMs: number | null;
}

const totals: Totals = {
  startup: new Map(),
  steps: new Map(),
  stepCount: 0,
  firstStepAtMs: null,
  marks: new Map(),
  markCpu: new Map(),
  startupCpu: new Map(),
  cpuAtFirstStepMs: null,
  cpuAtLastStepMs: null,
};

/** CPU time this process has used, ms (all its threads: the kernels' pool too). */
function cpuMs(): number {
  const u = nodeProcess!.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** The part that owns the clock now; null: unclaimed time. */
let current: Part | null = null;
/** performance.now() when the clock last changed hands. */
let since = 0;
/** cpuMs() when the clock last changed hands during start-up (CPU is not read in the steps after). */
let cpuSince = 0;
/** A step part was entered since start-up began: unclaimed start-up time is now the first step's. */
let inFirstStep = false;
/** Any section or step was seen (a process that never trains, like the launcher, prints nothing). */
let touched = false;

function unclaimed(): Part | Unclaimed {
  if (totals.firstStepAtMs !== null) return "other";
  return inFirstStep ? "first step" : "script";
}

function charge(now: number): void {
  const inStartup = totals.firstStepAtMs === null;
  const into = inStartup ? totals.startup : totals.steps;
  const key = current ?? unclaimed();
  into.set(key, (into.get(key) ?? 0) + (now - since));
  since = now;
  if (inStartup) {
    // start-up only: a getrusage() per hand-over (~1 µs) would add up over the steps
    const cpu = cpuMs();
    totals.startupCpu.set(key, (totals.startupCpu.get(key) ?? 0) + (cpu - cpuSince));
    cpuSince = cpu;
  }
}

/**
 * Gives the clock to `part` until the matching leave(); returns the part it
 * took the clock from, for leave(). Sections nest: the inner one's time is
 * not the outer one's.
 *
 * @example
 * ```ts
 * const prev = enter("optimizer");
 * try { update(); } finally { leave(prev); }
 * ```
 */
export function enter(part: Part): Part | null {
  if (!profiling) return null;
  const prev = current;
  if (prev !== null && ABSORBING.has(prev)) return prev;
  charge(performance.now());
  current = part;
  touched = true;
  if (STEP_PARTS.has(part)) inFirstStep = true;
  return prev;
}

/** Gives the clock back to the part enter() returned. */
export function leave(prev: Part | null): void {
  if (!profiling) return;
  charge(performance.now());
  current = prev;
}

/** Runs fn as a section of `part`. */
export function section<T>(part: Part, fn: () => T): T {
  if (!profiling) return fn();
  const prev = enter(part);
  try {
    return fn();
  } finally {
    leave(prev);
  }
}

/** Called at the end of every optimizer step: the first ends start-up. */
export function stepDone(): void {
  if (!profiling) return;
  charge(performance.now());
  touched = true;
  if (totals.firstStepAtMs === null) {
    totals.firstStepAtMs = performance.now();
    totals.cpuAtFirstStepMs = cpuMs();
  } else {
    totals.stepCount++;
    totals.cpuAtLastStepMs = cpuMs();
  }
}

/** The launcher's mark: its modules are loaded (cli.ts's main() starts). */
export const LAUNCHER_LOADED = "launcher loaded";

/** Records a named moment of start-up (ms since the process started). */
export function mark(name: string): void {
  if (!profiling || totals.marks.has(name)) return;
  totals.marks.set(name, performance.now());
  totals.markCpu.set(name, cpuMs());
}

/** When mark(name) was recorded (ms since the process started), if it was. */
export function markedAt(name: string): number | undefined {
  return totals.marks.get(name);
}

/** This process's CPU time (user + system, ms) when mark(name) was recorded, if it was. */
export function markedCpuAt(name: string): number | undefined {
  return totals.markCpu.get(name);
}

/** This process's CPU time so far (user + system, ms; all its threads), or null when not profiling. */
export function cpuNowMs(): number | null {
  return profiling ? cpuMs() : null;
}

/** What has been measured so far (the current section's running time included). */
export function snapshot(): Readonly<Totals> {
  if (profiling) charge(performance.now());
  return totals;
}

/** performance.now() when this module was evaluated: the library's modules are loaded. */
export const loadedAtMs: number = performance.now();
since = loadedAtMs;
/** CPU time (ms) this process had used by then: its runtime's start and the modules loaded so far. */
const cpuAtLoadMs: number | null = profiling ? cpuMs() : null;
cpuSince = cpuAtLoadMs ?? 0;

function envNumber(name: string): number | null {
  const v = Number(Deno.env.get(name) ?? NaN);
  return Number.isFinite(v) ? v : null;
}

/** DTRAIN_LAUNCHER_CPU_MS ("load,set-up"): the launcher's CPU time (ms) to its modules loaded and to this rank's spawn. */
function launcherCpu(): { load: number; setup: number } | null {
  const [load, spawn] = (Deno.env.get("DTRAIN_LAUNCHER_CPU_MS") ?? "").split(",").map(Number);
  if (!Number.isFinite(load) || !Number.isFinite(spawn) || spawn! < load!) return null;
  return { load: load!, setup: spawn! - load! };
}

/** Prints this process's report on stderr (at exit, when profiling). */
export function printProfile(): void {
  if (!touched) return;
  const t = snapshot();
  const rank = Deno.env.get("RANK");
  const lines = formatProfile({
    who: rank !== undefined ? `rank ${rank}` : "process",
    startup: t.startup,
    steps: t.steps,
    stepCount: t.stepCount,
    stepCpuMs: t.cpuAtLastStepMs !== null && t.cpuAtFirstStepMs !== null
      ? t.cpuAtLastStepMs - t.cpuAtFirstStepMs
      : null,
    loadedAtMs,
    bootstrapCpuMs: cpuAtLoadMs,
    startupCpu: t.startupCpu,
    launcherCpuMs: launcherCpu(),
    firstStepAtMs: t.firstStepAtMs,
    processStartEpochMs: performance.timeOrigin,
    commandEpochMs: envNumber("DTRAIN_COMMAND_MS"),
    launchEpochMs: envNumber("DTRAIN_LAUNCH_MS"),
    spawnEpochMs: envNumber("DTRAIN_SPAWN_MS"),
    launcherLoadedEpochMs: envNumber("DTRAIN_LAUNCHER_LOADED_MS"),
  });
  console.error(lines.join("\n"));
}

if (profiling) globalThis.addEventListener("unload", printProfile);
