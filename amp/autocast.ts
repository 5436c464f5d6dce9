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
import { backend } from "../tensor/backend.ts";

let warnedF16OnCpu = false;

/**
 * Where autocast's f16 warning goes (console.warn by default); returns the
 * previous one. For tools and tests that collect warnings.
 */
export function setAutocastWarningSink(sink: (message: string) => void): (message: string) => void {
  const prev = warnSink;
  warnSink = sink;
  return prev;
}
let warnSink: (message: string) => void = (m) => console.warn(m);

/** Forgets that the f16-on-CPU warning was given (tests). */
export function resetAutocastWarnings(): void {
  warnedF16OnCpu = false;
}

/**
 * f16 on a CPU: the CPU kernels convert f16 values one by one in software
 * (bf16 widens with a shift, or multiplies natively with AVX-512 BF16), so
 * f16 autocast there is several times slower than f32. Said once per process.
 */
function warnF16OnCpu(): void {
  if (warnedF16OnCpu || backend().device !== "cpu") return;
  warnedF16OnCpu = true;
  warnSink(
    'dtrain: autocast("f16") on a CPU runs several times slower than f32 (3x to 7x measured: f16 values ' +
      'are converted one by one in software); use autocast("bf16") there, which keeps f32\'s range and ' +
      "needs no GradScaler",
  );
}

/** The dtype matmul-class ops use now, or null outside autocast. */
export function autocastDtype(): DType | null {
  return matmulLowPrecision();
}

/**
 * Runs fn with autocast to `dtype` ("bf16" or "f16"); null or "f32" disables
 * it. An async fn keeps it for all of its run, across its awaits. A numerics
 * policy whose autocast is "f32" (`numerics`, else the process's policy:
 * tensor/numerics_policy.ts) runs fn in f32, and the log says so once.
 * As `with torch.autocast(device_type, dtype=…):` around the forward pass.
 */
export function autocast<T>(
  dtype: "bf16" | "f16" | "f32" | null,
  fn: () => T,
  numerics: NumericsPolicy = numericsPolicy(),
): T {
  if (dtype === "f16") warnF16OnCpu();
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
