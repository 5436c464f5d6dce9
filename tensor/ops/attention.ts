/**
 * Multi-head self-attention with autograd, one fused native kernel each way
 * (dt_attention_fwd/bwd): q, k and v are read where the fused projection
 * left them, (B, T, 3C), and no (B, H, T, T) matrix is ever stored; the
 * backward recomputes the probabilities from the saved log-sum-exp. The
 * output has the input's dtype (bf16 under autocast), every sum is f32.
 */
import { backend } from "../backend.ts";
import { castTensor, empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { DTYPE_CODE } from "../dtype.ts";
import { requireFloat } from "./_util.ts";

/** Largest head dimension of the fused kernels (kernels/common/attention.h). */
export const MAX_FUSED_HEAD_DIM = 256;

/** Options of selfAttention. */
export interface SelfAttentionOptions {
  /** each position attends only to itself and earlier ones (default true) */
  causal?: boolean;
  /** scores are scale * q.k (default 1 / sqrt(head dim)) */
  scale?: number;
}

/**
 * softmax(scale q k^T) v per head, from qkv (B, T, 3C) — q, k, v blocks of C
 * = nHead * D each, as nanoGPT's c_attn produces them — to (B, T, C), heads
 * side by side (ready for the output projection).
 *
 * @example
 * ```ts
 * const y = selfAttention(qkv, 12); // qkv: (B, T, 2304) -> y: (B, T, 768)
 * ```
 */
export function selfAttention(
  qkv: Tensor,
  nHead: number,
  opts: SelfAttentionOptions = {},
): Tensor {
  requireFloat("selfAttention", qkv);
  if (
    qkv.shape.length !== 3 || !Number.isInteger(nHead) || nHead < 1 ||
    qkv.shape[2]! % (3 * nHead) !== 0
  ) {
    throw new RangeError(
      `selfAttention: expected (B, T, 3C) with C divisible by ${nHead} heads, got [${qkv.shape}]`,
    );
  }
  const [B, T, C3] = qkv.shape as [number, number, number];
  const C = C3 / 3, D = C / nHead;
  if (D > MAX_FUSED_HEAD_DIM) {
    throw new RangeError(
      `selfAttention: head dimension ${D} is above ${MAX_FUSED_HEAD_DIM}, the fused kernel's limit`,
    );
  }
  const causal = opts.causal ?? true ? 1 : 0;
  const scale = opts.scale ?? 1 / Math.sqrt(D);
  const dtype = qkv.dtype;
  const code = DTYPE_CODE[dtype];
  const out = empty([B, T, C], dtype);
  const lse = empty([B, nHead, T], "f32");
  const k = backend();
  const b = BigInt(B), t = BigInt(T), h = BigInt(nHead), d = BigInt(D);
  k.call.dt_attention_fwd(out.ptr, lse.ptr, qkv.ptr, code, b, t, h, d, causal, scale);
  if (needsGrad(qkv)) {
    record(out, "selfAttention", [qkv], (g0) => {
      const g = g0.dtype === dtype ? g0 : castTensor(g0, dtype);
      const dqkv = empty(qkv.shape, dtype);
      k.call.dt_attention_bwd(
        dqkv.ptr,
        g.ptr,
        qkv.ptr,
        out.ptr,
        lse.ptr,
        code,
        b,
        t,
        h,
        d,
        causal,
        scale,
      );
      return [dqkv];
    }, { lowPrecisionGrad: true }); // g in the product's dtype as it comes
  } else {
    lse.dispose();
  }
  return out;
}
