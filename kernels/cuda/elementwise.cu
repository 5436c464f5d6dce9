/* elementwise.cu — CUDA launches of the elementwise kernels: dt_binary (with
 * its broadcast forms), dt_scale, dt_axpy, ReLU, GELU and dropout. Each
 * element runs the same kernels/common body as the CPU loop (elementwise.h,
 * gelu.h, dropout.h); argument checks mirror kernels/cpu/elementwise.c. */
#include "cuda_internal.cuh"
#include "dropout.h"
#include "elementwise.h"
#include "gelu.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_binary_k_(int32_t op, float* out, const float* a, const float* b, int64_t n, int64_t bn,
                             int64_t inner) {
  if (inner == 1 && bn == n) {
    DT_GRID_STRIDE(i, n) out[i] = dt_binary_f(op, a[i], b[i]);
  } else {
    DT_GRID_STRIDE(i, n) out[i] = dt_binary_f(op, a[i], b[(i / inner) % bn]);
  }
}

__global__ void dt_scale_k_(float* out, const float* inp, int64_t n, float alpha) {
  DT_GRID_STRIDE(i, n) out[i] = alpha * inp[i];
}

__global__ void dt_axpy_k_(float* y, const float* x, int64_t n, float alpha) {
  DT_GRID_STRIDE(i, n) y[i] = dt_axpy_f(y[i], alpha, x[i]);
}

__global__ void dt_relu_k_(float* out, const float* inp, int64_t n) {
  DT_GRID_STRIDE(i, n) out[i] = dt_relu_f(inp[i]);
}

__global__ void dt_relu_bwd_k_(float* dinp, const float* dout, const float* inp, int64_t n) {
  DT_GRID_STRIDE(i, n) dinp[i] = dt_relu_grad_f(dout[i], inp[i]);
}

__global__ void dt_gelu_k_(float* out, const float* inp, int64_t n) {
  DT_GRID_STRIDE(i, n) out[i] = dt_gelu_f(inp[i]);
}

__global__ void dt_gelu_bwd_k_(float* dinp, const float* dout, const float* inp, int64_t n) {
  DT_GRID_STRIDE(i, n) dinp[i] = dt_gelu_grad_f(dout[i], inp[i]);
}

__global__ void dt_dropout_k_(float* out, const float* inp, int64_t n, uint64_t seed, uint64_t offset,
                              uint64_t threshold, float scale) {
  DT_GRID_STRIDE(i, n) out[i] = dt_dropout_apply(inp[i], seed, offset + (uint64_t)i, threshold, scale);
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_binary(int32_t op, float* out, const float* a, const float* b, int64_t n, int64_t bn,
                              int64_t inner, void* stream) {
  DT_TRY_(dt_check_binary(op, out, a, b, n, bn, inner));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_binary_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, op, out, a, b, n, bn, inner);
  DT_CHECK_LAUNCH(s, "dt_binary");
  return DT_OK;
}

DT_EXPORT dt_status dt_scale(float* out, const float* inp, int64_t n, float alpha, void* stream) {
  DT_TRY_(dt_check_scale(out, inp, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_scale_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, inp, n, alpha);
  DT_CHECK_LAUNCH(s, "dt_scale");
  return DT_OK;
}

DT_EXPORT dt_status dt_axpy(float* y, const float* x, int64_t n, float alpha, void* stream) {
  DT_TRY_(dt_check_axpy(y, x, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_axpy_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, y, x, n, alpha);
  DT_CHECK_LAUNCH(s, "dt_axpy");
  return DT_OK;
}

/* Shared checks of the unary forward/backward launchers; on success *s is the stream. */
static dt_status dt_unary_prepare_(const char* name, const float* out, const float* x, const float* y, int needs_y,
                                   int64_t n, void* stream, cudaStream_t* s) {
  DT_TRY_(dt_check_unary(name, out, x, y, needs_y, n));
  if (n == 0) return DT_OK;
  return dt_cuda_stream_(stream, s);
}

DT_EXPORT dt_status dt_relu_fwd(float* out, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_relu_fwd", out, inp, NULL, 0, n, stream, &s));
  if (n == 0) return DT_OK;
  DT_LAUNCH(dt_relu_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, inp, n);
  DT_CHECK_LAUNCH(s, "dt_relu_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_relu_bwd(float* dinp, const float* dout, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_relu_bwd", dinp, inp, dout, 1, n, stream, &s));
  if (n == 0) return DT_OK;
  DT_LAUNCH(dt_relu_bwd_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, inp, n);
  DT_CHECK_LAUNCH(s, "dt_relu_bwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_gelu_fwd(float* out, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_gelu_fwd", out, inp, NULL, 0, n, stream, &s));
  if (n == 0) return DT_OK;
  DT_LAUNCH(dt_gelu_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, inp, n);
  DT_CHECK_LAUNCH(s, "dt_gelu_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_gelu_bwd(float* dinp, const float* dout, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_gelu_bwd", dinp, inp, dout, 1, n, stream, &s));
  if (n == 0) return DT_OK;
  DT_LAUNCH(dt_gelu_bwd_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, inp, n);
  DT_CHECK_LAUNCH(s, "dt_gelu_bwd");
  return DT_OK;
}

static dt_status dt_dropout_run_(const char* name, float* out, const float* inp, int64_t n, float p, int64_t seed,
                                 int64_t offset, void* stream) {
  DT_TRY_(dt_check_dropout(name, out, inp, n, p, offset));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_dropout_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s,
            out, inp, n, (uint64_t)seed, (uint64_t)offset, dt_dropout_threshold(p), dt_dropout_scale(p));
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

DT_EXPORT dt_status dt_dropout_fwd(float* out, const float* inp, int64_t n, float p, int64_t seed, int64_t offset,
                                   void* stream) {
  return dt_dropout_run_("dt_dropout_fwd", out, inp, n, p, seed, offset, stream);
}

DT_EXPORT dt_status dt_dropout_bwd(float* dinp, const float* dout, int64_t n, float p, int64_t seed, int64_t offset,
                                   void* stream) {
  return dt_dropout_run_("dt_dropout_bwd", dinp, dout, n, p, seed, offset, stream);
}
