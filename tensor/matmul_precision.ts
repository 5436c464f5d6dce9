/**
 * The precision matmul-class ops (matmul, linear, attention products) compute
 * in right now: null for f32, or the low precision their inputs and outputs
 * are rounded to. The ops read it; amp/autocast.ts sets it for the length of
 * an `autocast(...)` call, so the tensor layer needs nothing from amp/.
 */
import type { DType } from "./dtype.ts";

let lowPrecision: DType | null = null;

/** The dtype matmul-class ops round to now, or null (f32). */
export function matmulLowPrecision(): DType | null {
  return lowPrecision;
}

/** Sets it; returns the previous value, for the caller to restore. */
export function setMatmulLowPrecision(dtype: DType | null): DType | null {
  const prev = lowPrecision;
  lowPrecision = dtype;
  return prev;
}
