/**
 * Per-element bounds of the op sweep's reductions, rows and updates, derived
 * from their arithmetic (the rounding steps of each kernels/common body,
 * counted below, and the length of each reduction) with tolerance.ts's γ_k:
 * how far a GPU build that contracts a*b + c into FMAs, sums in another order
 * and rounds its intermediates differently may be from the CPU library while
 * both are correct. A wrong element, a wrong scale or a term too many falls
 * far outside (tests/cuda/op_bounds_test.ts plants them).
 *
 * Each function takes the case's inputs as they were before the call (the
 * harness gives the CPU's outputs where a bound needs them) and returns the
 * bounds of one output, element by element.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import {
  elementwiseBound,
  type FloatFormat,
  gamma,
  gemmBounds,
  sumBound,
  UNIT_ROUNDOFF,
} from "./tolerance.ts";

/** The smallest positive normal f32: absolute slack where a result is near zero. */
const TINY = 2 * 2 ** -126;

/** 2γ_R·magnitude_i: two correct evaluations of an R-rounding formula whose terms reach magnitude_i. */
function chainBounds(roundings: number, magnitude: (i: number) => number, n: number): Float64Array {
  const g = 2 * gamma(roundings, "f32");
  return Float64Array.from({ length: n }, (_, i) => g * magnitude(i) + TINY);
}

/** y + alpha·x (dt_axpy): a product and a sum, 2 roundings (1 fused), of terms |alpha·x| + |y|. */
export function axpyBounds(x: Float32Array, y: Float32Array, alpha: number): Float64Array {
  return chainBounds(2, (i) => Math.abs(alpha * x[i]!) + Math.abs(y[i]!), y.length);
}

/**
 * dt_reduce_bcast's out[j] = Σ a[i] over the i that broadcast from j (a viewed as [outer, bn,
 * inner], j indexing bn·inner... as dt_binary indexes b by (i / inner) % bn): a sum of n/bn terms in
 * double, in any order, then one rounding into f32.
 */
export function reduceBcastBounds(a: Float32Array, bn: number, inner: number): Float64Array {
  const absSum = new Float64Array(bn), terms = new Float64Array(bn);
  for (let i = 0; i < a.length; i++) {
    const j = Math.floor(i / inner) % bn;
    absSum[j]! += Math.abs(a[i]!);
    terms[j]!++;
  }
  return Float64Array.from(absSum, (s, j) => sumBound(Math.max(terms[j]!, 1), s, "f64", "f32"));
}

/** Σ x² of each tensor in double (dt_sumsq, dt_sumsq_many): squares of f32 are exact in double, n terms of one sign. */
export function sumsqBounds(tensors: Float32Array[]): Float64Array {
  return Float64Array.from(tensors, (x) => {
    let s = 0;
    for (const v of x) s += v * v;
    return sumBound(Math.max(x.length, 1), s, "f64");
  });
}

/**
 * dt_clip_grad_norm: per tensor Σ x² in double (as sumsqBounds), then the total norm in f32 (a
 * square root and a rounding per tensor, 2 per tensor, and the last square root), the clip
 * coefficient (one sum, one quotient) and each gradient's product: terms of one sign throughout,
 * so each result is within γ of itself.
 */
export function clipBounds(grads: Float32Array[]): { total: number; grad: number } {
  const maxLen = Math.max(1, ...grads.map((g) => g.length));
  const total = 2 * (gamma(2 * grads.length + 2, "f32") + gamma(maxLen, "f64"));
  return { total, grad: total + 2 * gamma(3, "f32") };
}

/** Elements of `want` within `rel` of themselves (one-signed terms: products, quotients, positive sums). */
export function relativeTo(want: ArrayLike<number>, rel: number): Float64Array {
  return Float64Array.from({ length: want.length }, (_, i) => Math.abs(want[i]!) * rel + TINY);
}

