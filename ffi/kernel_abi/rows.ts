/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Row kernels: softmax, layer norm, embedding, cross-entropy.
 *
 * @module
 */
import { F32, I32, I64, P, STATUS } from "./c_types.ts";

export const ROW_SYMBOLS = {
  // ---- rows: softmax, layer norm, embedding, cross-entropy ----------------
  /** out = softmax(scale * inp) along the last dim. causal_t > 0 masks column
   *  j of row r when j > r % causal_t (probability exactly 0), as
   *  masked_fill(-inf) does. */
  dt_softmax_fwd: {
    parameters: [
      P, // float* out [rows, cols]
      P, // const float* inp [rows, cols]
      I64, // int64_t rows
      I64, // int64_t cols
      I64, // int64_t causal_t: 0 = no mask, else the sequence length T
      F32, // float scale
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dinp = scale * out * (dout - sum_j(dout * out)). */
  dt_softmax_bwd: {
    parameters: [
      P, // float* dinp [rows, cols]
      P, // const float* dout [rows, cols]
      P, // const float* out [rows, cols]: the forward's output
      I64, // int64_t rows
      I64, // int64_t cols
      F32, // float scale
      P, // void* stream
    ],
    ...STATUS,
  },
  /** Layer norm over the last dim of x = inp (+ res), rows of f32, bf16 or
   *  f16; mean and rstd (f32) are saved for backward. With a residual, x is
   *  rounded to inp's dtype and written to sum_out when it is not NULL (the
   *  residual stream: an add and a norm in one pass). */
  dt_layernorm_fwd: {
    parameters: [
      P, // void* out [rows, C] of out_dtype
      P, // float* mean [rows]
      P, // float* rstd [rows]
      P, // const void* inp [rows, C] of inp_dtype
      P, // const float* weight [C], or NULL (all 1)
      P, // const float* bias [C], or NULL (all 0)
      I64, // int64_t rows
      I64, // int64_t C
      F32, // float eps
      I32, // int32_t out_dtype
      I32, // int32_t inp_dtype
      P, // const void* res [rows, C] of res_dtype, or NULL
      I32, // int32_t res_dtype
      P, // void* sum_out [rows, C] of inp_dtype: inp + res, or NULL
      P, // void* stream
    ],
    ...STATUS,
  },
  /** The gradients of dt_layernorm_fwd (inp is x, the normalised input).
   *  flags: 1 adds into dinp instead of overwriting it, 2 adds into dweight
   *  and dbias (a parameter's .grad). */
  dt_layernorm_bwd: {
    parameters: [
      P, // void* dinp [rows, C] of dinp_dtype
      P, // float* dweight [C], or NULL
      P, // float* dbias [C], or NULL
      P, // const void* dout [rows, C] of dout_dtype
      P, // const void* inp [rows, C] of inp_dtype
      P, // const float* weight [C], or NULL
      P, // const float* mean [rows]: saved by the forward
      P, // const float* rstd [rows]: saved by the forward
      I64, // int64_t rows
      I64, // int64_t C
      I32, // int32_t dout_dtype
      I32, // int32_t inp_dtype
      I32, // int32_t dinp_dtype
      I32, // int32_t flags
      P, // void* stream
    ],
    ...STATUS,
  },
  /** out[i] = table[idx[i]]; an index outside [0, V) is a data error (CUDA:
   *  its row is NaN, reported by dt_deferred_error). */
  dt_embedding_fwd: {
    parameters: [
      P, // float* out [n, C]
      P, // const int32_t* idx [n]
      P, // const float* table [V, C]
      I64, // int64_t n
      I64, // int64_t V
      I64, // int64_t C
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dtable = 0, then dtable[idx[i]] += dout[i] in position order
   *  (deterministic; on CUDA a device sort, no read-back). A bad index is a
   *  data error (CUDA: its row is left out). */
  dt_embedding_bwd: {
    parameters: [
      P, // float* dtable [V, C]
      P, // const float* dout [n, C]
      P, // const int32_t* idx [n]
      I64, // int64_t n
      I64, // int64_t V
      I64, // int64_t C
      P, // void* stream
    ],
    ...STATUS,
  },
  /** The fused classifier's forward: loss = mean over rows whose target !=
   *  ignore_index of logsumexp(row) - row[target], each row read once (in
   *  chunks, f32 sums); only the rows' log-sum-exps are saved for backward (no
   *  probabilities), with the count of valid rows. No valid row: loss = NaN
   *  (as torch). A target outside [0, V) is a data error (CUDA: its row's loss
   *  is NaN, reported by dt_deferred_error). */
  dt_crossentropy_fwd: {
    parameters: [
      P, // float* loss [1]
      P, // float* lse [rows]: each row's log-sum-exp (ignored rows too)
      P, // float* valid_rows [1]: how many targets are not ignore_index
      P, // const void* logits [rows, V] of dtype
      I32, // int32_t dtype: DT_F32, DT_BF16 or DT_F16
      P, // const int32_t* targets [rows]
      I64, // int64_t rows
      I64, // int64_t V
      I64, // int64_t ignore_index
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dlogits = (softmax(row) - onehot(target)) * dloss / valid_rows, the
   *  probabilities recomputed from the saved log-sum-exp, rounded once into
   *  dtype; 0 on ignored rows; dlogits may be logits (in place). A target
   *  outside [0, V) is a data error (CUDA: a NaN row). */
  dt_crossentropy_bwd: {
    parameters: [
      P, // void* dlogits [rows, V] of dtype (may be logits)
      P, // const void* logits [rows, V] of dtype
      P, // const float* lse [rows]: saved by the forward
      P, // const float* valid_rows [1]: saved by the forward
      P, // const int32_t* targets [rows]
      P, // const float* dloss [1]
      I32, // int32_t dtype
      I64, // int64_t rows
      I64, // int64_t V
      I64, // int64_t ignore_index
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out i32[rows], inp, rows, cols, stream): index of the first maximum. */
  dt_argmax_rows: { parameters: [P, P, I64, I64, P], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;
