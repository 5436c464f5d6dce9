/**
 * Batch-norm layers constructed as PyTorch's — BatchNorm1d, BatchNorm2d and
 * SyncBatchNorm, with convertSyncBatchNorm — and their state: weight, bias,
 * running_mean, running_var and num_batches_tracked (i64), the names and
 * order of torch's state dict, so a torch-saved model loads strictly.
 * SyncBatchNorm sums its statistics across the ranks of a process group
 * (the same numbers as batch norm over every rank's batch at once).
 */
import { Layer } from "./layers.ts";
import type { Module } from "./module.ts";
import { fromArray, full, type Tensor, zeros } from "../tensor/tensor.ts";
import { noGrad } from "../tensor/autograd.ts";
import { add, scale } from "../tensor/ops/elementwise.ts";
import {
  noteShardStatistics,
  type ShardScope,
  shardScope,
  type ShardStatistics,
} from "../tensor/exact_shards.ts";
import { noteNumericsOverride } from "../tensor/numerics_policy.ts";
import {
  batchNorm,
  type BatchNormOptions,
  batchNormReluMaxPool2d,
  type StatsBuffer,
} from "../tensor/ops/batchnorm.ts";
/**
 * What SyncBatchNorm needs of a process group (distributed/'s ProcessGroup
 * is one; nn/ sits below distributed/, so it names only this much).
 */
export interface StatsGroup {
  /** Ranks in the group. */
  readonly size: number;
  /** Sums `count` f64 values at `ptr` across the ranks, in place. */
  allReduce(buf: { ptr: Deno.PointerObject; count: number; dtype: "f64" }, op: "sum"): void;
}

/** Options of the batch-norm layers (PyTorch's keyword arguments and defaults). */
export interface BatchNormLayerOptions {
  /** Added to the variance (default 1e-5). */
  eps?: number;
  /** Weight of each batch in the running statistics; null: a cumulative average. Default 0.1. */
  momentum?: number | null;
  /** Learn weight (1 at init) and bias (0). Default true. */
  affine?: boolean;
  /** Keep running statistics (used in eval mode). Default true. */
  trackRunningStats?: boolean;
}

/** The tensors of a batch norm, shared when convertSyncBatchNorm converts one. */
export interface BatchNormState {
  /** Per-channel scale (null without affine). */
  weight: Tensor | null;
  /** Per-channel shift (null without affine). */
  bias: Tensor | null;
  /** Running mean (null without trackRunningStats). */
  runningMean: Tensor | null;
  /** Running (unbiased) variance (null without trackRunningStats). */
  runningVar: Tensor | null;
  /** i64 count of training batches seen (null without trackRunningStats). */
  numBatchesTracked: Tensor | null;
}

/** What BatchNorm1d, BatchNorm2d and SyncBatchNorm share (torch's _BatchNorm). */
export abstract class BatchNormBase extends Layer {
  /** Added to the variance before the square root. */
  readonly eps: number;
  /** Weight of each batch in the running statistics; null: a cumulative average. */
  readonly momentum: number | null;
  /** Whether weight and bias are learned. */
  readonly affine: boolean;
  /** Whether running statistics are kept (and used in eval mode). */
  readonly trackRunningStats: boolean;
  /** Per-channel scale γ, 1 at init (null without affine). */
  readonly weight: Tensor | null;
  /** Per-channel shift β, 0 at init (null without affine). */
  readonly bias: Tensor | null;
  /** Buffer `running_mean`, 0 at init (null without trackRunningStats). */
  readonly runningMean: Tensor | null;
  /** Buffer `running_var`, 1 at init (null without trackRunningStats). */
  readonly runningVar: Tensor | null;
  /**
   * Buffer `num_batches_tracked` (i64), counting training batches (null without trackRunningStats).
   */
  readonly numBatchesTracked: Tensor | null;

