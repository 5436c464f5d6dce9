/**
 * Training samples from a TokenStream, both read window by window: random
 * windows as nanoGPT's `get_batch` draws them, from a generator keyed by
 * (seed, rank, step) so a resumed run draws the same windows; and consecutive
 * windows as a Dataset, which a DistributedSampler or ResumableSampler shards
 * across ranks (set_epoch, resume at any world size).
 */
import { TorchGenerator } from "../random/torch_generator.ts";
import { fromArray, type Tensor } from "../tensor/tensor.ts";
import type { Dataset } from "./dataset.ts";
import type { TokenStream } from "./token_file.ts";

const MASK64 = (1n << 64n) - 1n;

/** SplitMix64's finaliser: a 64-bit mix where every input bit moves about half the output bits. */
function mix64(z: bigint): bigint {
  z = (z + 0x9e3779b97f4a7c15n) & MASK64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

/**
 * The seed of the generator that draws step `step`'s windows on `rank`:
 * mix64(mix64(mix64(seed) ^ rank) ^ step). scripts/peers/nanogpt.py computes
 * the same number, so the PyTorch twin draws the same windows.
 */
export function windowSeed(seed: number, rank: number, step: number): bigint {
  for (const [name, v] of [["seed", seed], ["rank", rank], ["step", step]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new RangeError(`windowSeed: ${name} must be a non-negative integer, got ${v}`);
    }
  }
  return mix64(mix64(mix64(BigInt(seed)) ^ BigInt(rank)) ^ BigInt(step));
}

/** x and y of windows starting at `offsets`: x = tokens[i : i+T], y = tokens[i+1 : i+T+1]. */
export function windowsAt(
  tokens: TokenStream,
  offsets: ArrayLike<number>,
  block: number,
): Tensor[] {
  const B = offsets.length;
  const T = block;
  const buf = new Int32Array(T + 1);
  const x = new Int32Array(B * T);
  const y = new Int32Array(B * T);
  for (let b = 0; b < B; b++) {
    tokens.read(offsets[b]!, T + 1, buf);
    x.set(buf.subarray(0, T), b * T);
    y.set(buf.subarray(1), b * T);
  }
  return [fromArray(x, [B, T], "i32"), fromArray(y, [B, T], "i32")];
}

/** Options of RandomWindows. */
export interface RandomWindowsOptions {
  /** tokens per input window (T) */
  block: number;
  /** windows per batch (B) */
  batch: number;
  /** Seed of the draws (nanoGPT's seed); each rank and step get their own stream. */
  seed: number;
  /** this rank (each rank draws its own windows) */
  rank: number;
}

/**
 * nanoGPT's `get_batch`: B offsets drawn as `torch.randint(len(data) - T,
 * (B,))` from a generator seeded with windowSeed(seed, rank, step). A batch
 * depends only on the step, so resuming at step k draws what the
 * interrupted run would have drawn, with no sampler state to save.
 *
 * @example
 * ```ts
 * using train = TokenStream.openSplit("data/shakespeare", "train");
 * const windows = new RandomWindows(train, { block: 256, batch: 12, seed: 1337, rank });
 * const [x, y] = windows.batch(step);
 * ```
 */
export class RandomWindows {
  /**
   * Windows over `tokens`; throws when block or batch is not a positive integer or the stream is
   * shorter than one window.
   */
  constructor(readonly tokens: TokenStream, readonly opts: RandomWindowsOptions) {
    const { block, batch } = opts;
    if (!Number.isSafeInteger(block) || block < 1 || !Number.isSafeInteger(batch) || batch < 1) {
      throw new RangeError(
        `RandomWindows: block and batch must be positive integers, got ${block}, ${batch}`,
      );
    }
    if (tokens.length <= block) {
      throw new RangeError(
        `RandomWindows: ${tokens.length} tokens hold no window of block + 1 = ${block + 1}`,
      );
    }
    windowSeed(opts.seed, opts.rank, 0);
  }

  /** The window offsets of `step` (numbers: a stream may hold more than 2^31 tokens). */
  offsets(step: number): number[] {
    const gen = new TorchGenerator(windowSeed(this.opts.seed, this.opts.rank, step));
    const high = this.tokens.length - this.opts.block;
    return Array.from({ length: this.opts.batch }, () => gen.randint(0, high));
  }

  /** [x, y] of `step`, each i32 (batch, block). */
  batch(step: number): Tensor[] {
    return windowsAt(this.tokens, this.offsets(step), this.opts.block);
  }
}

/**
 * Consecutive windows as a Dataset: sample i is tokens[i*T : i*T + T + 1]
 * split into x and y (windows overlap by the one target token). Shard it with
 * a DistributedSampler (shuffle false for the file's order) or a
 * ResumableSampler to resume at another world size.
 */
export class TokenWindows implements Dataset {
  readonly length: number;

  /**
   * Windows of `block` + 1 tokens over `tokens`; throws when block is not a positive integer or no
   * window fits.
   */
  constructor(readonly tokens: TokenStream, readonly block: number) {
    if (!Number.isSafeInteger(block) || block < 1) {
      throw new RangeError(`TokenWindows: block must be a positive integer, got ${block}`);
    }
    const n = Math.floor((tokens.length - 1) / block);
    if (n < 1) {
      throw new RangeError(`TokenWindows: ${tokens.length} tokens hold no window of ${block + 1}`);
    }
    if (n > 0x7fffffff) {
      throw new RangeError(
        `TokenWindows: ${n} windows of ${block} exceed a sampler's 2^31 - 1 indices; use a larger block`,
      );
    }
    this.length = n;
  }

  /** The windows at `indices`, as [x i32 (B, T), y i32 (B, T)]. */
  getBatch(indices: Int32Array): Tensor[] {
    const offsets = Array.from(indices, (i, b) => {
      if (!Number.isInteger(i) || i < 0 || i >= this.length) {
        throw new RangeError(
          `TokenWindows: index ${i} (batch row ${b}) is outside [0, ${this.length})`,
        );
      }
      return i * this.block;
    });
    return windowsAt(this.tokens, offsets, this.block);
  }

  fetchesInBackground(): boolean {
    return false;
  }
}
