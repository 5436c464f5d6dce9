/* rows.cu — CUDA launches of softmax (with the causal mask), forward and
 * backward. Rows of up to 1024 columns, a multiple of 4, 16-byte aligned, go
 * one warp each with 128-bit loads and stores and shuffle reductions (no
 * block barrier); other rows get a block each, a row of up to
 * ROW_CACHE * DT_BLOCK values staying in registers between its passes. The per-element arithmetic is
 * kernels/common/softmax.h; the row sums are block reductions in double.
 * Layer norm is layernorm.cu. */
#include "cuda_internal.cuh"
#include "softmax.h"
#include "vec128.cuh"

/* Values per thread kept in registers (rows of up to 1024 columns). */
#define ROW_CACHE 4
/* Warp-per-row kernels: at least this many blocks of DT_BLOCK threads resident
 * per multiprocessor (at most 64 registers a thread), as layer norm's rows. */
#define SM_WARP_MIN_BLOCKS 4
/* float4 vectors a lane keeps of a warp's row: rows of up to 1024 columns. */
#define SM_WARP_VECS (1024 / (32 * 4))

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

/* The sum of v over the warp (every lane gets it), in a fixed order. */
__device__ __forceinline__ double dt_sm_warp_sum_(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/* The largest of v over the warp (every lane gets it). */
__device__ __forceinline__ float dt_sm_warp_max_(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
}

/* Softmax forward, a warp per row: cols a multiple of 4 and at most 1024,
 * inp and out 16-byte aligned. Lane l keeps the float4 vectors l, l + 32, ...
 * of its row in registers; the same per-element arithmetic as
 * dt_softmax_fwd_k_, the row sum in double. */
__global__ void __launch_bounds__(DT_BLOCK, SM_WARP_MIN_BLOCKS)
    dt_softmax_fwd_warp_k_(float* out, const float* inp, int64_t rows, int64_t cols, int64_t causal_t, float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t nv = cols / 4, per_block = blockDim.x / 32;
  for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * per_block) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    const int64_t visible = dt_softmax_visible_cols(r, cols, causal_t);
    float z[SM_WARP_VECS][4];
    float m = -INFINITY;
DT_UNROLL
    for (int k = 0; k < SM_WARP_VECS; k++) {
      const int64_t c = lane + 32 * k;
      if (c >= nv) break;
      dt_vec_load_<DT_F32>(z[k], x + c * 4);
DT_UNROLL
      for (int i = 0; i < 4; i++) {
        z[k][i] = c * 4 + i < visible ? scale * z[k][i] : -INFINITY;
        m = z[k][i] > m ? z[k][i] : m;
      }
    }
    m = dt_sm_warp_max_(m);
    double sum = 0.0;
DT_UNROLL
    for (int k = 0; k < SM_WARP_VECS; k++) {
      const int64_t c = lane + 32 * k;
      if (c >= nv) break;
DT_UNROLL
      for (int i = 0; i < 4; i++) {
        if (c * 4 + i < visible) {
          z[k][i] = dt_softmax_exp_f(z[k][i], m);
          sum += z[k][i];
        }
      }
    }
    const float inv_sum = 1.0f / (float)dt_sm_warp_sum_(sum);
DT_UNROLL
    for (int k = 0; k < SM_WARP_VECS; k++) {
      const int64_t c = lane + 32 * k;
      if (c >= nv) break;
      float o[4];
DT_UNROLL
      for (int i = 0; i < 4; i++) o[i] = c * 4 + i < visible ? z[k][i] * inv_sum : 0.0f;
      dt_vec_store_<DT_F32>(y + c * 4, o);
    }
  }
}

/* Softmax backward, a warp per row (the forward's conditions): the dot
 * product in double from 128-bit loads, then dx from the row read again (the
 * warp's own 4 KiB, still in cache) rather than kept: two rows in registers
 * would pass the 64 a thread may hold. */
__global__ void __launch_bounds__(DT_BLOCK, SM_WARP_MIN_BLOCKS)
    dt_softmax_bwd_warp_k_(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                           float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t nv = cols / 4, per_block = blockDim.x / 32;
  for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * per_block) {
    const float* dy = dout + r * cols;
    const float* y = out + r * cols;
    float* dx = dinp + r * cols;
    double dot = 0.0;
    for (int64_t c = lane; c < nv; c += 32) {
      float a[4], b[4];
      dt_vec_load_<DT_F32>(a, dy + c * 4);
      dt_vec_load_<DT_F32>(b, y + c * 4);
DT_UNROLL
      for (int i = 0; i < 4; i++) dot += (double)a[i] * (double)b[i];
    }
    const float dot_f = (float)dt_sm_warp_sum_(dot);
    for (int64_t c = lane; c < nv; c += 32) {
      float a[4], b[4], o[4];
      dt_vec_load_<DT_F32>(a, dy + c * 4);
      dt_vec_load_<DT_F32>(b, y + c * 4);
DT_UNROLL
      for (int i = 0; i < 4; i++) o[i] = ((a[i] - dot_f) * b[i]) * scale;
      dt_vec_store_<DT_F32>(dx + c * 4, o);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

static bool dt_row_cached_(int64_t cols) { return cols <= (int64_t)ROW_CACHE * DT_BLOCK; }

/* Whether rows of `cols` f32 values at these pointers go a warp each: at most
 * 1024 columns, a multiple of the 4-float vector, every pointer 16-byte aligned. */
static bool dt_softmax_warp_rows_(int64_t cols, const void* a, const void* b, const void* c) {
  return cols <= 1024 && cols % 4 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* Blocks of DT_BLOCK threads for a warp per row over `rows` rows. */
static unsigned dt_warp_row_grid_(int64_t rows) { return dt_row_grid_((rows + DT_BLOCK / 32 - 1) / (DT_BLOCK / 32)); }

DT_EXPORT dt_status dt_softmax_fwd(float* out, const float* inp, int64_t rows, int64_t cols, int64_t causal_t,
                                   float scale, void* stream) {
  DT_TRY_(dt_check_softmax_fwd(out, inp, rows, cols, causal_t));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (dt_softmax_warp_rows_(cols, out, inp, NULL)) {
    DT_LAUNCH(dt_softmax_fwd_warp_k_, dt_warp_row_grid_(rows), DT_BLOCK, 0, s, out, inp, rows, cols, causal_t, scale);
    DT_CHECK_LAUNCH(s, "dt_softmax_fwd");
    return DT_OK;
  }
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
  if (dt_softmax_warp_rows_(cols, dinp, dout, out)) {
    DT_LAUNCH(dt_softmax_bwd_warp_k_, dt_warp_row_grid_(rows), DT_BLOCK, 0, s, dinp, dout, out, rows, cols, scale);
    DT_CHECK_LAUNCH(s, "dt_softmax_bwd");
    return DT_OK;
  }
  auto kernel = dt_row_cached_(cols) ? dt_softmax_bwd_k_<true> : dt_softmax_bwd_k_<false>;
  DT_LAUNCH(kernel, dt_row_grid_(rows), DT_BLOCK, 0, s, dinp, dout, out, rows, cols, scale);
  DT_CHECK_LAUNCH(s, "dt_softmax_bwd");
  return DT_OK;
}
