/* gemm_outer_avx512.c — two AVX-512 paths of f32 GEMM for B along N where
 * the micro-kernel's tile would be mostly set-up or padding: a tiny K, and
 * (below) an M of a few rows.
 *
 * A tiny K (1 to 4: the input gradient of a 256 -> 2 layer) is a sum of K
 * outer products: B's K rows of a
 * column block stay in registers and every row of C is made in one pass, so
 * the time goes to storing C rather than to micro-tiles and their set-up (64
 * x 256 x 2 ran at 0.84x OpenBLAS's small-matrix kernel through the 8 x 32
 * micro-kernel). Each element gets the micro-kernel's operations in its
 * order (a zero accumulator, K multiply-adds, then alpha and beta as the
 * kernel stores them), so the same bits as that path. */
#include "gemm_internal.h"
#include <immintrin.h>

#define AVX512_ __attribute__((target("avx512f,avx2,fma")))

/* One vector of a row of C stored as the micro-kernel stores it: alpha * acc,
 * or alpha * acc + beta * c; lanes outside mk neither read nor written. */
AVX512_ static inline __attribute__((always_inline)) void store_vec_(float* c, __m512 acc, __m512 va, float beta,
                                                                     __mmask16 mk) {
  __m512 out = beta == 0.0f ? _mm512_mul_ps(va, acc)
                            : _mm512_fmadd_ps(va, acc, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mk, c)));
  _mm512_mask_storeu_ps(c, mk, out);
}

/* The column block of C starting at j, at most vmax vectors of 16 wide: its
 * vector count and the mask of its last vector. */
static inline void column_block_(int64_t n, int64_t j, int vmax, int* v, __mmask16* last) {
  int64_t cols = n - j < 16 * vmax ? n - j : 16 * vmax;
  *v = (int)((cols + 15) / 16);
  int rem = (int)(cols - 16 * (*v - 1));
  *last = rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1);
}

/* A switch's cases turning a block's vector count (1 to 8) into a constant. */
#define CASES_1_TO_8_(CALL) \
  case 1: CALL(1); break;   \
  case 2: CALL(2); break;   \
  case 3: CALL(3); break;   \
  case 4: CALL(4); break;   \
  case 5: CALL(5); break;   \
  case 6: CALL(6); break;   \
  case 7: CALL(7); break;   \
  case 8: CALL(8); break

/* Columns [j0, j0 + 16 v) of every row, v vectors of B per K row held in
 * registers (v and k constants after inlining; k * v <= 16); lanes past n are
 * masked off (last). */
AVX512_ static inline __attribute__((always_inline)) void outer_block_(int k, int v, int64_t m, const float* a,
                                                                       int64_t rsa, int64_t csa, const float* b,
                                                                       int64_t ldb, float* c, int64_t ldc,
                                                                       float alpha, float beta, __mmask16 last) {
  __m512 bv[4][8];
#pragma GCC unroll 4
  for (int p = 0; p < k; p++)
#pragma GCC unroll 8
    for (int x = 0; x < v; x++) bv[p][x] = _mm512_maskz_loadu_ps(x == v - 1 ? last : 0xffff, b + p * ldb + 16 * x);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < m; i++) {
    __m512 acc[8];
#pragma GCC unroll 8
    for (int x = 0; x < v; x++) acc[x] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int p = 0; p < k; p++) {
      __m512 ap = _mm512_set1_ps(a[i * rsa + p * csa]);
#pragma GCC unroll 8
      for (int x = 0; x < v; x++) acc[x] = _mm512_fmadd_ps(ap, bv[p][x], acc[x]);
    }
    float* ci = c + i * ldc;
#pragma GCC unroll 8
    for (int x = 0; x < v; x++) store_vec_(ci + 16 * x, acc[x], va, beta, x == v - 1 ? last : 0xffff);
  }
}

/* Blocks of 8 vectors (128 columns) for K <= 2, 4 vectors for K <= 4; a
 * narrower last block where fewer columns are left. */
AVX512_ static inline __attribute__((always_inline)) void outer_k_(int k, int64_t m, int64_t n, const float* a,
                                                                   int64_t rsa, int64_t csa, const float* b,
                                                                   int64_t ldb, float* c, int64_t ldc, float alpha,
                                                                   float beta) {
  const int vmax = k <= 2 ? 8 : 4;
  for (int64_t j = 0; j < n; j += 16 * vmax) {
    int v;
    __mmask16 last;
    column_block_(n, j, vmax, &v, &last);
    switch (v) {
#define OUTER_V_(vv) outer_block_(k, vv, m, a, rsa, csa, b + j, ldb, c + j, ldc, alpha, beta, last)
      CASES_1_TO_8_(OUTER_V_);
#undef OUTER_V_
      default: break; /* unreachable: 1 <= v <= vmax */
    }
  }
}

