/**
 * Helpers shared by the op files: the dtype check with a message that names
 * the op, and the f32 view of low-precision inputs.
 */
import { castTensor, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";

/** Throws unless `t` holds floating-point values (f32, bf16 or f16). */
export function requireFloat(op: string, t: Tensor): void {
  if (t.dtype !== "f32" && t.dtype !== "bf16" && t.dtype !== "f16") {
    throw new TypeError(
      `${op}: expected a floating-point tensor, got ${t.dtype} of shape [${t.shape}]`,
    );
  }
}

/**
 * The f32 version of a float tensor: itself when already f32, otherwise a
 * differentiable cast (ops compute in f32; autocast rounds matmul outputs).
 */
export function asF32(t: Tensor): Tensor {
  if (t.dtype === "f32") return t;
  requireFloat("cast", t);
  const out = castTensor(t, "f32");
  if (needsGrad(t)) record(out, "cast", [t], (g) => [g]);
  return out;
}

/** `dim` of an `ndim`-dimensional tensor as an index in [0, ndim) (negative counts from the end). */
export function normDim(op: string, dim: number, ndim: number, shape?: readonly number[]): number {
  const d = dim < 0 ? dim + ndim : dim;
  if (!Number.isInteger(dim) || d < 0 || d >= ndim) {
    throw new RangeError(
      `${op}: dim ${dim} is out of range for a tensor of ${ndim} dims${
        shape ? ` (shape [${shape}])` : ""
      }: expected an integer in [${-ndim}, ${ndim - 1}]`,
    );
  }
  return d;
}

/** The (outer, D, inner) view of a contiguous shape around dimension d. */
export function dimView(
  shape: readonly number[],
  d: number,
): { outer: number; D: number; inner: number } {
  let outer = 1, inner = 1;
  for (let i = 0; i < d; i++) outer *= shape[i]!;
  for (let i = d + 1; i < shape.length; i++) inner *= shape[i]!;
  return { outer, D: shape[d]!, inner };
}

/** Row-major element strides of a contiguous shape. */
export function contiguousStrides(shape: readonly number[]): number[] {
  const s = new Array<number>(shape.length);
  let acc = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= shape[i]!;
  }
  return s;
}

/** A positive integer or a pair of them, as [h, w] (PyTorch's _pair), checked. */
export function pair(
  op: string,
  name: string,
  v: number | readonly number[],
  min = 1,
): [number, number] {
  const p = typeof v === "number" ? [v, v] : [...v];
  if (p.length !== 2 || !p.every((x) => Number.isSafeInteger(x) && x >= min)) {
    throw new RangeError(
      `${op}: ${name} must be an integer >= ${min} or a pair of them, got ${JSON.stringify(v)}`,
    );
  }
  return p as [number, number];
}
