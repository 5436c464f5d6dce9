/* rows.cu — CUDA launches of the row-wise kernels: softmax (with the causal
 * mask) and layer norm, forward and backward. One block owns a row; a row of
 * up to ROW_CACHE * DT_BLOCK values stays in registers between its passes.
 * The per-element arithmetic is kernels/common's (softmax.h, layernorm.h);
 * the row sums are block reductions in double. */
#include "cuda_internal.cuh"
#include "layernorm.h"
#include "softmax.h"

/* Values per thread kept in registers (rows of up to 1024 columns). */
#define ROW_CACHE 4
/* Rows per chunk (at least) of the weight/bias gradient column sums. */
#define LN_CHUNK_ROWS 128
#define COLS 32
#define COL_THREADS 8

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

template <bool CACHED>
__global__ void dt_layernorm_fwd_k_(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, int64_t rows, int64_t C, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = inp + r * C;
    float* y = out + r * C;
    float v[ROW_CACHE];
    double sum = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        v[k] = j < C ? x[j] : 0.0f;
        sum += v[k];
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) sum += x[j];
    }
    double mu = dt_block_sum_(sum) / (double)C;
    double sq = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        double d = (double)v[k] - mu;
        if (j < C) sq += d * d;
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        double d = (double)x[j] - mu;
        sq += d * d;
      }
    }
    float var = (float)(dt_block_sum_(sq) / (double)C);
    float mean_f = (float)mu;
    float rstd_f = dt_layernorm_rstd_f(var, eps); /* as dt_layernorm_moments */
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < C) y[j] = dt_layernorm_out_f(v[k], mean_f, rstd_f, weight ? weight[j] : 1.0f, bias ? bias[j] : 0.0f);
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
        y[j] = dt_layernorm_out_f(x[j], mean_f, rstd_f, weight ? weight[j] : 1.0f, bias ? bias[j] : 0.0f);
    }
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mean_f;
      if (rstd) rstd[r] = rstd_f;
    }
  }
}

/* dinp for each row: rstd * ((g - mean(g)) - xhat * mean(g * xhat)), g = dout * w. */
template <bool CACHED>
__global__ void dt_layernorm_bwd_k_(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, int64_t rows, int64_t C) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* dy = dout + r * C;
    const float* x = inp + r * C;
    float* dx = dinp + r * C;
    float rs = rstd[r], mu = mean[r];
    float cg[ROW_CACHE], cxhat[ROW_CACHE];
    double sum_g = 0.0, sum_g_xhat = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        cg[k] = j < C ? (weight ? dy[j] * weight[j] : dy[j]) : 0.0f;
        cxhat[k] = j < C ? dt_layernorm_xhat_f(x[j], mu, rs) : 0.0f;
        sum_g += cg[k];
        sum_g_xhat += (double)cg[k] * (double)cxhat[k];
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        float g = weight ? dy[j] * weight[j] : dy[j];
        float xhat = dt_layernorm_xhat_f(x[j], mu, rs);
        sum_g += g;
        sum_g_xhat += (double)g * (double)xhat;
      }
    }
    float mean_g = (float)(dt_block_sum_(sum_g) / (double)C);
    float mean_g_xhat = (float)(dt_block_sum_(sum_g_xhat) / (double)C);
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < C) dx[j] = rs * ((cg[k] - mean_g) - cxhat[k] * mean_g_xhat);
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        float g = weight ? dy[j] * weight[j] : dy[j];
        float xhat = dt_layernorm_xhat_f(x[j], mu, rs);
        dx[j] = rs * ((g - mean_g) - xhat * mean_g_xhat);
      }
    }
  }
}

/* Chunk c's partial column sums of dout * xhat (pw) and dout (pb): [chunks][C]. */
__global__ void dt_layernorm_cols_k_(double* pw, double* pb, const float* dout, const float* inp, const float* mean,
                                     const float* rstd, int64_t rows, int64_t C, int64_t chunk_rows) {
  __shared__ double aw[COL_THREADS][COLS + 1], ab[COL_THREADS][COLS + 1];
  int64_t j = (int64_t)blockIdx.x * COLS + threadIdx.x;
  int64_t c = blockIdx.y;
  int64_t r1 = (c + 1) * chunk_rows < rows ? (c + 1) * chunk_rows : rows;
  double sw = 0.0, sb = 0.0;
  if (j < C)
    for (int64_t r = c * chunk_rows + threadIdx.y; r < r1; r += COL_THREADS) {
      float dy = dout[r * C + j];
      sw += (double)(dy * dt_layernorm_xhat_f(inp[r * C + j], mean[r], rstd[r]));
      sb += (double)dy;
    }
  aw[threadIdx.y][threadIdx.x] = sw;
  ab[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && j < C) {
    double tw = 0.0, tb = 0.0;
    for (int k = 0; k < COL_THREADS; k++) {
      tw += aw[k][threadIdx.x];
      tb += ab[k][threadIdx.x];
    }
    pw[c * C + j] = tw;
    pb[c * C + j] = tb;
  }
}

