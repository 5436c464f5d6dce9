/**
 * Per-element bounds of f32 layer norm's rows (dt_layernorm_fwd's y, mean and
 * rstd; dt_layernorm_bwd's dx), derived as op_bounds.ts derives the others,
 * from kernels/common/layernorm.h's rounding steps and the row's length C.
 * The CPU library sums in double; a GPU's warp rows may sum in f32, so every
 * C-term sum is counted as γ_C in f32 (the looser of the two). The parameter
 * gradients' per-column bounds are op_cases_layernorm.ts's paramBounds.
 */
import { gamma } from "./tolerance.ts";

/** The smallest positive normal f32: absolute slack where a result is near zero. */
const TINY = 2 * 2 ** -126;

/** A row's Σ|x|/C and Σx²/C. */
function rowMagnitudes(x: Float32Array, r: number, C: number): { abs: number; sq: number } {
  let abs = 0, sq = 0;
  for (let j = 0; j < C; j++) {
    const v = x[r * C + j]!;
    abs += Math.abs(v);
    sq += v * v;
  }
  return { abs: abs / C, sq: sq / C };
}

/**
 * Forward, per row of C, per side:
 * - mean: a C-term sum and the division and rounding, γ_{C+2} of Σ|x|/C;
 * - var: C squares of deviations summed (or Σx²/C − mean², which the bound also covers: γ_{C+3}
 *   of Σx²/C, not of var), then var + eps, sqrt and the reciprocal: rstd within
 *   ρ = ½γ_{C+3}·(Σx²/C)·rstd² + γ_3 of itself (var + eps = 1/rstd²);
 * - y = fma((x − mean)·rstd, w, b): the mean's error and x − mean's rounding times rstd, rstd's
 *   ρ and the product's and the fused sum's roundings (γ_2 of |xhat·w| + |b|), times |w|.
 * Twice each (two sides). Without the affine parameters w = 1, b = 0.
 */
export function layerNormFwdBounds(
  x: Float32Array,
  w: Float32Array | null,
  b: Float32Array | null,
  mean: ArrayLike<number>,
  rstd: ArrayLike<number>,
  [rows, C]: [number, number],
): { y: Float64Array; mean: Float64Array; rstd: Float64Array } {
  const y = new Float64Array(rows * C), meanB = new Float64Array(rows);
  const rstdB = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    const { abs, sq } = rowMagnitudes(x, r, C), s = rstd[r]!, m = mean[r]!;
    const dMean = gamma(C + 2, "f32") * abs;
    const rho = 0.5 * gamma(C + 3, "f32") * sq * s * s + gamma(3, "f32");
    meanB[r] = 2 * dMean + TINY;
    rstdB[r] = 2 * rho * s + TINY;
    for (let j = 0; j < C; j++) {
      const dev = Math.abs(x[r * C + j]! - m), wj = w ? Math.abs(w[j]!) : 1;
      const bj = b ? Math.abs(b[j]!) : 0;
      const side = wj * s * (dMean + dev * (rho + gamma(2, "f32"))) +
        gamma(2, "f32") * (dev * s * wj + bj);
      y[r * C + j] = 2 * side + TINY;
    }
  }
  return { y, mean: meanB, rstd: rstdB };
}

/**
 * Backward's dx = rstd·(g − mean(g) − xhat·mean(g·xhat)), g = dy·w, xhat = (x − mean)·rstd from
 * the same saved mean and rstd: two C-term sums (of g and of g·xhat, their products and xhat's 2
 * roundings) and the row's own 5 roundings, γ_{C+8} in f32 of
 * rstd·(|g_j| + Σ|g|/C + |xhat_j|·Σ|g·xhat|/C); twice. `off` leading elements of dx (the offset
 * cases' heads) are untouched: bound 0.
 */
export function layerNormDxBounds(
  dy: Float32Array,
  x: Float32Array,
  w: Float32Array | null,
  mean: ArrayLike<number>,
  rstd: ArrayLike<number>,
  [rows, C]: [number, number],
  off = 0,
): Float64Array {
  const bound = new Float64Array(off + rows * C);
  const g = gamma(C + 8, "f32");
  for (let r = 0; r < rows; r++) {
    const s = rstd[r]!, m = mean[r]!;
    let sg = 0, sgx = 0;
    for (let j = 0; j < C; j++) {
      const gj = Math.abs(dy[r * C + j]! * (w ? w[j]! : 1));
      sg += gj;
      sgx += gj * Math.abs((x[r * C + j]! - m) * s);
    }
    for (let j = 0; j < C; j++) {
      const gj = Math.abs(dy[r * C + j]! * (w ? w[j]! : 1));
      const xhat = Math.abs((x[r * C + j]! - m) * s);
      bound[off + r * C + j] = 2 * s * g * (gj + sg / C + xhat * sgx / C) + TINY;
    }
  }
  return bound;
}
