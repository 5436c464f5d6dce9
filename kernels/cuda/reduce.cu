/* reduce.cu — CUDA launches of the reductions: dt_reduce_bcast (the gradient
 * of a broadcast operand), dt_sumsq (also of many tensors in one reduction,
 * and the gradient clipping built on it, with no read-back) and
 * dt_argmax_rows. Sums run in double
 * in two passes over a split that depends only on the sizes (partial sums,
 * then a fold in a fixed order), so a result never depends on timing; the
 * order differs from the CPU's (reduce.h), which agrees to double rounding.
 * dt_argmax_rows keeps dt_argmax_row's rules: the first NaN, else the first maximum. */
#include <stdlib.h>
#include "clip.h"
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

/* One block's share of a list of tensors: elements [start, end) of tensor `tensor`. */
typedef struct {
  int64_t tensor, start, end;
} dt_tensor_block_t;

/* partial[b] = sum of x^2 over block b (as dt_sumsq_partial_k_ sums one tensor's blocks). */
__global__ void dt_sumsq_blocks_k_(double* partial, const float* const* ptrs, const dt_tensor_block_t* blocks,
                                   int64_t nblocks) {
  for (int64_t b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const float* x = ptrs[blocks[b].tensor];
    double s = 0.0;
    for (int64_t i = blocks[b].start + threadIdx.x; i < blocks[b].end; i += blockDim.x) s += (double)x[i] * (double)x[i];
    double total = dt_block_sum_(s);
    if (threadIdx.x == 0) partial[b] = total;
  }
}

/* out[t] = the sum of tensor t's partials first[t]..first[t+1] (as dt_sum_partials_k_, 1024 threads). */
__global__ void dt_sumsq_fold_k_(double* out, const double* partial, const int64_t* first, int64_t num) {
  for (int64_t t = blockIdx.x; t < num; t += gridDim.x) {
    double s = 0.0;
    for (int64_t b = first[t] + threadIdx.x; b < first[t + 1]; b += blockDim.x) s += partial[b];
    double total = dt_block_sum_(s);
    if (threadIdx.x == 0) out[t] = total;
  }
}

/* The global norm and the clipping coefficient, from the per-tensor sums (one thread). */
__global__ void dt_clip_total_k_(float* total, float* coef, const double* sumsq, int64_t num, double max_norm) {
  float t = dt_clip_total_f(sumsq, num);
  *total = t;
  *coef = dt_clip_coef_f(max_norm, t);
}

