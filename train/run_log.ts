/**
 * RunLog: the Trainer's run records for a loop of one's own — config.json,
 * one metrics.jsonl line per optimizer step (loss averaged over ranks,
 * learning rate, throughput, every rank's step time), evaluation lines with
 * metrics reduced over ranks, data_order.jsonl per epoch and rank, and the
 * TensorBoard events — so `dtrain report`, `dtrain diff` and `dtrain check`
 * read a tutorial- or nanoGPT-style loop as they read a Trainer run. Built on
 * train/metrics.ts (MetricsLogger) and run_record/record.ts; rank 0 writes.
 */
import type { ProcessGroup } from "../distributed/process_group.ts";
import { allGatherJson } from "../distributed/gather_json.ts";
import { getRankSettings, getWorld } from "../distributed/control/env.ts";
import { memoryStats } from "../tensor/allocator.ts";
import { backend } from "../tensor/backend.ts";
import { type NumericsPolicy, numericsPolicy } from "../tensor/numerics_policy.ts";
import type { Tensor } from "../tensor/tensor.ts";
import { appendDataOrder } from "../run_record/record.ts";
import { orderDigest } from "../run_record/data_order.ts";
import { MetricsLogger } from "./metrics.ts";

/** The sampler whose epoch order data_order.jsonl records (a DistributedSampler). */
export interface OrderSource {
  /** this rank's indices of `epoch` without side effects (DistributedSampler.indicesFor) */
  indicesFor?(epoch: number): Int32Array;
  /** this rank's indices of the current epoch (used when indicesFor is absent) */
  indices(): Int32Array;
}

/** Options of a RunLog. */
export interface RunLogOptions {
  /**
   * The loop's settings as config.json records them and `dtrain diff`
   * compares them (plain JSON: batch size, learning rate, epochs, …).
   */
  config: Record<string, unknown>;
  /** config.json's seed (default: config.seed when it is an integer, else 0) */
  seed?: number;
  /** the job's process group; losses and evaluations are reduced over it (default: one process) */
  processGroup?: ProcessGroup;
  /**
   * The numerics policy the loop passes to autocast, GradScaler and
   * clipGradNorm, for config.json (default: the process's policy now, so set
   * one with setNumericsPolicy before making the RunLog).
   */
  numerics?: NumericsPolicy;
  /** its learning rate (the first group's) goes into each step line */
  optimizer?: { readonly lr: number };
  /** the sampler whose order of each epoch data_order.jsonl records (see epoch()) */
  sampler?: OrderSource;
  /** where the records go (default: the launcher's run directory; null: console only) */
  runDir?: string | null;
  /** optimizer steps already done when a resumed loop starts (default 0) */
  startStep?: number;
  /** steps of the whole run, for the progress line's ETA */
  totalSteps?: number | null;
  /** print a progress line every this many steps (default 10) */
  logEvery?: number;
  /** tokens per sample, for tokens/s (e.g. a language model's block size) */
  tokensPerSample?: number;
  /** write TensorBoard event files in <runDir>/tb (default true) */
  tensorboard?: boolean;
}

/** One optimizer step as this rank saw it. */
export interface StepInput {
  /** this rank's loss of the step (the mean over its samples): a number or a one-element tensor */
  loss: number | Tensor;
  /** samples this rank trained on in the step */
  samples: number;
  /** the epoch (default: the last epoch() call's, else 0) */
  epoch?: number;
  /** the global gradient norm, if measured (clipGradNorm's return) */
  gradNorm?: number | null;
  /** the learning rate used (default: the optimizer's) */
  lr?: number;
  /** the GradScaler's scale, when one is used */
  lossScale?: number | null;
  /** optimizer steps skipped so far (GradScaler.skippedSteps) */
  skipped?: number;
  /** milliseconds this rank waited for the step's data (the batches' waitMs) */
  dataWaitMs?: number;
  /** the dataset indices the step used on this rank, for loops without a sampler (random windows) */
  indices?: Int32Array;
}

/** Options of RunLog.eval(). */
export interface EvalOptions {
  /**
   * This rank's weight in the mean over ranks: the number of samples it
   * evaluated (so accuracies combine as total correct / total samples).
   * Default 1: the plain mean.
   */
  weight?: number;
  /** the epoch (default: the last epoch() call's) */
  epoch?: number;
}

