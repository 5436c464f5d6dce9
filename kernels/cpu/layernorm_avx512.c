/* layernorm_avx512.c — dt_layernorm_bwd_row and dt_layernorm_moments (of one row or two at once)
 * (layernorm.h) written out in AVX-512 intrinsics, with their bits. The
 * backward row: the eight double lanes of its sums are
 * one zmm each (lane k sums the columns j = k mod 8, as the scalar body's
 * acc[k]), folded by dt_fold8_, and the row's gradient is the same f32
 * arithmetic 16 columns at a time. GCC left the scalar body's double sums
 * scalar (the `weight ?` select and the widening), a third of layer norm's
 * backward on a Zen 5 core. Call only where dt_cpu_avx512_(). */
#include "cpu_internal.h"
#include "layernorm.h"
#include <immintrin.h>

#define AVX512_ __attribute__((target("avx512f")))

/* layernorm.h's dt_layernorm_moments with its bits: dt_sum_f64 and
 * dt_sumsq_dev_f64's eight double lanes as one zmm each (GCC used four at a
 * time), folded by dt_fold8_, then their scalar tails; for n rows at once (n
 * = 1 or 2, a constant after inlining). Each row's sums are one chain of
 * dependent adds in an order fixed by the scalar body (16 adds for C = 128),
 * which alone leaves the adder waiting on its latency; two rows' chains
 * interleaved fill those waits (a GPT-mini layer norm's forward spent a
 * quarter of its time in them). Each row gets the bits it gets alone. */
#define ROWS_ _Pragma("GCC unroll 2") for (int r = 0; r < n; r++)

AVX512_ static inline __attribute__((always_inline)) void moments_rows_(int n, const float* const* x, int64_t C,
                                                                        float eps, float* mean_out, float* rstd_out) {
  __m512d acc[2];
  double mean[2];
  ROWS_ acc[r] = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= C; j += 8) ROWS_ acc[r] = _mm512_add_pd(acc[r], _mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j)));
  ROWS_ {
    double lanes[8];
    _mm512_storeu_pd(lanes, acc[r]);
    double s = dt_fold8_(lanes);
    for (int64_t t = j; t < C; t++) s += (double)x[r][t];
    mean[r] = s / (double)C;
    acc[r] = _mm512_setzero_pd();
  }
  for (j = 0; j + 8 <= C; j += 8) {
    ROWS_ {
      __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x[r] + j)), _mm512_set1_pd(mean[r]));
      acc[r] = _mm512_add_pd(acc[r], _mm512_mul_pd(d, d));
    }
  }
  ROWS_ {
    double lanes[8];
    _mm512_storeu_pd(lanes, acc[r]);
    double ss = dt_fold8_(lanes);
    for (int64_t t = j; t < C; t++) {
      double d = (double)x[r][t] - mean[r];
      ss += d * d;
    }
    float var = (float)(ss / (double)C);
    mean_out[r] = (float)mean[r];
    rstd_out[r] = dt_layernorm_rstd_f(var, eps);
  }
}

AVX512_ void dt_layernorm_bwd_row_avx512_(float* dinp, const float* dout, const float* x, const float* weight,
                                          float mean, float rstd, int64_t C) {
  const __m256 vmean = _mm256_set1_ps(mean), vrstd = _mm256_set1_ps(rstd);
  __m512d acc_g = _mm512_setzero_pd(), acc_gx = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= C; j += 8) {
    __m256 g = _mm256_loadu_ps(dout + j);
    if (weight) g = _mm256_mul_ps(g, _mm256_loadu_ps(weight + j));
    __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmean), vrstd);
    __m512d gd = _mm512_cvtps_pd(g);
    acc_g = _mm512_add_pd(acc_g, gd);
    acc_gx = _mm512_add_pd(acc_gx, _mm512_mul_pd(gd, _mm512_cvtps_pd(xhat)));
  }
  double lanes_g[8], lanes_gx[8];
  _mm512_storeu_pd(lanes_g, acc_g);
  _mm512_storeu_pd(lanes_gx, acc_gx);
  double sum_g = dt_fold8_(lanes_g), sum_g_xhat = dt_fold8_(lanes_gx);
  for (; j < C; j++) {
    float g = weight ? dout[j] * weight[j] : dout[j];
    sum_g += g;
    sum_g_xhat += (double)g * (double)dt_layernorm_xhat_f(x[j], mean, rstd);
  }
  const __m512 mg = _mm512_set1_ps((float)(sum_g / (double)C));
  const __m512 mgx = _mm512_set1_ps((float)(sum_g_xhat / (double)C));
  const __m512 m16 = _mm512_set1_ps(mean), r16 = _mm512_set1_ps(rstd);
  for (j = 0; j < C; j += 16) {
    __mmask16 k = C - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (C - j)) - 1);
    __m512 g = _mm512_maskz_loadu_ps(k, dout + j);
    if (weight) g = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, weight + j));
    __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m16), r16);
    __m512 d = _mm512_mul_ps(r16, _mm512_sub_ps(_mm512_sub_ps(g, mg), _mm512_mul_ps(xhat, mgx)));
    _mm512_mask_storeu_ps(dinp + j, k, d);
  }
}

AVX512_ void dt_layernorm_moments_avx512_(const float* x, int64_t C, float eps, float* mean_out, float* rstd_out) {
  moments_rows_(1, &x, C, eps, mean_out, rstd_out);
}

AVX512_ void dt_layernorm_moments2_avx512_(const float* x0, const float* x1, int64_t C, float eps, float* mean_out,
                                           float* rstd_out) {
  const float* x[2] = {x0, x1};
  moments_rows_(2, x, C, eps, mean_out, rstd_out);
}
