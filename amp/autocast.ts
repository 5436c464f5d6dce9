/**
 * autocast: inside `autocast("bf16" | "f16", fn)`, matmul-class ops (matmul,
 * linear, attention products) round their inputs to the low precision,
 * multiply with f32 accumulation and round their outputs; every other op
 * (reductions, softmax, losses, norms, elementwise) computes in f32, and
 * master weights stay f32. As torch.autocast.
 */
import type { DType } from "../tensor/dtype.ts";
import { matmulLowPrecision, withMatmulPrecision } from "../tensor/matmul_precision.ts";
import { plainArithmetic } from "../tensor/plain_arithmetic.ts";

/** The dtype matmul-class ops use now, or null outside autocast. */
export function autocastDtype(): DType | null {
  return matmulLowPrecision();
}

/**
 * Runs fn with autocast to `dtype` ("bf16" or "f16"); null or "f32" disables
 * it. An async fn keeps it for all of its run, across its awaits.
 * As `with torch.autocast(device_type, dtype=…):` around the forward pass.
 */
export function autocast<T>(
  dtype: "bf16" | "f16" | "f32" | null,
  fn: () => T,
): T {
  // Plain arithmetic (tensor/plain_arithmetic.ts) computes in f32.
  return withMatmulPrecision(dtype === "f32" || plainArithmetic() ? null : dtype, fn);
}
