/* gemm_epilogue.cu — dt_gemm_ex's epilogues as kernels of their own, for
 * products cuBLASLt cannot fuse one into (a leading dimension or type it does
 * not take for that epilogue) and for products that vanish (K == 0 or alpha
 * == 0): bias, bias + GELU with the pre-activation kept, from an f32 product
 * rounded once into C; and the bias gradient as a fixed-order sum (column
 * sums in chunks of rows, then a fold), so results never depend on timing.
 * Arithmetic: kernels/common/gemm_epilogue.h. */
#include "convert.h"
#include "cuda_internal.cuh"
#include "gemm_epilogue.h"

/* Rows of K per chunk of the bias-gradient column sums (at least; at most
 * 1024 chunks, so that the fold stays short). 64: GPT-2's 8192 x 768 bias
 * gradient is 128 chunks x 3 column blocks = 384 blocks, enough to fill 132
 * multiprocessors (256-row chunks gave 96). */
#define BGRAD_CHUNK_ROWS 64
#define BGRAD_MAX_CHUNKS 1024

/* ---- kernels ---------------------------------------------------------------------------- */

/* C = epilogue(acc + beta C) element by element; acc NULL is a product of 0. A
 * block walks rows, its threads the columns (no division per element). */
__global__ void dt_gemm_epi_k_(const float* acc, int64_t lacc, void* C, int32_t c_dtype, int64_t M, int64_t N,
                               int64_t ldc, float beta, int32_t epilogue, const void* bias, void* aux, int64_t ldaux) {
  for (int64_t i = blockIdx.x; i < M; i += gridDim.x) {
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      float v = acc ? acc[i * lacc + j] : 0.0f;
      if (beta != 0.0f) v += beta * dt_load_float(C, c_dtype, i * ldc + j);
      if (epilogue == DT_EPI_BIAS || epilogue == DT_EPI_GELU_BIAS)
        v = dt_epilogue_pre_f(v, dt_load_float(bias, c_dtype, j));
      if (epilogue == DT_EPI_GELU_BIAS) {
        dt_store_float(aux, c_dtype, i * ldaux + j, v);
        v = dt_gelu_f(v);
      }
      dt_store_float(C, c_dtype, i * ldc + j, v);
    }
  }
}

/* bias[i] = sum over k of A[i * lda + k] (op(A) = A): one block per row. */
__global__ void dt_gemm_bgrad_rows_k_(void* bias, int32_t c_dtype, const void* A, int32_t ab_dtype, int64_t M,
                                      int64_t K, int64_t lda) {
  for (int64_t i = blockIdx.x; i < M; i += gridDim.x) {
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) s += (double)dt_load_float(A, ab_dtype, i * lda + k);
    s = dt_block_sum_(s);
    if (threadIdx.x == 0) dt_store_float(bias, c_dtype, i, (float)s);
  }
}

/* partial[c][i] = sum over the rows k of chunk c of A[k * lda + i] (op(A) = A^T). */
__global__ void dt_gemm_bgrad_cols_k_(double* partial, const void* A, int32_t ab_dtype, int64_t M, int64_t K,
                                      int64_t lda, int64_t chunk_rows) {
  int64_t c = blockIdx.y;
  int64_t k1 = (c + 1) * chunk_rows < K ? (c + 1) * chunk_rows : K;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M; i += (int64_t)gridDim.x * blockDim.x) {
    double s = 0.0;
    for (int64_t k = c * chunk_rows; k < k1; k++) s += (double)dt_load_float(A, ab_dtype, k * lda + i);
    partial[c * M + i] = s;
  }
}

/* bias[i] = the chunks' partial sums folded in chunk order. */
__global__ void dt_gemm_bgrad_fold_k_(void* bias, int32_t c_dtype, const double* partial, int64_t chunks, int64_t M) {
  DT_GRID_STRIDE(i, M) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; c++) s += partial[c * M + i];
    dt_store_float(bias, c_dtype, i, (float)s);
  }
}

/* ---- launchers (called by gemm.cu) --------------------------------------------------------- */

dt_status dt_gemm_epilogue_run_(const float* acc, int64_t lacc, void* C, int32_t c_dtype, int64_t M, int64_t N,
                                int64_t ldc, float beta, int32_t epilogue, const void* bias, void* aux, int64_t ldaux,
                                cudaStream_t s) {
  DT_LAUNCH(dt_gemm_epi_k_, dt_row_grid_(M), DT_BLOCK, 0, s, acc, lacc, C, c_dtype, M, N, ldc, beta, epilogue, bias,
            aux, ldaux);
  DT_CHECK_LAUNCH(s, "dt_gemm_ex (epilogue)");
  return DT_OK;
}

dt_status dt_gemm_bgrad_run_(void* bias, int32_t c_dtype, const void* A, int32_t ab_dtype, int32_t trans_a,
                             int64_t M, int64_t K, int64_t lda, cudaStream_t s) {
  if (!trans_a) {
    DT_LAUNCH(dt_gemm_bgrad_rows_k_, dt_row_grid_(M), DT_BLOCK, 0, s, bias, c_dtype, A, ab_dtype, M, K, lda);
    DT_CHECK_LAUNCH(s, "dt_gemm_ex (bias gradient)");
    return DT_OK;
  }
  int64_t chunk_rows = K / BGRAD_MAX_CHUNKS + 1 > BGRAD_CHUNK_ROWS ? K / BGRAD_MAX_CHUNKS + 1 : BGRAD_CHUNK_ROWS;
  int64_t chunks = K > 0 ? (K + chunk_rows - 1) / chunk_rows : 1;
  double* partial = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&partial, (size_t)(chunks * M) * sizeof(double), s, "dt_gemm_ex"));
  dim3 grid((unsigned)((M + DT_BLOCK - 1) / DT_BLOCK < 65535 ? (M + DT_BLOCK - 1) / DT_BLOCK : 65535),
            (unsigned)chunks);
  if (K == 0) {
    DT_CHECK_CUDA_WORK(cudaMemsetAsync(partial, 0, (size_t)M * sizeof(double), s));
  } else {
    DT_LAUNCH(dt_gemm_bgrad_cols_k_, grid, DT_BLOCK, 0, s, partial, A, ab_dtype, M, K, lda, chunk_rows);
    DT_CHECK_LAUNCH(s, "dt_gemm_ex (bias gradient, chunks)");
  }
  DT_LAUNCH(dt_gemm_bgrad_fold_k_, dt_grid_for_(M, DT_BLOCK), DT_BLOCK, 0, s, bias, c_dtype, partial, chunks, M);
  DT_CHECK_LAUNCH(s, "dt_gemm_ex (bias gradient, fold)");
  return dt_scratch_free_(partial, s);
}
