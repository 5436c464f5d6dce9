/**
 * autocast: inside `autocast("bf16" | "f16", fn)`, matmul-class ops (matmul,
 * linear, attention products) round their inputs to the low precision,
 * multiply with f32 accumulation and round their outputs; every other op
 * (reductions, softmax, losses, norms, elementwise) computes in f32, and
 * master weights stay f32. As torch.autocast.
 */
import type { DType } from "../tensor/dtype.ts";
import { matmulLowPrecision, withMatmulPrecision } from "../tensor/matmul_precision.ts";
import {
  noteNumericsOverride,
  type NumericsPolicy,
  numericsPolicy,
} from "../tensor/numerics_policy.ts";

/** The dtype matmul-class ops use now, or null outside autocast. */
export function autocastDtype(): DType | null {
  return matmulLowPrecision();
}

/**
 * Runs fn with autocast to `dtype` ("bf16" or "f16"); null or "f32" disables
 * it. An async fn keeps it for all of its run, across its awaits. A numerics
 * policy whose autocast is "f32" (`numerics`, else the process's policy:
 * tensor/numerics_policy.ts) runs fn in f32, and the log says so once.
 */
export function autocast<T>(
  dtype: "bf16" | "f16" | "f32" | null,
  fn: () => T,
  numerics: NumericsPolicy = numericsPolicy(),
): T {
  const low = dtype === "f32" ? null : dtype;
  if (low !== null && numerics.autocast === "f32") {
    noteNumericsOverride(
      "autocast",
      `autocast is f32: autocast("${low}") regions compute in f32`,
      numerics,
    );
    return withMatmulPrecision(null, fn);
  }
  return withMatmulPrecision(low, fn);
}
