/* compare.cu — CUDA launch of dt_compare (elementwise comparisons of f32
 * tensors into a u8 mask). Each element runs kernels/common/compare.h's
 * body, as the CPU loop does: the same bits. */
#include "compare.h"
#include "cuda_internal.cuh"

/* b NULL: every element is compared with b_value. */
__global__ void dt_compare_k_(int32_t op, uint8_t* out, const float* a, const float* b, int64_t n, float b_value) {
  DT_GRID_STRIDE(i, n) out[i] = dt_compare_f(op, a[i], b ? b[i] : b_value);
}

DT_EXPORT dt_status dt_compare(int32_t op, uint8_t* out, const float* a, const float* b, int64_t n, float b_value,
                               void* stream) {
  DT_TRY_(dt_check_compare(op, out, a, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_compare_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, op, out, a, b, n, b_value);
  DT_CHECK_LAUNCH(s, "dt_compare");
  return DT_OK;
}
