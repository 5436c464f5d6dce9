/**
 * The precision matmul-class ops (matmul, linear, attention products) compute
 * in right now: null for f32, or the low precision their inputs and outputs
 * are rounded to. The ops read it; amp/autocast.ts sets it for the whole of
 * an `autocast(...)` call — an async one too, across its awaits, without
 * touching code that runs meanwhile outside it (an async context, as
 * noGrad's) — so the tensor layer needs nothing from amp/.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { DType } from "./dtype.ts";

const context = new AsyncLocalStorage<DType | null>();
/** withMatmulPrecision calls not finished yet: with none, no context is consulted. */
let open = 0;

/** The dtype matmul-class ops round to now, or null (f32). */
export function matmulLowPrecision(): DType | null {
  return open === 0 ? null : context.getStore() ?? null;
}

/**
 * Runs fn with matmul-class ops rounding to `dtype` (null: f32) until fn
 * returns, or until the promise it returns settles.
 */
export function withMatmulPrecision<T>(dtype: DType | null, fn: () => T): T {
  open++;
  let result: T;
  try {
    result = context.run(dtype, fn);
  } catch (e) {
    open--;
    throw e;
  }
  const r = result as { then?: unknown };
  if (typeof r === "object" && r !== null && typeof r.then === "function") {
    const done = () => void open--;
    (result as PromiseLike<unknown>).then(done, done);
  } else open--;
  return result;
}
