/* convert.cu — CUDA launches of dt_fill and dt_cast. Every element goes
 * through kernels/common/convert.h, as on the CPU. A cast into an integer
 * type first looks for a value the destination cannot hold (one pass on the
 * GPU, one small read-back), so nothing is written when it fails. */
#include "convert.h"
#include "cuda_internal.cuh"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_fill_float_k_(void* out, int32_t dtype, int64_t n, float v) {
  DT_GRID_STRIDE(i, n) dt_store_float(out, dtype, i, v);
}

__global__ void dt_fill_int_k_(void* out, int32_t dtype, int64_t n, int64_t v) {
  DT_GRID_STRIDE(i, n) dt_store_int(out, dtype, i, v);
}

__global__ void dt_cast_k_(void* out, int32_t out_dtype, const void* inp, int32_t inp_dtype, int64_t n) {
  int in_float = dt_dtype_is_float(inp_dtype), out_float = dt_dtype_is_float(out_dtype);
  DT_GRID_STRIDE(i, n) {
    if (in_float) {
      float v = dt_load_float(inp, inp_dtype, i);
      if (out_float) dt_store_float(out, out_dtype, i, v);
      else dt_store_int(out, out_dtype, i, (int64_t)v); /* truncates toward zero; range checked before */
    } else {
      int64_t v = dt_load_int(inp, inp_dtype, i);
      if (out_float) dt_store_float(out, out_dtype, i, (float)v); /* rounds to nearest even */
      else dt_store_int(out, out_dtype, i, v);
    }
  }
}

/* *first = the smallest index whose value out_dtype (an integer type) cannot hold. */
__global__ void dt_cast_find_bad_k_(unsigned long long* first, const void* inp, int32_t inp_dtype, int32_t out_dtype,
                                    int64_t n) {
  int in_float = dt_dtype_is_float(inp_dtype);
  DT_GRID_STRIDE(i, n) {
    int bad = in_float ? !dt_float_truncates_into(dt_load_float(inp, inp_dtype, i), out_dtype)
                       : !dt_int_fits(dt_load_int(inp, inp_dtype, i), out_dtype);
    if (bad) atomicMin(first, (unsigned long long)i);
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

/* *bad = the first index of inp whose value the integer type out_dtype cannot
 * hold, or ~0 when there is none; `first` is one word of device scratch. */
static dt_status dt_cast_range_scan_(unsigned long long* first, const void* inp, int32_t inp_dtype, int32_t out_dtype,
                                     int64_t n, cudaStream_t s, unsigned long long* bad) {
  DT_CHECK_CUDA(cudaMemsetAsync(first, 0xff, sizeof *first, s));
  DT_LAUNCH(dt_cast_find_bad_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, first, inp, inp_dtype, out_dtype, n);
  DT_CHECK_LAUNCH(s, "dt_cast (range check)");
  return dt_read_back_(bad, first, sizeof *bad, s);
}

/* Fails with the CPU library's text when some element of inp does not fit in
 * the integer type out_dtype. */
static dt_status dt_cast_check_range_(const void* inp, int32_t inp_dtype, int32_t out_dtype, int64_t n,
                                      cudaStream_t s) {
  unsigned long long* first = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&first, sizeof *first, s, "dt_cast"));
  unsigned long long bad = ~0ull;
  dt_status st = dt_cast_range_scan_(first, inp, inp_dtype, out_dtype, n, s, &bad);
  dt_status freed = dt_scratch_free_(first, s);
  if (st != DT_OK) return st;
  if (freed != DT_OK) return freed;
  if (bad >= (unsigned long long)n) return DT_OK;
  int64_t i = (int64_t)bad;
  size_t esize = dt_dtype_size(inp_dtype);
  unsigned char raw[8] = {0};
  DT_TRY_(dt_read_back_(raw, (const char*)inp + i * esize, esize, s));
  int in_float = dt_dtype_is_float(inp_dtype);
  return dt_fail_cast_value_(inp_dtype, out_dtype, i, in_float ? (double)dt_load_float(raw, inp_dtype, 0) : 0.0,
                             in_float ? 0 : dt_load_int(raw, inp_dtype, 0));
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
  if (!dt_dtype_is_float(out_dtype)) DT_TRY_(dt_cast_check_range_(inp, inp_dtype, out_dtype, n, s));
  DT_LAUNCH(dt_cast_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, out, out_dtype, inp, inp_dtype, n);
  DT_CHECK_LAUNCH(s, "dt_cast");
  return DT_OK;
}
