/* unary.cu — CUDA launches of the scalar-parameter unary kernels
 * (dt_unary_fwd / dt_unary_bwd: exp, log, sigmoid, tanh, sqrt, pow, clamp)
 * and dt_where. Each element runs kernels/common/unary.h's body, as the CPU
 * loop does: the same bits, except pow by an exponent without a special
 * case, which is the device's powf (within 2 ulp of the CPU's). */
#include "cuda_internal.cuh"
#include "ops_checks.h"
#include "unary.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_unary_fwd_k_(int32_t op, float* out, const float* inp, int64_t n, float a, float b) {
  DT_GRID_STRIDE(i, n) out[i] = dt_unary_f(op, inp[i], a, b);
}

/* y: the forward's output */
__global__ void dt_unary_bwd_k_(int32_t op, float* dinp, const float* dout, const float* x, const float* y, int64_t n,
                                float a, float b) {
  DT_GRID_STRIDE(i, n) dinp[i] = dt_unary_grad_f(op, dout[i], x[i], y[i], a, b);
}

/* a or b NULL: its scalar stands for every element. */
__global__ void dt_where_k_(float* out, const uint8_t* cond, const float* a, const float* b, int64_t n, float a_value,
                            float b_value) {
  DT_GRID_STRIDE(i, n) out[i] = dt_where_f(cond[i], a ? a[i] : a_value, b ? b[i] : b_value);
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_unary_fwd(int32_t op, float* out, const float* inp, int64_t n, double a, double b,
                                 void* stream) {
  DT_TRY_(dt_check_unary_fwd(op, out, inp, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_unary_fwd_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, op, out, inp, n, (float)a, (float)b);
  DT_CHECK_LAUNCH(s, "dt_unary_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_unary_bwd(int32_t op, float* dinp, const float* dout, const float* inp, const float* out,
                                 int64_t n, double a, double b, void* stream) {
  DT_TRY_(dt_check_unary_bwd(op, dinp, dout, inp, out, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_unary_bwd_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, op, dinp, dout, inp, out, n, (float)a,
            (float)b);
  DT_CHECK_LAUNCH(s, "dt_unary_bwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_where(float* out, const uint8_t* cond, const float* a, const float* b, int64_t n,
                             float a_value, float b_value, void* stream) {
  DT_TRY_(dt_check_where(out, cond, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_where_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, cond, a, b, n, a_value, b_value);
  DT_CHECK_LAUNCH(s, "dt_where");
  return DT_OK;
}