/**
 * The run log of a hand-written loop. Every rank constructs it and calls
 * epoch(), step(), eval() and close() at the same points (they reduce over
 * the ranks); rank 0 writes.
 *
 * @example
 * ```ts
 * const log = new RunLog({ config: { lr: 1e-3, batchSize: 32, epochs }, processGroup: pg, optimizer, sampler });
 * for (let epoch = 0; epoch < epochs; epoch++) {
 *   sampler.setEpoch(epoch);
 *   log.epoch(epoch);
 *   for await (const { tensors: [x, y], waitMs } of loader) {
 *     const loss = trainStep(x!, y!);
 *     log.step({ loss, samples: x!.shape[0]!, dataWaitMs: waitMs });
 *   }
 *   log.eval({ accuracy: correct / seen }, { weight: seen });
 * }
 * log.close();
 * ```
 */
export class RunLog {
  readonly #pg: ProcessGroup | null;
  readonly #opts: RunLogOptions;
  readonly #logger: MetricsLogger;
  readonly #runDir: string | null;
  readonly #rank: number;
  readonly #size: number;
  readonly #attempt: number;
  #step: number;
  #epoch = 0;
  #samples = 0;
  #last = performance.now();
  /** indices passed to step() since the last epoch() (loops without a sampler) */
  #drawn: Int32Array[] = [];
  #closed = false;