/* out[j] = sum over chunks of partial[c][j], in chunk order (out may be NULL). */
__global__ void dt_layernorm_fold_k_(float* dweight, float* dbias, const double* pw, const double* pb, int64_t chunks,
                                     int64_t C) {
  DT_GRID_STRIDE(j, C) {
    double tw = 0.0, tb = 0.0;
    for (int64_t c = 0; c < chunks; c++) {
      tw += pw[c * C + j];
      tb += pb[c * C + j];
    }
    if (dweight) dweight[j] = (float)tw;
    if (dbias) dbias[j] = (float)tb;
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

DT_EXPORT dt_status dt_layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                     const float* bias, int64_t rows, int64_t C, float eps, void* stream) {
  DT_TRY_(dt_check_layernorm_fwd(out, inp, rows, C, eps));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  auto kernel = dt_row_cached_(C) ? dt_layernorm_fwd_k_<true> : dt_layernorm_fwd_k_<false>;
  DT_LAUNCH(kernel, dt_row_grid_(rows), DT_BLOCK, 0, s, out, mean, rstd, inp, weight, bias, rows, C, eps);
  DT_CHECK_LAUNCH(s, "dt_layernorm_fwd");
  return DT_OK;
}

/* dweight/dbias: deterministic column sums in two passes (chunks of rows, then a fold). */
static dt_status dt_layernorm_param_grads_(float* dweight, float* dbias, const float* dout, const float* inp,
                                           const float* mean, const float* rstd, int64_t rows, int64_t C,
                                           cudaStream_t s) {
  /* at most 1024 chunks, so that the fold stays short */
  int64_t chunk_rows = rows / 1024 + 1 > LN_CHUNK_ROWS ? rows / 1024 + 1 : LN_CHUNK_ROWS;
  int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  double* partial = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&partial, (size_t)(2 * chunks * C) * sizeof(double), s, "dt_layernorm_bwd"));
  dim3 grid((unsigned)((C + COLS - 1) / COLS), (unsigned)chunks);
  DT_LAUNCH(dt_layernorm_cols_k_, grid, dim3(COLS, COL_THREADS), 0, s,
            partial, partial + chunks * C, dout, inp, mean, rstd, rows, C, chunk_rows);
  DT_CHECK_LAUNCH(s, "dt_layernorm_bwd (column sums)");
  DT_LAUNCH(dt_layernorm_fold_k_, dt_grid_for_(C, DT_BLOCK), DT_BLOCK, 0, s,
            dweight, dbias, partial, partial + chunks * C, chunks, C);
  DT_CHECK_LAUNCH(s, "dt_layernorm_bwd (fold)");
  return dt_scratch_free_(partial, s);
}

DT_EXPORT dt_status dt_layernorm_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, int64_t rows,
                                     int64_t C, void* stream) {
  DT_TRY_(dt_check_layernorm_bwd(dinp, dout, inp, mean, rstd, rows, C));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (rows == 0) { /* the parameter gradients of an empty batch are zero */
    if (dweight && C > 0) DT_CHECK_CUDA(cudaMemsetAsync(dweight, 0, (size_t)C * sizeof(float), s));
    if (dbias && C > 0) DT_CHECK_CUDA(cudaMemsetAsync(dbias, 0, (size_t)C * sizeof(float), s));
    return DT_OK;
  }
  auto kernel = dt_row_cached_(C) ? dt_layernorm_bwd_k_<true> : dt_layernorm_bwd_k_<false>;
  DT_LAUNCH(kernel, dt_row_grid_(rows), DT_BLOCK, 0, s, dinp, dout, inp, weight, mean, rstd, rows, C);
  DT_CHECK_LAUNCH(s, "dt_layernorm_bwd");
  if (dweight || dbias) DT_TRY_(dt_layernorm_param_grads_(dweight, dbias, dout, inp, mean, rstd, rows, C, s));
  return DT_OK;
}
