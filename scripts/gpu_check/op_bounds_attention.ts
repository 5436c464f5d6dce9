/**
 * Per-element bounds of f32 attention (dt_attention_fwd/bwd) in the op sweep,
 * derived as op_bounds.ts derives the others: from the rounding steps of
 * kernels/common/attention.h and the length of each sum, per (batch, head),
 * with the products of absolute values the bounds need computed by the CPU
 * library's GEMM (fast at GPT-2's sizes). Either library tiles and orders its
 * sums as it likes; neither rounds P or dS below f32. bf16/f16 keep the
 * tensor-core tolerance of tests/cuda/_attention_tolerance.ts (the rounding
 * of P and dS to the dtype dominates, a normwise 4u).
 *
 * Common to both directions, for query row i (keys j it sees):
 * - a score s_ij = scale·q_i·k_j is a D-term dot and a scaling, within
 *   a_i = γ_{D+1}·scale·max_j Σ_d|q_id·k_jd| of the exact one;
 * - exp(s − m) or exp(s − lse) is within 1 ulp (2 roundings' worth) plus its
 *   argument's rounding (u·|s − lse|, ⌈range_i⌉ roundings' worth), so each
 *   weight is within δ_i = a_i + γ_{3 + ⌈range_i⌉} of exact, relatively.
 */
import type { KernelSymbols } from "../../ffi/symbols.ts";
import type { NativeLibrary } from "../../ffi/native.ts";
import { absProducts } from "./op_bounds.ts";
import { gamma } from "./tolerance.ts";

/** The smallest positive normal f32: absolute slack where a result is near zero. */
const TINY = 2 * 2 ** -126;

/** An attention call's shape: batch, sequence, heads, head dimension, causal mask, score scale. */
export interface AttentionDims {
  B: number;
  T: number;
  H: number;
  D: number;
  causal: number;
  scale: number;
}

/** Head h of batch b of a [B, T, parts·C] buffer (part p of `parts`) as a T x D matrix. */
function head(
  x: ArrayLike<number>,
  d: AttentionDims,
  b: number,
  h: number,
  part: number,
  parts: number,
) {
  const { T, H, D } = d, stride = parts * H * D, out = new Float32Array(T * D);
  for (let t = 0; t < T; t++) {
    const base = (b * T + t) * stride + part * H * D + h * D;
    for (let e = 0; e < D; e++) out[t * D + e] = x[base + e]!;
  }
  return out;
}

/** Writes a T x D matrix back as head h of batch b of a [B, T, parts·C] buffer. */
function putHead(
  dst: Float64Array,
  m: ArrayLike<number>,
  d: AttentionDims,
  b: number,
  h: number,
  part: number,
  parts: number,
) {
  const { T, H, D } = d, stride = parts * H * D;
  for (let t = 0; t < T; t++) {
    const base = (b * T + t) * stride + part * H * D + h * D;
    for (let e = 0; e < D; e++) dst[base + e] = m[t * D + e]!;
  }
}

const abs = (v: Float32Array) => Float32Array.from(v, Math.abs);

/** One head's scores' shared quantities: P from the reference lse, and each row's δ_i (module doc). */
function weights(
  cpu: NativeLibrary<KernelSymbols>,
  q: Float32Array,
  k: Float32Array,
  lse: ArrayLike<number>,
  lseAt: number,
  d: AttentionDims,
) {
  const { T, D, causal, scale } = d;
  const sh = { M: T, N: T, K: D, ta: 0, tb: 1 };
  const s = absProducts(cpu, q, k, sh), a = absProducts(cpu, abs(q), abs(k), sh);
  const p = new Float32Array(T * T), delta = new Float64Array(T), max = new Float64Array(T);
  const gDot = gamma(D + 1, "f32");
  for (let i = 0; i < T; i++) {
    let aMax = 0, range = 0, m = -Infinity;
    const l = lse[lseAt + i]!;
    for (let j = 0; j < T && (!causal || j <= i); j++) {
      const sij = scale * s[i * T + j]!;
      aMax = Math.max(aMax, scale * a[i * T + j]!);
      range = Math.max(range, Math.abs(sij - l));
      m = Math.max(m, sij);
      p[i * T + j] = Math.exp(sij - l);
    }
    delta[i] = gDot * aMax + gamma(3 + Math.ceil(range), "f32");
    max[i] = m;
  }
  return { p, delta, max };
}

/**
 * dt_attention_fwd in f32: out_i = Σ_j e_j·v_j / Σ_j e_j, folded online (each rescale multiplies
 * the running output and sum by the same factor, so its own error cancels; its product rounds
 * once in each). Weights within δ_i move out_id by at most δ_i·(Σ_j p_ij|v_jd| + |out_id|); the
 * output's T additions, T rescales and products (2T + 3) and the sum's (2T + 1) and the division
 * add γ of Σ_j p_ij|v_jd| and |out_id|. lse = m + log l: δ_i (the scores' shift and the weights),
 * l's γ_{2T+1} as an absolute error of its log, and 2 roundings of |m| + |log l|. Twice each.
 */