  /**
   * A batch norm over `numFeatures` channels; `shared` reuses another one's tensors
   * (convertSyncBatchNorm).
   */
  constructor(
    readonly numFeatures: number,
    opts: BatchNormLayerOptions = {},
    shared?: BatchNormState,
  ) {
    super();
    const name = this.constructor.name;
    if (!Number.isSafeInteger(numFeatures) || numFeatures < 1) {
      throw new RangeError(`${name}: numFeatures must be a positive integer, got ${numFeatures}`);
    }
    this.eps = opts.eps ?? 1e-5;
    this.momentum = opts.momentum === undefined ? 0.1 : opts.momentum;
    if (!(this.eps >= 0)) throw new RangeError(`${name}: eps must be >= 0, got ${this.eps}`);
    if (this.momentum !== null && !(this.momentum >= 0 && this.momentum <= 1)) {
      throw new RangeError(`${name}: momentum must be in [0, 1] or null, got ${this.momentum}`);
    }
    this.affine = opts.affine ?? true;
    this.trackRunningStats = opts.trackRunningStats ?? true;
    const C = numFeatures;
    const param = (n: string, t: Tensor | null) => (t ? this.registerParameter(n, t) : null);
    const buffer = (n: string, t: Tensor | null) => (t ? this.registerBuffer(n, t) : null);
    this.weight = this.affine ? param("weight", shared ? shared.weight : full([C], 1)) : null;
    this.bias = this.affine ? param("bias", shared ? shared.bias : zeros([C])) : null;
    const track = this.trackRunningStats;
    this.runningMean = track
      ? buffer("running_mean", shared ? shared.runningMean : zeros([C]))
      : null;
    this.runningVar = track
      ? buffer("running_var", shared ? shared.runningVar : full([C], 1))
      : null;
    this.numBatchesTracked = track
      ? buffer("num_batches_tracked", shared ? shared.numBatchesTracked : zeros([], "i64"))
      : null;
  }

  /** Throws unless x has the dims this layer takes. */
  protected abstract checkInput(x: Tensor): void;

  /** Sums statistics across ranks, or null for this process alone. */
  protected statsAllReduce(): ((buf: StatsBuffer) => void) | null {
    return null;
  }

  /**
   * Normalises x per channel: batch statistics in training mode (updating the running ones), the
   * running statistics in eval mode.
   */
  forward(x: Tensor): Tensor {
    return batchNorm(x, ...this.#arguments(x));
  }

  /**
   * forward(x), then ReLU and 2x2 max pooling at stride 2, in one pass with
   * the same bits (batchNormReluMaxPool2d): what Sequential runs for a batch
   * norm followed by ReLU and MaxPool2d(2) on an (N, C, H, W) input.
   */
  forwardReluMaxPool2d(x: Tensor): Tensor {
    return batchNormReluMaxPool2d(x, ...this.#arguments(x));
  }

  /** Whether forward is batch norm's own (Sequential fuses only then). */
  fusesReluMaxPool(): boolean {
    return this.forward === BatchNormBase.prototype.forward;
  }

  /** The running statistics and options of this layer's mode, for an input x. */
  #arguments(x: Tensor): [Tensor | null, Tensor | null, BatchNormOptions] {
    this.checkInput(x);
    if (x.shape[1] !== this.numFeatures) {
      throw new RangeError(
        `${this.constructor.name}(${this.numFeatures}): the input [${x.shape}] has ${
          x.shape[1]
        } channels (dim 1)`,
      );
    }
    // torch: batch statistics in training, or whenever there are no running ones
    const batchStats = this.training || this.runningMean === null;
    const useRunning = !this.training || this.trackRunningStats;
    const shard = batchStats ? shardScope() : null;
    if (shard !== null) return this.#shardArguments(shard);
    if (this.training) this.#counted = null; // the kernel counts this batch in num_batches_tracked
    return [useRunning ? this.runningMean : null, useRunning ? this.runningVar : null, {
      weight: this.weight,
      bias: this.bias,
      training: batchStats,
      momentum: this.momentum,
      eps: this.eps,
      numBatchesTracked: this.training ? this.numBatchesTracked : null,
      allReduce: batchStats ? this.statsAllReduce() : null,
    }];
  }

  /** Exact mode: this forward's per-shard statistics (mean, then unbiased variance). */
  readonly #shardStats: ShardStatistics = {
    byShard: new Map(),
    applyShardMean: (mean) => this.#applyShardMean(mean),
  };

