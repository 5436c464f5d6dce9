/**
 * Neural-network ops with autograd, each a fused native kernel with its
 * backward beside it: layer norm, embedding
 * lookup, cross-entropy over logits, and causal self-attention composed from
 * them.
 */
import { backend } from "../backend.ts";
import { castTensor, empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { requireFloat } from "./_util.ts";
import { DTYPE_CODE } from "../dtype.ts";
import { matmul } from "./linalg.ts";
import { reshape, splitLast } from "./shape.ts";
import { transpose } from "./layout.ts";
import { softmax } from "./softmax.ts";
import { MAX_FUSED_HEAD_DIM, selfAttention } from "./attention.ts";
export { addLayerNorm, layerNorm } from "./layernorm.ts";

/** The int32 version of an index tensor (i64 indices are converted, range-checked). */
export function asIndices(idx: Tensor): Tensor {
  if (idx.dtype === "i32") return idx;
  if (idx.dtype !== "i64") {
    throw new TypeError(
      `expected an i32 or i64 index tensor, got ${idx.dtype}`,
    );
  }
  return castTensor(idx, "i32");
}

/**
 * Rows of `table` (V, C) picked by integer indices: output shape [...idx.shape, C].
 * (torch.nn.functional.embedding.)
 */
export function embedding(idx0: Tensor, table: Tensor): Tensor {
  const idx = asIndices(idx0);
  if (table.shape.length !== 2) {
    throw new RangeError(`embedding: table must be 2-D, got [${table.shape}]`);
  }
  const [V, C] = table.shape as [number, number];
  const n = idx.numel;
  const out = empty([...idx.shape, C], "f32");
  const k = backend();
  k.call.dt_embedding_fwd(out.ptr, idx.ptr, table.ptr, BigInt(n), BigInt(V), BigInt(C));
  if (needsGrad(table)) {
    record(out, "embedding", [table], (g) => {
      const gt = empty(table.shape, "f32");
      k.call.dt_embedding_bwd(gt.ptr, g.ptr, idx.ptr, BigInt(n), BigInt(V), BigInt(C));
      return [gt];
    });
  }
  return out;
}

/**
 * Mean cross-entropy of logits (..., V) against integer targets (...),
 * skipping targets equal to ignoreIndex (torch's F.cross_entropy).
 *
 * @example
 * ```ts
 * import { crossEntropy, fromArray } from "dtrain";
 * const logits = fromArray(new Float32Array([2, 0, 0, 0, 3, 0]), [2, 3]);
 * const targets = fromArray(new Int32Array([0, 1]), [2]);
 * const loss = crossEntropy(logits, targets); // 0-dim: 0.16723, as F.cross_entropy(logits, targets)
 * ```
 */
export function crossEntropy(
  logits: Tensor,
  targets0: Tensor,
  opts: { ignoreIndex?: number } = {},
): Tensor {
  requireFloat("crossEntropy", logits);
  const targets = asIndices(targets0);
  const V = logits.shape[logits.shape.length - 1]!;
  const rows = logits.numel / V;
  if (targets.numel !== rows) {
    throw new RangeError(
      `crossEntropy: logits [${logits.shape}] need ${rows} targets, got [${targets0.shape}]`,
    );
  }
  const ignore = BigInt(opts.ignoreIndex ?? -100);
  const dtype = logits.dtype;
  const code = DTYPE_CODE[dtype];
  const loss = empty([], "f32");
  const lse = empty([rows], "f32");
  const valid = empty([1], "f32");
  const k = backend();
  const r = BigInt(rows), v = BigInt(V);
  k.call.dt_crossentropy_fwd(
    loss.ptr,
    lse.ptr,
    valid.ptr,
    logits.ptr,
    code,
    targets.ptr,
    r,
    v,
    ignore,
  );
  if (needsGrad(logits)) {
    record(loss, "crossEntropy", [logits], (g) => {
      const gl = empty(logits.shape, dtype);
      k.call.dt_crossentropy_bwd(
        gl.ptr,
        logits.ptr,
        lse.ptr,
        valid.ptr,
        targets.ptr,
        g.ptr,
        code,
        r,
        v,
        ignore,
      );
      return [gl];
    });
  } else {
    lse.dispose();
    valid.dispose();
  }
  return loss;
}

/**
 * Causal self-attention as in nanoGPT, from the fused qkv projection
 * (B, T, 3C) to (B, T, C) before the output projection: per head,
 * softmax(q k^T / sqrt(d)) v. Head dimensions up to 256 run the fused kernel
 * (no T x T matrix); larger ones the composed ops: q, k, v split, heads
 * (B, nHead, T, C/nHead), the scores, a masked softmax and a product.
 */
export function causalSelfAttention(qkv: Tensor, nHead: number): Tensor {
  if (qkv.shape.length !== 3 || qkv.shape[2]! % (3 * nHead) !== 0) {
    throw new RangeError(
      `causalSelfAttention: expected (B, T, 3C) with C divisible by ${nHead} heads, got [${qkv.shape}]`,
    );
  }
  const D = qkv.shape[2]! / 3 / nHead;
  if (D <= MAX_FUSED_HEAD_DIM) return selfAttention(qkv, nHead, { causal: true });
  return composedCausalSelfAttention(qkv, nHead);
}

/**
 * The same attention composed of separate ops (split, head transposes, the
 * (B, nHead, T, T) scores, a causal softmax, the product): what nanoGPT's
 * manual path computes, used above 256 head dims and for comparisons.
 */
export function composedCausalSelfAttention(qkv: Tensor, nHead: number): Tensor {
  if (qkv.shape.length !== 3 || qkv.shape[2]! % (3 * nHead) !== 0) {
    throw new RangeError(
      `causalSelfAttention: expected (B, T, 3C) with C divisible by ${nHead} heads, got [${qkv.shape}]`,
    );
  }
  const [B, T, C3] = qkv.shape as [number, number, number];
  const C = C3 / 3, D = C / nHead;
  const [q, k, v] = splitLast(qkv, C) as [Tensor, Tensor, Tensor];
  const heads = (t: Tensor) => transpose(reshape(t, [B, T, nHead, D]), 1, 2); // (B, H, T, D)
  const qh = heads(q), kh = heads(k), vh = heads(v);
  const att = matmul(qh, kh, { transB: true }); // (B, H, T, T)
  const p = softmax(att, -1, { causal: true, scale: 1 / Math.sqrt(D) });
  const y = matmul(p, vh); // (B, H, T, D)
  return reshape(transpose(y, 1, 2), [B, T, C]);
}
