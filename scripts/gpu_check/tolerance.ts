/**
 * Tolerances derived from arithmetic, not picked: how far two correct
 * implementations of an op may differ, from the unit roundoff of the dtypes
 * involved and the length of each reduction. A GPU may contract a*b + c into
 * one FMA, add a dot product's terms in another order (split-K, tree
 * reductions, tensor-core fragments) and round intermediate results
 * differently; each of these keeps the computed value within Higham's bound
 * of the exact one, |fl(Σ t_i) - Σ t_i| <= γ_k Σ|t_i| with γ_k = k·u/(1 - k·u)
 * (Accuracy and Stability of Numerical Algorithms, §3.1), so two of them
 * differ by at most twice that, plus a rounding of each into the output
 * dtype. A result off by more than the bound is wrong, not rounded
 * differently; a bound is per element, so one bad element among a million
 * good ones fails.
 *
 * Used by the op sweep (scripts/gpu_check/op_cases*.ts) and by any check
 * that compares a device's arithmetic with the CPU's.
 *
 * @example
 * ```ts
 * const bound = gemmBounds({ M, N, K: 768, alpha: 1, beta: 0 }, absProducts, null, "f32", "bf16");
 * const r = withinBounds(gpuOut, cpuOut, bound);
 * if (!r.ok) console.log(`element ${r.at}: off by ${r.worst}x its bound`);
 * ```
 */

/** The unit roundoff u (half the machine epsilon) of each float format, round to nearest. */
export const UNIT_ROUNDOFF = {
  f64: 2 ** -53,
  f32: 2 ** -24,
  /** tf32: f32's range with 10 bits of mantissa (cuBLAS with TF32 allowed) */
  tf32: 2 ** -11,
  f16: 2 ** -11,
  bf16: 2 ** -8,
} as const;

/** A float format by name. */
export type FloatFormat = keyof typeof UNIT_ROUNDOFF;

/** The smallest positive normal of each format: absolute slack for results near zero (subnormals). */
const MIN_NORMAL: Record<FloatFormat, number> = {
  f64: 2 ** -1022,
  f32: 2 ** -126,
  tf32: 2 ** -126,
  f16: 2 ** -14,
  bf16: 2 ** -126,
};

/**
 * γ_k = k·u / (1 - k·u): the relative error bound of k roundings in format
 * `f` (Infinity once k·u reaches 1, where no bound holds).
 */
export function gamma(k: number, f: FloatFormat): number {
  if (!(k >= 0)) throw new RangeError(`gamma: k must be a count >= 0, got ${k}`);
  const ku = k * UNIT_ROUNDOFF[f];
  return ku < 1 ? ku / (1 - ku) : Infinity;
}

/**
 * How far two correct computations of a sum of `k` terms may be apart,
 * given Σ|terms| (`absSum`): each is within γ_k·absSum of the exact sum when
 * accumulated in `acc` (any order, FMA or not), and each is then rounded
 * once into `out` (at most u_out·absSum each, since |sum| <= absSum).
 *
 * @example
 * ```ts
 * sumBound(1024, 3.5, "f32");        // f32 accumulation, f32 result
 * sumBound(1024, 3.5, "f32", "bf16"); // f32 accumulation, bf16 result
 * ```
 */
export function sumBound(
  k: number,
  absSum: number,
  acc: FloatFormat,
  out: FloatFormat = acc,
): number {
  const outRounding = out === acc ? 0 : 2 * UNIT_ROUNDOFF[out];
  // a k-term sum has k - 1 additions; a dot product's k products add one rounding each (or none,
  // fused): γ_k covers both. Both sides may also flush to the output's smallest normal.
  return (2 * gamma(k, acc) + outRounding) * absSum + 2 * MIN_NORMAL[out];
}

/**
 * How far two correct evaluations of an element-wise formula may be apart:
 * `roundings` operations in `f` on values of magnitude `magnitude` (the
 * largest |intermediate|, e.g. |a·b| + |c| for a·b + c, which an FMA rounds
 * once and separate operations twice).
 */