/**
 * softmax(scale·x) of rows of `cols` (dt_softmax_fwd), relative to each result: exp within 1 ulp
 * on each side (dt_expf, contracted or not: 2 roundings' worth), its argument z − max rounded or
 * fused into it (an error of u·|z|, i.e. ⌈max|z|⌉ roundings), the row's positive sum in double and
 * its rounding to f32, the reciprocal and the product: 5 + ⌈max|z|⌉ roundings in f32 and a
 * `cols`-term sum in double.
 */
export function softmaxFwdRelative(x: Float32Array, cols: number, scale: number): number {
  let zMax = 0;
  for (const v of x) zMax = Math.max(zMax, Math.abs(scale * v));
  return 2 * (gamma(5 + Math.ceil(zMax), "f32") + gamma(Math.max(cols, 1), "f64"));
}

/**
 * dt_softmax_bwd's dx = ((dy − dot)·y)·scale, dot = Σ_j dy_j·y_j in double rounded to f32: the
 * dot is within γ_cols (double) of Σ_j|dy_j·y_j| plus its f32 rounding, then a difference and two
 * products in f32, relative to |dy_i| + Σ_j|dy_j·y_j| (which may cancel: not relative to dx).
 * `off` elements before the rows (the offset cases) are left alone by both sides: bound 0.
 */
export function softmaxBwdBounds(
  dy: Float32Array,
  y: Float32Array,
  rows: number,
  cols: number,
  scale: number,
  off = 0,
): Float64Array {
  const bound = new Float64Array(dy.length);
  const g64 = gamma(Math.max(cols, 1), "f64"), g32 = gamma(4, "f32");
  for (let r = 0; r < rows; r++) {
    const base = off + r * cols;
    let s = 0;
    for (let j = 0; j < cols; j++) s += Math.abs(dy[base + j]! * y[base + j]!);
    for (let j = 0; j < cols; j++) {
      const i = base + j;
      bound[i] = 2 * Math.abs(scale * y[i]!) * (g64 * s + g32 * (Math.abs(dy[i]!) + s)) + TINY;
    }
  }
  return bound;
}

/** AdamW's hyperparameters as dt_adamw takes them. */
export interface AdamwHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  step: number;
}

/**
 * dt_adamw (adamw.h), per output, from the values before the step:
 * - m ← β1·m + (1 − β1)·g: 2 roundings, terms |m| + |g|;
 * - v ← β2·v + (1 − β2)·g²: 3 roundings, positive terms v + g²;
 * - p ← p·decay + s·m_new / (√v_new / √bc2 + eps), s = −lr/bc1: the decay's product, m_new's 2,
 *   the product by s, √v_new's (3 halved, and its own), the quotient by √bc2, the sum with eps,
 *   the quotient and the final sum: 11 roundings (12 counted), terms |p| + |s|·(|m| + |g|)/denom,
 *   denom from the reference's v_new (positive terms: no cancellation there).
 * The scalars (decay, √bc2, s) are computed in double on the host by both libraries alike.
 */
export function adamwBounds(
  before: { p: Float32Array; g: Float32Array; m: Float32Array; v: Float32Array },
  vAfter: ArrayLike<number>,
  h: AdamwHyper,
): { p: Float64Array; m: Float64Array; v: Float64Array } {
  const { p, g, m, v } = before;
  const bc1 = 1 - h.beta1 ** h.step, bc2Sqrt = Math.sqrt(1 - h.beta2 ** h.step);
  const s = Math.abs(h.lr / bc1);
  return {
    m: chainBounds(2, (i) => Math.abs(m[i]!) + Math.abs(g[i]!), p.length),
    v: chainBounds(3, (i) => Math.abs(v[i]!) + g[i]! * g[i]!, p.length),
    p: chainBounds(12, (i) => {
      const denom = Math.sqrt(Math.abs(vAfter[i]!)) / bc2Sqrt + h.eps;
      return Math.abs(p[i]!) + (s * (Math.abs(m[i]!) + Math.abs(g[i]!))) / denom;
    }, p.length),
  };
}

/** SGD's hyperparameters as dt_sgd takes them. */
export interface SgdHyper {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
}