export function attentionFwdBounds(
  cpu: NativeLibrary<KernelSymbols>,
  qkv: ArrayLike<number>,
  out: ArrayLike<number>,
  lse: ArrayLike<number>,
  d: AttentionDims,
): { out: Float64Array; lse: Float64Array } {
  const { B, T, H, D } = d;
  const outBound = new Float64Array(B * T * H * D), lseBound = new Float64Array(B * H * T);
  const gOut = gamma(2 * T + 3, "f32"), gSum = gamma(2 * T + 2, "f32");
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const q = head(qkv, d, b, h, 0, 3), k = head(qkv, d, b, h, 1, 3);
      const v = head(qkv, d, b, h, 2, 3), o = head(out, d, b, h, 0, 1);
      const at = (b * H + h) * T;
      const { p, delta, max } = weights(cpu, q, k, lse, at, d);
      const pv = absProducts(cpu, p, abs(v), { M: T, N: D, K: T, ta: 0, tb: 0 });
      const bound = new Float64Array(T * D);
      for (let i = 0; i < T; i++) {
        const di = delta[i]!;
        for (let e = 0; e < D; e++) {
          const x = i * D + e;
          bound[x] = 2 * ((di + gOut) * pv[x]! + (di + gSum) * Math.abs(o[x]!)) + TINY;
        }
        const l = lse[at + i]!, m = max[i]!;
        lseBound[at + i] = 2 * (di / (1 - di) + gamma(2 * T + 1, "f32") +
              gamma(2, "f32") * (Math.abs(m) + Math.abs(l - m))) + TINY;
      }
      putHead(outBound, bound, d, b, h, 0, 1);
    }
  }
  return { out: outBound, lse: lseBound };
}

/**
 * dt_attention_bwd in f32, from the same saved out and lse: P recomputed within δ_i; dP = dO·Vᵀ
 * and delta_i = Σ_d dO_id·O_id D-term dots; dS = P·(dP − delta)·scale (2 roundings and the
 * scaling). With G_ij = p_ij·(Σ_d|dO_id·v_jd| + Σ_d|dO_id·O_id|) ≥ |dS_ij|/scale, dS's error is at
 * most κ_i·G_ij, κ_i = γ_D + δ_i + γ_2; then dQ = dS·K and dK = dSᵀ·Q are T-term sums (γ_{T+2}
 * with the scaling) of G·|K| and Gᵀ·|Q|, and dV = Pᵀ·dO a T-term sum of weights within δ.
 * Twice each; dK and dV take the head's largest κ, δ over the rows they sum.
 */
export function attentionBwdBounds(
  cpu: NativeLibrary<KernelSymbols>,
  qkv: ArrayLike<number>,
  dout: ArrayLike<number>,
  out: ArrayLike<number>,
  lse: ArrayLike<number>,
  d: AttentionDims,
): Float64Array {
  const { B, T, H, D, scale } = d;
  const bound = new Float64Array(B * T * 3 * H * D);
  const gD = gamma(D, "f32"), gT = gamma(T + 2, "f32"), g2 = gamma(2, "f32");
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const q = head(qkv, d, b, h, 0, 3), k = head(qkv, d, b, h, 1, 3);
      const v = head(qkv, d, b, h, 2, 3);
      const dO = head(dout, d, b, h, 0, 1), o = head(out, d, b, h, 0, 1);
      const { p, delta } = weights(cpu, q, k, lse, (b * H + h) * T, d);
      const av = absProducts(cpu, abs(dO), abs(v), { M: T, N: T, K: D, ta: 0, tb: 1 });
      const g = new Float32Array(T * T);
      for (let i = 0; i < T; i++) {
        let c = 0;
        for (let e = 0; e < D; e++) c += Math.abs(dO[i * D + e]! * o[i * D + e]!);
        for (let j = 0; j < T; j++) g[i * T + j] = p[i * T + j]! * (av[i * T + j]! + c);
      }
      const kappa = Float64Array.from(delta, (di) => gD + di + g2);
      const kappaMax = Math.max(0, ...kappa), deltaMax = Math.max(0, ...delta);
      const gk = absProducts(cpu, g, abs(k), { M: T, N: D, K: T, ta: 0, tb: 0 });
      const gq = absProducts(cpu, g, abs(q), { M: T, N: D, K: T, ta: 1, tb: 0 });
      const pdo = absProducts(cpu, p, abs(dO), { M: T, N: D, K: T, ta: 1, tb: 0 });
      const dq = Float64Array.from(
        { length: T * D },
        (_, x) => 2 * scale * (kappa[Math.floor(x / D)]! + gT) * gk[x]! + TINY,
      );
      const dk = Float64Array.from(
        gq.subarray(0, T * D),
        (y) => 2 * scale * (kappaMax + gT) * y + TINY,
      );
      const dv = Float64Array.from(
        pdo.subarray(0, T * D),
        (y) => 2 * (deltaMax + gamma(T + 1, "f32")) * y + TINY,
      );
      putHead(bound, dq, d, b, h, 0, 3);
      putHead(bound, dk, d, b, h, 1, 3);
      putHead(bound, dv, d, b, h, 2, 3);
    }
  }
  return bound;
}
