/* gemm_kernel_avx512.c — the AVX-512 GEMM micro-kernel: an 8 x 32 f32 tile
 * held in 16 zmm accumulators, A broadcast straight from memory into each
 * FMA. Compiled for AVX-512F with a target attribute and only called on CPUs
 * (and operating systems) that support it. */
#include "gemm_internal.h"
#include <immintrin.h>

#define MR 8
#define NR 32
#define AVX512_ __attribute__((target("avx512f,avx2,fma")))

/* One row of the tile: c = alpha * acc + beta * c, or alpha * acc without
 * reading c when beta == 0. Columns whose mask bit is clear are neither read
 * nor written (a masked lane never faults, even past the end of a buffer). */
AVX512_ static inline void store_row_(float* c, __m512 acc0, __m512 acc1, __m512 alpha, float beta,
                                      __mmask16 mask0, __mmask16 mask1) {
  __m512 v0, v1;
  if (beta == 0.0f) {
    v0 = _mm512_mul_ps(alpha, acc0);
    v1 = _mm512_mul_ps(alpha, acc1);
  } else {
    __m512 vb = _mm512_set1_ps(beta);
    v0 = _mm512_fmadd_ps(alpha, acc0, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask0, c)));
    v1 = _mm512_fmadd_ps(alpha, acc1, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask1, c + 16)));
  }
  _mm512_mask_storeu_ps(c, mask0, v0);
  _mm512_mask_storeu_ps(c + 16, mask1, v1);
}

#define ROW_(i)                                         \
  do {                                                  \
    __m512 x = _mm512_set1_ps(a##i[o]);                 \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0);          \
    c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1);          \
  } while (0)

/* The tile's first `rows` rows (a constant after inlining: 8, 4, 2 or 1),
 * each two accumulators wide. A short tile runs a body of its own size
 * instead of the 8-row one with rows repeated: the same operations per
 * element in the same order, so the same bits, for a fraction of the work (a
 * 2 x 256 x 64 weight gradient ran 2x faster). Rows past mr (up to `rows`)
 * repeat the last real row and are discarded. With `ap` (a full 8-row tile of
 * an A whose rows are contiguous, rsa == 1), each step also copies the 8
 * values of A it broadcasts to ap + p * 8: the packed sliver, made while its
 * values are loaded anyway (as the AVX2 kernel does). */
AVX512_ static inline __attribute__((always_inline)) void tile_rows_(int rows, int64_t k, const float* a, int64_t rsa,
                                                                     int64_t csa, float* ap, const float* b,
                                                                     int64_t rsb, float* c, int64_t ldc, float alpha,
                                                                     float beta, int mr, int nr) {
  const float* a0 = a;
  const float* a1 = a + (mr > 1 ? 1 : 0) * rsa;
  const float* a2 = a + (mr > 2 ? 2 : mr - 1) * rsa;
  const float* a3 = a + (mr > 3 ? 3 : mr - 1) * rsa;
  const float* a4 = a + (mr > 4 ? 4 : mr - 1) * rsa;
  const float* a5 = a + (mr > 5 ? 5 : mr - 1) * rsa;
  const float* a6 = a + (mr > 6 ? 6 : mr - 1) * rsa;
  const float* a7 = a + (mr > 7 ? 7 : mr - 1) * rsa;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  int64_t o = 0;
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; p++) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    ROW_(0);
    if (rows > 1) ROW_(1);
    if (rows > 2) {
      ROW_(2);
      ROW_(3);
    }
    if (rows > 4) {
      ROW_(4);
      ROW_(5);
      ROW_(6);
      ROW_(7);
    }
    if (ap) {
      _mm256_storeu_ps(ap, _mm256_loadu_ps(a0 + o));
      ap += MR;
    }
    o += csa;
    b += rsb;
  }
  /* rows past mr are not stored; columns past nr are masked off */
  __m512 va = _mm512_set1_ps(alpha);
  __mmask16 mask0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 mask1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  store_row_(c, c00, c01, va, beta, mask0, mask1);
  if (rows > 1 && mr > 1) store_row_(c + ldc, c10, c11, va, beta, mask0, mask1);
  if (rows > 2 && mr > 2) store_row_(c + 2 * ldc, c20, c21, va, beta, mask0, mask1);
  if (rows > 2 && mr > 3) store_row_(c + 3 * ldc, c30, c31, va, beta, mask0, mask1);
  if (rows > 4 && mr > 4) store_row_(c + 4 * ldc, c40, c41, va, beta, mask0, mask1);
  if (rows > 4 && mr > 5) store_row_(c + 5 * ldc, c50, c51, va, beta, mask0, mask1);
  if (rows > 4 && mr > 6) store_row_(c + 6 * ldc, c60, c61, va, beta, mask0, mask1);
  if (rows > 4 && mr > 7) store_row_(c + 7 * ldc, c70, c71, va, beta, mask0, mask1);
}

AVX512_ static void kernel_8x32_(int64_t k, const float* a, int64_t rsa, int64_t csa, const float* b,
                                 int64_t rsb, float* c, int64_t ldc, float alpha, float beta, int mr, int nr) {
  if (mr > 4) tile_rows_(8, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
  else if (mr > 2) tile_rows_(4, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
  else if (mr > 1) tile_rows_(2, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
  else tile_rows_(1, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
}

AVX512_ static void kernel_pack_8x32_(int64_t k, const float* a, int64_t lda, float* ap, const float* b,
                                      int64_t rsb, float* c, int64_t ldc, float alpha, float beta, int nr) {
  tile_rows_(8, k, a, 1, lda, ap, b, rsb, c, ldc, alpha, beta, MR, nr);
}

const dt_gemm_isa_ dt_gemm_isa_avx512_ = {
    .name = "avx512",
    .mr = MR,
    .nr = NR,
    .mc = 192,
    .kc = 256,
    .nc = 4096,
    .kernel = kernel_8x32_,
    .kernel_pack = kernel_pack_8x32_,
    .pack_a = dt_gemm_pack_a_avx2_,
    .pack_b = dt_gemm_pack_b_avx2_,
    .dot = dt_gemm_dot_avx512_,
    .outer = dt_gemm_outer_avx512_,
    .rows = dt_gemm_rows_avx512_,
};
