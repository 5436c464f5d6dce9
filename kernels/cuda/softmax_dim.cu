/* softmax_dim.cu — CUDA launches of dt_softmax_dim_fwd/bwd: softmax and
 * log-softmax along any dimension of a tensor viewed as (outer, D, inner),
 * with the CPU library's bits. Along a middle dimension a thread per column
 * runs softmax.h's column bodies; along the last (inner = 1) eight threads
 * per row do what softmax.h's row bodies do, their double sums kept in
 * dt_sum_f64's eight lanes (dt_lanes8_sum_). */
#include "cuda_internal.cuh"
#include "ops_checks.h"
#include "softmax.h"

/* ---- kernels -------------------------------------------------------------------- */

/* The largest of a row's values as softmax.h's rows take it (NaN never
 * wins), over each lane's elements, then the group's eight lanes. */
__device__ __forceinline__ float dt_row_max_by_8_(const float* x, int64_t len) {
  int lane = threadIdx.x & 7, base = threadIdx.x & 24;
  float m = -INFINITY;
  for (int64_t i = lane; i < len; i += 8) m = x[i] > m ? x[i] : m;
  float all = -INFINITY;
  for (int k = 0; k < 8; k++) {
    float v = __shfl_sync(0xffffffffu, m, base + k);
    all = v > all ? v : all;
  }
  return all;
}

/* dt_softmax_row (scale 1, no mask) or dt_log_softmax_row of each row. */
__global__ void dt_softmax_rows_fwd_k_(float* out, const float* inp, int64_t rows, int64_t D, int is_log) {
  int lane = threadIdx.x & 7;
  DT_ROWS_BY_8(r, rows) {
    bool active = r < rows;
    int64_t len = active ? D : 0;
    const float* x = inp + (active ? r : 0) * D;
    float* y = out + (active ? r : 0) * D;
    float m = dt_row_max_by_8_(x, len);
    if (is_log) {
      float lse = dt_logf((float)dt_lanes8_sum_(len, [&](int64_t i) { return (double)dt_expf(x[i] - m); }));
      for (int64_t i = lane; i < len; i += 8) y[i] = (x[i] - m) - lse;
    } else {
      /* the exponentials are stored, then summed (each written by its lane) */
      double sum = dt_lanes8_sum_(len, [&](int64_t i) {
        float e = dt_softmax_exp_f(1.0f * x[i], m);
        if (i % 8 == lane) y[i] = e;
        return (double)e;
      });
      float inv_sum = 1.0f / (float)sum;
      for (int64_t i = lane; i < len; i += 8) y[i] *= inv_sum;
    }
  }
}

/* dt_softmax_bwd_row (scale 1) or dt_log_softmax_bwd_row of each row. */
__global__ void dt_softmax_rows_bwd_k_(float* dinp, const float* dout, const float* out, int64_t rows, int64_t D,
                                       int is_log) {
  int lane = threadIdx.x & 7;
  DT_ROWS_BY_8(r, rows) {
    bool active = r < rows;
    int64_t len = active ? D : 0, off = (active ? r : 0) * D;
    const float *dy = dout + off, *y = out + off;
    float* dx = dinp + off;
    if (is_log) {
      float sum = (float)dt_lanes8_sum_(len, [&](int64_t i) { return (double)dy[i]; });
      for (int64_t i = lane; i < len; i += 8) dx[i] = dy[i] - dt_expf(y[i]) * sum;
    } else {
      float dot_f = (float)dt_lanes8_sum_(len, [&](int64_t i) { return (double)dy[i] * (double)y[i]; });
      for (int64_t i = lane; i < len; i += 8) dx[i] = ((dy[i] - dot_f) * y[i]) * 1.0f;
    }
  }
}

/* One (o, i) column of D values at stride inner per thread. */
__global__ void dt_softmax_cols_fwd_k_(float* out, const float* inp, int64_t outer, int64_t D, int64_t inner,
                                       int is_log) {
  DT_GRID_STRIDE(k, outer * inner) {
    int64_t base = (k / inner) * D * inner + k % inner;
    dt_softmax_col(out + base, inp + base, D, inner, is_log);
  }
}

__global__ void dt_softmax_cols_bwd_k_(float* dinp, const float* dout, const float* out, int64_t outer, int64_t D,
                                       int64_t inner, int is_log) {
  DT_GRID_STRIDE(k, outer * inner) {
    int64_t base = (k / inner) * D * inner + k % inner;
    dt_softmax_bwd_col(dinp + base, dout + base, out + base, D, inner, is_log);
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_softmax_dim_fwd(float* out, const float* inp, int64_t outer, int64_t D, int64_t inner,
                                       int32_t is_log, void* stream) {
  DT_TRY_(dt_check_softmax_dim_fwd(out, inp, outer, D, inner, is_log));
  if (outer == 0 || D == 0 || inner == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (inner == 1) {
    DT_LAUNCH(dt_softmax_rows_fwd_k_, dt_grid_by_8_(outer), DT_BLOCK, 0, s, out, inp, outer, D, is_log);
    DT_CHECK_LAUNCH(s, "dt_softmax_dim_fwd");
  } else {
    DT_LAUNCH(dt_softmax_cols_fwd_k_, dt_grid_for_(outer * inner, DT_BLOCK), DT_BLOCK, 0, s, out, inp, outer, D,
              inner, is_log);
    DT_CHECK_LAUNCH(s, "dt_softmax_dim_fwd");
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_softmax_dim_bwd(float* dinp, const float* dout, const float* out, int64_t outer, int64_t D,
                                       int64_t inner, int32_t is_log, void* stream) {
  DT_TRY_(dt_check_softmax_dim_bwd(dinp, dout, out, outer, D, inner, is_log));
  if (outer == 0 || D == 0 || inner == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (inner == 1) {
    DT_LAUNCH(dt_softmax_rows_bwd_k_, dt_grid_by_8_(outer), DT_BLOCK, 0, s, dinp, dout, out, outer, D, is_log);
    DT_CHECK_LAUNCH(s, "dt_softmax_dim_bwd");
  } else {
    DT_LAUNCH(dt_softmax_cols_bwd_k_, dt_grid_for_(outer * inner, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, out, outer,
              D, inner, is_log);
    DT_CHECK_LAUNCH(s, "dt_softmax_dim_bwd");
  }
  return DT_OK;
}
