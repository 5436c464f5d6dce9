/* reduce_dim.cu — CUDA launches of dt_reduce_dim: sum, mean, max and min
 * along one dimension of a tensor viewed as (outer, D, inner), in the CPU
 * library's order, so with its bits: along a middle dimension a thread per
 * output runs reduce_dim.h's dt_reduce_col (d in order); along the last
 * (inner = 1) eight threads per row keep dt_sum_f64's eight lanes
 * (dt_lanes8_sum_), and max/min merge per-lane candidates by torch's rule
 * (the first NaN, else the first extreme), which is the sequential answer. */
#include "cuda_internal.cuh"
#include "ops_checks.h"
#include "reduce_dim.h"

/* ---- kernels -------------------------------------------------------------------- */

/* One output per (o, i) column of D values at stride inner. */
__global__ void dt_reduce_cols_k_(int32_t op, float* out, int32_t* idx, const float* inp, int64_t outer, int64_t D,
                                  int64_t inner) {
  DT_GRID_STRIDE(k, outer * inner) {
    float v;
    int32_t at;
    dt_reduce_col(op, inp + (k / inner) * D * inner + k % inner, D, inner, &v, &at);
    if (out) out[k] = v;
    if (idx) idx[k] = at;
  }
}

/* Whether candidate (v2, at2) of a max/min beats (v, at) (at < 0: no
 * candidate yet): a NaN beats any number and the earlier NaN wins; then the
 * better value; equal values keep the earlier index. */
__device__ __forceinline__ bool dt_extreme_merge_takes_(float v, int64_t at, float v2, int64_t at2, int want_max) {
  if (at2 < 0) return false;
  if (at < 0) return true;
  bool nan = v != v, nan2 = v2 != v2;
  if (nan || nan2) return nan2 && (!nan || at2 < at);
  if (v2 == v) return at2 < at;
  return want_max ? v2 > v : v2 < v;
}

/* Rows of D contiguous values (inner == 1), eight threads per row. */
__global__ void dt_reduce_rows_k_(int32_t op, float* out, int32_t* idx, const float* inp, int64_t rows, int64_t D) {
  int lane = threadIdx.x & 7, base = threadIdx.x & 24;
  DT_ROWS_BY_8(r, rows) {
    bool active = r < rows;
    const float* x = inp + (active ? r : 0) * D;
    int64_t len = active ? D : 0;
    if (op == DT_RED_SUM || op == DT_RED_MEAN) {
      double s = dt_lanes8_sum_(len, [&](int64_t i) { return (double)x[i]; });
      if (active && lane == 0) out[r] = op == DT_RED_MEAN ? (float)(s / (double)D) : (float)s;
      continue;
    }
    /* this lane's elements in order: dt_extreme_better's scan */
    int want_max = op == DT_RED_MAX;
    float best = 0.0f;
    int64_t at = -1;
    for (int64_t i = lane; i < len; i += 8) {
      if (at < 0 || dt_extreme_better(x[i], best, want_max)) {
        best = x[i];
        at = i;
      }
    }
    float bv = 0.0f;
    int64_t bat = -1;
    for (int k = 0; k < 8; k++) {
      float v2 = __shfl_sync(0xffffffffu, best, base + k);
      int64_t at2 = __shfl_sync(0xffffffffu, at, base + k);
      if (dt_extreme_merge_takes_(bv, bat, v2, at2, want_max)) {
        bv = v2;
        bat = at2;
      }
    }
    if (active && lane == 0) {
      if (out) out[r] = bv;
      if (idx) idx[r] = (int32_t)bat;
    }
  }
}

/* torch: the sum of nothing is 0, the mean NaN. */
__global__ void dt_reduce_empty_k_(float* out, int64_t rows, float value) {
  DT_GRID_STRIDE(r, rows) out[r] = value;
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_reduce_dim(int32_t op, float* out, int32_t* idx, const float* inp, int64_t outer, int64_t D,
                                  int64_t inner, void* stream) {
  int64_t rows = 0;
  DT_TRY_(dt_check_reduce_dim(op, out, idx, inp, outer, D, inner, &rows));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (D == 0) {
    DT_LAUNCH(dt_reduce_empty_k_, dt_grid_for_(rows, DT_BLOCK), DT_BLOCK, 0, s, out, rows,
              op == DT_RED_MEAN ? NAN : 0.0f);
    DT_CHECK_LAUNCH(s, "dt_reduce_dim");
  } else if (inner == 1) {
    DT_LAUNCH(dt_reduce_rows_k_, dt_grid_by_8_(rows), DT_BLOCK, 0, s, op, out, idx, inp, rows, D);
    DT_CHECK_LAUNCH(s, "dt_reduce_dim");
  } else {
    DT_LAUNCH(dt_reduce_cols_k_, dt_grid_for_(rows, DT_BLOCK), DT_BLOCK, 0, s, op, out, idx, inp, outer, D, inner);
    DT_CHECK_LAUNCH(s, "dt_reduce_dim");
  }
  return DT_OK;
}
