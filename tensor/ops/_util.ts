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