  /**
   * Exact mode (tensor/exact_shards.ts): the batch statistics are the
   * canonical shard's own (B/S rows, whatever the world size; SyncBatchNorm
   * sums nothing across ranks inside the forward), and the running
   * statistics are not updated shard by shard: each shard's mean and
   * unbiased variance are caught in buffers of its own (momentum 1 writes
   * them there), and after the forward the mean over all S shards, summed in
   * the fixed tree, updates the running ones once (#applyShardMean).
   */
  #shardArguments(sh: ShardScope): [Tensor | null, Tensor | null, BatchNormOptions] {
    noteNumericsOverride(
      "exact batch norm",
      "exact mode: batch norm statistics are each canonical shard's (SyncBatchNorm does not sum " +
        "them across ranks); running statistics take the mean over the shards",
    );
    const C = this.numFeatures;
    let runningMean: Tensor | null = null, runningVar: Tensor | null = null;
    if (this.training && this.trackRunningStats && this.runningMean !== null) {
      const caught = zeros([2 * C]).keep();
      this.#shardStats.byShard.get(sh.shard)?.dispose();
      this.#shardStats.byShard.set(sh.shard, caught);
      runningMean = caught.subview(0, [C]);
      runningVar = caught.subview(C, [C]);
      noteShardStatistics(this.#shardStats);
    }
    return [runningMean, runningVar, {
      weight: this.weight,
      bias: this.bias,
      training: true,
      momentum: 1,
      eps: this.eps,
      numBatchesTracked: null,
      allReduce: null,
    }];
  }

  /** num_batches_tracked as #applyShardMean last wrote it, and the buffer's write counter then */
  #counted: { version: number; value: bigint } | null = null;

  /** One running-statistics update (torch's formula) from the mean of the shards' statistics. */
  #applyShardMean(mean: Tensor): void {
    for (const t of this.#shardStats.byShard.values()) t.dispose();
    this.#shardStats.byShard.clear();
    const C = this.numFeatures;
    noGrad(() => {
      const nbt = this.numBatchesTracked!;
      // The count as this layer last wrote it, read back (a host sync) only after someone else
      // wrote it (a loaded state dict, a broadcast): its write counter says so.
      const known = this.#counted;
      const n = (known !== null && known.version === nbt.version
        ? known.value
        : (nbt.toArray() as BigInt64Array)[0]!) + 1n;
      const next = fromArray(BigInt64Array.of(n), []);
      nbt.copyFrom(next);
      next.dispose();
      this.#counted = { version: nbt.version, value: n };
      const m = this.momentum ?? 1 / Number(n);
      for (const [buf, off] of [[this.runningMean!, 0], [this.runningVar!, C]] as const) {
        const part = mean.subview(off, [C]);
        const kept = scale(buf, 1 - m), added = scale(part, m), upd = add(kept, added);
        buf.copyFrom(upd);
        for (const t of [part, kept, added, upd]) {
          t.dispose();
        }
      }
    });
    mean.dispose();
  }

  /** The tensors, for a converted copy that shares them. */
  protected state(): BatchNormState {
    return {
      weight: this.weight,
      bias: this.bias,
      runningMean: this.runningMean,
      runningVar: this.runningVar,
      numBatchesTracked: this.numBatchesTracked,
    };
  }
}

/**
 * Batch norm over (N, C) or (N, C, L) inputs (torch.nn.BatchNorm1d).
 *
 * @example
 * ```ts
 * const bn = new BatchNorm1d(64, { momentum: 0.01 });
 * ```
 */
export class BatchNorm1d extends BatchNormBase {
  /** Throws unless x is (N, C) or (N, C, L). */
  protected checkInput(x: Tensor): void {
    if (x.shape.length !== 2 && x.shape.length !== 3) {
      throw new RangeError(
        `BatchNorm1d: expected 2D or 3D input (got ${x.shape.length}D input [${x.shape}])`,
      );
    }
  }
}

/**
 * Batch norm over (N, C, H, W) inputs (torch.nn.BatchNorm2d).
 *
 * @example
 * ```ts
 * const bn = new BatchNorm2d(32); // after a Conv2d(…, 32, …)
 * ```
 */
