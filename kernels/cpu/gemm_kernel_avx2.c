/* gemm_kernel_avx2.c — the AVX2 + FMA GEMM micro-kernel: a 6 x 16 f32 tile
 * held in 12 ymm accumulators (the BLIS Haswell shape). Compiled for AVX2
 * with a target attribute, so it is only called on CPUs that have it. */
#include "gemm_internal.h"
#include <immintrin.h>

#define MR 6
#define NR 16
#define AVX2_ __attribute__((target("avx2,fma")))

/* One row of the tile: c = alpha * acc + beta * c, or alpha * acc without
 * reading c when beta == 0. Unless the row is full, columns whose mask lane
 * is clear are neither read nor written (a masked lane never faults, even
 * past the end of a buffer). */
AVX2_ static inline void store_row_(float* c, __m256 acc0, __m256 acc1, __m256 alpha, float beta, int full,
                                    __m256i mask0, __m256i mask1) {
  __m256 v0, v1;
  if (beta == 0.0f) {
    v0 = _mm256_mul_ps(alpha, acc0);
    v1 = _mm256_mul_ps(alpha, acc1);
  } else {
    __m256 vb = _mm256_set1_ps(beta);
    __m256 c0 = full ? _mm256_loadu_ps(c) : _mm256_maskload_ps(c, mask0);
    __m256 c1 = full ? _mm256_loadu_ps(c + 8) : _mm256_maskload_ps(c + 8, mask1);
    v0 = _mm256_fmadd_ps(alpha, acc0, _mm256_mul_ps(vb, c0));
    v1 = _mm256_fmadd_ps(alpha, acc1, _mm256_mul_ps(vb, c1));
  }
  if (full) {
    _mm256_storeu_ps(c, v0);
    _mm256_storeu_ps(c + 8, v1);
  } else {
    _mm256_maskstore_ps(c, mask0, v0);
    _mm256_maskstore_ps(c + 8, mask1, v1);
  }
}

/* The tile's first `rows` rows (a constant after inlining: 6, 4 or 2), each
 * two accumulators wide. A short tile runs a body of its own size instead of
 * the 6-row one with rows repeated: the same operations per element in the
 * same order, so the same bits, for two thirds or a third of the work.
 * Rows past mr (up to `rows`) repeat the last real row and are discarded.
 * With `ap` (a full 6-row tile of an A whose rows are contiguous, rsa == 1),
 * each step also copies the 6 values of A it broadcasts to ap + p * 6: the
 * packed sliver, made while its values are loaded anyway. */
AVX2_ static inline __attribute__((always_inline)) void tile_rows_(int rows, int64_t k, const float* a, int64_t rsa,
                                                                   int64_t csa, float* ap, const float* b,
                                                                   int64_t rsb, float* c, int64_t ldc, float alpha,
                                                                   float beta, int mr, int nr) {
  const float* a0 = a;
  const float* a1 = a + (mr > 1 ? 1 : 0) * rsa;
  const float* a2 = a + (mr > 2 ? 2 : mr - 1) * rsa;
  const float* a3 = a + (mr > 3 ? 3 : mr - 1) * rsa;
  const float* a4 = a + (mr > 4 ? 4 : mr - 1) * rsa;
  const float* a5 = a + (mr > 5 ? 5 : mr - 1) * rsa;
  /* C's rows are fetched while the products run: a K block after the first
   * reads them back (beta = 1), and the tile may have left L1 and L2 since
   * the previous block stored it. Not for a short K, whose loop is too short
   * to hide the fetch and where the prefetches cost more than they save
   * (64 x 256 x 2: 8 % slower with them). */
  if (k >= 32) {
    for (int i = 0; i < mr; i++) {
      _mm_prefetch((const char*)(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch((const char*)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
  }
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  int64_t o = 0;
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; p++) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0 + o);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a1 + o);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    if (rows > 2) {
      x = _mm256_broadcast_ss(a2 + o);
      c20 = _mm256_fmadd_ps(x, b0, c20);
      c21 = _mm256_fmadd_ps(x, b1, c21);
      x = _mm256_broadcast_ss(a3 + o);
      c30 = _mm256_fmadd_ps(x, b0, c30);
      c31 = _mm256_fmadd_ps(x, b1, c31);
    }
    if (rows > 4) {
      x = _mm256_broadcast_ss(a4 + o);
      c40 = _mm256_fmadd_ps(x, b0, c40);
      c41 = _mm256_fmadd_ps(x, b1, c41);
      x = _mm256_broadcast_ss(a5 + o);
      c50 = _mm256_fmadd_ps(x, b0, c50);
      c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    if (ap) {
      _mm_storeu_ps(ap, _mm_loadu_ps(a0 + o));
      _mm_storel_pi((__m64*)(ap + 4), _mm_castpd_ps(_mm_load_sd((const double*)(a0 + o + 4))));
      ap += MR;
    }
    o += csa;
    b += rsb;
  }
  /* rows past mr are not stored; columns past nr are masked off */
  __m256 va = _mm256_set1_ps(alpha);
  __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);
  __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lane);
  int full = nr == NR;
  store_row_(c, c00, c01, va, beta, full, mask0, mask1);
  if (mr > 1) store_row_(c + ldc, c10, c11, va, beta, full, mask0, mask1);
  if (rows > 2 && mr > 2) store_row_(c + 2 * ldc, c20, c21, va, beta, full, mask0, mask1);
  if (rows > 2 && mr > 3) store_row_(c + 3 * ldc, c30, c31, va, beta, full, mask0, mask1);
  if (rows > 4 && mr > 4) store_row_(c + 4 * ldc, c40, c41, va, beta, full, mask0, mask1);
  if (rows > 4 && mr > 5) store_row_(c + 5 * ldc, c50, c51, va, beta, full, mask0, mask1);
}

AVX2_ static void kernel_6x16_(int64_t k, const float* a, int64_t rsa, int64_t csa, const float* b, int64_t rsb,
                               float* c, int64_t ldc, float alpha, float beta, int mr, int nr) {
  if (mr > 4) tile_rows_(6, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
  else if (mr > 2) tile_rows_(4, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
  else tile_rows_(2, k, a, rsa, csa, NULL, b, rsb, c, ldc, alpha, beta, mr, nr);
}

AVX2_ static void kernel_pack_6x16_(int64_t k, const float* a, int64_t lda, float* ap, const float* b, int64_t rsb,
                                    float* c, int64_t ldc, float alpha, float beta, int nr) {
  tile_rows_(6, k, a, 1, lda, ap, b, rsb, c, ldc, alpha, beta, MR, nr);
}

const dt_gemm_isa_ dt_gemm_isa_avx2_ = {
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .mc = 144,
    .kc = 256,
    .nc = 4080,
    .kernel = kernel_6x16_,
    .kernel_pack = kernel_pack_6x16_,
    .pack_a = dt_gemm_pack_a_avx2_,
    .pack_b = dt_gemm_pack_b_avx2_,
    .dot = dt_gemm_dot_avx2_,
    .split_short_tail = 1,
};
