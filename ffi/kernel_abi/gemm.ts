/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Matrix products (cuBLASLt on the GPU) and their fused epilogues.
 *
 * @module
 */
import { F32, I32, I64, P, STATUS } from "./c_types.ts";

export const GEMM_SYMBOLS = {
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
} as const satisfies Deno.ForeignLibraryInterface;
