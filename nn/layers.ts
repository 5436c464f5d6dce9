/**
 * The standard layers with PyTorch's parameter names, shapes and default
 * initialisation: Linear, ReLU, GELU, Dropout, LayerNorm, Embedding, Identity,
 * Flatten, and Sequential (children named "0", "1", …).
 */
import { Module } from "./module.ts";
import {
  linearBiasBound,
  linearWeightBound,
  nextDropoutSeed,
  normalTensor,
  uniformTensor,
} from "./init.ts";
import { full, type Tensor } from "../tensor/tensor.ts";
import { linear } from "../tensor/ops/linalg.ts";
import { dropout, gelu, relu } from "../tensor/ops/elementwise.ts";
import { embedding, layerNorm } from "../tensor/ops/nn.ts";
import { flatten } from "../tensor/ops/layout.ts";
import type { TorchGenerator } from "../random/torch_generator.ts";
import { noteNumericsOverride, numericsPolicy } from "../tensor/numerics_policy.ts";
import { noteDropoutDraw } from "./dropout_replay.ts";
import { type ShardScope, shardScope } from "../tensor/exact_shards.ts";

/** A module mapping one tensor to one tensor. Sequential holds Layers. */
export abstract class Layer extends Module {
  /** Maps the input to the output (records autograd nodes when gradients are on). */
  abstract forward(x: Tensor): Tensor;
}

/** y = x W^T + b; weight (out, in) and bias (out) drawn as torch.nn.Linear does. */
export class Linear extends Layer {
  /** The (out, in) weight, uniform in ±1/√in at init. */
  readonly weight: Tensor;
  /** The (out) bias, uniform in ±1/√in at init; null when made with `bias: false`. */
  readonly bias: Tensor | null;
  /**
   * A layer from `inFeatures` to `outFeatures` (torch.nn.Linear(in, out, bias=True)); `generator`
   * draws its init (default: the global one manualSeed seeds).
   *
   * @example
   * ```ts
   * import { fromArray, Linear, manualSeed } from "dtrain";
   * manualSeed(0);
   * const fc = new Linear(4, 2);
   * const y = fc.forward(fromArray(new Float32Array(12).fill(1), [3, 4])); // shape [3, 2]
   * ```
   */
  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    opts: { bias?: boolean; generator?: TorchGenerator } = {},
  ) {
    super();
    const wb = linearWeightBound(inFeatures);
    this.weight = this.registerParameter(
      "weight",
      uniformTensor([outFeatures, inFeatures], -wb, wb, opts.generator),
    );
    if (opts.bias ?? true) {
      const bb = linearBiasBound(inFeatures);
      this.bias = this.registerParameter(
        "bias",
        uniformTensor([outFeatures], -bb, bb, opts.generator),
      );
    } else {
      this.bias = null;
    }
  }
  /** x W^T + b over the last dim of x (any leading dims). */
  forward(x: Tensor): Tensor {
    return linear(x, this.weight, this.bias);
  }
}

/** A layer that runs itself, then ReLU, then 2x2 max pooling in one op (batch norm). */
interface FusesReluMaxPool {
  /** Whether its forward is its class's own (a subclass may change it). */
  fusesReluMaxPool(): boolean;
  forwardReluMaxPool2d(x: Tensor): Tensor;
}

/** Whether layers a, b, c are a batch norm, ReLU and MaxPool2d(2) for input x (duck-typed:
 *  the classes live in modules that import this one). */
function fusesReluMaxPool(a: Layer, b: Layer, c: Layer, x: Tensor): boolean {
  const norm = a as unknown as Partial<FusesReluMaxPool>;
  const pool = c as unknown as { pools2x2?: () => boolean };
  return typeof norm.fusesReluMaxPool === "function" && norm.fusesReluMaxPool() &&
    b.forward === ReLU.prototype.forward && typeof pool.pools2x2 === "function" &&
    pool.pools2x2() && x.shape.length === 4 && x.shape[2]! >= 2 && x.shape[3]! >= 2;
}

