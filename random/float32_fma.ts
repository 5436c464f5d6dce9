/**
 * Fused multiply-add on float32 values, rounded once to float32 as the x86
 * FMA instructions (`vfmadd`, C `fmaf`) do. torch's CPU kernels are built
 * with FMA contraction, so reproducing their bits needs this instead of
 * `Math.fround(a * b + c)`, which can round twice.
 */

/**
 * Returns `fmaf(a, b, c)`: `a * b + c` computed exactly and rounded once to
 * float32 (round half to even). `a`, `b` and `c` must already be float32
 * values (`Math.fround` of something); results are exact for products and
 * sums whose magnitude stays within float32's normal range.
 *
 * @example
 * ```ts
 * fmaf32(Math.fround(0.1), Math.fround(3), Math.fround(-0.3)); // one rounding, not two
 * ```
 */
export function fmaf32(a: number, b: number, c: number): number {
  // Two 24-bit significands multiply into at most 48 bits: exact in float64.
  const product = a * b;
  const sum = product + c;
  // TwoSum: `error` is exactly (product + c) - sum, also a float64.
  const bVirtual = sum - product;
  const error = (product - (sum - bVirtual)) + (c - bVirtual);
  const rounded = Math.fround(sum);
  if (error === 0 || rounded === sum) return rounded;
  // The exact result is sum + error. Rounding float64 `sum` to float32 only
  // differs from rounding the exact value when `sum` is the midpoint of two
  // adjacent float32 values: then the sign of `error` decides, not the tie rule.
  const other = 2 * sum - rounded;
  if (Math.fround(other) !== other) return rounded;
  const upper = Math.max(rounded, other);
  const lower = Math.min(rounded, other);
  return error > 0 ? upper : lower;
}