  /** A log of the run described by `opts`. */
  constructor(opts: RunLogOptions) {
    this.#opts = opts;
    this.#pg = opts.processGroup ?? null;
    this.#rank = this.#pg?.rank ?? 0;
    this.#size = this.#pg?.size ?? 1;
    this.#runDir = opts.runDir === undefined ? getWorld().runDir : opts.runDir;
    this.#attempt = getRankSettings().restartCount;
    this.#step = opts.startStep ?? 0;
    const every = opts.logEvery ?? 10;
    if (!Number.isSafeInteger(every) || every < 1) {
      throw new RangeError(`RunLog: logEvery must be a positive integer, got ${every}`);
    }
    if (!Number.isSafeInteger(this.#step) || this.#step < 0) {
      throw new RangeError(`RunLog: startStep must be a non-negative integer, got ${this.#step}`);
    }
    this.#logger = new MetricsLogger(this.#runDir, {
      logEvery: every,
      enabled: this.#rank === 0,
      totalSteps: opts.totalSteps ?? null,
      ...(opts.tensorboard === undefined ? {} : { tensorboard: opts.tensorboard }),
    });
    const configSeed = opts.config.seed;
    const seed = opts.seed ?? (Number.isSafeInteger(configSeed) ? configSeed as number : 0);
    this.#logger.begin({
      config: {
        config: opts.config,
        seed,
        worldSize: this.#size,
        device: backend().device,
        numerics: { ...(opts.numerics ?? numericsPolicy()) },
      },
      step: this.#step,
    });
  }

  /** Optimizer steps recorded so far (including startStep). */
  get stepCount(): number {
    return this.#step;
  }

  /**
   * Starts epoch `epoch` on every rank: records each rank's order of the
   * epoch in data_order.jsonl (the sampler's, or `order` when given), after
   * recording what earlier step() calls drew without a sampler.
   */
  epoch(epoch: number, order?: Int32Array): void {
    this.#assertOpen("epoch");
    if (!Number.isSafeInteger(epoch) || epoch < 0) {
      throw new RangeError(`RunLog.epoch: epoch must be a non-negative integer, got ${epoch}`);
    }
    this.#flushDrawn();
    this.#epoch = epoch;
    const sampler = this.#opts.sampler;
    const indices = order ??
      (sampler ? (sampler.indicesFor?.(epoch) ?? sampler.indices()) : null);
    if (indices) this.#recordOrder(epoch, indices);
    this.#last = performance.now();
  }

  /**
   * Records one optimizer step on every rank; returns the loss averaged over
   * the ranks (the value metrics.jsonl holds). The step time is the time
   * since the previous step() (or epoch(), or the construction).
   */
  step(s: StepInput): number {
    this.#assertOpen("step");
    const own = typeof s.loss === "number" ? s.loss : s.loss.item();
    if (!Number.isSafeInteger(s.samples) || s.samples < 0) {
      throw new RangeError(
        `RunLog.step: samples must be a non-negative integer, got ${s.samples}`,
      );
    }
    const lr = s.lr ?? this.#opts.optimizer?.lr;
    if (lr === undefined || !Number.isFinite(lr)) {
      throw new TypeError(
        `RunLog.step: no learning rate (got ${lr}): pass the optimizer in RunLog's options, or lr in step()`,
      );
    }
    const now = performance.now();
    const ms = now - this.#last;
    this.#last = now;
    if (s.indices) this.#drawn.push(s.indices.slice());
    // Every rank's [loss, samples, step ms] in one collective.
    const all = new Float64Array(3 * this.#size);
    const mine = Float64Array.of(own, s.samples, ms);
    if (this.#pg && this.#size > 1) this.#pg.allGather(all, mine);
    else all.set(mine);
    let lossSum = 0, samples = 0;
    const byRank: number[] = [];
    for (let r = 0; r < this.#size; r++) {
      lossSum += all[3 * r]!;
      samples += all[3 * r + 1]!;
      byRank.push(all[3 * r + 2]!);
    }
    const loss = lossSum / this.#size;
    this.#step++;
    this.#samples += samples;
    const stepMs = byRank[0]!; // as the Trainer's lines: rank 0's wall time (every rank's is in byRank)
    const perS = stepMs > 0 ? samples / (stepMs / 1000) : 0;
    const tokens = this.#opts.tokensPerSample;
    const mem = memoryStats();
    this.#logger.log({
      step: this.#step,
      epoch: s.epoch ?? this.#epoch,
      attempt: this.#attempt,
      loss,
      lr,
      gradNorm: s.gradNorm ?? null,
      lossScale: s.lossScale ?? null,
      skipped: s.skipped ?? 0,
      samplesPerS: perS,
      tokensPerS: tokens ? perS * tokens : null,
      stepMs,
      dataWaitMs: s.dataWaitMs ?? 0,
      memBytes: mem.liveBytes + mem.cachedBytes,
      stepMsByRank: byRank,
      samples,
    });
    return loss;
  }

  /**
   * Records an evaluation after the current step on every rank: each metric
   * is the mean over ranks weighted by `weight` (the samples each rank
   * evaluated); returns the reduced metrics, which rank 0 writes to
   * metrics.jsonl and TensorBoard and prints. Every rank must pass the same
   * metric names.
   */
  eval(metrics: Record<string, number>, opts: EvalOptions = {}): Record<string, number> {
    this.#assertOpen("eval");
    const weight = opts.weight ?? 1;
    if (!(weight >= 0) || !Number.isFinite(weight)) {
      throw new RangeError(`RunLog.eval: weight must be a finite number >= 0, got ${weight}`);
    }
    const names = Object.keys(metrics).sort();
    const all = this.#pg && this.#size > 1
      ? allGatherJson(this.#pg, { names, values: names.map((n) => metrics[n]!), weight })
      : [{ names, values: names.map((n) => metrics[n]!), weight }];
    const differ = all.findIndex((a) => a.names.join("\u0000") !== names.join("\u0000"));
    if (differ >= 0) {
      throw new Error(
        `RunLog.eval: rank ${this.#rank} reports metrics [${names}] but rank ${differ} ` +
          `[${all[differ]!.names}]: every rank must evaluate the same metrics`,
      );
    }
    const total = all.reduce((a, x) => a + x.weight, 0);
    const reduced: Record<string, number> = {};
    names.forEach((n, i) => {
      // JSON carries NaN and Infinity as null: a rank's non-finite value makes the result NaN.
      const parts = all.map((a) => (a.values[i] === null ? NaN : a.values[i]!) * a.weight);
      reduced[n] = total > 0 ? parts.reduce((a, b) => a + b, 0) / total : NaN;
    });
    this.#logger.logEval({
      step: this.#step,
      epoch: opts.epoch ?? this.#epoch,
      attempt: this.#attempt,
      metrics: reduced,
    });
    return reduced;
  }

  /** Prints a line on rank 0 (ending a progress line first). */
  print(line: string): void {
    this.#logger.print(line);
  }

  /** Records what step() drew without a sampler, and closes the TensorBoard file (every rank). */
  close(): void {
    if (this.#closed) return;
    this.#flushDrawn();
    this.#closed = true;
    this.#logger.close();
  }

  /** Same as close(), for `using log = new RunLog(…)`. */
  [Symbol.dispose](): void {
    this.close();
  }

  #flushDrawn(): void {
    // Collective: every rank decides alike, since step() is called alike.
    const drawn = this.#drawn;
    this.#drawn = [];
    if (drawn.length === 0) return;
    const n = drawn.reduce((a, d) => a + d.length, 0);
    const order = new Int32Array(n);
    let at = 0;
    for (const d of drawn) {
      order.set(d, at);
      at += d.length;
    }
    this.#recordOrder(this.#epoch, order);
  }

  #recordOrder(epoch: number, indices: Int32Array): void {
    const mine = orderDigest(epoch, this.#rank, indices);
    const all = this.#pg && this.#size > 1 ? allGatherJson(this.#pg, mine) : [mine];
    if (this.#rank === 0 && this.#runDir) { for (const d of all) appendDataOrder(this.#runDir, d); }
  }

  #assertOpen(what: string): void {
    if (this.#closed) throw new Error(`RunLog.${what}: the log was closed`);
  }
}
