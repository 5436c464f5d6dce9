/**
 * Reading what the probe recorded: the rank-<r>.jsonl files of one run as
 * events per rank, and the events of a rank cut into optimizer steps (the
 * losses of the backward passes since the previous step, the step's
 * gradient norm, the parameters the step's first forward used).
 */
import { join } from "node:path";
import type { ProbeEvent } from "./probe.ts";

/** Every rank's events of one run, in the order they were recorded. */
export type RankEvents = Map<number, ProbeEvent[]>;

/** One optimizer step as seen by one rank. */
export interface StepRecord {
  /** sum of the backward losses since the previous step (accumulation's loss/k sums to the step loss) */
  loss: number;
  /** global gradient norm (f64) before the update */
  gradNorm: number;
  /** digests of the parameters at the step's first backward, or null when no backward preceded the step */
  params: string[] | null;
  /**
   * the dataset indices of the batches the step's backward passes used (a
   * DataLoader's batch yielded before each), or null when no loader fed it
   */
  samples?: number[] | null;
  /** the learning rate the step used (first group), when recorded */
  lr?: number;
  /** digest of the default generator's state at the step, when recorded */
  rng?: string;
  /** digest of the optimizer's state before the update, when recorded */
  optimizer?: string;
  /** what plain arithmetic turned off (dropout), when recorded */
  plainOff?: string[];
}

const KINDS = new Set(["sampler", "loss", "batch", "step", "params", "checkpoint", "state"]);

/** Parses one rank file; a line that is not a probe event throws an error naming the file and line. */
export function parseEvents(text: string, where: string): ProbeEvent[] {
  const out: ProbeEvent[] = [];
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    let e: unknown;
    try {
      e = JSON.parse(line);
    } catch (err) {
      throw new Error(`${where}:${i + 1}: not JSON (${(err as Error).message})`);
    }
    const kind = (e as { kind?: unknown } | null)?.kind;
    if (typeof kind !== "string" || !KINDS.has(kind)) {
      throw new Error(`${where}:${i + 1}: not a probe event (kind ${JSON.stringify(kind)})`);
    }
    out.push(e as ProbeEvent);
  });
  return out;
}

/** Reads `<probeDir>/rank-<r>.jsonl` of every rank that wrote one (an absent folder gives no ranks). */
export function readRankEvents(probeDir: string): RankEvents {
  const out: RankEvents = new Map();
  let entries: Deno.DirEntry[];
  try {
    entries = [...Deno.readDirSync(probeDir)];
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return out;
    throw e;
  }
  for (const entry of entries) {
    const m = /^rank-(\d+)\.jsonl$/.exec(entry.name);
    if (!m || !entry.isFile) continue;
    const path = join(probeDir, entry.name);
    out.set(Number(m[1]), parseEvents(Deno.readTextFileSync(path), path));
  }
  return new Map([...out].sort(([a], [b]) => a - b));
}

/**
 * The optimizer steps in a rank's events; losses after the last step (a step
 * the probe cut off) are dropped. A batch belongs to a step when a backward
 * followed it (batches of an evaluation, or a peek, are left out).
 */
export function stepsOf(events: readonly ProbeEvent[]): StepRecord[] {
  const steps: StepRecord[] = [];
  let loss = 0;
  let params: string[] | null = null;
  let batch: number[] | null = null;
  let samples: number[] | null = null;
  for (const e of events) {
    if (e.kind === "batch") batch = e.indices;
    else if (e.kind === "loss") {
      loss += e.value;
      if (batch) (samples ??= []).push(...batch);
      batch = null;
    } else if (e.kind === "params") params ??= e.tensors;
    else if (e.kind === "step") {
      const rec: StepRecord = { loss, gradNorm: e.gradNorm, params, samples };
      if (e.lr !== undefined) rec.lr = e.lr;
      if (e.rng !== undefined) rec.rng = e.rng;
      if (e.optimizer !== undefined) rec.optimizer = e.optimizer;
      if (e.plainOff !== undefined) rec.plainOff = e.plainOff;
      steps.push(rec);
      loss = 0;
      params = null;
      samples = null;
      batch = null;
    }
  }
  return steps;
}
