/**
 * The kernel ABI: every symbol that both native kernel libraries (CPU:
 * build/libdtrain_cpu.so from kernels/cpu, CUDA: build/libdtrain_cuda.so from
 * kernels/cuda) export, with the same signatures and semantics. The backend
 * chosen at run time is just which library was opened.
 *
 * Conventions, shared by every entry:
 * - returns a dt_status (i32): 0 is success; otherwise dt_last_error() holds
 *   the library's own text. Callers use the status-checked wrappers of
 *   ffi/calls.ts (`backend().call.dt_scale(...)`), never the raw symbols.
 * - sizes and counts are i64 and must be passed as BigInt (a JS number there
 *   drops the call to Deno's slow FFI path).
 * - the last parameter is a stream (CUDA) that the CPU library ignores, except
 *   for the symbols of KERNEL_UNSTREAMED; the wrappers append it.
 * - float tensors are f32 unless a dtype argument says otherwise; index
 *   tensors are i32.
 * - backward kernels overwrite their outputs (never accumulate), unless the
 *   comment says so; autograd accumulates with dt_axpy.
 * - errors in the data rather than the arguments (an index outside its range,
 *   a value an integer dt_cast cannot hold) are DT_ERR_ARG naming the op, the
 *   position and the value. The CPU library returns them from the call; the
 *   CUDA library finds them on the device without a read-back (the output is
 *   poisoned) and returns the first from the next dt_deferred_error, which a
 *   step calls once at its explicit synchronisation.
 *
 * @module
 */

const P = "pointer" as const;
const I64 = "i64" as const;
const I32 = "i32" as const;
const F32 = "f32" as const;
const F64 = "f64" as const;
const B = "buffer" as const;
const STATUS = { result: I32 } as const;

