/**
 * Helpers shared by the op files: shape checks with messages that name the
 * op and both shapes, and the f32 view of low-precision inputs.
 */
import type { Tensor } from "../tensor.ts";
import { castTensor } from "../tensor.ts";
import { record } from "../autograd.ts";
import { needsGrad } from "../autograd.ts";

/** Throws unless `t` has dtype f32 (after autocast, ops compute in f32). */
export function requireFloat(op: string, t: Tensor): void {
  if (t.dtype !== "f32" && t.dtype !== "bf16" && t.dtype !== "f16") {
    throw new TypeError(
      `${op}: expected a floating-point tensor, got ${t.dtype} of shape [${t.shape}]`,
    );
  }
}

/** Throws unless the two shapes are equal. */
export function requireSameShape(op: string, a: Tensor, b: Tensor): void {
  if (
    a.numel !== b.numel || a.shape.length !== b.shape.length ||
    a.shape.some((d, i) => d !== b.shape[i])
  ) {
    throw new RangeError(`${op}: shapes [${a.shape}] and [${b.shape}] differ`);
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

/** BigInt of a number, for i64 FFI arguments. */
export const big = BigInt;
