/**
 * Synthetic run directories for the tests of run_record/ and record_tools/, written through run_record/record.ts
 * the way the launcher and trainer write them. A spec describes a small
 * two-rank run; tests change one field of it and compare.
 */
import { join } from "node:path";
import type {
  ConfigRecord,
  DataOrderRecord,
  EvalRecord,
  MetricsRecord,
  RunRecord,
} from "../../run_record/format.ts";
import {
  appendDataOrder,
  appendEval,
  appendMetrics,
  beginAttempt,
  finishAttempt,
  newRunRecord,
  writeConfigRecord,
  writeRunRecord,
} from "../../run_record/record.ts";
import { orderDigest } from "../../run_record/data_order.ts";

/** Everything that defines a synthetic run; every field has a default. */
export interface RunSpec {
  name: string;
  seed: number;
  config: Record<string, unknown>;
  worldSize: number;
  nnodes: number;
  steps: number;
  epochs: number;
  /** dataset size split over the ranks each epoch */
  samples: number;
  env: Record<string, string>;
  scriptSha: string;
  scriptArgs: string[];
  nativeCpu: string;
  /** loss of a step; defaults to a smooth decay that depends on the seed */
  loss: (step: number, seed: number) => number;
  /** change individual digests, e.g. to make one epoch/rank differ */
  editOrder: (d: DataOrderRecord) => DataOrderRecord;
  gradNorm: boolean;
  lossScale: boolean;
  stepMsByRank: boolean;
  tokens: boolean;
  /** global samples of each step, or null to leave the field out (files of older writers) */
  samplesPerStep: number | null;
  /** an evaluation after every this many steps (0: none) */
  evalEvery: number;
  /** the evaluation metrics after `step` */
  evalMetrics: (step: number, seed: number) => Record<string, number>;
  /** config.json's numerics policy, or null to leave it out (runs before it was recorded) */
  numerics: NonNullable<ConfigRecord["numerics"]> | null;
  /** the numerics policy run.json's attempt records, or null to leave it out */
  attemptNumerics: NonNullable<ConfigRecord["numerics"]> | null;
}

/** The baseline spec: 12 steps, 3 epochs, 2 ranks on one node. */
export function baseSpec(): RunSpec {
  return {
    name: "toy",
    seed: 1,
    config: { model: { dim: 8, layers: 2 }, optimizer: { name: "adamw", lr: 0.001 }, batchSize: 4 },
    worldSize: 2,
    nnodes: 1,
    steps: 12,
    epochs: 3,
    samples: 40,
    env: { DTRAIN_NUM_THREADS: "1", OMP_NUM_THREADS: "1" },
    scriptSha: "3fa1".padEnd(64, "0"),
    scriptArgs: ["--epochs", "3"],
    nativeCpu: "a321783a1a851864",
    loss: (step, seed) => 2.5 * Math.exp(-step / 10) + 0.1 + seed * 1e-3,
    editOrder: (d) => d,
    gradNorm: true,
    lossScale: false,
    stepMsByRank: true,
    tokens: false,
    samplesPerStep: 10,
    evalEvery: 0,
    evalMetrics: (step, seed) => ({
      accuracy: 0.5 + 0.4 * (1 - Math.exp(-step / 8)) + seed * 1e-3,
      "val loss": 2 * Math.exp(-step / 12) + 0.2,
    }),
    numerics: null,
    attemptNumerics: null,
  };
}

