/* mixed_dtype.cu — CUDA launches of the elementwise kernels whose operands
 * each have their own float dtype (dt_binary_ex, dt_gelu_fwd_ex,
 * dt_gelu_bwd_ex): bf16/f16 activations under autocast without a cast kernel
 * before and after. Each element is widened to f32, runs the body of
 * dt_binary / dt_gelu_* (elementwise.h, gelu.h) and is rounded once, as on
 * the CPU (kernels/cpu/mixed_dtype.c). */
#include "convert.h"
#include "cuda_internal.cuh"
#include "elementwise.h"
#include "gelu.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_binary_ex_k_(int32_t op, void* out, int32_t out_dtype, const void* a, int32_t a_dtype, const void* b,
                                int32_t b_dtype, int64_t n, int64_t bn, int64_t inner) {
  if (inner == 1 && bn == n) {
    DT_GRID_STRIDE(i, n) {
      dt_store_float(out, out_dtype, i, dt_binary_f(op, dt_load_float(a, a_dtype, i), dt_load_float(b, b_dtype, i)));
    }
  } else {
    DT_GRID_STRIDE(i, n) {
      float y = dt_load_float(b, b_dtype, (i / inner) % bn);
      dt_store_float(out, out_dtype, i, dt_binary_f(op, dt_load_float(a, a_dtype, i), y));
    }
  }
}

__global__ void dt_gelu_ex_k_(void* out, const void* inp, int64_t n, int32_t dtype) {
  DT_GRID_STRIDE(i, n) dt_store_float(out, dtype, i, dt_gelu_f(dt_load_float(inp, dtype, i)));
}

__global__ void dt_gelu_bwd_ex_k_(void* dinp, const void* dout, const void* inp, int64_t n, int32_t dtype) {
  DT_GRID_STRIDE(i, n) {
    float g = dt_gelu_grad_f(dt_load_float(dout, dtype, i), dt_load_float(inp, dtype, i));
    dt_store_float(dinp, dtype, i, g);
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_binary_ex(int32_t op, void* out, int32_t out_dtype, const void* a, int32_t a_dtype,
                                 const void* b, int32_t b_dtype, int64_t n, int64_t bn, int64_t inner, void* stream) {
  DT_TRY_(dt_check_binary_ex(op, out, out_dtype, a, a_dtype, b, b_dtype, n, bn, inner));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_binary_ex_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, op, out, out_dtype, a, a_dtype, b, b_dtype, n,
            bn, inner);
  DT_CHECK_LAUNCH(s, "dt_binary_ex");
  return DT_OK;
}

DT_EXPORT dt_status dt_gelu_fwd_ex(void* out, const void* inp, int64_t n, int32_t dtype, void* stream) {
  DT_TRY_(dt_check_gelu_ex("dt_gelu_fwd_ex", out, inp, NULL, 0, n, dtype));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_gelu_ex_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, inp, n, dtype);
  DT_CHECK_LAUNCH(s, "dt_gelu_fwd_ex");
  return DT_OK;
}

DT_EXPORT dt_status dt_gelu_bwd_ex(void* dinp, const void* dout, const void* inp, int64_t n, int32_t dtype,
                                   void* stream) {
  DT_TRY_(dt_check_gelu_ex("dt_gelu_bwd_ex", dinp, inp, dout, 1, n, dtype));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_gelu_bwd_ex_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, inp, n, dtype);
  DT_CHECK_LAUNCH(s, "dt_gelu_bwd_ex");
  return DT_OK;
}