export function elementwiseBound(roundings: number, magnitude: number, f: FloatFormat): number {
  return 2 * gamma(roundings, f) * magnitude + 2 * MIN_NORMAL[f];
}

/**
 * Per-element bounds of an update X ← c·X + step with |c| <= 1 (axpy, an
 * optimizer's moments and parameters), whose step takes `roundings`
 * roundings in `f`: each side is within γ_R of the exact value relative to
 * |X| + |step|, so two correct ones differ by at most 2γ_R·(|X| + |step|).
 * |step| is read from the reference's change, |after − before| (exact in a
 * double; its own rounding is far inside the slack).
 */
export function updateBounds(
  before: ArrayLike<number>,
  after: ArrayLike<number>,
  roundings: number,
  f: FloatFormat,
): Float64Array {
  const g = 2 * gamma(roundings, f);
  return Float64Array.from(
    { length: after.length },
    (_, i) => g * (Math.abs(before[i]!) + Math.abs(after[i]! - before[i]!)) + 2 * MIN_NORMAL[f],
  );
}

/**
 * Per-element bounds of results whose error is relative to themselves
 * (products and quotients of sums of terms of one sign: a softmax, a norm, a
 * scaling), `rel` apart at most: |want_i|·rel, plus the format's smallest
 * normal for results near zero.
 */
export function relativeBounds(want: ArrayLike<number>, rel: number, f: FloatFormat): Float64Array {
  return Float64Array.from(
    { length: want.length },
    (_, i) => Math.abs(want[i]!) * rel + 2 * MIN_NORMAL[f],
  );
}

/**
 * Per-element bounds of a GEMM C = alpha·op(A)·op(B) + beta·C0 (row-major
 * M x N, as dt_gemm): `absProducts[i·N + j]` is Σ_k |a_ik·b_kj| of the
 * operands' values as stored (itself a product of |A| and |B|, which a CPU
 * GEMM computes fast; its own rounding is far below the bound's slack),
 * `c0[i·N + j]` C's value before the call (read only when beta != 0); the
 * reduction length K accumulates in `acc`, beta·C0 is one more term, the
 * result is rounded into `out`.
 */
export function gemmBounds(
  shape: { M: number; N: number; K: number; alpha: number; beta: number },
  absProducts: ArrayLike<number>,
  c0: ArrayLike<number> | null,
  acc: FloatFormat,
  out: FloatFormat,
): Float64Array {
  const { M, N, K, alpha, beta } = shape;
  const bound = new Float64Array(M * N);
  // alpha and beta scale in the accumulator: a rounding or two beside the K of the sum
  const terms = K + (beta !== 0 ? 3 : 1);
  for (let e = 0; e < M * N; e++) {
    const absSum = Math.abs(alpha) * absProducts[e]! * (1 + 1e-3) +
      (beta !== 0 ? Math.abs(beta * c0![e]!) : 0);
    bound[e] = sumBound(terms, absSum, acc, out);
  }
  return bound;
}

/** The outcome of a comparison against per-element bounds. */
export interface BoundCheck {
  ok: boolean;
  /** the largest |got - want| / bound (0: equal everywhere; Infinity: a NaN on one side only) */
  worst: number;
  /** the element of `worst`, -1 when every element is equal */
  at: number;
}

/**
 * Whether |got[i] - want[i]| <= bound[i] for every i. NaN on both sides
 * agrees, NaN on one side never does, infinities must be equal.
 */
export function withinBounds(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  bound: ArrayLike<number>,
): BoundCheck {
  if (got.length !== want.length || bound.length !== want.length) {
    throw new RangeError(
      `withinBounds: ${got.length} results, ${want.length} references, ${bound.length} bounds`,
    );
  }
  let worst = 0, at = -1;
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!, w = want[i]!;
    if (g === w || (Number.isNaN(g) && Number.isNaN(w))) continue;
    const d = Math.abs(g - w);
    const ratio = Number.isNaN(d) || !Number.isFinite(d) ? Infinity : d / bound[i]!;
    if (!(ratio <= worst)) [worst, at] = [Number.isNaN(ratio) ? Infinity : ratio, i];
  }
  return { ok: worst <= 1, worst, at };
}
