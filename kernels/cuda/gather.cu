/* gather.cu — CUDA launches of the index-driven row copies: dt_embedding_fwd
 * and _bwd and dt_gather_rows. Indices are read back and checked on the host
 * before anything is written (the CPU library's rules and text). The
 * embedding backward groups positions by index on the host (a stable counting
 * sort) so that each table row adds its dout rows in index order with no
 * atomics: the same bits as the CPU, and the same on every run. */
#include <stdlib.h>
#include "cuda_internal.cuh"

/* ---- kernels -------------------------------------------------------------------- */

/* Copies row `idx[i]` of `src` into row i of `dst`, `words` words of type W per row. */
template <typename W>
__global__ void dt_gather_rows_k_(W* dst, const W* src, const int32_t* idx, int64_t n, int64_t words) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const W* from = src + (int64_t)idx[i] * words;
    W* to = dst + i * words;
    for (int64_t k = threadIdx.x; k < words; k += blockDim.x) to[k] = from[k];
  }
}

/* Table row uniq[u] = the sum, in position order, of the dout rows listed in
 * order[start[u] : start[u + 1]]; one block column per 256 table columns. */
__global__ void dt_embedding_bwd_k_(float* dtable, const float* dout, const int64_t* uniq, const int64_t* start,
                                    const int32_t* order, int64_t unique, int64_t C) {
  int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= C) return;
  for (int64_t u = blockIdx.x; u < unique; u += gridDim.x) {
    float acc = 0.0f; /* dtable starts at 0, as on the CPU */
    for (int64_t q = start[u]; q < start[u + 1]; q++) acc += dout[(int64_t)order[q] * C + j];
    dtable[uniq[u] * C + j] = acc;
  }
}

/* ---- helpers ------------------------------------------------------------------------ */

/* Largest word (16, 8, 4, 2 or 1 bytes) that divides the row size and both addresses. */
static int dt_word_bytes_(const void* a, const void* b, int64_t row_bytes) {
  uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)row_bytes;
  for (int w = 16; w > 1; w >>= 1)
    if ((bits & (uintptr_t)(w - 1)) == 0) return w;
  return 1;
}

