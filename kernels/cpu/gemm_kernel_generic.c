/* gemm_kernel_generic.c — the portable GEMM micro-kernel: a 4 x 8 tile in
 * plain (GNU) C vectors, compiled for baseline x86-64. The fallback on CPUs
 * without AVX2 + FMA. */
#include "gemm_internal.h"

#define MR 4
#define NR 8

/* Four floats as a GNU C vector: SSE2 on baseline x86-64, whatever the
 * target offers elsewhere, without intrinsics. */
typedef float v4_ __attribute__((vector_size(16)));

static inline v4_ load4_(const float* p) {
  v4_ v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void store4_(float* p, v4_ v) { memcpy(p, &v, sizeof v); }

/* One row of the tile: c = alpha * acc + beta * c (beta == 0: c not read). */
static inline void store_row_(float* c, v4_ lo, v4_ hi, float alpha, float beta) {
  if (beta == 0.0f) {
    store4_(c, alpha * lo);
    store4_(c + 4, alpha * hi);
  } else {
    store4_(c, alpha * lo + beta * load4_(c));
    store4_(c + 4, alpha * hi + beta * load4_(c + 4));
  }
}

static void kernel_4x8_(int64_t k, const float* a, int64_t rsa, int64_t csa, const float* b, int64_t rsb,
                        float* c, int64_t ldc, float alpha, float beta, int mr, int nr) {
  /* rows past mr repeat the last real row: always readable, then discarded */
  const float* a0 = a;
  const float* a1 = a + (mr > 1 ? 1 : 0) * rsa;
  const float* a2 = a + (mr > 2 ? 2 : mr - 1) * rsa;
  const float* a3 = a + (mr > 3 ? 3 : mr - 1) * rsa;
  v4_ c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  int64_t o = 0;
  for (int64_t p = 0; p < k; p++) {
    v4_ b0 = load4_(b), b1 = load4_(b + 4);
    c00 += a0[o] * b0;
    c01 += a0[o] * b1;
    c10 += a1[o] * b0;
    c11 += a1[o] * b1;
    c20 += a2[o] * b0;
    c21 += a2[o] * b1;
    c30 += a3[o] * b0;
    c31 += a3[o] * b1;
    o += csa;
    b += rsb;
  }
  float* t = c;
  int64_t ldt = ldc;
  float tile[MR * NR];
  int edge = mr != MR || nr != NR;
  if (edge) { /* the same arithmetic on a full-size copy, then the valid part back */
    memset(tile, 0, sizeof tile);
    t = tile;
    ldt = NR;
    if (beta != 0.0f)
      for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) tile[i * NR + j] = c[i * ldc + j];
  }
  store_row_(t, c00, c01, alpha, beta);
  store_row_(t + ldt, c10, c11, alpha, beta);
  store_row_(t + 2 * ldt, c20, c21, alpha, beta);
  store_row_(t + 3 * ldt, c30, c31, alpha, beta);
  if (edge)
    for (int i = 0; i < mr; i++)
      for (int j = 0; j < nr; j++) c[i * ldc + j] = tile[i * NR + j];
}

const dt_gemm_isa_ dt_gemm_isa_generic_ = {
    .name = "generic",
    .mr = MR,
    .nr = NR,
    .mc = 128,
    .kc = 256,
    .nc = 2048,
    .kernel = kernel_4x8_,
    .pack_a = dt_gemm_pack_a_generic_,
    .pack_b = dt_gemm_pack_b_generic_,
    .dot = NULL,
};
