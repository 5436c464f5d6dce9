/* gemm_dot_avx2.c — GEMM as dot products, for f32 products whose M or N is
 * tiny (a 256 -> 2 layer) and whose operands both run along K (A not
 * transposed, B transposed): no packing, and no micro-tile mostly padding. */
#include "gemm_internal.h"
#include <immintrin.h>

#define AVX2_ __attribute__((target("avx2,fma")))
#define DOT_MAX_ 4 /* rows and columns per tile */

AVX2_ static inline float hsum_(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* An rb x nb tile of dot products (rb, nb <= 4 are constants after inlining).
 * The K tail is read with masked loads, so nothing past a row is touched. */
AVX2_ static inline __attribute__((always_inline)) void dot_tile_(int rb, int nb, int64_t k, const float* a,
                                                                  int64_t lda, const float* b, int64_t ldb,
                                                                  float* c, int64_t ldc, float alpha, float beta) {
  __m256 acc[DOT_MAX_][DOT_MAX_];
  for (int i = 0; i < rb; i++)
    for (int j = 0; j < nb; j++) acc[i][j] = _mm256_setzero_ps();
  int64_t k8 = k / 8 * 8;
  for (int64_t p = 0; p < k8; p += 8) {
    __m256 bv[DOT_MAX_];
    for (int j = 0; j < nb; j++) bv[j] = _mm256_loadu_ps(b + j * ldb + p);
    for (int i = 0; i < rb; i++) {
      __m256 av = _mm256_loadu_ps(a + i * lda + p);
      for (int j = 0; j < nb; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  if (k8 < k) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(k - k8)), lane);
    __m256 bv[DOT_MAX_];
    for (int j = 0; j < nb; j++) bv[j] = _mm256_maskload_ps(b + j * ldb + k8, mask);
    for (int i = 0; i < rb; i++) {
      __m256 av = _mm256_maskload_ps(a + i * lda + k8, mask);
      for (int j = 0; j < nb; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < rb; i++) {
    for (int j = 0; j < nb; j++) {
      float v = alpha * hsum_(acc[i][j]);
      c[i * ldc + j] = beta == 0.0f ? v : v + beta * c[i * ldc + j];
    }
  }
}

#define DOT_CASE_(rb, nb) \
  case (rb) * 8 + (nb): dot_tile_(rb, nb, k, a, lda, b, ldb, c, ldc, alpha, beta); break

/* One tile with its sizes turned into constants, so each shape gets its own
 * fully unrolled loop. */
AVX2_ static void dot_tile_dispatch_(int rb, int nb, int64_t k, const float* a, int64_t lda, const float* b,
                                     int64_t ldb, float* c, int64_t ldc, float alpha, float beta) {
  switch (rb * 8 + nb) {
    DOT_CASE_(1, 1);
    DOT_CASE_(1, 2);
    DOT_CASE_(1, 3);
    DOT_CASE_(1, 4);
    DOT_CASE_(2, 1);
    DOT_CASE_(2, 2);
    DOT_CASE_(2, 3);
    DOT_CASE_(2, 4);
    DOT_CASE_(3, 1);
    DOT_CASE_(3, 2);
    DOT_CASE_(3, 3);
    DOT_CASE_(3, 4);
    DOT_CASE_(4, 1);
    DOT_CASE_(4, 2);
    DOT_CASE_(4, 3);
    DOT_CASE_(4, 4);
    default: break; /* unreachable: 1 <= rb, nb <= DOT_MAX_ */
  }
}

void dt_gemm_dot_avx2_(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; i += DOT_MAX_) {
    int rb = m - i < DOT_MAX_ ? (int)(m - i) : DOT_MAX_;
    for (int64_t j = 0; j < n; j += DOT_MAX_) {
      int nb = n - j < DOT_MAX_ ? (int)(n - j) : DOT_MAX_;
      dot_tile_dispatch_(rb, nb, k, a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, alpha, beta);
    }
  }
}
