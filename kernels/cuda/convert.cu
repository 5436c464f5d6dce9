/* convert.cu — CUDA launches of dt_fill and dt_cast. Every element goes
 * through kernels/common/convert.h, as on the CPU. A cast into an integer
 * type checks every value on the device, without a read-back: one the
 * destination cannot hold is written as 0, and the first is recorded for
 * dt_deferred_error, in the CPU library's words. */
#include "convert.h"
#include "cuda_internal.cuh"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_fill_float_k_(void* out, int32_t dtype, int64_t n, float v) {
  DT_GRID_STRIDE(i, n) dt_store_float(out, dtype, i, v);
}

__global__ void dt_fill_int_k_(void* out, int32_t dtype, int64_t n, int64_t v) {
  DT_GRID_STRIDE(i, n) dt_store_int(out, dtype, i, v);
}

/* first_bad is NULL for a float destination, which can hold any value (inf when too large). */
__global__ void dt_cast_k_(void* out, int32_t out_dtype, const void* inp, int32_t inp_dtype, int64_t n,
                           unsigned long long* first_bad) {
  int in_float = dt_dtype_is_float(inp_dtype), out_float = dt_dtype_is_float(out_dtype);
  DT_GRID_STRIDE(i, n) {
    if (in_float) {
      float v = dt_load_float(inp, inp_dtype, i);
      if (out_float) {
        dt_store_float(out, out_dtype, i, v);
      } else if (dt_float_truncates_into(v, out_dtype)) {
        dt_store_int(out, out_dtype, i, (int64_t)v); /* truncates toward zero */
      } else {
        dt_store_int(out, out_dtype, i, 0);
        dt_mark_bad_(first_bad, i);
      }
    } else {
      int64_t v = dt_load_int(inp, inp_dtype, i);
      if (out_float) {
        dt_store_float(out, out_dtype, i, (float)v); /* rounds to nearest even */
      } else if (dt_int_fits(v, out_dtype)) {
        dt_store_int(out, out_dtype, i, v);
      } else {
        dt_store_int(out, out_dtype, i, 0);
        dt_mark_bad_(first_bad, i);
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_fill(void* out, int32_t dtype, int64_t n, double value, void* stream) {
  DT_TRY_(dt_check_fill(out, dtype, n, value));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (dt_dtype_is_float(dtype)) {
    /* torch: double scalar -> float -> bf16/f16 */
    DT_LAUNCH(dt_fill_float_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, dtype, n, (float)value);
    DT_CHECK_LAUNCH(s, "dt_fill");
    return DT_OK;
  }
  DT_LAUNCH(dt_fill_int_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, dtype, n, (int64_t)value);
  DT_CHECK_LAUNCH(s, "dt_fill");
  return DT_OK;
}

DT_EXPORT dt_status dt_cast(void* out, int32_t out_dtype, const void* inp, int32_t inp_dtype, int64_t n,
                            void* stream) {
  DT_TRY_(dt_check_cast(out, out_dtype, inp, inp_dtype, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (out_dtype == inp_dtype) {
    DT_CHECK_CUDA(cudaMemcpyAsync(out, inp, (size_t)n * dt_dtype_size(inp_dtype), cudaMemcpyDeviceToDevice, s));
    return DT_OK;
  }
  if (dt_dtype_is_float(out_dtype)) {
    DT_LAUNCH(dt_cast_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, out_dtype, inp, inp_dtype, n,
              (unsigned long long*)NULL);
    DT_CHECK_LAUNCH(s, "dt_cast");
    return DT_OK;
  }
  unsigned long long* first_bad = NULL;
  DT_TRY_(dt_bad_begin_(&first_bad, s, "dt_cast"));
  DT_LAUNCH(dt_cast_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, out_dtype, inp, inp_dtype, n, first_bad);
  DT_CHECK_LAUNCH(s, "dt_cast");
  return dt_bad_end_(first_bad, DT_DATA_CAST, inp, inp_dtype, out_dtype, 0, s);
}
