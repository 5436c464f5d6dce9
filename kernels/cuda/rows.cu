/* rows.cu — CUDA launches of softmax (with the causal mask), forward and
 * backward. One block owns a row; a row of up to ROW_CACHE * DT_BLOCK values
 * stays in registers between its passes. The per-element arithmetic is
 * kernels/common/softmax.h; the row sums are block reductions in double.
 * Layer norm is layernorm.cu. */
#include "cuda_internal.cuh"
#include "softmax.h"

/* Values per thread kept in registers (rows of up to 1024 columns). */
#define ROW_CACHE 4

/* ---- kernels ------------------------------------------------------------------------
 * CACHED = true: the row fits in registers (cols <= ROW_CACHE * blockDim.x). */

template <bool CACHED>
__global__ void dt_softmax_fwd_k_(float* out, const float* inp, int64_t rows, int64_t cols, int64_t causal_t,
                                  float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    int64_t visible = dt_softmax_visible_cols(r, cols, causal_t);
    float z[ROW_CACHE];
    float m = -INFINITY;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        z[k] = j < visible ? scale * x[j] : -INFINITY;
        m = z[k] > m ? z[k] : m;
      }
    } else {
      for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
        float v = scale * x[j];
        m = v > m ? v : m;
      }
    }
    m = dt_block_max_(m);
    double sum = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < visible) {
          z[k] = dt_softmax_exp_f(z[k], m);
          sum += z[k];
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
        float e = dt_softmax_exp_f(scale * x[j], m);
        y[j] = e;
        sum += e;
      }
    }
    float inv_sum = 1.0f / (float)dt_block_sum_(sum);
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < cols) y[j] = j < visible ? z[k] * inv_sum : 0.0f;
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) y[j] = j < visible ? y[j] * inv_sum : 0.0f;
    }
  }
}

template <bool CACHED>
__global__ void dt_softmax_bwd_k_(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                                  float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* dy = dout + r * cols;
    const float* y = out + r * cols;
    float* dx = dinp + r * cols;
    float cdy[ROW_CACHE], cy[ROW_CACHE];
    double dot = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        cdy[k] = j < cols ? dy[j] : 0.0f;
        cy[k] = j < cols ? y[j] : 0.0f;
        dot += (double)cdy[k] * (double)cy[k];
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += (double)dy[j] * (double)y[j];
    }
    float dot_f = (float)dt_block_sum_(dot);
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < cols) dx[j] = ((cdy[k] - dot_f) * cy[k]) * scale;
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dx[j] = ((dy[j] - dot_f) * y[j]) * scale;
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

static bool dt_row_cached_(int64_t cols) { return cols <= (int64_t)ROW_CACHE * DT_BLOCK; }

DT_EXPORT dt_status dt_softmax_fwd(float* out, const float* inp, int64_t rows, int64_t cols, int64_t causal_t,
                                   float scale, void* stream) {
  DT_TRY_(dt_check_softmax_fwd(out, inp, rows, cols, causal_t));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  auto kernel = dt_row_cached_(cols) ? dt_softmax_fwd_k_<true> : dt_softmax_fwd_k_<false>;
  DT_LAUNCH(kernel, dt_row_grid_(rows), DT_BLOCK, 0, s, out, inp, rows, cols, causal_t, scale);
  DT_CHECK_LAUNCH(s, "dt_softmax_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_softmax_bwd(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                                   float scale, void* stream) {
  DT_TRY_(dt_check_softmax_bwd(dinp, dout, out, rows, cols));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  auto kernel = dt_row_cached_(cols) ? dt_softmax_bwd_k_<true> : dt_softmax_bwd_k_<false>;
  DT_LAUNCH(kernel, dt_row_grid_(rows), DT_BLOCK, 0, s, dinp, dout, out, rows, cols, scale);
  DT_CHECK_LAUNCH(s, "dt_softmax_bwd");
  return DT_OK;
}
