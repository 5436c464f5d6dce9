/**
 * What this rank is doing right now: the library's phases (forward, backward,
 * allreduce bucket k of step s, barrier "epoch-end") and the user's own
 * (`phase("scan dataset")`), plus the sequence number of the last collective.
 * The launcher's hang diagnosis reads these through a sink that the rank
 * runtime installs; without one (a plain single process) they only update
 * the local record.
 */
import { enter, leave } from "../../profile/profile.ts";

/** One collective call as the hang diagnosis and the mismatch check see it. */
export interface CollectiveRecord {
  /** 1-based sequence number of collectives on this process group. */
  seq: number;
  /** "allReduce", "broadcast", "allGather", "reduceScatter", "barrier" */
  op: string;
  /** payload size in bytes (0 for a barrier) */
  bytes: number;
  /** barrier name or other detail */
  detail?: string;
}

/** Receives phase changes; installed by the rank runtime. */
export interface PhaseSink {
  /** `frequent`: a library phase that changes many times a second (may be reported late). */
  phase(name: string, sinceMs: number, frequent?: boolean): void;
  collective(rec: CollectiveRecord, state: "enter" | "exit"): void;
  /** Sends whatever is waiting to be sent now (before a failure is reported). */
  flush?(): void;
}

interface PhaseState {
  phase: string;
  sinceMs: number;
  lastCollective: CollectiveRecord | null;
}

const state: PhaseState = {
  phase: "start",
  sinceMs: Date.now(),
  lastCollective: null,
};
let sink: PhaseSink | null = null;

/** Installs (or removes, with null) the receiver of phase reports. */
export function setPhaseSink(next: PhaseSink | null): void {
  sink = next;
}

/**
 * Marks the start of a phase of this rank, e.g. `phase("scan dataset")`.
 * The library's own per-step phases pass `{ frequent: true }`: they are
 * recorded at once but reported at most every ~100 ms (and with the next
 * collective), so a training step does not pay a message per phase.
 */
export function phase(name: string, opts: { frequent?: boolean } = {}): void {
  if (name === state.phase) return;
  const prev = enter("bookkeeping");
  state.phase = name;
  state.sinceMs = Date.now();
  sink?.phase(name, state.sinceMs, opts.frequent ?? false);
  leave(prev);
}

/** Called by process groups around every collective. */
export function reportCollective(
  rec: CollectiveRecord,
  s: "enter" | "exit",
): void {
  const prev = enter("bookkeeping");
  if (s === "enter") state.lastCollective = rec;
  sink?.collective(rec, s);
  leave(prev);
}

/** Sends phase reports still waiting to be sent (a failing rank's last phase and collective). */
export function flushPhases(): void {
  sink?.flush?.();
}

/** The current phase, when it started, and the last collective entered. */
export function currentPhase(): Readonly<PhaseState> {
  return state;
}