/** A seeded shuffle of 0…n-1 (xorshift32 + Fisher–Yates), as a sampler would make. */
export function shuffled(n: number, seed: number): Int32Array {
  const out = Int32Array.from({ length: n }, (_, i) => i);
  let s = (seed * 2654435761) >>> 0 || 1;
  for (let i = n - 1; i > 0; i--) {
    s = (s ^ (s << 13)) >>> 0;
    s = (s ^ (s >>> 17)) >>> 0;
    s = (s ^ (s << 5)) >>> 0;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** Each rank's digest for each epoch: a strided split of a per-epoch shuffle. */
export function dataOrderOf(spec: RunSpec): DataOrderRecord[] {
  const out: DataOrderRecord[] = [];
  for (let epoch = 0; epoch < spec.epochs; epoch++) {
    const perm = shuffled(spec.samples, spec.seed * 1000 + epoch);
    for (let rank = 0; rank < spec.worldSize; rank++) {
      const mine = perm.filter((_, i) => i % spec.worldSize === rank);
      out.push(spec.editOrder(orderDigest(epoch, rank, mine)));
    }
  }
  return out;
}

/** One metrics line per step of `attempt`, for steps [from, to). */
export function metricsOf(spec: RunSpec, attempt = 0, from = 0, to = spec.steps): MetricsRecord[] {
  const perEpoch = Math.ceil(spec.steps / spec.epochs);
  const out: MetricsRecord[] = [];
  for (let step = from; step < to; step++) {
    const m: MetricsRecord = {
      step,
      epoch: Math.floor(step / perEpoch),
      attempt,
      loss: spec.loss(step, spec.seed),
      lr: 0.001 * Math.min(1, (step + 1) / 4),
      gradNorm: spec.gradNorm ? 1 / (step + 1) : null,
      lossScale: spec.lossScale ? 65536 / 2 ** (step % 3) : null,
      skipped: 0,
      samplesPerS: 1000 + 10 * step,
      tokensPerS: spec.tokens ? 64000 + 640 * step : null,
      stepMs: 20 + (step % 4),
      dataWaitMs: 0.5,
      memBytes: 1 << 20,
    };
    if (spec.stepMsByRank) {
      m.stepMsByRank = Array.from({ length: spec.worldSize }, (_, r) => 18 + r + (step % 3));
    }
    if (spec.samplesPerStep !== null) m.samples = spec.samplesPerStep;
    out.push(m);
  }
  return out;
}

/** The evaluation lines of `attempt` for steps [from, to): after every evalEvery steps. */
export function evalsOf(spec: RunSpec, attempt = 0, from = 0, to = spec.steps): EvalRecord[] {
  if (spec.evalEvery <= 0) return [];
  const perEpoch = Math.ceil(spec.steps / spec.epochs);
  const out: EvalRecord[] = [];
  for (let step = from; step < to; step++) {
    if ((step + 1) % spec.evalEvery !== 0) continue;
    const epoch = Math.floor(step / perEpoch);
    out.push({ kind: "eval", step, epoch, attempt, metrics: spec.evalMetrics(step, spec.seed) });
  }
  return out;
}

/** The run.json record of a run that succeeded in one attempt. */
export function runRecordOf(spec: RunSpec, dir: string): RunRecord {
  const nproc = spec.worldSize / spec.nnodes;
  let r = newRunRecord({
    runId: `20250101-000000-${spec.name}-0001`,
    name: spec.name,
    argv: ["dtrain", "--nproc", String(nproc), "--run-dir", dir, "train.ts", ...spec.scriptArgs],
    cwd: "/home/user/project",
    script: { path: "train.ts", sha256: spec.scriptSha, args: spec.scriptArgs },
    world: {
      nnodes: spec.nnodes,
      nprocPerNode: nproc,
      hosts: Array.from({ length: spec.nnodes }, (_, i) => `node${i}`),
    },
    versions: {
      dtrain: "0.1.0",
      deno: "2.9.6",
      v8: "15.0.245.2-rusty",
      typescript: "6.0.3",
      native: { cpu: spec.nativeCpu },
    },
    env: spec.env,
    machine: {
      hostname: "node0",
      os: "linux 6.1.0",
      arch: "x86_64",
      cpuModel: "Test CPU @ 3.0GHz",
      cpus: 2,
      memBytes: 8 * 2 ** 30,
    },
    createdAt: new Date("2025-01-01T00:00:00Z"),
  });
  r = beginAttempt(r, new Date("2025-01-01T00:00:01Z"));
  return finishAttempt(r, {
    exitCode: 0,
    endedAt: new Date("2025-01-01T00:01:00Z"),
    ...(spec.attemptNumerics ? { numerics: spec.attemptNumerics } : {}),
  });
}

/** The config.json record. */
export function configOf(spec: RunSpec): ConfigRecord {
  return {
    config: spec.config,
    seed: spec.seed,
    worldSize: spec.worldSize,
    device: "cpu",
    ...(spec.numerics ? { numerics: spec.numerics } : {}),
  };
}

/** Writes a complete run directory for `spec` under `root/<sub>` and returns its path. */
export function writeRun(root: string, sub: string, spec: RunSpec): string {
  const dir = join(root, sub);
  Deno.mkdirSync(dir, { recursive: true });
  writeRunRecord(dir, runRecordOf(spec, dir));
  writeConfigRecord(dir, configOf(spec));
  const evals = evalsOf(spec);
  for (const m of metricsOf(spec)) {
    appendMetrics(dir, m);
    for (const e of evals.filter((e) => e.step === m.step)) appendEval(dir, e);
  }
  for (const d of dataOrderOf(spec)) appendDataOrder(dir, d);
  Deno.writeTextFileSync(join(dir, "rank-0.log"), "step 0 loss 2.6\n");
  return dir;
}

/** Runs `fn` with a fresh temporary directory, removed afterwards. */
export async function withTempDir(fn: (dir: string) => void | Promise<void>): Promise<void> {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-run-" });
  try {
    await fn(dir);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}