AVX512_ void dt_gemm_outer_avx512_(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa, int64_t csa,
                           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  switch (k) {
    case 1: outer_k_(1, m, n, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    case 2: outer_k_(2, m, n, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    case 3: outer_k_(3, m, n, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    case 4: outer_k_(4, m, n, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    default: break; /* unreachable: the caller takes K <= DT_GEMM_OUTER_MAX_K only */
  }
}

/* ---- a few rows: C's rows held in registers across K ----------------------------
 * An M of 1 to 4 (a weight gradient with 2 outputs) with B along N: a block of
 * C's rows, V vectors wide, is summed in registers over a K block of kc, so
 * that each B vector loaded feeds every row (the micro-kernel's 2-row body
 * loads two B vectors for four multiply-adds: 2 x 256 x 64 ran at 0.8x
 * OpenBLAS). The micro-kernel's operations per element, K blocks included (a
 * zero accumulator per block, alpha and then beta, or 1 after the first
 * block, as it stores), so its bits. */

AVX512_ static inline __attribute__((always_inline)) void rows_block_(int rows, int v, int64_t k, int64_t kc,
                                                                      const float* a, int64_t rsa, int64_t csa,
                                                                      const float* b, int64_t ldb, float* c,
                                                                      int64_t ldc, float alpha, float beta,
                                                                      __mmask16 last) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t p0 = 0; p0 < k; p0 += kc) {
    int64_t p1 = k - p0 < kc ? k : p0 + kc;
    float beta_k = p0 == 0 ? beta : 1.0f;
    __m512 acc[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
      for (int x = 0; x < v; x++) acc[r][x] = _mm512_setzero_ps();
    for (int64_t p = p0; p < p1; p++) {
      __m512 bv[8];
#pragma GCC unroll 8
      for (int x = 0; x < v; x++) {
        bv[x] = _mm512_maskz_loadu_ps(x == v - 1 ? last : 0xffff, b + p * ldb + 16 * x);
        /* held in a register: GCC otherwise folds the load into every row's multiply-add, and
         * 2 x 256 x 64 loaded each B vector twice (0.85x OpenBLAS, load-bound) */
        __asm__("" : "+v"(bv[x]));
      }
#pragma GCC unroll 4
      for (int r = 0; r < rows; r++) {
        __m512 ar = _mm512_set1_ps(a[r * rsa + p * csa]);
#pragma GCC unroll 8
        for (int x = 0; x < v; x++) acc[r][x] = _mm512_fmadd_ps(ar, bv[x], acc[r][x]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
      for (int x = 0; x < v; x++)
        store_vec_(c + r * ldc + 16 * x, acc[r][x], va, beta_k, x == v - 1 ? last : 0xffff);
  }
}

/* Column blocks of 8 vectors for 1 or 2 rows, 4 vectors for 3 or 4 (at most
 * 16 accumulators), narrower where fewer columns are left. */
AVX512_ static inline __attribute__((always_inline)) void rows_m_(int rows, int64_t n, int64_t k, int64_t kc,
                                                                  const float* a, int64_t rsa, int64_t csa,
                                                                  const float* b, int64_t ldb, float* c, int64_t ldc,
                                                                  float alpha, float beta) {
  const int vmax = rows <= 2 ? 8 : 4;
  for (int64_t j = 0; j < n; j += 16 * vmax) {
    int v;
    __mmask16 last;
    column_block_(n, j, vmax, &v, &last);
    switch (v) {
#define ROWS_V_(vv) rows_block_(rows, vv, k, kc, a, rsa, csa, b + j, ldb, c + j, ldc, alpha, beta, last)
      CASES_1_TO_8_(ROWS_V_);
#undef ROWS_V_
      default: break; /* unreachable: 1 <= v <= vmax */
    }
  }
}

AVX512_ void dt_gemm_rows_avx512_(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float* a,
                                  int64_t rsa, int64_t csa, const float* b, int64_t ldb, float beta, float* c,
                                  int64_t ldc) {
  switch (m) {
    case 1: rows_m_(1, n, k, kc, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    case 2: rows_m_(2, n, k, kc, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    case 3: rows_m_(3, n, k, kc, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    case 4: rows_m_(4, n, k, kc, a, rsa, csa, b, ldb, c, ldc, alpha, beta); break;
    default: break; /* unreachable: the caller takes M <= DT_GEMM_ROWS_MAX_M only */
  }
}