/**
 * dt_sgd (sgd.h), per output, from the values before the step: d = g + wd·p (1 rounding, terms
 * |g| + wd|p|); buf ← (1 − dampening)·d + momentum·buf (2 more, terms |d's| + |buf|); Nesterov's
 * d + momentum·buf (1 more); p ← p − lr·d (1 more): 5 roundings, terms
 * |p| + lr·(2(|g| + wd|p|) + |buf| + |buf_new|).
 */
export function sgdBounds(
  before: { p: Float32Array; g: Float32Array; buf: Float32Array | null },
  bufAfter: ArrayLike<number> | null,
  h: SgdHyper,
): { p: Float64Array; buf: Float64Array | null } {
  const { p, g, buf } = before;
  const dTerms = (i: number) => Math.abs(g[i]!) + Math.abs(h.weightDecay * p[i]!);
  const bufTerms = (i: number) =>
    h.momentum === 0 || !buf ? 0 : Math.abs(buf[i]!) + Math.abs(bufAfter![i]!);
  return {
    p: chainBounds(5, (i) => Math.abs(p[i]!) + h.lr * (2 * dTerms(i) + bufTerms(i)), p.length),
    buf: buf && h.momentum !== 0
      ? chainBounds(3, (i) => dTerms(i) + Math.abs(buf[i]!), p.length)
      : null,
  };
}

/**
 * Σ_k |a_ik|·|b_kj| of a row-major product op(A)·op(B) (M x N, reduction K; `ta`/`tb` as dt_gemm
 * takes them, leading dimensions unpadded), by the CPU library's f32 GEMM of the absolute values:
 * what gemmBounds needs, fast at every size.
 */
export function absProducts(
  cpu: NativeLibrary<KernelSymbols>,
  absA: Float32Array,
  absB: Float32Array,
  shape: { M: number; N: number; K: number; ta: number; tb: number },
): Float32Array {
  const { M, N, K, ta, tb } = shape;
  const out = new Float32Array(Math.max(1, M * N));
  if (M * N === 0) return out;
  const P = (x: Float32Array) => Deno.UnsafePointer.of(x);
  cpu.check(
    cpu.symbols.dt_gemm(
      0,
      ta,
      tb,
      BigInt(M),
      BigInt(N),
      BigInt(K),
      1,
      P(absA),
      BigInt(ta ? M : K),
      P(absB),
      BigInt(tb ? K : N),
      0,
      P(out),
      BigInt(N),
      1n,
      0n,
      0n,
      0n,
      null,
    ),
    "dt_gemm (|A| |B|)",
  );
  return out;
}

/**
 * A linear layer's gradients in f32 from bf16/f16 operands (dt_gemm_ex with C in f32): the input
 * gradient g·W (M x K, N-term sums), the weight gradient dW ← dW + gᵀ·x (N x K, M-term sums and
 * the old dW as one more term) and the bias gradient db = Σ_rows g (M-term sums), each sum in f32
 * in any order: gemmBounds and sumBound of the operands' values as stored.
 */
export function linearGradBounds(
  cpu: NativeLibrary<KernelSymbols>,
  g: Float32Array,
  w: Float32Array,
  x: Float32Array,
  dw0: Float32Array,
  [M, N, K]: [number, number, number],
): { dx: Float64Array; dw: Float64Array; db: Float64Array } {
  const abs = (v: Float32Array) => Float32Array.from(v, Math.abs);
  const ag = abs(g), aw = abs(w), ax = abs(x);
  const dx = gemmBounds(
    { M, N: K, K: N, alpha: 1, beta: 0 },
    absProducts(cpu, ag, aw, { M, N: K, K: N, ta: 0, tb: 0 }),
    null,
    "f32",
    "f32",
  );
  const dw = gemmBounds(
    { M: N, N: K, K: M, alpha: 1, beta: 1 },
    absProducts(cpu, ag, ax, { M: N, N: K, K: M, ta: 1, tb: 0 }),
    dw0,
    "f32",
    "f32",
  );
  const db = Float64Array.from({ length: N }, (_, j) => {
    let s = 0;
    for (let i = 0; i < M; i++) s += ag[i * N + j]!;
    return sumBound(Math.max(M, 1), s, "f32");
  });
  return { dx: M * K ? dx : new Float64Array(0), dw, db };
}

