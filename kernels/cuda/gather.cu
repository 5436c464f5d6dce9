/* gather.cu — CUDA launches of the index-driven row copies: dt_embedding_fwd
 * and _bwd and dt_gather_rows. Indices are checked on the device, never read
 * back: a bad one gets an output row of all-ones bits (NaN) or is left out of
 * the gradient, and the first is recorded for dt_deferred_error, in the CPU
 * library's words. The embedding backward sorts the positions by index on the
 * device (a stable LSD radix sort, 8 bits a pass), so each table row adds its
 * dout rows in position order with no atomics: the CPU's bits, every run. */
#include "cuda_internal.cuh"

/* Positions per radix-sort tile (one block of as many threads). */
#define SORT_TILE 256

/* ---- kernels -------------------------------------------------------------------- */

/* Copies row `idx[i]` of `src` into row i of `dst`, `words` words of type W per
 * row; an index outside [0, limit) (limit < 0: a negative one) is marked and
 * its row filled with all-ones bits. */
template <typename W>
__global__ void dt_gather_rows_k_(W* dst, const W* src, const int32_t* idx, int64_t n, int64_t words, int64_t limit,
                                  unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    int64_t v = idx[i];
    W* to = dst + i * words;
    if (v < 0 || (limit >= 0 && v >= limit)) {
      if (threadIdx.x == 0) dt_mark_bad_(first_bad, i);
      W ones;
      memset(&ones, 0xff, sizeof ones);
      for (int64_t k = threadIdx.x; k < words; k += blockDim.x) to[k] = ones;
      continue;
    }
    const W* from = src + v * words;
    for (int64_t k = threadIdx.x; k < words; k += blockDim.x) to[k] = from[k];
  }
}

/* Only checks idx[0:n] against [0, limit) (limit < 0: >= 0): calls that copy nothing. */
__global__ void dt_check_indices_k_(const int32_t* idx, int64_t n, int64_t limit, unsigned long long* first_bad) {
  DT_GRID_STRIDE(i, n) {
    int64_t v = idx[i];
    if (v < 0 || (limit >= 0 && v >= limit)) dt_mark_bad_(first_bad, i);
  }
}

/* keys[i] = idx[i], or V (after every row) when it is outside [0, V), which
 * is marked; pos[i] = i. */
__global__ void dt_embedding_keys_k_(int32_t* keys, int32_t* pos, const int32_t* idx, int64_t n, int64_t V,
                                     unsigned long long* first_bad) {
  DT_GRID_STRIDE(i, n) {
    int64_t v = idx[i];
    int bad = v < 0 || v >= V;
    if (bad) dt_mark_bad_(first_bad, i);
    keys[i] = bad ? (int32_t)V : (int32_t)v;
    pos[i] = (int32_t)i;
  }
}

/* hist[d * tiles + t] = how many keys of tile t have digit d (bits shift..shift+7). */
__global__ void dt_radix_hist_k_(int32_t* hist, const int32_t* keys, int64_t n, int shift, int64_t tiles) {
  __shared__ int32_t count[256];
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    count[threadIdx.x] = 0;
    __syncthreads();
    int64_t e = t * SORT_TILE + threadIdx.x;
    if (e < n) atomicAdd(&count[(keys[e] >> shift) & 255], 1);
    __syncthreads();
    hist[(int64_t)threadIdx.x * tiles + t] = count[threadIdx.x];
    __syncthreads();
  }
}

/* a[0:m] = its exclusive prefix sums (one block; the counts fit in int32). */
__global__ void dt_exclusive_scan_k_(int32_t* a, int64_t m) {
  __shared__ int64_t part[1024];
  int64_t per = (m + blockDim.x - 1) / blockDim.x;
  int64_t lo = threadIdx.x * per, hi = lo + per < m ? lo + per : m;
  int64_t s = 0;
  for (int64_t i = lo; i < hi; i++) s += a[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t run = 0;
    for (unsigned k = 0; k < blockDim.x; k++) {
      int64_t v = part[k];
      part[k] = run;
      run += v;
    }
  }
  __syncthreads();
  int64_t run = part[threadIdx.x];
  for (int64_t i = lo; i < hi; i++) {
    int64_t v = a[i];
    a[i] = (int32_t)run;
    run += v;
  }
}

/* One stable pass: each key (and its position) goes to offset[digit][tile]
 * plus the number of keys before it in its tile with the same digit. */
