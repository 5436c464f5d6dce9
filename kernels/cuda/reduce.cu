/* reduce.cu — CUDA launches of the reductions: dt_reduce_bcast (the gradient
 * of a broadcast operand), dt_sumsq and dt_argmax_rows. Sums run in double
 * in two passes over a split that depends only on the sizes (partial sums,
 * then a fold in a fixed order), so a result never depends on timing; the
 * order differs from the CPU's (reduce.h), which agrees to double rounding.
 * dt_argmax_rows keeps dt_argmax_row's rules: the first NaN, else the first maximum. */
#include "cuda_internal.cuh"
#include "dt_math.h"

/* Columns per block and threads per column in the column-sum kernels. */
#define COLS 32
#define COL_THREADS 8
/* Elements one block sums in the run and sum-of-squares kernels. */
#define BLOCK_ELEMS (1 << 16)

/* ---- kernels -------------------------------------------------------------------- */

/* partial[c * bn + j] = sum of inp[r * bn + j] over rows r of chunk c (inner == 1). */
__global__ void dt_col_partial_k_(double* partial, const float* inp, int64_t n, int64_t bn, int64_t rows,
                                  int64_t chunk_rows) {
  __shared__ double acc[COL_THREADS][COLS + 1];
  int64_t j = (int64_t)blockIdx.x * COLS + threadIdx.x;
  int64_t c = blockIdx.y;
  int64_t r1 = (c + 1) * chunk_rows < rows ? (c + 1) * chunk_rows : rows;
  double s = 0.0;
  if (j < bn)
    for (int64_t r = c * chunk_rows + threadIdx.y; r < r1; r += COL_THREADS) {
      int64_t i = r * bn + j;
      if (i < n) s += (double)inp[i]; /* the last row may be partial */
    }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < bn) {
    double t = 0.0;
    for (int k = 0; k < COL_THREADS; k++) t += acc[k][threadIdx.x];
    partial[c * bn + j] = t;
  }
}

/* out[j] = sum over c of partial[c * stride_c + j * stride_j], in order of c. */
__global__ void dt_fold_k_(float* out, const double* partial, int64_t outputs, int64_t chunks, int64_t stride_c,
                           int64_t stride_j) {
  DT_GRID_STRIDE(j, outputs) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; c++) s += partial[c * stride_c + j * stride_j];
    out[j] = (float)s;
  }
}

/* partial[j * chunks + c] = the sum of chunk c of output j's runs (inner > 1):
 * run k of output j is inp[(k * bn + j) * inner : + inner]. */
__global__ void dt_runs_partial_k_(double* partial, const float* inp, int64_t n, int64_t bn, int64_t inner,
                                   int64_t chunks) {
  for (int64_t j = blockIdx.x; j < bn; j += gridDim.x) {
    int64_t c = blockIdx.y;
    int64_t first = j * inner;
    int64_t runs = first < n ? (n - first + bn * inner - 1) / (bn * inner) : 0;
    int64_t k0 = runs * c / chunks, k1 = runs * (c + 1) / chunks;
    double s = 0.0;
    for (int64_t k = k0; k < k1; k++) {
      int64_t start = (k * bn + j) * inner;
      int64_t len = n - start < inner ? n - start : inner;
      for (int64_t off = threadIdx.x; off < len; off += blockDim.x) s += (double)inp[start + off];
    }
    double total = dt_block_sum_(s);
    if (threadIdx.x == 0) partial[j * chunks + c] = total;
  }
}

/* partial[b] = sum of x^2 over block b's range of inp. */
__global__ void dt_sumsq_partial_k_(double* partial, const float* inp, int64_t n, int64_t per_block) {
  int64_t b = blockIdx.x;
  int64_t end = (b + 1) * per_block < n ? (b + 1) * per_block : n;
  double s = 0.0;
  for (int64_t i = b * per_block + threadIdx.x; i < end; i += blockDim.x) s += (double)inp[i] * (double)inp[i];
  double total = dt_block_sum_(s);
  if (threadIdx.x == 0) partial[b] = total;
}

/* *out = sum of partial[0:blocks] (one block). */
__global__ void dt_sum_partials_k_(double* out, const double* partial, int64_t blocks) {
  double s = 0.0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
  double total = dt_block_sum_(s);
  if (threadIdx.x == 0) *out = total;
}

/* The better of two argmax candidates: a NaN beats any number (the first NaN
 * wins, as torch.argmax), then the larger value, then the smaller index. */
__device__ __forceinline__ void dt_argmax_merge_(float* v, int64_t* at, int* nan, float v2, int64_t at2, int nan2) {
  int take;
  if (*nan || nan2) take = nan2 && (!*nan || at2 < *at);
  else take = v2 > *v || (v2 == *v && at2 < *at);
  if (take) {
    *v = v2;
    *at = at2;
    *nan = nan2;
  }
}