/**
 * Per-element bounds of a product-sum op (a convolution, either gradient) from the same op run
 * on the operands' absolute values (Σ|terms| of each result: the op is linear in each operand)
 * and the most terms any result sums (`terms`), in f32 in any order: sumBound, with the absolute
 * run's own rounding covered by a relative 1e-3.
 */
export function termBounds(absResult: Float32Array, terms: number): Float64Array {
  return Float64Array.from(absResult, (a) => sumBound(Math.max(terms, 1), a * (1 + 1e-3), "f32"));
}

/**
 * Two correct roundings of nearby values into `out`, of magnitude ≤ `magnitude`: an ulp,
 * 2u·magnitude, or a subnormal step (both libraries keep 16-bit subnormals: __float2half_rn and
 * dt_common's conversions round to them, never flush).
 */
export function outRounding(magnitude: number, out: FloatFormat): number {
  if (out === "f32") return 0; // counted among the f32 roundings of each formula
  const u = UNIT_ROUNDOFF[out]; // an ulp of the larger rounded value, up to (1 + u)·magnitude
  return 2 * u * (1 + u) * magnitude + (out === "f16" ? 2 ** -24 : 2 ** -133);
}

/** tanh-GELU's constants (kernels/common/gelu.h). */
const GELU_BETA = 0.7978845608028654, GELU_KAPPA = 0.044715;

/**
 * t = tanh(β(x + κx³)) and how far one correct evaluation of it may be from exact: dt_tanhf's 2
 * ulps (dt_math.h; γ_3·|t| with the contraction's slack) and the inner argument's x·x, ·x, fused
 * sum and β· (γ_4·β(|x| + κ|x|³)) carried through tanh' = 1 − t².
 */
function geluTanh(x: number): { t: number; err: number } {
  const a = Math.abs(x), t = Math.tanh(GELU_BETA * (x + GELU_KAPPA * x ** 3));
  const inner = GELU_BETA * (a + GELU_KAPPA * a ** 3);
  return { t, err: gamma(3, "f32") * Math.abs(t) + gamma(4, "f32") * (1 - t * t) * inner };
}

/**
 * dt_gelu_f, y = 0.5x·(1 + t), on f32 inputs (decoded): t's error (geluTanh) times 0.5|x|, and
 * 1 + t and the product (γ_4 of |y|, with the contraction's slack; 0.5x is exact); twice (two
 * sides), then y's rounding into `out`. Where t is near −1 (x below about −3) y shrinks below
 * t's own rounding (0.5|x|·2^-24): a relative error of y there is no kernel error.
 */
export function geluFwdBounds(x: ArrayLike<number>, out: FloatFormat): Float64Array {
  return Float64Array.from({ length: x.length }, (_, i) => {
    const a = Math.abs(x[i]!), { t, err } = geluTanh(x[i]!), y = 0.5 * a * (1 + t);
    const side = 0.5 * a * err + gamma(4, "f32") * y;
    return 2 * side + TINY + outRounding(y + side, out);
  });
}

/**
 * dt_gelu_grad_f, dx = dy·(0.5x·(1 − t²)·β(1 + 3κx²) + 0.5(1 + t)): the terms' own roundings (x²,
 * 1 − t², the inner derivative's fused sum and β·, the products, the final fused sum and dy·: 12
 * with slack, of |dy|·(0.5|x|(1 − t²)·β(1 + 3κx²) + 0.5(1 + t))) and t's error (geluTanh) carried
 * by ∂dx/∂t = |dy|·(0.5 + |x|·|t|·β(1 + 3κx²)); twice, then dx's rounding into `out`.
 */
