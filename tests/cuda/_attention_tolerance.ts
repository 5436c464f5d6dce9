/**
 * Tolerances of the tensor-core attention kernels against the CPU library,
 * derived from the dtype (normwise relative error, as the op sweep measures
 * it: ‖gpu − cpu‖ / ‖cpu‖ over a whole output).
 *
 * Both sides start from the same bf16/f16 inputs and accumulate in f32 (its
 * 2⁻²⁴ is negligible next to the terms below). With u the dtype's unit
 * roundoff (2⁻⁸ for bf16's 8 significant bits, 2⁻¹¹ for f16's 11):
 * - each side rounds its output once: up to u each, so 2u between them;
 * - the GPU rounds the probabilities P (forward, dV) and dS (dQ, dK) to the
 *   dtype before their tensor-core products, as FlashAttention-2 does: a
 *   relative u per term of each output's weighted sum, at most u normwise
 *   for the convex sums of the forward, about that for backward on random
 *   data (measured: ≤ 1.8u over the emulated cases);
 * - the exponential (2^x on the special-function unit, 2 ulp of f32) and the
 *   order of f32 sums are 2⁻²² level.
 * Sum: 3u; one more u of headroom for the cancellation in dS = P (dP − δ),
 * whose rows sum to zero: 4u (bf16 1.56e-2, f16 1.95e-3).
 * A kernel that drops a tile, misplaces a fragment or skips a rescale is
 * off by O(1) (tests/cuda/attention_tc_test.ts plants one).
 */

/** Unit roundoff of a 16-bit float dtype. */
export const UNIT_ROUNDOFF = { bf16: 2 ** -8, f16: 2 ** -11 } as const;

/** Normwise relative error allowed for tensor-core attention outputs of a dtype. */
export function attentionTolerance(dtype: "bf16" | "f16"): number {
  return 4 * UNIT_ROUNDOFF[dtype];
}
