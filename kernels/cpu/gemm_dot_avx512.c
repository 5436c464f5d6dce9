/* gemm_dot_avx512.c — GEMM as dot products with AVX-512, for f32 products
 * whose M or N is tiny (a 256 -> 2 layer) and whose operands both run along
 * K (A not transposed, B transposed): no packing, and no micro-tile mostly
 * padding. The AVX2 version (gemm_dot_avx2.c) with 16 lanes: on a core with
 * full-width AVX-512 units it does twice the multiply-adds per instruction
 * (64 x 2 x 256 ran at 52 GFLOP/s on the AVX2 version, half of OpenBLAS's
 * AVX-512 small-matrix kernel). */
#include "gemm_internal.h"
#include <immintrin.h>

#define AVX512_ __attribute__((target("avx512f,avx2,fma")))
#define DOT_ACC_ 16 /* accumulators per tile: rows x columns */

/* The sums of 16 vectors as one vector, sum of v[k] in lane k: halves,
 * quarters, pairs and single lanes added pairwise across the vectors (15
 * merges of three instructions) rather than each vector reduced alone (eight
 * or so instructions each, a third of a tile's work at K = 256). */
AVX512_ static inline __attribute__((always_inline)) __m512 sums16_(const __m512* v) {
  __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) /* 128-bit quarters 0, 1 of v[2k] and 2, 3 of v[2k+1], each folded */
    t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xee));
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) /* quarter q: a partial sum of v[4k + q] */
    u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0xdd));
#pragma GCC unroll 2
  for (int k = 0; k < 2; k++)
    w[k] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * k], u[2 * k + 1], 0x44), _mm512_shuffle_ps(u[2 * k], u[2 * k + 1], 0xee));
  /* lane 4q + e now holds the sum of v[4e + q] */
  __m512 x = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xdd));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, x);
}

/* An rb x nb tile of dot products (constants after inlining, rb * nb <= 16).
 * The K tail is read with masked loads, so nothing past a row is touched. */
AVX512_ static inline __attribute__((always_inline)) void dot_tile_(int rb, int nb, int64_t k, const float* a,
                                                                    int64_t lda, const float* b, int64_t ldb,
                                                                    float* c, int64_t ldc, float alpha, float beta) {
  __m512 acc[DOT_ACC_];
#pragma GCC unroll 16
  for (int t = 0; t < DOT_ACC_; t++) acc[t] = _mm512_setzero_ps();
  int64_t k16 = k / 16 * 16;
  for (int64_t p = 0; p < k16; p += 16) {
    __m512 bv[8];
#pragma GCC unroll 8
    for (int j = 0; j < nb; j++) bv[j] = _mm512_loadu_ps(b + j * ldb + p);
#pragma GCC unroll 8
    for (int i = 0; i < rb; i++) {
      __m512 av = _mm512_loadu_ps(a + i * lda + p);
      /* in a register: left to itself GCC folds the load into each of the
       * row's multiply-adds, twice the loads (64 x 2 x 128: 20 % slower) */
      __asm__("" : "+v"(av));
#pragma GCC unroll 8
      for (int j = 0; j < nb; j++) acc[i * nb + j] = _mm512_fmadd_ps(av, bv[j], acc[i * nb + j]);
    }
  }
  if (k16 < k) {
    __mmask16 mask = (__mmask16)((1u << (k - k16)) - 1);
    __m512 bv[8];
#pragma GCC unroll 8
    for (int j = 0; j < nb; j++) bv[j] = _mm512_maskz_loadu_ps(mask, b + j * ldb + k16);
#pragma GCC unroll 8
    for (int i = 0; i < rb; i++) {
      __m512 av = _mm512_maskz_loadu_ps(mask, a + i * lda + k16);
#pragma GCC unroll 8
      for (int j = 0; j < nb; j++) acc[i * nb + j] = _mm512_fmadd_ps(av, bv[j], acc[i * nb + j]);
    }
  }
  float s[DOT_ACC_];
  _mm512_storeu_ps(s, _mm512_mul_ps(_mm512_set1_ps(alpha), sums16_(acc)));
  for (int i = 0; i < rb; i++)
    for (int j = 0; j < nb; j++) {
      float v = s[i * nb + j];
      c[i * ldc + j] = beta == 0.0f ? v : v + beta * c[i * ldc + j];
    }
}

#define DOT_CASE_(rb, nb) \
  case (rb) * 16 + (nb): dot_tile_(rb, nb, k, a, lda, b, ldb, c, ldc, alpha, beta); break

/* One tile with its sizes turned into constants, so each shape gets its own
 * fully unrolled loop. */
AVX512_ static void dot_tile_dispatch_(int rb, int nb, int64_t k, const float* a, int64_t lda, const float* b,
                                       int64_t ldb, float* c, int64_t ldc, float alpha, float beta) {
  switch (rb * 16 + nb) {
    DOT_CASE_(1, 1);
    DOT_CASE_(1, 2);
    DOT_CASE_(1, 3);
    DOT_CASE_(1, 4);
    DOT_CASE_(1, 5);
    DOT_CASE_(1, 6);
    DOT_CASE_(1, 7);
    DOT_CASE_(1, 8);
    DOT_CASE_(2, 1);
    DOT_CASE_(2, 2);
    DOT_CASE_(2, 3);
    DOT_CASE_(2, 4);
    DOT_CASE_(2, 5);
    DOT_CASE_(2, 6);
    DOT_CASE_(2, 7);
    DOT_CASE_(2, 8);
    DOT_CASE_(3, 1);
    DOT_CASE_(3, 2);
    DOT_CASE_(3, 3);
    DOT_CASE_(3, 4);
    DOT_CASE_(4, 1);
    DOT_CASE_(4, 2);
    DOT_CASE_(4, 3);
    DOT_CASE_(4, 4);
    DOT_CASE_(5, 1);
    DOT_CASE_(5, 2);
    DOT_CASE_(6, 1);
    DOT_CASE_(6, 2);
    DOT_CASE_(7, 1);
    DOT_CASE_(7, 2);
    DOT_CASE_(8, 1);
    DOT_CASE_(8, 2);
    default: break; /* unreachable: the tiles of dt_gemm_dot_avx512_ */
  }
}

/* Tiles of 16 accumulators: 8 x 2 when N <= 2 (and 2 x 8 when M <= 2), so
 * that each loaded row of A (of B) feeds as many multiply-adds as possible,
 * else 4 x 4. */
void dt_gemm_dot_avx512_(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                         int64_t ldb, float beta, float* c, int64_t ldc) {
  const int rmax = n <= 2 ? 8 : m <= 2 ? 2 : 4, cmax = n <= 2 ? 2 : m <= 2 ? 8 : 4;
  for (int64_t i = 0; i < m; i += rmax) {
    int rb = m - i < rmax ? (int)(m - i) : rmax;
    for (int64_t j = 0; j < n; j += cmax) {
      int nb = n - j < cmax ? (int)(n - j) : cmax;
      dot_tile_dispatch_(rb, nb, k, a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, alpha, beta);
    }
  }
}