export class BatchNorm2d extends BatchNormBase {
  /** Throws unless x is (N, C, H, W). */
  protected checkInput(x: Tensor): void {
    if (x.shape.length !== 4) {
      throw new RangeError(
        `BatchNorm2d: expected 4D input (got ${x.shape.length}D input [${x.shape}])`,
      );
    }
  }
}

/** Options of SyncBatchNorm: the batch-norm options and the group whose ranks share statistics. */
export interface SyncBatchNormOptions extends BatchNormLayerOptions {
  /** The ranks whose batches are normalised together; absent: this process alone. */
  processGroup?: StatsGroup | null;
}

/**
 * Batch norm whose training statistics are those of every rank's batch
 * together (torch.nn.SyncBatchNorm): per-channel sums, squared deviations
 * and counts are all-reduced (in f64) in the forward, and the two sums of
 * the backward likewise; weight and bias gradients stay per rank for DDP to
 * average. Ranks may have different batch sizes. Inputs (N, C, ...).
 *
 * @example
 * ```ts
 * using pg = initProcessGroup();
 * const model = convertSyncBatchNorm(buildCnn(), pg);
 * ```
 */
export class SyncBatchNorm extends BatchNormBase {
  /** The ranks whose statistics are combined (null: this process alone). */
  processGroup: StatsGroup | null;

  /** A SyncBatchNorm over `numFeatures` channels (see BatchNormBase for `shared`). */
  constructor(numFeatures: number, opts: SyncBatchNormOptions = {}, shared?: BatchNormState) {
    super(numFeatures, opts, shared);
    this.processGroup = opts.processGroup ?? null;
  }

  /** Throws unless x has at least 2 dims (N, C, …). */
  protected checkInput(x: Tensor): void {
    if (x.shape.length < 2) {
      throw new RangeError(
        `SyncBatchNorm: expected at least 2D input (got ${x.shape.length}D input [${x.shape}])`,
      );
    }
  }

  /** The all-reduce of the statistics over processGroup (null when alone). */
  protected override statsAllReduce(): ((buf: StatsBuffer) => void) | null {
    const pg = this.processGroup;
    if (!pg || pg.size === 1) return null;
    return (buf) => pg.allReduce({ ptr: buf.ptr, count: buf.count, dtype: "f64" }, "sum");
  }

  /** A SyncBatchNorm sharing `bn`'s parameters, buffers, options and mode. */
  static fromBatchNorm(bn: BatchNormBase, processGroup: StatsGroup | null = null): SyncBatchNorm {
    const s = new SyncBatchNorm(bn.numFeatures, {
      eps: bn.eps,
      momentum: bn.momentum,
      affine: bn.affine,
      trackRunningStats: bn.trackRunningStats,
      processGroup,
    }, (bn as SyncBatchNorm).state());
    s.training = bn.training;
    return s;
  }
}

/**
 * Replaces every BatchNorm1d/BatchNorm2d in `module` (itself included) by a
 * SyncBatchNorm over `processGroup` that shares its parameters and buffers
 * (so optimizers built before still hold them), as
 * torch.nn.SyncBatchNorm.convert_sync_batchnorm. Each parent's child entry
 * is replaced, and so is any field (or array element) of the parent that
 * held the old layer. Returns the converted module (a new object only when
 * `module` itself was a batch norm).
 */
export function convertSyncBatchNorm<M extends Module>(
  module: M,
  processGroup: StatsGroup | null = null,
): M | SyncBatchNorm {
  if (module instanceof BatchNormBase && !(module instanceof SyncBatchNorm)) {
    return SyncBatchNorm.fromBatchNorm(module, processGroup);
  }
  if (module instanceof SyncBatchNorm) {
    module.processGroup = processGroup;
    return module;
  }
  for (const [name, child] of module.children()) {
    const converted = convertSyncBatchNorm(child, processGroup);
    if (converted === child) continue;
    module.addModule(name, converted);
    const fields = module as unknown as Record<string, unknown>;
    for (const key of Object.keys(fields)) {
      const v = fields[key];
      if (v === child) fields[key] = converted;
      else if (Array.isArray(v)) v.forEach((e, i) => e === child && (v[i] = converted));
    }
  }
  return module;
}
