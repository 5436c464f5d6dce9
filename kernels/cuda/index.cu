/* index.cu — CUDA launches of the dimension-wise index kernels on tensors
 * viewed as (outer, D, inner): dt_gather_dim (torch.gather) and
 * dt_index_select, and their backwards dt_scatter_add_dim and dt_index_add.
 * Indices are checked on the device, never read back: a gather writes
 * all-ones bits (NaN) for a bad one, a backward leaves it out, and the first
 * (in the CPU's scan order) is recorded for dt_deferred_error in the CPU's
 * words. A backward gives each (o, column) to one thread, which adds dout in
 * j order into the zeroed dinp column: the CPU's bits, with no atomics. */
#include "cuda_internal.cuh"
#include "index.h"
#include "ops_checks.h"

/* ---- kernels -------------------------------------------------------------------- */

/* Output element k = (o, j, i), `words` words of type W each: from input
 * element (o, idx, i), idx = idx[k] (per_element) or idx[j]; a bad index is
 * marked at its position (k or j). */
template <typename W>
__global__ void dt_gather_dim_k_(W* out, const W* inp, const int32_t* idx, int64_t n, int64_t D, int64_t J,
                                 int64_t inner, int64_t words, int per_element, unsigned long long* first_bad) {
  DT_GRID_STRIDE(k, n) {
    int64_t pos = per_element ? k : (k / inner) % J;
    int32_t v = idx[pos];
    W* to = out + k * words;
    if (v < 0 || v >= D) {
      dt_mark_bad_(first_bad, pos);
      W ones;
      memset(&ones, 0xff, sizeof ones);
      for (int64_t w = 0; w < words; w++) to[w] = ones;
      continue;
    }
    int64_t src = per_element ? dt_gather_dim_src(k, idx, D, J, inner) : dt_index_select_src(k, idx, D, J, inner);
    for (int64_t w = 0; w < words; w++) to[w] = inp[src * words + w];
  }
}

/* Column c = (o, i): dinp[o, :, i] = 0, then dout[o, j, i] added at row
 * idx (per element: idx[o, j, i]; else idx[j]) for j in order; a bad index is
 * marked at its position and left out. */
__global__ void dt_scatter_add_k_(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                  int64_t J, int64_t inner, int per_element, unsigned long long* first_bad) {
  DT_GRID_STRIDE(c, outer * inner) {
    int64_t o = c / inner, i = c % inner;
    float* col = dinp + o * D * inner + i;
    for (int64_t d = 0; d < D; d++) col[d * inner] = 0.0f;
    for (int64_t j = 0; j < J; j++) {
      int64_t at = (o * J + j) * inner + i, pos = per_element ? at : j;
      int32_t v = idx[pos];
      if (v < 0 || v >= D) {
        dt_mark_bad_(first_bad, pos);
        continue;
      }
      col[(int64_t)v * inner] += dout[at];
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

template <typename W>
static dt_status dt_gather_dim_as_(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t D, int64_t J,
                                   int64_t inner, int64_t elem, int per_element, unsigned long long* first_bad,
                                   cudaStream_t s, const char* name) {
  int64_t words = elem / (int64_t)sizeof(W);
  DT_LAUNCH(dt_gather_dim_k_<W>, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, (W*)out, (const W*)inp, idx, n, D, J,
            inner, words, per_element, first_bad);
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

/* The checked copy behind both gathers; its first bad index is data error `op`. */
static dt_status dt_gather_run_(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D, int64_t J,
                                int64_t inner, int64_t elem, int per_element, int32_t op, void* stream,
                                const char* name) {
  int64_t n = outer * J * inner;
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  unsigned long long* first_bad = NULL;
  DT_TRY_(dt_bad_begin_(&first_bad, s, name));
  uintptr_t bits = (uintptr_t)out | (uintptr_t)inp | (uintptr_t)elem;
  int word = (bits & 15) == 0 ? 16 : (bits & 7) == 0 ? 8 : (bits & 3) == 0 ? 4 : (bits & 1) == 0 ? 2 : 1;
  dt_status st;
#define DT_GATHER_AS_(W) dt_gather_dim_as_<W>(out, inp, idx, n, D, J, inner, elem, per_element, first_bad, s, name)
  switch (word) {
    case 16: st = DT_GATHER_AS_(uint4); break;
    case 8: st = DT_GATHER_AS_(uint2); break;
    case 4: st = DT_GATHER_AS_(uint32_t); break;
    case 2: st = DT_GATHER_AS_(uint16_t); break;
    default: st = DT_GATHER_AS_(uint8_t);
  }
#undef DT_GATHER_AS_
  if (st != DT_OK) {
    dt_scratch_free_(first_bad, s);
    return st;
  }
  return dt_bad_end_(first_bad, op, idx, DT_I32, D, 0, s);
}

DT_EXPORT dt_status dt_gather_dim(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D, int64_t J,
                                  int64_t inner, int64_t elem_bytes, void* stream) {
  DT_TRY_(dt_check_gather_dim(out, inp, idx, outer, D, J, inner, elem_bytes));
  return dt_gather_run_(out, inp, idx, outer, D, J, inner, elem_bytes, 1, DT_DATA_GATHER_DIM, stream, "dt_gather_dim");
}

DT_EXPORT dt_status dt_index_select(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D,
                                    int64_t J, int64_t inner, int64_t elem_bytes, void* stream) {
  DT_TRY_(dt_check_index_select(out, inp, idx, outer, D, J, inner, elem_bytes));
  return dt_gather_run_(out, inp, idx, outer, D, J, inner, elem_bytes, 0, DT_DATA_INDEX_SELECT, stream,
                        "dt_index_select");
}

static dt_status dt_scatter_launch_(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                    int64_t J, int64_t inner, int per_element, unsigned long long* first_bad,
                                    cudaStream_t s, const char* name) {
  DT_LAUNCH(dt_scatter_add_k_, dt_grid_for_(outer * inner, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, idx, outer, D, J,
            inner, per_element, first_bad);
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

/* The shared run of the two backwards, once their argument checks passed. */
static dt_status dt_scatter_run_(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                 int64_t J, int64_t inner, int per_element, int32_t op, void* stream,
                                 const char* name) {
  if (outer * D * inner == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  unsigned long long* first_bad = NULL;
  DT_TRY_(dt_bad_begin_(&first_bad, s, name));
  dt_status st = dt_scatter_launch_(dinp, dout, idx, outer, D, J, inner, per_element, first_bad, s, name);
  if (st != DT_OK) {
    dt_scratch_free_(first_bad, s);
    return st;
  }
  return dt_bad_end_(first_bad, op, idx, DT_I32, D, 0, s);
}

DT_EXPORT dt_status dt_scatter_add_dim(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                       int64_t J, int64_t inner, void* stream) {
  DT_TRY_(dt_check_scatter_add_dim(dinp, dout, idx, outer, D, J, inner));
  return dt_scatter_run_(dinp, dout, idx, outer, D, J, inner, 1, DT_DATA_SCATTER_ADD_DIM, stream,
                         "dt_scatter_add_dim");
}

DT_EXPORT dt_status dt_index_add(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                 int64_t J, int64_t inner, void* stream) {
  DT_TRY_(dt_check_index_add(dinp, dout, idx, outer, D, J, inner));
  return dt_scatter_run_(dinp, dout, idx, outer, D, J, inner, 0, DT_DATA_INDEX_ADD, stream, "dt_index_add");
}