export const KERNEL_SYMBOLS = {
  // ---- library identity and runtime -------------------------------------
  dt_abi_version: { parameters: [], result: I32 },
  /** const char*: text of the last error on this thread. */
  dt_last_error: { parameters: [], result: P },
  /** const char*: "cpu-avx2", "cpu-generic", "cuda sm_90", ... */
  dt_backend_name: { parameters: [], result: P },
  /** const char*: sha256 of the kernel sources this library was built from. */
  dt_build_hash: { parameters: [], result: P },
  dt_set_num_threads: { parameters: [I32], ...STATUS },
  dt_get_num_threads: { parameters: [], result: I32 },

  // ---- memory ------------------------------------------------------------
  /** void* dt_alloc(size_t bytes): 64-byte aligned; NULL + error on failure. */
  dt_alloc: { parameters: [I64], result: P },
  dt_free: { parameters: [P], ...STATUS },
  /** (dst, src, bytes, kind 0=h2h 1=h2d 2=d2h 3=d2d, stream) */
  dt_memcpy: { parameters: [P, P, I64, I32, P], ...STATUS },
  dt_synchronize: { parameters: [P], ...STATUS },
  /** (stream): the first data error that kernels found on the device since the
   *  last call (see the conventions above), then forgotten; 0 when none.
   *  Synchronises the stream. Always 0 on the CPU library. */
  dt_deferred_error: { parameters: [P], ...STATUS },
  /** (out, dtype, n, value, stream): every element = value (cast to dtype). */
  dt_fill: { parameters: [P, I32, I64, F64, P], ...STATUS },
  /** (out, out_dtype, inp, inp_dtype, n, stream): elementwise conversion; floats
   *  round to nearest even; into an integer type, a value it cannot hold is a
   *  data error (CUDA: written as 0, reported by dt_deferred_error). */
  dt_cast: { parameters: [P, I32, P, I32, I64, P], ...STATUS },

  // ---- elementwise ---------------------------------------------------------
  /** out[i] = a[i] op b[(i / inner) % bn]. bn = n, inner = 1 is same-shape;
   *  trailing-suffix broadcast is inner = 1; a column vector (R,1) against
   *  (R,C) is bn = R, inner = C. out may alias a. */
  dt_binary: {
    parameters: [
      I32, // int32_t op: DT_OP_ADD 0, SUB 1, MUL 2, DIV 3
      P, // float* out [n]
      P, // const float* a [n]
      P, // const float* b [bn]
      I64, // int64_t n
      I64, // int64_t bn: elements of b
      I64, // int64_t inner: consecutive elements of a that share one element of b
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out, inp, n, bn, inner, stream): out[j] = sum of inp[i] over all i with
   *  (i / inner) % bn == j (the gradient of a broadcast operand); f64 accumulate. */
  dt_reduce_bcast: { parameters: [P, P, I64, I64, I64, P], ...STATUS },
  /** (out, inp, n, alpha, stream): out = alpha * inp. out may alias inp. */
  dt_scale: { parameters: [P, P, I64, F32, P], ...STATUS },
  /** (y, x, n, alpha, stream): y += alpha * x. */
  dt_axpy: { parameters: [P, P, I64, F32, P], ...STATUS },
  /** (out f64[1], inp, n, stream): sum of inp[i]^2 accumulated in double. */
  dt_sumsq: { parameters: [P, P, I64, P], ...STATUS },
  /** out[i] = dt_sumsq of tensor i, for every tensor in one reduction (no read-back). */
  dt_sumsq_many: {
    parameters: [
      P, // double* out [num]: device (CPU: host) memory
      P, // const float* const* ptrs [num]: a host array of the tensors' addresses
      P, // const int64_t* counts [num]: a host array of their element counts
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
  /** torch 1.13's clip_grad_norm_ with one reduction and no read-back: sumsq[i]
   *  = dt_sumsq of tensor i, *total = the f32 global norm (per-tensor f32 norms
   *  folded in order), then every tensor *= min(max_norm / (total + 1e-6), 1).
   *  max_norm = +inf computes the norm only. */
  dt_clip_grad_norm: {
    parameters: [
      P, // float* total [1]: device (CPU: host) memory
      P, // double* sumsq [num]: device (CPU: host) memory, written
      P, // float* const* ptrs [num]: a host array of the gradients' addresses (scaled in place)
      P, // const int64_t* counts [num]: a host array of their element counts
      I64, // int64_t num
      F64, // double max_norm (>= 0)
      P, // void* stream
    ],
    ...STATUS,
  },
  dt_relu_fwd: { parameters: [P, P, I64, P], ...STATUS },
  /** (dinp, dout, inp, n, stream): dinp = inp > 0 ? dout : 0 */
  dt_relu_bwd: { parameters: [P, P, P, I64, P], ...STATUS },
  /** tanh-approximate GELU, as torch.nn.functional.gelu(approximate="tanh"). */
  dt_gelu_fwd: { parameters: [P, P, I64, P], ...STATUS },
  dt_gelu_bwd: { parameters: [P, P, P, I64, P], ...STATUS },
  /** Element i is kept when dt_hash_u32(seed, offset + i) >= p * 2^32, then
   *  scaled by 1 / (1 - p). */
  dt_dropout_fwd: {
    parameters: [
      P, // float* out [n]
      P, // const float* inp [n]
      I64, // int64_t n
      F32, // float p: drop probability in [0, 1)
      I64, // int64_t seed
      I64, // int64_t offset: counter of element 0 (distinct per call)
      P, // void* stream
    ],
    ...STATUS,
  },
  /** The same mask as dt_dropout_fwd, recomputed from (seed, offset). */
  dt_dropout_bwd: {
    parameters: [
      P, // float* dinp [n]
      P, // const float* dout [n]
      I64, // int64_t n
      F32, // float p
      I64, // int64_t seed
      I64, // int64_t offset
      P, // void* stream
    ],
    ...STATUS,
  },

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

  // ---- layout ---------------------------------------------------------------
  /** out[r, :] = inp[r, start : start + len]. */
  dt_slice_cols: {
    parameters: [
      P, // void* out [rows, len]
      P, // const void* inp [rows, in_cols]
      I64, // int64_t rows
      I64, // int64_t in_cols
      I64, // int64_t start
      I64, // int64_t len
      I64, // int64_t elem_bytes
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dst[r, start : start + len] = src[r, :]; other columns untouched. */
  dt_scatter_cols: {
    parameters: [
      P, // void* dst [rows, dst_cols]
      P, // const void* src [rows, len]
      I64, // int64_t rows
      I64, // int64_t dst_cols
      I64, // int64_t start
      I64, // int64_t len
      I64, // int64_t elem_bytes
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (A,B,C,D) -> (A,C,B,D); A = D = 1 is a 2-D transpose. */
  dt_transpose_0213: {
    parameters: [
      P, // void* out [A, C, B, D]
      P, // const void* inp [A, B, C, D]
      I64, // int64_t A
      I64, // int64_t B
      I64, // int64_t C
      I64, // int64_t D
      I64, // int64_t elem_bytes
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out, inp, idx i32[n], n, row_bytes, stream): out row i = inp row idx[i]
   *  (data-loader collation); a negative index is a data error (CUDA: its
   *  row's bytes are all ones). */
  dt_gather_rows: { parameters: [P, P, P, I64, I64, P], ...STATUS },

  // ---- GEMM -------------------------------------------------------------------
  /** Row-major C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b], op(A) is
   *  MxK, op(B) KxN; accumulation is f32. beta = 0 never reads C (NaN in C
   *  does not leak). */
  dt_gemm: {
    parameters: [
      I32, // int32_t dtype of A, B and C: DT_F32 0, DT_BF16 1, DT_F16 2
      I32, // int32_t trans_a: 1 = A is stored KxM
      I32, // int32_t trans_b: 1 = B is stored NxK
      I64, // int64_t M
      I64, // int64_t N
      I64, // int64_t K
      F32, // float alpha
      P, // const void* A
      I64, // int64_t lda: elements between rows of A as stored
      P, // const void* B
      I64, // int64_t ldb
      F32, // float beta
      P, // void* C [M, N]
      I64, // int64_t ldc
      I64, // int64_t batch: number of matrices
      I64, // int64_t stride_a: elements between A[b] and A[b+1] (0 = shared)
      I64, // int64_t stride_b
      I64, // int64_t stride_c
      P, // void* stream
    ],
    ...STATUS,
  },

  /** One row-major product C = alpha op(A) op(B) + beta C, f32 accumulation,
   *  with C in the operands' dtype or f32, and an epilogue applied before the
   *  one rounding into C (cuBLASLt's, on the GPU): 0 none; 1 bias (C[i, j] +=
   *  bias[j]); 2 bias + tanh GELU, the pre-activation written to aux; 3 bias
   *  gradient (C = product; bias[i] = sum over k of op(A)[i, k], overwritten).
   *  bias and aux have C's dtype; aux is M x N with row stride ldaux. */
  dt_gemm_ex: {
    parameters: [
      I32, // int32_t ab_dtype: A and B, DT_F32, DT_BF16 or DT_F16
      I32, // int32_t c_dtype: ab_dtype or DT_F32
      I32, // int32_t trans_a
      I32, // int32_t trans_b
      I64, // int64_t M
      I64, // int64_t N
      I64, // int64_t K
      F32, // float alpha
      P, // const void* A
      I64, // int64_t lda
      P, // const void* B
      I64, // int64_t ldb
      F32, // float beta
      P, // void* C [M, N]
      I64, // int64_t ldc
      I32, // int32_t epilogue: DT_EPI_NONE 0, BIAS 1, GELU_BIAS 2, BGRAD 3
      P, // void* bias: [N] read (1, 2) or [M] written (3); NULL for 0
      P, // void* aux [M, ldaux]: the pre-activation (2); NULL otherwise
      I64, // int64_t ldaux
      P, // void* stream
    ],
    ...STATUS,
  },

  // ---- ops of convolutional networks and everyday tensor ops ------------------
  // Tensors are viewed as (outer, D, inner) around the dimension an op works
  // along. Host arrays (shapes, strides, geometries) are "buffer" parameters:
  // an i64 typed array read before the call returns. Index tensors are i32
  // and checked before anything is written.
  /** Unary elementwise forward: out[i] = op(inp[i]). */
  dt_unary_fwd: {
    parameters: [
      I32, // int32 op: DT_UN_EXP 0, LOG 1, SIGMOID 2, TANH 3, SQRT 4, POW 5, CLAMP 6 (common/unary.h)
      P, // float* out (n)
      P, // const float* inp (n); may alias out
      I64, // int64 n
      F64, // double a: POW's exponent, CLAMP's min (-inf: none); rounded to f32
      F64, // double b: CLAMP's max (+inf: none); rounded to f32
      P, // stream
    ],
    ...STATUS,
  },
  /** Unary elementwise backward: dinp = dout * op'(inp) (common/unary.h's rules). */
  dt_unary_bwd: {
    parameters: [
      I32, // int32 op (as dt_unary_fwd)
      P, // float* dinp (n)
      P, // const float* dout (n)
      P, // const float* inp (n): the forward's input
      P, // const float* out (n): the forward's output
      I64, // int64 n
      F64, // double a (as dt_unary_fwd)
      F64, // double b (as dt_unary_fwd)
      P, // stream
    ],
    ...STATUS,
  },
  /**
   * out[i] = a[i] <op> b[i] as 0/1 (kernels/common/compare.h: 0 eq, 1 ne, 2 lt,
   * 3 le, 4 gt, 5 ge; 6 and 7 pick torch.maximum's / minimum's operand); a NULL
   * b compares with b_value.
   */
  dt_compare: {
    parameters: [
      I32, // int32 op
      P, // uint8* out (n)
      P, // const float* a (n)
      P, // const float* b (n) or NULL
      I64, // int64 n
      F32, // float b_value: used where b is NULL
      P, // stream
    ],
    ...STATUS,
  },
  /** out[i] = cond[i] ? a[i] : b[i]; a NULL a or b reads a_value or b_value instead. */
  dt_where: {
    parameters: [
      P, // float* out (n)
      P, // const uint8* cond (n): nonzero picks a
      P, // const float* a (n) or NULL
      P, // const float* b (n) or NULL
      I64, // int64 n
      F32, // float a_value: used where a is NULL
      F32, // float b_value: used where b is NULL
      P, // stream
    ],
    ...STATUS,
  },
  /** Copies a box of elements between two strided layouts (permute, expand,
   *  pad, slice, cat): for every index tuple t < sizes,
   *  out[sum t*out_strides] = inp[sum t*inp_strides]. Output positions must be distinct. */
  dt_strided_copy: {
    parameters: [
      P, // void* out (at the box's first element)
      P, // const void* inp (at the box's first element)
      I32, // int32 ndim, 0..16
      B, // const int64* sizes (ndim, host)
      B, // const int64* out_strides (ndim, host; elements, >= 0)
      B, // const int64* inp_strides (ndim, host; elements, >= 0; 0 broadcasts)
      I64, // int64 elem_bytes, 1..64
      P, // stream
    ],
    ...STATUS,
  },
  /** Reduces (outer, D, inner) along D: sum and mean in double; max/min with
   *  the first index of the extreme (a NaN wins). D = 0: sum 0, mean NaN, max/min refused. */
  dt_reduce_dim: {
    parameters: [
      I32, // int32 op: DT_RED_SUM 0, MEAN 1, MAX 2, MIN 3 (common/reduce_dim.h)
      P, // float* out (outer * inner), or NULL for max/min with idx (argmax)
      P, // int32* idx (outer * inner) or NULL; max/min only
      P, // const float* inp (outer * D * inner)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 inner
      P, // stream
    ],
    ...STATUS,
  },
  /** Softmax or log-softmax of (outer, D, inner) along D. */
  dt_softmax_dim_fwd: {
    parameters: [
      P, // float* out (outer * D * inner)
      P, // const float* inp
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 inner
      I32, // int32 is_log: 1 for log-softmax
      P, // stream
    ],
    ...STATUS,
  },
  /** Its backward: softmax dinp = (dout - sum(dout*out)) * out; log-softmax
   *  dinp = dout - exp(out) * sum(dout), sums along D. */
  dt_softmax_dim_bwd: {
    parameters: [
      P, // float* dinp (outer * D * inner)
      P, // const float* dout
      P, // const float* out: the forward's output
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 inner
      I32, // int32 is_log
      P, // stream
    ],
    ...STATUS,
  },
  /** torch.gather: out[o, j, i] = inp[o, idx[o, j, i], i]. */
  dt_gather_dim: {
    parameters: [
      P, // void* out (outer * J * inner)
      P, // const void* inp (outer * D * inner)
      P, // const int32* idx (outer * J * inner), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      I64, // int64 elem_bytes, 1..64
      P, // stream
    ],
    ...STATUS,
  },
  /** gather's backward: dinp = 0, then dinp[o, idx[o, j, i], i] += dout[o, j, i], j in order. */
  dt_scatter_add_dim: {
    parameters: [
      P, // float* dinp (outer * D * inner), overwritten
      P, // const float* dout (outer * J * inner)
      P, // const int32* idx (outer * J * inner), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      P, // stream
    ],
    ...STATUS,
  },
  /** torch.index_select: out[o, j, i] = inp[o, idx[j], i]. */
  dt_index_select: {
    parameters: [
      P, // void* out (outer * J * inner)
      P, // const void* inp (outer * D * inner)
      P, // const int32* idx (J), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      I64, // int64 elem_bytes, 1..64
      P, // stream
    ],
    ...STATUS,
  },
  /** index_select's backward: dinp = 0, then dinp[o, idx[j], i] += dout[o, j, i], j in order. */
  dt_index_add: {
    parameters: [
      P, // float* dinp (outer * D * inner), overwritten
      P, // const float* dout (outer * J * inner)
      P, // const int32* idx (J), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      P, // stream
    ],
    ...STATUS,
  },
  /** Convolution's column matrix: col[(c, ki, kj), (n, oh, ow)] = the input
   *  under that tap, 0 in the padding (common/conv.h). */
  dt_im2col: {
    parameters: [
      P, // float* col (C*KH*KW, N*OH*OW)
      P, // const float* inp (N, C, H, W)
      B, // const int64* geom[14] (host): N, C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW
      P, // stream
    ],
    ...STATUS,
  },
  /** im2col's adjoint: dinp (overwritten) = each input's taps summed in (ki, kj) order. */
  dt_col2im: {
    parameters: [
      P, // float* dinp (N, C, H, W), overwritten
      P, // const float* col (C*KH*KW, N*OH*OW)
      B, // const int64* geom[14] (host), as dt_im2col
      P, // stream
    ],
    ...STATUS,
  },
  /** Direct convolution for few taps per output (C/groups·KH·KW <= 64): out[n, co] =
   *  bias[co] + the taps (ci, ki, kj) in order (common/conv.h). */
  dt_conv2d_direct_fwd: {
    parameters: [
      P, // float* out (N, Cout, OH, OW)
      P, // const float* inp (N, C, H, W)
      P, // const float* weight (Cout, C/groups, KH, KW)
      P, // const float* bias (Cout) or NULL
      B, // const int64* geom[14] (host), as dt_im2col
      I64, // int64 Cout
      I64, // int64 groups, dividing C and Cout
      P, // stream
    ],
    ...STATUS,
  },
  /** Its weight and bias gradients: per tap, the sum over images and output
   *  positions (rows in eight float lanes, rows added in double). */
  dt_conv2d_direct_bwd_weight: {
    parameters: [
      P, // float* dweight (Cout, C/groups, KH, KW), overwritten
      P, // float* dbias (Cout), overwritten, or NULL
      P, // const float* dout (N, Cout, OH, OW)
      P, // const float* inp (N, C, H, W)
      B, // const int64* geom[14] (host)
      I64, // int64 Cout
      I64, // int64 groups
      P, // stream
    ],
    ...STATUS,
  },
  /** Its input gradient: each input's taps summed in (co, ki, kj) order. */
  dt_conv2d_direct_bwd_input: {
    parameters: [
      P, // float* dinp (N, C, H, W), overwritten
      P, // const float* dout (N, Cout, OH, OW)
      P, // const float* weight (Cout, C/groups, KH, KW)
      B, // const int64* geom[14] (host)
      I64, // int64 Cout
      I64, // int64 groups
      P, // stream
    ],
    ...STATUS,
  },
  /** Winograd F(2x2, 3x3) kernel transform U = G g G^T of each (co, c) (common/winograd.h). */
  dt_winograd_weight: {
    parameters: [
      P, // float* u [16][Cout][C]
      P, // const float* weight (Cout, C, 3, 3)
      I64, // int64 Cout
      I64, // int64 C
      P, // stream
    ],
    ...STATUS,
  },
  /** Its adjoint: dweight (Cout, C, 3, 3) (overwritten) = G^T m G of each (co, c). */
  dt_winograd_weight_grad: {
    parameters: [
      P, // float* dweight (Cout, C, 3, 3)
      P, // const float* m [16][Cout][C]
      I64, // int64 Cout
      I64, // int64 C
      P, // stream
    ],
    ...STATUS,
  },
  /** Input transform V = B^T d B of tiles [t0, t0 + nt) of a 3x3, stride-1 conv
   *  (tile t = (n, ty, tx) over TH x TW = ceil(OH/2) x ceil(OW/2) per image). */
  dt_winograd_input: {
    parameters: [
      P, // float* v [16][C][ld]: component xi of channel c of tile t0 + q at (xi * C + c) * ld + q
      P, // const float* inp (N, C, H, W)
      B, // const int64* geom[14] (host), as dt_im2col: kernel 3x3, stride 1, dilation 1
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld >= nt
      P, // stream
    ],
    ...STATUS,
  },
  /** Its adjoint: dinp += B dv B^T of each tile, tiles in increasing order. */
  dt_winograd_input_grad: {
    parameters: [
      P, // float* dinp (N, C, H, W): added to
      P, // const float* dv [16][C][ld]
      B, // const int64* geom[14] (host), as dt_winograd_input
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld
      P, // stream
    ],
    ...STATUS,
  },
  /** Output transform: the 2x2 outputs A^T m A (+ bias) of tiles [t0, t0 + nt). */
  dt_winograd_output: {
    parameters: [
      P, // float* out (N, Cout, OH, OW): those tiles' outputs written
      P, // const float* m [16][Cout][ld]
      P, // const float* bias (Cout) or NULL
      B, // const int64* geom[14] (host), as dt_winograd_input
      I64, // int64 Cout
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld
      P, // stream
    ],
    ...STATUS,
  },
  /** Its adjoint: p = A dy A^T of tiles [t0, t0 + nt) (dy 0 past the output). */
  dt_winograd_output_grad: {
    parameters: [
      P, // float* p [16][Cout][ld]
      P, // const float* dout (N, Cout, OH, OW)
      B, // const int64* geom[14] (host), as dt_winograd_input
      I64, // int64 Cout
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld
      P, // stream
    ],
    ...STATUS,
  },
  /** 2-D max pooling of P planes; padding counts as -inf, a NaN always wins. */
  dt_maxpool2d_fwd: {
    parameters: [
      P, // float* out (P, OH, OW)
      P, // int32* idx (P, OH, OW): ih * W + iw of each maximum within its plane
      P, // const float* inp (P, H, W)
      B, // const int64* geom[13] (host): P, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW
      P, // stream
    ],
    ...STATUS,
  },
  /** dinp (overwritten) = dout added at the forward's indices, in output order. */
  dt_maxpool2d_bwd: {
    parameters: [
      P, // float* dinp (P, H, W)
      P, // const float* dout (P, OH, OW)
      P, // const int32* idx (P, OH, OW) from dt_maxpool2d_fwd
      B, // const int64* geom[13] (host), as dt_maxpool2d_fwd
      P, // stream
    ],
    ...STATUS,
  },
  /** 2-D average pooling (torch.nn.functional.avg_pool2d). */
  dt_avgpool2d_fwd: {
    parameters: [
      P, // float* out (P, OH, OW)
      P, // const float* inp (P, H, W)
      B, // const int64* geom[13] (host), dilation 1
      I32, // int32 count_include_pad: 1 divides by the padded window
      I64, // int64 divisor_override: > 0 divides by it; 0: none
      P, // stream
    ],
    ...STATUS,
  },
  /** dinp (overwritten) = each output's gradient / divisor spread over its window. */
  dt_avgpool2d_bwd: {
    parameters: [
      P, // float* dinp (P, H, W)
      P, // const float* dout (P, OH, OW)
      B, // const int64* geom[13] (host), as dt_avgpool2d_fwd
      I32, // int32 count_include_pad
      I64, // int64 divisor_override
      P, // stream
    ],
    ...STATUS,
  },
  /** Adaptive average pooling: window o spans [floor(o*H/OH), ceil((o+1)*H/OH)). */
  dt_adaptive_avgpool2d_fwd: {
    parameters: [
      P, // float* out (P, OH, OW)
      P, // const float* inp (P, H, W)
      I64, // int64 P: planes (N * C)
      I64, // int64 H
      I64, // int64 W
      I64, // int64 OH
      I64, // int64 OW
      P, // stream
    ],
    ...STATUS,
  },
  /** dinp (overwritten) = each output's gradient / window size over its window. */
  dt_adaptive_avgpool2d_bwd: {
    parameters: [
      P, // float* dinp (P, H, W)
      P, // const float* dout (P, OH, OW)
      I64, // int64 P
      I64, // int64 H
      I64, // int64 W
      I64, // int64 OH
      I64, // int64 OW
      P, // stream
    ],
    ...STATUS,
  },
  /** Batch norm, step 1: per-channel sums of (N, C, HW); acc[C] = N * HW. A
   *  synchronised batch norm all-reduces acc (sums and counts) after it. */
  dt_bn_sum: {
    parameters: [
      P, // double* acc (C + 1): sums, then the element count
      P, // const float* inp (N, C, HW)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Step 2: sq[c] = sum of (x - mean_c)^2 with mean_c = acc[c] / acc[C] (all-reduced next when synchronised). */
  dt_bn_sqdev: {
    parameters: [
      P, // double* sq (C)
      P, // const float* inp (N, C, HW)
      P, // const double* acc (C + 1) from dt_bn_sum (all-reduced)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Step 3: mean, rstd = 1/sqrt(var + eps) (biased var), and the running
   *  statistics r = f*v + (1-f)*r with the unbiased variance; num_batches += 1. */
  dt_bn_finalize: {
    parameters: [
      P, // float* mean (C)
      P, // float* rstd (C)
      P, // float* running_mean (C) or NULL
      P, // float* running_var (C) or NULL
      P, // int64* num_batches (1) or NULL: incremented
      P, // const double* acc (C + 1)
      P, // const double* sq (C)
      I64, // int64 C
      F64, // double eps
      F64, // double momentum f in [0, 1]; -1: cumulative average f = 1 / num_batches
      P, // stream
    ],
    ...STATUS,
  },
  /** Eval mode: mean = running_mean, rstd = 1 / sqrt(running_var + eps) in f32. */
  dt_bn_eval_stats: {
    parameters: [
      P, // float* mean (C)
      P, // float* rstd (C)
      P, // const float* running_mean (C)
      P, // const float* running_var (C)
      I64, // int64 C
      F64, // double eps
      P, // stream
    ],
    ...STATUS,
  },
  /** out = x * alpha + beta per channel, alpha = rstd * w, beta = b - mean * alpha. */
  dt_bn_apply: {
    parameters: [
      P, // float* out (N, C, HW)
      P, // const float* inp (N, C, HW)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      P, // const float* weight (C) or NULL (1)
      P, // const float* bias (C) or NULL (0)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Batch norm's output, ReLU and 2x2 max pooling at stride 2 in one pass (the
   *  bits of dt_bn_apply, dt_relu_fwd, dt_maxpool2d_fwd): out[n, c, oh, ow] = the
   *  max over the window of relu(x * alpha + beta), idx as dt_maxpool2d_fwd's. */
  dt_bn_relu_maxpool2x2_fwd: {
    parameters: [
      P, // float* out (N, C, H/2, W/2)
      P, // int32* idx (N, C, H/2, W/2): ih * W + iw of each maximum within its plane
      P, // const float* inp (N, C, H, W)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      P, // const float* weight (C) or NULL (1)
      P, // const float* bias (C) or NULL (0)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 H
      I64, // int64 W
      P, // stream
    ],
    ...STATUS,
  },
  /** Backward step 1: acc = [sum dy, sum (x - mean) dy] per channel (local;
   *  all-reduced next when synchronised); dweight = acc[C+c] * rstd, dbias = acc[c]. */
  dt_bn_bwd_reduce: {
    parameters: [
      P, // double* acc (2C)
      P, // float* dweight (C) or NULL
      P, // float* dbias (C) or NULL
      P, // const float* dout (N, C, HW)
      P, // const float* inp (N, C, HW)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Backward step 2: dinp = (dy - sum_dy/M - (x - mean) sum_dy_xmu rstd^2/M) rstd w,
   *  M = *count; with acc NULL (fixed statistics) dinp = dy rstd w. */
  dt_bn_bwd_apply: {
    parameters: [
      P, // float* dinp (N, C, HW)
      P, // const float* dout (N, C, HW)
      P, // const float* inp (N, C, HW)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      P, // const float* weight (C) or NULL (1)
      P, // const double* acc (2C) from dt_bn_bwd_reduce (all-reduced), or NULL
      P, // const double* count (1): the forward's element count (acc[C] of dt_bn_sum)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },

  // ---- optimizers and loss scaling ----------------------------------------
  /** torch 1.13 AdamW (single-tensor path) for step >= 1; scalars are Python
   *  doubles there, so they are f64 here. */
  dt_adamw: {
    parameters: [
      P, // float* p [n]: parameters, updated
      P, // const float* g [n]: gradients
      P, // float* m [n]: first moment, updated
      P, // float* v [n]: second moment, updated
      I64, // int64_t n
      F64, // double lr
      F64, // double beta1
      F64, // double beta2
      F64, // double eps
      F64, // double weight_decay
      I64, // int64_t step: 1 for the first step
      P, // void* stream
    ],
    ...STATUS,
  },
  /** torch 1.13 SGD. */
  dt_sgd: {
    parameters: [
      P, // float* p [n]: parameters, updated
      P, // const float* g [n]: gradients
      P, // float* buf [n]: momentum buffer, updated
      I64, // int64_t n
      F64, // double lr
      F64, // double momentum
      F64, // double dampening
      F64, // double weight_decay
      I32, // int32_t nesterov (0 or 1)
      I32, // int32_t first: != 0 initialises buf = d (a copy)
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (g, n, inv_scale, found_inf f32[1], stream): g *= inv_scale; found_inf = 1
   *  when any element of g is inf or NaN (never reset to 0 here). */
  dt_unscale_check: { parameters: [P, I64, F32, P, P], ...STATUS },

  // ---- one-launch optimizer steps (ABI 3) ---------------------------------
  /** dt_adamw over `num` tensors in one call (one launch on a GPU), each with
   *  its own step and hyperparameters: the same bits as one dt_adamw per
   *  tensor. Every table is a host array of `num` entries (hyper: 5 per
   *  tensor); the tensors are device (CPU: host) memory. */
  dt_adamw_many: {
    parameters: [
      P, // float* const* params [num]: updated
      P, // const float* const* grads [num]
      P, // float* const* exp_avgs [num]: updated
      P, // float* const* exp_avg_sqs [num]: updated
      P, // const int64_t* counts [num]: elements of each tensor
      P, // const int64_t* steps [num]: each tensor's step, >= 1
      P, // const double* hyper [5 num]: lr, beta1, beta2, eps, weight_decay of each tensor
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dt_sgd over `num` tensors in one call (one launch on a GPU): the same
   *  bits as one dt_sgd per tensor. Host tables as dt_adamw_many's. */
  dt_sgd_many: {
    parameters: [
      P, // float* const* params [num]: updated
      P, // const float* const* grads [num]
      P, // float* const* bufs [num]: momentum buffers, updated (NULL where momentum is 0)
      P, // const int64_t* counts [num]
      P, // const double* hyper [4 num]: lr, momentum, dampening, weight_decay of each tensor
      P, // const int32_t* flags [2 num]: nesterov, first of each tensor (as dt_sgd's)
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
  /** Every element of `num` f32 tensors = 0 in one call (one launch on a GPU):
   *  zero_grad. Host tables as dt_adamw_many's. */
  dt_zero_many: {
    parameters: [
      P, // float* const* ptrs [num]
      P, // const int64_t* counts [num]
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },

  // ---- mixed-dtype elementwise ops (ABI 3) --------------------------------
  /** dt_binary with each operand in its own float dtype (f32, bf16, f16):
   *  out[i] = a[i] op b[(i / inner) % bn], computed in f32 from the widened
   *  operands and rounded once into out_dtype (all f32: dt_binary's bits).
   *  out may alias a when their dtypes match. */
  dt_binary_ex: {
    parameters: [
      I32, // int32_t op: DT_OP_ADD 0, SUB 1, MUL 2, DIV 3
      P, // void* out [n]
      I32, // int32_t out_dtype
      P, // const void* a [n]
      I32, // int32_t a_dtype
      P, // const void* b [bn]
      I32, // int32_t b_dtype
      I64, // int64_t n
      I64, // int64_t bn
      I64, // int64_t inner
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out, inp, n, dtype, stream): dt_gelu_fwd on f32/bf16/f16 data, computed
   *  in f32 and rounded once into dtype. */
  dt_gelu_fwd_ex: { parameters: [P, P, I64, I32, P], ...STATUS },
  /** (dinp, dout, inp, n, dtype, stream): dt_gelu_bwd with all three in dtype. */
  dt_gelu_bwd_ex: { parameters: [P, P, P, I64, I32, P], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;

export type KernelSymbols = typeof KERNEL_SYMBOLS;

/** Symbols that return a value, not a dt_status: called directly through `lib.symbols`. */
export const KERNEL_VALUE_SYMBOLS = [
  "dt_abi_version",
  "dt_last_error",
  "dt_backend_name",
  "dt_build_hash",
  "dt_get_num_threads",
  "dt_alloc",
] as const;

/** dt_status symbols without a trailing stream parameter. */
export const KERNEL_UNSTREAMED = ["dt_set_num_threads", "dt_free"] as const;

/** dt_status symbols whose last parameter is the stream. */
export type KernelStreamed = Exclude<
  keyof KernelSymbols,
  (typeof KERNEL_VALUE_SYMBOLS)[number] | (typeof KERNEL_UNSTREAMED)[number]
>;

/** The names of KernelStreamed, in table order. */
export const KERNEL_STREAMED = Object.keys(KERNEL_SYMBOLS).filter((name) =>
  !(KERNEL_VALUE_SYMBOLS as readonly string[]).includes(name) &&
  !(KERNEL_UNSTREAMED as readonly string[]).includes(name)
) as KernelStreamed[];

/**
 * Symbols of KERNEL_SYMBOLS that the CUDA library does not export yet (the
 * CPU library exports all of them). ffi/cuda.ts declares these as optional,
 * so the CUDA library still opens; an op that needs one on the GPU fails
 * naming it. Remove a name here once kernels/cuda exports it.
 */
export const CUDA_PENDING_SYMBOLS: ReadonlySet<keyof KernelSymbols> = new Set<keyof KernelSymbols>(
  [],
);
