/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Multi-head self-attention, forward and backward.
 *
 * @module
 */
import { F32, I32, I64, P, STATUS } from "./c_types.ts";

export const ATTENTION_SYMBOLS = {
  // ---- attention --------------------------------------------------------------
  /** Multi-head self-attention softmax(scale q k^T) v without the T x T matrix
   *  (flash attention: tiles of keys, an online softmax, f32 sums), reading q,
   *  k and v where the fused projection left them. Row r of each (batch, head)
   *  sees keys <= r when causal. The log-sum-exp of each row's scaled scores is
   *  saved for backward. */
  dt_attention_fwd: {
    parameters: [
      P, // void* out [B, T, H*D] of dtype: heads side by side, as (B, T, C)
      P, // float* lse [B, H, T]
      P, // const void* qkv [B, T, 3, H, D] of dtype: q, k, v blocks of each row
      I32, // int32_t dtype: DT_F32, DT_BF16 or DT_F16
      I64, // int64_t B
      I64, // int64_t T
      I64, // int64_t H: heads
      I64, // int64_t D: head dimension, 1..256
      I32, // int32_t causal: 1 = each row sees only keys at or before it
      F32, // float scale: usually 1 / sqrt(D)
      P, // void* stream
    ],
    ...STATUS,
  },
  /** The gradients of dt_attention_fwd's q, k and v from dout, recomputing the
   *  probabilities from the saved log-sum-exp; dqkv is overwritten. */
  dt_attention_bwd: {
    parameters: [
      P, // void* dqkv [B, T, 3, H, D] of dtype (must not alias an input)
      P, // const void* dout [B, T, H*D] of dtype
      P, // const void* qkv [B, T, 3, H, D]: the forward's input
      P, // const void* out [B, T, H*D]: the forward's output
      P, // const float* lse [B, H, T]: saved by the forward
      I32, // int32_t dtype
      I64, // int64_t B
      I64, // int64_t T
      I64, // int64_t H
      I64, // int64_t D
      I32, // int32_t causal
      F32, // float scale
      P, // void* stream
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;