export function geluBwdBounds(
  x: ArrayLike<number>,
  dy: ArrayLike<number>,
  out: FloatFormat,
): Float64Array {
  return Float64Array.from({ length: x.length }, (_, i) => {
    const a = Math.abs(x[i]!), g = Math.abs(dy[i]!), { t, err } = geluTanh(x[i]!);
    const innerDer = GELU_BETA * (1 + 3 * GELU_KAPPA * a * a);
    const terms = g * (0.5 * a * (1 - t * t) * innerDer + 0.5 * (1 + t));
    const side = gamma(12, "f32") * terms + g * (0.5 + a * Math.abs(t) * innerDer) * err;
    return 2 * side + TINY + outRounding(terms + side, out);
  });
}

/** The largest slope of tanh-GELU, max |d/dx gelu(x)| ≈ 1.1289 (at x ≈ 1.5): how far an error in its argument moves it. */
const GELU_SLOPE = 1.13;
/**
 * tanh.approx.f32's relative error (PTX ISA: 2^-10.987), what cuBLASLt's GELU epilogue may
 * evaluate tanh with; dt_tanhf is within 2 ulps (dt_math.h), far inside it.
 */
const TANH_APPROX = 2 ** -10.987;

/**
 * dt_gemm_ex's forward with an epilogue, y = x·Wᵀ + b (M x N, K-term sums; x M x K, w N x K, as
 * stored, decoded to numbers) and, for GELU, pre = x·Wᵀ + b and y = gelu(pre):
 * - pre: a (K + 1)-term sum in `acc` (the bias one more term) rounded into `out` (gemmBounds);
 * - y of GELU: pre's error through GELU's slope (≤ 1.13), from the accumulator's value or from pre
 *   already rounded into `out` (either library may do either), GELU's own evaluation (x³, the fused
 *   inner sum, β·, tanh, 1 + t, 0.5x·: 12 roundings' worth in f32 of 0.5|x|·(2 + β(|x| + κ|x|³)),
 *   and tanh itself within tanh.approx's 2^-10.987 of 0.5|x|, which cuBLASLt's fused epilogue may
 *   use) and y's own rounding into `out` (|y| ≤ |pre|).
 * `pre` is the reference's pre-activation (decoded), read only for GELU.
 */
export function linearFwdBounds(
  cpu: NativeLibrary<KernelSymbols>,
  x: Float32Array,
  w: Float32Array,
  b: Float32Array,
  [M, N, K]: [number, number, number],
  acc: FloatFormat,
  out: FloatFormat,
  pre: ArrayLike<number> | null,
): { pre: Float64Array; y: Float64Array } {
  const abs = (v: Float32Array) => Float32Array.from(v, Math.abs);
  const prods = absProducts(cpu, abs(x), abs(w), { M, N, K, ta: 0, tb: 1 });
  const bias = Float32Array.from({ length: M * N }, (_, e) => b[e % N]!);
  const shape = { M, N, K, alpha: 1, beta: 1 };
  const rounded = gemmBounds(shape, prods, bias, acc, out);
  if (!pre) return { pre: rounded, y: rounded };
  const unrounded = gemmBounds(shape, prods, bias, acc, acc);
  const y = Float64Array.from(unrounded, (d, e) => {
    const a = Math.abs(pre[e]!) + rounded[e]!; // the GPU's pre is within its bound of the reference's
    // pre's own rounding into `out`, where GELU reads the rounded pre
    return GELU_SLOPE * (d + outRounding(a, out)) + geluFwdBounds([a], out)[0]! +
      2 * TANH_APPROX * 0.5 * a;
  });
  return { pre: rounded, y };
}

/**
 * dt_crossentropy_fwd's per-row log-sum-exp and mean loss, from the logits as stored (decoded) and
 * the reference's lse. A row's exp sum S = Σ exp(x_j − max): the GPU library folds each thread's
 * share online in f32 (a warp or a block per row: at most k = ⌈V/32⌉ logits each), every logit's
 * exp within 1 ulp (2 roundings' worth) plus its argument's rounding (u·|x_j − max| ≤ u·range),
 * k additions and at most k rescales by exp(m − x) (3 roundings each, their arguments' roundings
 * adding up to at most the row's range), then each share's rescale to the row's max (3 more and a
 * range) and their sum in double; the CPU sums 2048-logit chunks in double (fewer roundings, the
 * same bound): relative error γ_{4k + 3⌈range⌉ + 5} in f32 plus γ_V in double. lse = max + log S:
 * S's relative error δ becomes an absolute δ/(1 − δ), log S rounded to f32 and the sum with max
 * another rounding (2 of |max| + |log S|). A row's loss −(x_t − lse) one more rounding, their
 * mean in double (γ_rows of Σ|row losses|) and its rounding to f32. Two sides: twice each.
 * `valid` (a count) is exact and not bounded here. Rows of `ignore` have no loss.
 */