/** max(x, 0). (torch.nn.ReLU.) */
export class ReLU extends Layer {
  /** max(x, 0) elementwise. */
  forward(x: Tensor): Tensor {
    return relu(x);
  }
}

/** GELU, tanh approximation. (torch.nn.GELU(approximate="tanh").) */
export class GELU extends Layer {
  /** GELU(x) elementwise (tanh approximation). */
  forward(x: Tensor): Tensor {
    return gelu(x);
  }
}

/**
 * Dropout with a seeded, counter-based mask: each call uses the next offset,
 * so a run is reproducible from (seed, number of calls), which checkpoints
 * save (getRngState). The seed defaults to one derived from manualSeed's seed
 * and the layer's construction order (nextDropoutSeed), distinct per layer.
 * The counterpart of torch.nn.Dropout (off in eval mode).
 */
export class Dropout extends Layer {
  /** Mask stream position; advanced by the element count of each call. */
  offset = 0n;
  /**
   * Zeroes each element with probability `p` in training mode and scales the rest by 1/(1-p)
   * (torch.nn.Dropout); `seed` chooses the mask stream.
   */
  constructor(readonly p: number, public seed: bigint = nextDropoutSeed()) {
    super();
    if (!(p >= 0 && p < 1)) {
      throw new RangeError(`Dropout: p must be in [0, 1), got ${p}`);
    }
  }
  /** x with the mask applied in training mode; x itself in eval mode or when p is 0. */
  forward(x: Tensor): Tensor {
    if (!this.training || this.p === 0) return x;
    if (!numericsPolicy().dropout) {
      noteNumericsOverride("dropout", "dropout is off: Dropout layers pass their input through");
      return x;
    }
    noteDropoutDraw(this); // a checkpointed forward replays the same masks
    const shard = shardScope();
    if (shard !== null) return dropout(x, this.p, this.seed, this.#shardOffset(shard, x.numel));
    const out = dropout(x, this.p, this.seed, this.offset);
    this.offset += BigInt(x.numel);
    return out;
  }

  /** the sharded forward whose draws #shardOffset places, and where the layer's stream stood then */
  #generation = -1;
  #base = 0n;
  /** elements drawn so far in this forward, by canonical shard */
  #drawn = new Map<number, bigint>();

  /**
   * Exact mode (tensor/exact_shards.ts): a shard's masks are keyed by the
   * shard, not by the order in which a process computes its shards. A
   * sharded forward takes the stream from the layer's offset at its start on:
   * the k-th draw of every shard (all shards have the same shapes) owns a
   * block of S·n elements, shard s the s-th n of it, so a sample's mask is
   * the same whichever rank computes its shard; the offset then stands past
   * every shard's draws, at every world size.
   */
  #shardOffset(sh: ShardScope, numel: number): bigint {
    if (this.#generation !== sh.generation) {
      this.#generation = sh.generation;
      this.#base = this.offset;
      this.#drawn.clear();
    }
    const before = this.#drawn.get(sh.shard) ?? 0n;
    const n = BigInt(numel), S = BigInt(sh.count);
    this.#drawn.set(sh.shard, before + n);
    const end = this.#base + S * (before + n);
    if (end > this.offset) this.offset = end;
    return this.#base + S * before + BigInt(sh.shard) * n;
  }
}

/**
 * Layer norm over the last dim with weight = 1, bias = 0 at init. (torch.nn.LayerNorm over one last
 * dim.)
 */