__global__ void dt_argmax_rows_k_(int32_t* out, const float* inp, int64_t rows, int64_t cols) {
  __shared__ float sv[DT_BLOCK];
  __shared__ int64_t sat[DT_BLOCK];
  __shared__ int snan[DT_BLOCK];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = inp + r * cols;
    float v = -INFINITY;
    int64_t at = INT64_MAX;
    int nan = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float y = x[j];
      if (dt_isnan_f(y)) { /* the first NaN this thread sees is its smallest */
        v = y;
        at = j;
        nan = 1;
        break;
      }
      if (at == INT64_MAX || y > v) {
        v = y;
        at = j;
      }
    }
    sv[threadIdx.x] = v;
    sat[threadIdx.x] = at;
    snan[threadIdx.x] = nan;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
      if ((int)threadIdx.x < half) {
        float mv = sv[threadIdx.x];
        int64_t mat = sat[threadIdx.x];
        int mnan = snan[threadIdx.x];
        dt_argmax_merge_(&mv, &mat, &mnan, sv[threadIdx.x + half], sat[threadIdx.x + half], snan[threadIdx.x + half]);
        sv[threadIdx.x] = mv;
        sat[threadIdx.x] = mat;
        snan[threadIdx.x] = mnan;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = (int32_t)sat[0];
    __syncthreads();
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

/* Column sums of a (rows, bn) matrix whose last row may be partial (inner == 1). */
static dt_status dt_reduce_cols_(float* out, const float* inp, int64_t n, int64_t bn, cudaStream_t s) {
  int64_t rows = (n + bn - 1) / bn;
  int64_t chunk_rows = rows < 256 ? rows : 256;
  if (chunk_rows < 1) chunk_rows = 1;
  int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  if (chunks > 1024) { /* keep the grid's y extent and the fold short */
    chunk_rows = (rows + 1023) / 1024;
    chunks = (rows + chunk_rows - 1) / chunk_rows;
  }
  if (chunks < 1) chunks = 1;
  double* partial = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&partial, (size_t)(chunks * bn) * sizeof(double), s, "dt_reduce_bcast"));
  dim3 grid((unsigned)((bn + COLS - 1) / COLS), (unsigned)chunks);
  DT_LAUNCH(dt_col_partial_k_, grid, dim3(COLS, COL_THREADS), 0, s, partial, inp, n, bn, rows, chunk_rows);
  DT_CHECK_LAUNCH(s, "dt_reduce_bcast (column sums)");
  DT_LAUNCH(dt_fold_k_, dt_grid_for_(bn, DT_BLOCK), DT_BLOCK, 0, s, out, partial, bn, chunks, bn, 1);
  DT_CHECK_LAUNCH(s, "dt_reduce_bcast (fold)");
  return dt_scratch_free_(partial, s);
}

/* Sums of the inner-long runs that share an index modulo bn (inner > 1). */
static dt_status dt_reduce_runs_(float* out, const float* inp, int64_t n, int64_t bn, int64_t inner, cudaStream_t s) {
  int64_t per_output = n / bn + 1;
  int64_t chunks = (per_output + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
  if (chunks > 1024) chunks = 1024;
  if (chunks < 1) chunks = 1;
  double* partial = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&partial, (size_t)(chunks * bn) * sizeof(double), s, "dt_reduce_bcast"));
  int threads = inner >= DT_BLOCK ? DT_BLOCK : (int)((inner + 31) / 32 * 32);
  unsigned gx = dt_row_grid_(bn);
  DT_LAUNCH(dt_runs_partial_k_, dim3(gx, (unsigned)chunks), threads, 0, s, partial, inp, n, bn, inner, chunks);
  DT_CHECK_LAUNCH(s, "dt_reduce_bcast (run sums)");
  DT_LAUNCH(dt_fold_k_, dt_grid_for_(bn, DT_BLOCK), DT_BLOCK, 0, s, out, partial, bn, chunks, 1, chunks);
  DT_CHECK_LAUNCH(s, "dt_reduce_bcast (fold)");
  return dt_scratch_free_(partial, s);
}

DT_EXPORT dt_status dt_reduce_bcast(float* out, const float* inp, int64_t n, int64_t bn, int64_t inner,
                                    void* stream) {
  DT_TRY_(dt_check_reduce_bcast(out, inp, n, bn, inner));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (n == 0) { /* every sum is empty */
    DT_CHECK_CUDA(cudaMemsetAsync(out, 0, (size_t)bn * sizeof(float), s));
    return DT_OK;
  }
  return inner == 1 ? dt_reduce_cols_(out, inp, n, bn, s) : dt_reduce_runs_(out, inp, n, bn, inner, s);
}

DT_EXPORT dt_status dt_sumsq(double* out, const float* inp, int64_t n, void* stream) {
  DT_TRY_(dt_check_sumsq(out, inp, n));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (n == 0) {
    DT_CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(double), s));
    return DT_OK;
  }
  int64_t blocks = (n + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
  if (blocks > 4096) blocks = 4096;
  int64_t per_block = (n + blocks - 1) / blocks;
  double* partial = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&partial, (size_t)blocks * sizeof(double), s, "dt_sumsq"));
  DT_LAUNCH(dt_sumsq_partial_k_, (unsigned)blocks, DT_BLOCK, 0, s, partial, inp, n, per_block);
  DT_CHECK_LAUNCH(s, "dt_sumsq (blocks)");
  DT_LAUNCH(dt_sum_partials_k_, 1, 1024, 0, s, out, partial, blocks);
  DT_CHECK_LAUNCH(s, "dt_sumsq (fold)");
  return dt_scratch_free_(partial, s);
}

DT_EXPORT dt_status dt_argmax_rows(int32_t* out, const float* inp, int64_t rows, int64_t cols, void* stream) {
  DT_TRY_(dt_check_argmax_rows(out, inp, rows, cols));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_argmax_rows_k_, dt_row_grid_(rows), DT_BLOCK, 0, s, out, inp, rows, cols);
  DT_CHECK_LAUNCH(s, "dt_argmax_rows");
  return DT_OK;
}
