/**
 * Random tensor constructors drawing from PyTorch's generator, as
 * torch.rand, torch.randn and torch.randint (and their *_like forms): after
 * `manualSeed(s)` (torch.manual_seed(s)) the same calls in the same order
 * give torch's values, from the default generator or from a TorchGenerator
 * passed as `generator`. The values are drawn on the host and copied to the
 * active device.
 */
import { type TorchGenerator } from "../random/torch_generator.ts";
import { fromArray, numelOf, type Tensor } from "../tensor/tensor.ts";
import type { DType } from "../tensor/dtype.ts";
import { getDefaultGenerator } from "./init.ts";

/** Options of the random constructors. */
export interface RandomOptions {
  /** the generator to draw from (default: the one manualSeed seeds) */
  generator?: TorchGenerator;
}

function checkShape(who: string, shape: readonly number[]): number {
  if (!Array.isArray(shape) || shape.some((s) => !Number.isSafeInteger(s) || s < 0)) {
    throw new RangeError(
      `${who}: shape must be a list of non-negative integers, got ${JSON.stringify(shape)}`,
    );
  }
  return numelOf(shape);
}

/**
 * Uniform values in [0, 1) (torch.rand): float32, each (u & 0xFFFFFF) · 2^-24.
 *
 * @example
 * ```ts
 * manualSeed(0);
 * const x = rand([2, 3]); // == torch.manual_seed(0); torch.rand(2, 3)
 * ```
 */
export function rand(shape: readonly number[], opts: RandomOptions = {}): Tensor {
  const n = checkShape("rand", shape);
  return fromArray((opts.generator ?? getDefaultGenerator()).randFloat32(n), shape);
}

/** Standard normal values (torch.randn), with torch's Box-Muller paths. */
export function randn(shape: readonly number[], opts: RandomOptions = {}): Tensor {
  const n = checkShape("randn", shape);
  const data = new Float32Array(n);
  (opts.generator ?? getDefaultGenerator()).normal_(data, 0, 1);
  return fromArray(data, shape);
}

/** Options of randint. */
export interface RandintOptions extends RandomOptions {
  /** "i64" (torch's default), "i32" or "f32" */
  dtype?: DType;
}

/**
 * Integers uniform in [low, high) (torch.randint(low, high, size)); i64 by
 * default, as torch.
 */
export function randint(
  low: number,
  high: number,
  shape: readonly number[],
  opts: RandintOptions = {},
): Tensor {
  const n = checkShape("randint", shape);
  if (!Number.isSafeInteger(low) || !Number.isSafeInteger(high) || high <= low) {
    throw new RangeError(`randint: expected integers low < high, got low=${low}, high=${high}`);
  }
  const g = opts.generator ?? getDefaultGenerator();
  const dtype = opts.dtype ?? "i64";
  if (dtype === "i64") {
    const out = new BigInt64Array(n);
    for (let i = 0; i < n; i++) out[i] = BigInt(g.randint(low, high));
    return fromArray(out, shape);
  }
  if (dtype === "i32") {
    if (low < -(2 ** 31) || high > 2 ** 31) {
      throw new RangeError(`randint: [${low}, ${high}) does not fit in i32; use dtype "i64"`);
    }
    const out = new Int32Array(n);
    for (let i = 0; i < n; i++) out[i] = g.randint(low, high);
    return fromArray(out, shape);
  }
  if (dtype === "f32") {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = g.randint(low, high);
    return fromArray(out, shape);
  }
  throw new TypeError(`randint: dtype must be "i64", "i32" or "f32", got ${JSON.stringify(dtype)}`);
}

/** rand() of `t`'s shape (torch.rand_like). */
export function randLike(t: Tensor, opts: RandomOptions = {}): Tensor {
  return rand(t.shape, opts);
}

/** randn() of `t`'s shape (torch.randn_like). */
export function randnLike(t: Tensor, opts: RandomOptions = {}): Tensor {
  return randn(t.shape, opts);
}

/** randint() of `t`'s shape (torch.randint_like; the dtype defaults to i64). */
export function randintLike(
  t: Tensor,
  low: number,
  high: number,
  opts: RandintOptions = {},
): Tensor {
  return randint(low, high, t.shape, opts);
}
