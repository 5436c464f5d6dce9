/**
 * The kernel ABI: every symbol that both native kernel libraries (CPU:
 * build/libdtrain_cpu.so from kernels/cpu, CUDA: build/libdtrain_cuda.so from
 * kernels/cuda) export, with the same signatures and semantics. The backend
 * chosen at run time is just which library was opened.
 *
 * Conventions, shared by every entry:
 * - returns a dt_status (i32): 0 is success; otherwise dt_last_error() holds
 *   the library's own text (see ffi/native.ts `unwrap`).
 * - sizes and counts are i64 and must be passed as BigInt (a JS number there
 *   drops the call to Deno's slow FFI path).
 * - the last parameter is a stream (CUDA) that the CPU library ignores.
 * - float tensors are f32 unless a dtype argument says otherwise; index
 *   tensors are i32.
 * - backward kernels overwrite their outputs (never accumulate), unless the
 *   comment says so; autograd accumulates with dt_axpy.
 *
 * @module
 */

const P = "pointer" as const;
const I64 = "i64" as const;
const I32 = "i32" as const;
const F32 = "f32" as const;
const F64 = "f64" as const;
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
  /** (out, dtype, n, value, stream): every element = value (cast to dtype). */
  dt_fill: { parameters: [P, I32, I64, F64, P], ...STATUS },
  /** (out, out_dtype, inp, inp_dtype, n, stream): elementwise conversion; floats
   *  round to nearest even; i64 -> i32 fails on values out of i32 range. */
  dt_cast: { parameters: [P, I32, P, I32, I64, P], ...STATUS },

  // ---- elementwise ---------------------------------------------------------
  /** (op DT_OP_*, out, a, b, n, bn, inner, stream): out[i] = a[i] op b[(i / inner) % bn].
   *  bn = n, inner = 1 is same-shape; trailing-suffix broadcast is inner = 1;
   *  a column vector (R,1) against (R,C) is bn = R, inner = C. out may alias a. */
  dt_binary: { parameters: [I32, P, P, P, I64, I64, I64, P], ...STATUS },
  /** (out, inp, n, bn, inner, stream): out[j] = sum of inp[i] over all i with
   *  (i / inner) % bn == j (the gradient of a broadcast operand); f64 accumulate. */
  dt_reduce_bcast: { parameters: [P, P, I64, I64, I64, P], ...STATUS },
  /** (out, inp, n, alpha, stream): out = alpha * inp. out may alias inp. */
  dt_scale: { parameters: [P, P, I64, F32, P], ...STATUS },
  /** (y, x, n, alpha, stream): y += alpha * x. */
  dt_axpy: { parameters: [P, P, I64, F32, P], ...STATUS },
  /** (out f64[1], inp, n, stream): sum of inp[i]^2 accumulated in double. */
  dt_sumsq: { parameters: [P, P, I64, P], ...STATUS },
  dt_relu_fwd: { parameters: [P, P, I64, P], ...STATUS },
  /** (dinp, dout, inp, n, stream): dinp = inp > 0 ? dout : 0 */
  dt_relu_bwd: { parameters: [P, P, P, I64, P], ...STATUS },
  /** tanh-approximate GELU, as torch.nn.functional.gelu(approximate="tanh"). */
  dt_gelu_fwd: { parameters: [P, P, I64, P], ...STATUS },
  dt_gelu_bwd: { parameters: [P, P, P, I64, P], ...STATUS },
  /** (out, inp, n, p, seed, offset, stream): element i is kept when
   *  dt_hash_u32(seed, offset + i) >= p * 2^32, then scaled by 1 / (1 - p). */
  dt_dropout_fwd: { parameters: [P, P, I64, F32, I64, I64, P], ...STATUS },
  /** (dinp, dout, n, p, seed, offset, stream): the same mask, recomputed. */
  dt_dropout_bwd: { parameters: [P, P, I64, F32, I64, I64, P], ...STATUS },

  // ---- rows: softmax, layer norm, embedding, cross-entropy ----------------
  /** (out, inp, rows, cols, causal_t, scale, stream): out = softmax(scale * inp)
   *  along the last dim. causal_t > 0 masks column j of row r when
   *  j > r % causal_t (probability exactly 0), as masked_fill(-inf) does. */
  dt_softmax_fwd: { parameters: [P, P, I64, I64, I64, F32, P], ...STATUS },
  /** (dinp, dout, out, rows, cols, scale, stream):
   *  dinp = scale * out * (dout - sum_j(dout * out)). */
  dt_softmax_bwd: { parameters: [P, P, P, I64, I64, F32, P], ...STATUS },
  /** (out, mean, rstd, inp, weight, bias, rows, C, eps, stream): mean and rstd
   *  are f32[rows], saved for backward. weight/bias may be NULL (1 and 0). */
  dt_layernorm_fwd: {
    parameters: [P, P, P, P, P, P, I64, I64, F32, P],
    ...STATUS,
  },
  /** (dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, C, stream):
   *  all three outputs overwritten; dweight/dbias may be NULL. */
  dt_layernorm_bwd: {
    parameters: [P, P, P, P, P, P, P, P, I64, I64, P],
    ...STATUS,
  },
  /** (out, idx i32[n], table, n, V, C, stream): out[i] = table[idx[i]];
   *  an index outside [0, V) is DT_ERR_ARG naming it. */
  dt_embedding_fwd: { parameters: [P, P, P, I64, I64, I64, P], ...STATUS },
  /** (dtable, dout, idx, n, V, C, stream): dtable = 0, then dtable[idx[i]] += dout[i]
   *  in index order (deterministic). */
  dt_embedding_bwd: { parameters: [P, P, P, I64, I64, I64, P], ...STATUS },
  /** (loss f32[1], probs f32[rows*V], logits, targets i32[rows], rows, V,
   *  ignore_index, stream): loss = mean over rows whose target != ignore_index
   *  of logsumexp(row) - row[target]; probs = softmax(row), saved for backward.
   *  No valid row: loss = NaN (as torch). A target outside [0, V) is DT_ERR_ARG. */
  dt_crossentropy_fwd: {
    parameters: [P, P, P, P, I64, I64, I64, P],
    ...STATUS,
  },
  /** (dlogits, probs, targets, dloss f32[1], rows, V, ignore_index, stream):
   *  dlogits = (probs - onehot(target)) * dloss / valid_rows; 0 on ignored rows. */
  dt_crossentropy_bwd: {
    parameters: [P, P, P, P, I64, I64, I64, P],
    ...STATUS,
  },
  /** (out i32[rows], inp, rows, cols, stream): index of the first maximum. */
  dt_argmax_rows: { parameters: [P, P, I64, I64, P], ...STATUS },

  // ---- layout ---------------------------------------------------------------
  /** (out, inp, rows, in_cols, start, len, elem_bytes, stream):
   *  out[r, :] = inp[r, start : start + len]. */
  dt_slice_cols: { parameters: [P, P, I64, I64, I64, I64, I64, P], ...STATUS },
  /** (dst, src, rows, dst_cols, start, len, elem_bytes, stream):
   *  dst[r, start : start + len] = src[r, :]; other columns untouched. */
  dt_scatter_cols: {
    parameters: [P, P, I64, I64, I64, I64, I64, P],
    ...STATUS,
  },
  /** (out, inp, A, B, C, D, elem_bytes, stream): (A,B,C,D) -> (A,C,B,D).
   *  A = D = 1 is a 2-D transpose. */
  dt_transpose_0213: {
    parameters: [P, P, I64, I64, I64, I64, I64, P],
    ...STATUS,
  },
  /** (out, inp, idx i32[n], n, row_bytes, stream): out row i = inp row idx[i]
   *  (data-loader collation). */
  dt_gather_rows: { parameters: [P, P, P, I64, I64, P], ...STATUS },

  // ---- GEMM -------------------------------------------------------------------
  /** (dtype, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
   *   batch, strideA, strideB, strideC, stream), row-major:
   *  C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b], op(A) is MxK, op(B) KxN.
   *  dtype (DT_F32, DT_BF16, DT_F16) is that of A, B and C; accumulation is f32.
   *  beta = 0 never reads C (NaN in C does not leak). */
  dt_gemm: {
    parameters: [
      I32,
      I32,
      I32,
      I64,
      I64,
      I64,
      F32,
      P,
      I64,
      P,
      I64,
      F32,
      P,
      I64,
      I64,
      I64,
      I64,
      I64,
      P,
    ],
    ...STATUS,
  },

  // ---- optimizers and loss scaling ----------------------------------------
  /** (p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step, stream):
   *  torch 1.13 AdamW (single-tensor path) for step >= 1; scalars are Python
   *  doubles there, so they are f64 here. */
  dt_adamw: {
    parameters: [P, P, P, P, I64, F64, F64, F64, F64, F64, I64, P],
    ...STATUS,
  },
  /** (p, g, buf, n, lr, momentum, dampening, weight_decay, nesterov, first, stream):
   *  torch 1.13 SGD; first != 0 initialises buf = d (a copy). */
  dt_sgd: {
    parameters: [P, P, P, I64, F64, F64, F64, F64, I32, I32, P],
    ...STATUS,
  },
  /** (g, n, inv_scale, found_inf f32[1], stream): g *= inv_scale; found_inf = 1
   *  when any element of g is inf or NaN (never reset to 0 here). */
  dt_unscale_check: { parameters: [P, I64, F32, P, P], ...STATUS },
} as const satisfies Deno.ForeignLibraryInterface;

export type KernelSymbols = typeof KERNEL_SYMBOLS;