__global__ void dt_radix_scatter_k_(int32_t* keys_out, int32_t* pos_out, const int32_t* keys_in, const int32_t* pos_in,
                                    const int32_t* offset, int64_t n, int shift, int64_t tiles) {
  __shared__ int32_t digit[SORT_TILE];
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    int64_t e = t * SORT_TILE + threadIdx.x;
    int32_t d = e < n ? (keys_in[e] >> shift) & 255 : 256;
    digit[threadIdx.x] = d;
    __syncthreads();
    if (e < n) {
      int32_t before = 0;
      for (unsigned k = 0; k < threadIdx.x; k++) before += digit[k] == d;
      int64_t to = (int64_t)offset[(int64_t)d * tiles + t] + before;
      keys_out[to] = keys_in[e];
      pos_out[to] = pos_in[e];
    }
    __syncthreads();
  }
}

/* For each run of equal keys k in [0, V) of the sorted positions, table row k
 * = the sum of its dout rows in position order (0 + a + b + ..., as the CPU's
 * loop adds them into a zeroed table). */
__global__ void dt_embedding_runs_k_(float* dtable, const float* dout, const int32_t* keys, const int32_t* pos,
                                     int64_t n, int64_t V, int64_t C) {
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    int32_t key = keys[k];
    if (key >= V || (k > 0 && keys[k - 1] == key)) continue; /* not a run's first position */
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      float acc = 0.0f;
      for (int64_t q = k; q < n && keys[q] == key; q++) acc += dout[(int64_t)pos[q] * C + j];
      dtable[(int64_t)key * C + j] = acc;
    }
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
                               int64_t limit, unsigned long long* first_bad, cudaStream_t s, const char* name) {
  int64_t words = row_bytes / (int64_t)sizeof(W);
  int threads = words >= DT_BLOCK ? DT_BLOCK : (int)((words + 31) / 32 * 32);
  DT_LAUNCH(dt_gather_rows_k_<W>, dt_row_grid_(n), threads, 0, s, (W*)out, (const W*)inp, idx, n, words, limit,
            first_bad);
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

/* The checked row copy behind dt_embedding_fwd (limit V) and dt_gather_rows
 * (limit -1); its first bad index is recorded as data error `op`. */
static dt_status dt_launch_gather_(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t row_bytes,
                                   int64_t limit, int32_t op, cudaStream_t s, const char* name) {
  unsigned long long* first_bad = NULL;
  DT_TRY_(dt_bad_begin_(&first_bad, s, name));
  dt_status st = DT_OK;
  int word = row_bytes == 0 ? 0 : dt_word_bytes_(out, inp, row_bytes);
  switch (word) {
    case 0: /* nothing to copy, but the indices are still checked, as on the CPU */
      DT_LAUNCH(dt_check_indices_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, idx, n, limit, first_bad);
      DT_CHECK_LAUNCH(s, name);
      break;
    case 16: st = dt_gather_as_<uint4>(out, inp, idx, n, row_bytes, limit, first_bad, s, name); break;
    case 8: st = dt_gather_as_<uint2>(out, inp, idx, n, row_bytes, limit, first_bad, s, name); break;
    case 4: st = dt_gather_as_<uint32_t>(out, inp, idx, n, row_bytes, limit, first_bad, s, name); break;
    case 2: st = dt_gather_as_<uint16_t>(out, inp, idx, n, row_bytes, limit, first_bad, s, name); break;
    default: st = dt_gather_as_<uint8_t>(out, inp, idx, n, row_bytes, limit, first_bad, s, name);
  }
  if (st != DT_OK) return st;
  return dt_bad_end_(first_bad, op, idx, DT_I32, limit, 0, s);
}

/* Sorts (keys, pos) by key, stably, in `passes` 8-bit passes; the result is
 * in keys[0:n] / pos[0:n] again (the pass count is made even with a copy). */
static dt_status dt_radix_sort_(int32_t* keys, int32_t* pos, int32_t* keys2, int32_t* pos2, int32_t* hist, int64_t n,
                                int passes, cudaStream_t s) {
  int64_t tiles = (n + SORT_TILE - 1) / SORT_TILE;
  unsigned grid = dt_row_grid_(tiles);
  for (int p = 0; p < passes; p++) {
    int shift = 8 * p;
    DT_LAUNCH(dt_radix_hist_k_, grid, SORT_TILE, 0, s, hist, keys, n, shift, tiles);
    DT_CHECK_LAUNCH(s, "dt_embedding_bwd (radix histogram)");
    DT_LAUNCH(dt_exclusive_scan_k_, 1, 1024, 0, s, hist, 256 * tiles);
    DT_CHECK_LAUNCH(s, "dt_embedding_bwd (radix offsets)");
    DT_LAUNCH(dt_radix_scatter_k_, grid, SORT_TILE, 0, s, keys2, pos2, keys, pos, hist, n, shift, tiles);
    DT_CHECK_LAUNCH(s, "dt_embedding_bwd (radix scatter)");
    int32_t* t = keys;
    keys = keys2, keys2 = t;
    t = pos, pos = pos2, pos2 = t;
  }
  if (passes % 2) { /* the sorted run is in the second buffers */
    DT_CHECK_CUDA(cudaMemcpyAsync(keys2, keys, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
    DT_CHECK_CUDA(cudaMemcpyAsync(pos2, pos, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
  }
  return DT_OK;
}

static dt_status dt_zero_table_(float* table, int64_t elems, cudaStream_t s) {
  if (elems > 0) DT_CHECK_CUDA(cudaMemsetAsync(table, 0, (size_t)elems * sizeof(float), s));
  return DT_OK;
}

/* Sorts the positions by index (keys V for bad ones, which are recorded) and
 * sums each index's dout rows into its table row. */
static dt_status dt_embedding_bwd_run_(float* dtable, const float* dout, const int32_t* idx, int64_t n, int64_t V,
                                       int64_t C, cudaStream_t s) {
  int64_t tiles = (n + SORT_TILE - 1) / SORT_TILE;
  size_t bytes = (size_t)(4 * n + 256 * tiles) * sizeof(int32_t);
  int32_t* scratch = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&scratch, bytes, s, "dt_embedding_bwd"));
  int32_t *keys = scratch, *pos = scratch + n, *keys2 = scratch + 2 * n, *pos2 = scratch + 3 * n;
  int32_t* hist = scratch + 4 * n;
  unsigned long long* first_bad = NULL;
  dt_status st = dt_bad_begin_(&first_bad, s, "dt_embedding_bwd");
  if (st == DT_OK) {
    DT_LAUNCH(dt_embedding_keys_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, keys, pos, idx, n, V, first_bad);
    DT_CHECK_LAUNCH(s, "dt_embedding_bwd (keys)");
    st = dt_bad_end_(first_bad, DT_DATA_EMBEDDING_BWD, idx, DT_I32, V, 0, s);
  }
  if (st == DT_OK && V > 0 && C > 0) {
    int bits = 64 - __builtin_clzll((unsigned long long)V); /* keys are in [0, V] */
    st = dt_radix_sort_(keys, pos, keys2, pos2, hist, n, (bits + 7) / 8, s);
  }
  if (st == DT_OK && V > 0 && C > 0) {
    int threads = C >= DT_BLOCK ? DT_BLOCK : (int)((C + 31) / 32 * 32);
    DT_LAUNCH(dt_embedding_runs_k_, dt_row_grid_(n), threads, 0, s, dtable, dout, keys, pos, n, V, C);
    DT_CHECK_LAUNCH(s, "dt_embedding_bwd (row sums)");
  }
  dt_status freed = dt_scratch_free_(scratch, s);
  return st != DT_OK ? st : freed;
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_embedding_fwd(float* out, const int32_t* idx, const float* table, int64_t n, int64_t V,
                                     int64_t C, void* stream) {
  DT_TRY_(dt_check_embedding_fwd(out, idx, table, n, V, C));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  return dt_launch_gather_(out, table, idx, n, C * (int64_t)sizeof(float), V, DT_DATA_EMBEDDING_FWD, s,
                           "dt_embedding_fwd");
}

DT_EXPORT dt_status dt_embedding_bwd(float* dtable, const float* dout, const int32_t* idx, int64_t n, int64_t V,
                                     int64_t C, void* stream) {
  DT_TRY_(dt_check_embedding_bwd(dtable, dout, idx, n, V, C));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (V > 0 && C > 0) DT_TRY_(dt_zero_table_(dtable, V * C, s));
  if (n == 0) return DT_OK;
  return dt_embedding_bwd_run_(dtable, dout, idx, n, V, C, s);
}

DT_EXPORT dt_status dt_gather_rows(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t row_bytes,
                                   void* stream) {
  DT_TRY_(dt_check_gather_rows(out, inp, idx, n, row_bytes));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  /* The ABI passes no row count for inp, so only negative indices can be refused. */
  return dt_launch_gather_(out, inp, idx, n, row_bytes, -1, DT_DATA_GATHER_ROWS, s, "dt_gather_rows");
}