template <typename W>
static dt_status dt_gather_as_(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t row_bytes,
                               cudaStream_t s, const char* name) {
  int64_t words = row_bytes / (int64_t)sizeof(W);
  int threads = words >= DT_BLOCK ? DT_BLOCK : (int)((words + 31) / 32 * 32);
  DT_LAUNCH(dt_gather_rows_k_<W>, dt_row_grid_(n), threads, 0, s, (W*)out, (const W*)inp, idx, n, words);
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

static dt_status dt_launch_gather_(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t row_bytes,
                                   cudaStream_t s, const char* name) {
  switch (dt_word_bytes_(out, inp, row_bytes)) {
    case 16: return dt_gather_as_<uint4>(out, inp, idx, n, row_bytes, s, name);
    case 8: return dt_gather_as_<uint2>(out, inp, idx, n, row_bytes, s, name);
    case 4: return dt_gather_as_<uint32_t>(out, inp, idx, n, row_bytes, s, name);
    case 2: return dt_gather_as_<uint16_t>(out, inp, idx, n, row_bytes, s, name);
    default: return dt_gather_as_<uint8_t>(out, inp, idx, n, row_bytes, s, name);
  }
}

/* Reads idx[0:n] back into *host (malloc'd; the caller frees it) and checks
 * every index against [0, limit) (limit < 0: only >= 0 is known). */
static dt_status dt_read_indices_(const char* name, const int32_t* idx, int64_t n, int64_t limit, cudaStream_t s,
                                  int32_t** host) {
  *host = (int32_t*)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
  if (!*host) return dt_fail_(DT_ERR_ALLOC, "%s: cannot allocate %lld host indices", name, (long long)n);
  DT_TRY_(dt_read_back_(*host, idx, (size_t)n * sizeof(int32_t), s));
  for (int64_t i = 0; i < n; i++) {
    int64_t v = (*host)[i];
    if (v < 0 || (limit >= 0 && v >= limit)) return dt_fail_index_(name, v, i, limit);
  }
  return DT_OK;
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_embedding_fwd(float* out, const int32_t* idx, const float* table, int64_t n, int64_t V,
                                     int64_t C, void* stream) {
  DT_TRY_(dt_check_embedding_fwd(out, idx, table, n, V, C));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int32_t* host = NULL;
  dt_status st = dt_read_indices_("dt_embedding_fwd", idx, n, V, s, &host);
  free(host);
  if (st != DT_OK || C == 0) return st;
  return dt_launch_gather_(out, table, idx, n, C * (int64_t)sizeof(float), s, "dt_embedding_fwd");
}

/* Groups positions by index: uniq[0:U] are the distinct indices in increasing
 * order, and order[start[u] : start[u+1]] the positions holding uniq[u], in
 * increasing order. `meta` (malloc'd) holds uniq then start. */
static dt_status dt_group_positions_(const int32_t* idx, int64_t n, int64_t V, int64_t** meta, int32_t** order,
                                     int64_t* unique) {
  int64_t* count = (int64_t*)calloc((size_t)V + 1, sizeof(int64_t));
  *order = (int32_t*)malloc((size_t)n * sizeof(int32_t));
  if (!count || !*order) {
    free(count);
    return dt_fail_(DT_ERR_ALLOC, "dt_embedding_bwd: cannot allocate host buffers for %lld positions", (long long)n);
  }
  int64_t u = 0;
  for (int64_t i = 0; i < n; i++) u += count[idx[i]]++ == 0;
  *meta = (int64_t*)malloc((size_t)(2 * u + 1) * sizeof(int64_t));
  if (!*meta) {
    free(count);
    return dt_fail_(DT_ERR_ALLOC, "dt_embedding_bwd: cannot allocate host buffers for %lld indices", (long long)u);
  }
  int64_t *uniq = *meta, *start = *meta + u;
  int64_t k = 0, offset = 0;
  for (int64_t v = 0; v < V; v++) { /* count[v] becomes the next free slot of index v */
    if (count[v] == 0) continue;
    uniq[k] = v;
    start[k++] = offset;
    int64_t c = count[v];
    count[v] = offset;
    offset += c;
  }
  start[u] = n;
  for (int64_t i = 0; i < n; i++) (*order)[count[idx[i]]++] = (int32_t)i; /* stable: positions ascend */
  free(count);
  *unique = u;
  return DT_OK;
}

/* Uploads the grouping and launches the per-row sums. */
static dt_status dt_embedding_bwd_run_(float* dtable, const float* dout, const int64_t* meta, const int32_t* order,
                                       int64_t unique, int64_t n, int64_t C, cudaStream_t s) {
  size_t meta_bytes = (size_t)(2 * unique + 1) * sizeof(int64_t), order_bytes = (size_t)n * sizeof(int32_t);
  char* dev = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&dev, meta_bytes + order_bytes, s, "dt_embedding_bwd"));
  /* pageable sources: each copy returns once its data is staged, so the host buffers may go */
  DT_CHECK_CUDA(cudaMemcpyAsync(dev, meta, meta_bytes, cudaMemcpyHostToDevice, s));
  DT_CHECK_CUDA(cudaMemcpyAsync(dev + meta_bytes, order, order_bytes, cudaMemcpyHostToDevice, s));
  const int64_t* uniq = (const int64_t*)dev;
  dim3 grid((unsigned)(unique < 65535 * 16 ? unique : 65535 * 16), (unsigned)((C + DT_BLOCK - 1) / DT_BLOCK));
  DT_LAUNCH(dt_embedding_bwd_k_, grid, DT_BLOCK, 0, s,
            dtable, dout, uniq, uniq + unique, (const int32_t*)(dev + meta_bytes), unique, C);
  DT_CHECK_LAUNCH(s, "dt_embedding_bwd");
  return dt_scratch_free_(dev, s);
}

static dt_status dt_zero_table_(float* table, int64_t elems, cudaStream_t s) {
  DT_CHECK_CUDA(cudaMemsetAsync(table, 0, (size_t)elems * sizeof(float), s));
  return DT_OK;
}

DT_EXPORT dt_status dt_embedding_bwd(float* dtable, const float* dout, const int32_t* idx, int64_t n, int64_t V,
                                     int64_t C, void* stream) {
  DT_TRY_(dt_check_embedding_bwd(dtable, dout, idx, n, V, C));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int32_t* host = NULL;
  dt_status st = dt_read_indices_("dt_embedding_bwd", idx, n, V, s, &host);
  if (st != DT_OK || V == 0 || C == 0) {
    free(host);
    return st;
  }
  int64_t* meta = NULL;
  int32_t* order = NULL;
  int64_t unique = 0;
  st = dt_group_positions_(host, n, V, &meta, &order, &unique);
  free(host);
  if (st == DT_OK) st = dt_zero_table_(dtable, V * C, s);
  if (st == DT_OK && unique > 0) st = dt_embedding_bwd_run_(dtable, dout, meta, order, unique, n, C, s);
  free(meta);
  free(order);
  return st;
}

DT_EXPORT dt_status dt_gather_rows(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t row_bytes,
                                   void* stream) {
  DT_TRY_(dt_check_gather_rows(out, inp, idx, n, row_bytes));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  /* The ABI passes no row count for inp, so only negative indices can be refused. */
  int32_t* host = NULL;
  dt_status st = dt_read_indices_("dt_gather_rows", idx, n, -1, s, &host);
  free(host);
  if (st != DT_OK || row_bytes == 0) return st;
  return dt_launch_gather_(out, inp, idx, n, row_bytes, s, "dt_gather_rows");
}