export class LayerNorm extends Layer {
  /** Per-feature scale, 1 at init. */
  readonly weight: Tensor;
  /** Per-feature shift, 0 at init; null when made with `bias: false`. */
  readonly bias: Tensor | null;
  /**
   * Normalises over a last dim of size `normalizedShape` (torch.nn.LayerNorm; `eps` default 1e-5,
   * `bias: false` as nanoGPT's LayerNorm without bias).
   */
  constructor(
    readonly normalizedShape: number,
    opts: { bias?: boolean; eps?: number } = {},
  ) {
    super();
    this.eps = opts.eps ?? 1e-5;
    this.weight = this.registerParameter("weight", full([normalizedShape], 1));
    this.bias = (opts.bias ?? true)
      ? this.registerParameter("bias", full([normalizedShape], 0))
      : null;
  }
  /** Added to the variance before the square root. */
  readonly eps: number;
  /** Layer norm of x over its last dim. */
  forward(x: Tensor): Tensor {
    return layerNorm(x, this.weight, this.bias, this.eps);
  }
}

/** A lookup table (num, dim), N(0, 1) at init as torch.nn.Embedding. */
export class Embedding extends Module {
  /** The (num, dim) table, N(0, 1) at init. */
  readonly weight: Tensor;
  /** A table of `num` vectors of size `dim` (torch.nn.Embedding(num, dim)). */
  constructor(
    readonly num: number,
    readonly dim: number,
    opts: { generator?: TorchGenerator } = {},
  ) {
    super();
    this.weight = this.registerParameter(
      "weight",
      normalTensor([num, dim], 0, 1, opts.generator),
    );
  }
  /** The rows of the table at the integer (i32/i64) indices `idx`: shape idx.shape + [dim]. */
  forward(idx: Tensor): Tensor {
    return embedding(idx, this.weight);
  }
}

/** Layers applied in order; children are named "0", "1", … as in torch.nn.Sequential. */
export class Sequential extends Layer {
  /** The layers in order (child i is layers[i]). */
  readonly layers: Layer[];
  /** The given layers in order, registered as children "0", "1", …. */
  constructor(...layers: Layer[]) {
    super();
    this.layers = layers;
    layers.forEach((l, i) => this.registerModule(String(i), l));
  }
  /**
   * Each layer in turn; a batch norm followed by ReLU and MaxPool2d(2) on an
   * (N, C, H, W) input runs as one op with the same bits
   * (batchNormReluMaxPool2d: no intermediate tensors, fewer passes over them).
   */
  forward(x: Tensor): Tensor {
    let y = x;
    const L = this.layers;
    for (let i = 0; i < L.length; i++) {
      const l = L[i]!;
      if (i + 2 < L.length && fusesReluMaxPool(l, L[i + 1]!, L[i + 2]!, y)) {
        y = (l as unknown as FusesReluMaxPool).forwardReluMaxPool2d(y);
        i += 2;
        continue;
      }
      y = l.forward(y);
    }
    return y;
  }
  /** Replacing child "i" replaces layer i (what convertSyncBatchNorm does). */
  override addModule<M extends Module>(name: string, m: M): M {
    const i = Number(name);
    const isIndex = String(i) === name && i < this.layers.length;
    if (isIndex && !(m instanceof Layer)) {
      throw new TypeError(`Sequential: child ${name} must be a Layer (one tensor in, one out)`);
    }
    super.addModule(name, m);
    if (isIndex) this.layers[i] = m as unknown as Layer;
    return m;
  }
}

/** Returns its input (torch.nn.Identity): a placeholder that keeps a model's structure. */
export class Identity extends Layer {
  /** x unchanged. */
  forward(x: Tensor): Tensor {
    return x;
  }
}

/** Merges dims startDim..endDim into one (torch.nn.Flatten; by default all but the batch dim). */
export class Flatten extends Layer {
  /** Flattens dims `startDim`..`endDim` (negative: from the end), as torch.nn.Flatten. */
  constructor(readonly startDim = 1, readonly endDim = -1) {
    super();
  }
  /** x with dims startDim..endDim merged into one. */
  forward(x: Tensor): Tensor {
    return flatten(x, this.startDim, this.endDim);
  }
}