export function crossEntropyFwdBounds(
  logits: ArrayLike<number>,
  targets: Int32Array,
  lse: ArrayLike<number>,
  [rows, V]: [number, number],
  ignore: number,
): { lse: Float64Array; loss: Float64Array } {
  const lseBound = new Float64Array(rows);
  let lossErr = 0, absLoss = 0, valid = 0, sum = 0;
  const k = Math.ceil(V / 32);
  for (let r = 0; r < rows; r++) {
    let max = -Infinity, min = Infinity;
    for (let j = 0; j < V; j++) {
      const v = logits[r * V + j]!;
      max = Math.max(max, v);
      min = Math.min(min, v);
    }
    const rel = gamma(4 * k + 3 * Math.ceil(max - min) + 5, "f32") + gamma(V, "f64");
    const logS = Math.abs(lse[r]! - max);
    lseBound[r] = 2 * (rel / (1 - rel) + gamma(2, "f32") * (Math.abs(max) + logS)) + TINY;
    if (targets[r] === ignore) continue;
    const xt = logits[r * V + targets[r]!]!, rowLoss = lse[r]! - xt;
    valid++;
    sum += rowLoss;
    absLoss += Math.abs(rowLoss);
    lossErr += lseBound[r]! + 2 * gamma(1, "f32") * (Math.abs(xt) + Math.abs(lse[r]!));
  }
  const mean = valid ? sum / valid : 0;
  const loss = valid
    ? (lossErr + 2 * gamma(Math.max(rows, 1), "f64") * absLoss) / valid +
      2 * gamma(1, "f32") * Math.abs(mean) + TINY
    : 0; // no valid row: NaN on both sides, which agrees
  return { lse: lseBound, loss: Float64Array.of(loss) };
}

/**
 * dt_crossentropy_bwd's dx_j = p_j·w − [j = t]·w, p_j = exp(x_j − lse) from the same saved lse and
 * w = dloss / valid (one IEEE quotient, the same on both sides): exp within 1 ulp (2 roundings'
 * worth) plus its argument's rounding (⌈|x_j − lse|⌉ roundings' worth), the product and the
 * difference (2 more, fused or not), relative to |p_j·w| + [j = t]·|w|; then the rounding into
 * `out` (bf16 logits give a bf16 gradient). Ignored rows are 0 on both sides.
 */
export function crossEntropyBwdBounds(
  logits: ArrayLike<number>,
  targets: Int32Array,
  lse: ArrayLike<number>,
  w: number,
  [rows, V]: [number, number],
  ignore: number,
  out: FloatFormat,
): Float64Array {
  const bound = new Float64Array(rows * V).fill(TINY);
  for (let r = 0; r < rows; r++) {
    if (targets[r] === ignore) continue;
    for (let j = 0; j < V; j++) {
      const z = logits[r * V + j]! - lse[r]!;
      const terms = Math.abs(Math.exp(z) * w) + (j === targets[r] ? Math.abs(w) : 0);
      const dx = Math.exp(z) * w - (j === targets[r] ? w : 0);
      bound[r * V + j] = elementwiseBound(4 + Math.ceil(Math.abs(z)), terms, "f32") +
        outRounding(Math.abs(dx) + 2 * gamma(8, "f32") * terms, out);
    }
  }
  return bound;
}

/** The unit roundoff of f32, for the tests' planted errors. */
export const U32 = UNIT_ROUNDOFF.f32;
