/* gemm_pack.c — plain C packing of GEMM operands into the sliver layout of
 * the micro-kernels, for every dtype (bf16 and f16 become f32 here) and any
 * strides. The ISA files add faster f32 paths and fall back to these. */
#include "gemm_internal.h"

void dt_gemm_pack_b_generic_(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int nr,
                             float* dst) {
  for (int64_t s = 0; s * nr < nc; s++) {
    int64_t cols = nc - s * nr < nr ? nc - s * nr : nr;
    float* out = dst + s * kc * nr;
    for (int64_t p = 0; p < kc; p++) {
      int64_t base = (p0 + p) * v->rs + (j0 + s * nr) * v->cs;
      for (int64_t j = 0; j < cols; j++) out[p * nr + j] = dt_gemm_load_(v->data, v->dtype, base + j * v->cs);
      for (int64_t j = cols; j < nr; j++) out[p * nr + j] = 0.0f;
    }
  }
}

void dt_gemm_pack_a_generic_(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr,
                             float* dst) {
  for (int64_t s = 0; s * mr < mc; s++) {
    int64_t rows = mc - s * mr < mr ? mc - s * mr : mr;
    float* out = dst + s * kc * mr;
    for (int64_t i = 0; i < rows; i++) {
      /* walk one row of op(A) along k: contiguous reads when A is not transposed */
      int64_t base = (i0 + s * mr + i) * v->rs + p0 * v->cs;
      for (int64_t p = 0; p < kc; p++) out[p * mr + i] = dt_gemm_load_(v->data, v->dtype, base + p * v->cs);
    }
    for (int64_t i = rows; i < mr; i++)
      for (int64_t p = 0; p < kc; p++) out[p * mr + i] = 0.0f;
  }
}