/* x *= *coef over every block of the list (as dt_scale: coef * x). */
__global__ void dt_scale_blocks_k_(float* const* ptrs, const dt_tensor_block_t* blocks, int64_t nblocks,
                                   const float* coef) {
  float c = *coef;
  for (int64_t b = blockIdx.x; b < nblocks; b += gridDim.x) {
    float* x = ptrs[blocks[b].tensor];
    for (int64_t i = blocks[b].start + threadIdx.x; i < blocks[b].end; i += blockDim.x) x[i] = c * x[i];
  }
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

/* A list of tensors split into blocks as dt_sumsq splits one tensor, in
 * device scratch: the pointers, each tensor's first block (num + 1 entries),
 * the blocks, then room for a double per block and a float. */
typedef struct {
  char* scratch;
  const float** ptrs;
  int64_t* first;
  dt_tensor_block_t* blocks;
  double* partial;
  float* coef;
  int64_t nblocks;
} dt_tensor_list_t;

/* A pageable source: the copy returns once it is staged, so the host table may go. */
static dt_status dt_upload_(void* dev, const void* host, size_t bytes, cudaStream_t s) {
  DT_CHECK_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
  return DT_OK;
}

static dt_status dt_tensor_list_(dt_tensor_list_t* L, const void* const* ptrs, const int64_t* counts, int64_t num,
                                 cudaStream_t s, const char* who) {
  memset(L, 0, sizeof *L);
  int64_t nblocks = 0;
  for (int64_t t = 0; t < num; t++) {
    int64_t b = (counts[t] + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
    nblocks += b > 4096 ? 4096 : b;
  }
  size_t head = (size_t)num * sizeof(void*) + (size_t)(num + 1) * sizeof(int64_t) +
                (size_t)nblocks * sizeof(dt_tensor_block_t);
  head = (head + 15) / 16 * 16;
  char* host = (char*)malloc(head ? head : 16);
  if (!host) return dt_fail_(DT_ERR_ALLOC, "%s: cannot allocate a table of %lld tensors", who, (long long)num);
  const float** hp = (const float**)host;
  int64_t* hf = (int64_t*)(host + num * sizeof(void*));
  dt_tensor_block_t* hb = (dt_tensor_block_t*)(hf + num + 1);
  int64_t b = 0;
  for (int64_t t = 0; t < num; t++) {
    hp[t] = (const float*)ptrs[t];
    hf[t] = b;
    int64_t n = counts[t], blocks = (n + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
    if (blocks > 4096) blocks = 4096;
    int64_t per_block = blocks ? (n + blocks - 1) / blocks : 0;
    for (int64_t k = 0; k < blocks; k++, b++) {
      hb[b].tensor = t;
      hb[b].start = k * per_block;
      hb[b].end = (k + 1) * per_block < n ? (k + 1) * per_block : n;
    }
  }
  hf[num] = b;
  size_t bytes = head + (size_t)nblocks * sizeof(double) + 16;
  dt_status st = dt_scratch_alloc_((void**)&L->scratch, bytes, s, who);
  if (st == DT_OK && head) st = dt_upload_(L->scratch, host, head, s);
  free(host);
  if (st != DT_OK) return st;
  L->ptrs = (const float**)L->scratch;
  L->first = (int64_t*)(L->scratch + num * sizeof(void*));
  L->blocks = (dt_tensor_block_t*)(L->first + num + 1);
  L->partial = (double*)(L->scratch + head);
  L->coef = (float*)(L->partial + nblocks);
  L->nblocks = nblocks;
  return DT_OK;
}

/* out[t] = the sum of squares of tensor t, in the same order as dt_sumsq. */
static dt_status dt_sumsq_list_(double* out, const dt_tensor_list_t* L, int64_t num, cudaStream_t s, const char* who) {
  if (L->nblocks > 0) {
    DT_LAUNCH(dt_sumsq_blocks_k_, dt_row_grid_(L->nblocks), DT_BLOCK, 0, s, L->partial, L->ptrs, L->blocks,
              L->nblocks);
    DT_CHECK_LAUNCH(s, who);
  }
  if (num > 0) {
    DT_LAUNCH(dt_sumsq_fold_k_, dt_row_grid_(num), 1024, 0, s, out, L->partial, L->first, num);
    DT_CHECK_LAUNCH(s, who);
  }
  return DT_OK;
}

/* out[i] = dt_sumsq of tensor i, every tensor in one reduction and no read-back. */
DT_EXPORT dt_status dt_sumsq_many(double* out, const void* const* ptrs, const int64_t* counts, int64_t num,
                                  void* stream) {
  DT_TRY_(dt_check_sumsq_many(out, ptrs, counts, num));
  if (num == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_tensor_list_t L;
  DT_TRY_(dt_tensor_list_(&L, ptrs, counts, num, s, "dt_sumsq_many"));
  dt_status st = dt_sumsq_list_(out, &L, num, s, "dt_sumsq_many");
  dt_status freed = dt_scratch_free_(L.scratch, s);
  return st != DT_OK ? st : freed;
}

/* Clipping to a global norm on the device: sumsq[i] of each tensor, *total
 * the norm (clip.h), then every gradient scaled by the coefficient (max_norm
 * = +inf: the norm only). Reading *total is the caller's one sync, if any. */
DT_EXPORT dt_status dt_clip_grad_norm(float* total, double* sumsq, void* const* ptrs, const int64_t* counts,
                                      int64_t num, double max_norm, void* stream) {
  DT_TRY_(dt_check_clip_grad_norm(total, sumsq, (const void* const*)ptrs, counts, num, max_norm));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_tensor_list_t L;
  DT_TRY_(dt_tensor_list_(&L, (const void* const*)ptrs, counts, num, s, "dt_clip_grad_norm"));
  dt_status st = dt_sumsq_list_(sumsq, &L, num, s, "dt_clip_grad_norm (sums of squares)");
  if (st == DT_OK) {
    DT_LAUNCH(dt_clip_total_k_, 1, 1, 0, s, total, L.coef, sumsq, num, max_norm);
    DT_CHECK_LAUNCH(s, "dt_clip_grad_norm (norm)");
  }
  if (st == DT_OK && max_norm < INFINITY && L.nblocks > 0) {
    DT_LAUNCH(dt_scale_blocks_k_, dt_row_grid_(L.nblocks), DT_BLOCK, 0, s, (float* const*)L.ptrs, L.blocks, L.nblocks,
              (const float*)L.coef);
    DT_CHECK_LAUNCH(s, "dt_clip_grad_norm (scale)");
  }
  dt_status freed = dt_scratch_free_(L.scratch, s);
  return st != DT_OK ? st : freed;
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
