/* dt_math_avx512.h — dt_math.h's expf and tanhf, and gelu.h's GELU and its
 * gradient, 16 lanes at a time with AVX-512F intrinsics, giving the bits of
 * the scalar bodies on every input (all 2^32 floats compared by
 * scripts/math_avx512_exhaustive.c after each change to this file;
 * tests/kernels/math_rows_test.ts compares about 4.2 M of them on every
 * run). GCC's own vectorisation of the scalar
 * bodies spends most of its instructions on the selects and on building 2^k
 * from bits; here the clamps are min / max, and 2^n is applied by vscalefps,
 * which rounds p * 2^n once as the scalar body's two halves do (the first
 * half is exact). CPU library only; include where AVX-512F code is compiled
 * (a target attribute) and call only on CPUs that have it. */
#pragma once
#include <immintrin.h>
#include "gelu.h"

#define DT_AVX512_MATH_ __attribute__((target("avx512f"), always_inline)) static inline

/* e^xc for an xc already clamped to [-105, 89]: dt_expf's reduction, polynomial and 2^n. */
DT_AVX512_MATH_ __m512 dt_expf_clamped_avx512_(__m512 xc) {
  __m512 t = _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f));
  /* (t + shift) - shift in the scalar body: both round to the nearest integer, ties to even, for
   * |t| < 2^22; roundscale is one instruction where that is two on the critical path (a -0 for a
   * small negative t instead of +0 changes neither r nor 2^n) */
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* dt_expf on 16 lanes. */
DT_AVX512_MATH_ __m512 dt_expf_avx512_(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  /* x < -105 ? -105 : (x > 89 ? 89 : x), 0 for NaN */
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-105.0f)), _mm512_set1_ps(89.0f));
  xc = _mm512_mask_mov_ps(xc, nan, _mm512_setzero_ps());
  return _mm512_mask_mov_ps(dt_expf_clamped_avx512_(xc), nan, x);
}

/* dt_expf on 16 lanes of x >= 0, where a NaN lane's result is never used: tanh's e^2|x| inside
 * GELU and its gradient. Only the upper clamp, and no NaN masks: a NaN x gives a finite tanh there,
 * and GELU's 0.5x (a factor of every term) makes the result x's NaN all the same (all 2^32 inputs
 * compared with the scalar bodies). */
DT_AVX512_MATH_ __m512 dt_expf_nonneg_avx512_(__m512 x) {
  return dt_expf_clamped_avx512_(_mm512_min_ps(x, _mm512_set1_ps(89.0f)));
}

/* dt_tanhf on 16 lanes; nan_used 0 (a constant) takes dt_expf_nonneg_avx512_ for GELU. */
DT_AVX512_MATH_ __m512 dt_tanhf_body_avx512_(__m512 x, const int nan_used) {
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  __m512 z = _mm512_abs_ps(x);
  __m512 s = _mm512_mul_ps(z, z);
  __m512 poly = _mm512_set1_ps(-5.70498872745e-3f);
  poly = _mm512_fmadd_ps(poly, s, _mm512_set1_ps(2.06390887954e-2f));
  poly = _mm512_fmadd_ps(poly, s, _mm512_set1_ps(-5.37397155531e-2f));
  poly = _mm512_fmadd_ps(poly, s, _mm512_set1_ps(1.33314422036e-1f));
  poly = _mm512_fmadd_ps(poly, s, _mm512_set1_ps(-3.33332819422e-1f));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(poly, s), z, z);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 e = nan_used ? dt_expf_avx512_(_mm512_add_ps(z, z)) : dt_expf_nonneg_avx512_(_mm512_add_ps(z, z));
  __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  /* z < 0.625 is false for NaN: the large branch, as the scalar select */
  __m512 mag = _mm512_mask_mov_ps(large, _mm512_cmp_ps_mask(z, _mm512_set1_ps(0.625f), _CMP_LT_OQ), small);
  /* copysignf(mag, x) */
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(sign, _mm512_castps_si512(mag), _mm512_castps_si512(x), 0xac));
}

/* dt_tanhf on 16 lanes. */
DT_AVX512_MATH_ __m512 dt_tanhf_avx512_(__m512 x) { return dt_tanhf_body_avx512_(x, 1); }

/* dt_gelu_f on 16 lanes. */
DT_AVX512_MATH_ __m512 dt_gelu_avx512_(__m512 x) {
  __m512 x_cube = _mm512_mul_ps(x, _mm512_mul_ps(x, x));
  __m512 inner =
      _mm512_mul_ps(_mm512_set1_ps(DT_GELU_BETA), _mm512_fmadd_ps(_mm512_set1_ps(DT_GELU_KAPPA), x_cube, x));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), dt_tanhf_body_avx512_(inner, 0)));
}

/* dt_gelu_grad_f on 16 lanes. */
DT_AVX512_MATH_ __m512 dt_gelu_grad_avx512_(__m512 dout, __m512 x) {
  __m512 x_sq = _mm512_mul_ps(x, x);
  __m512 x_cube = _mm512_mul_ps(x, x_sq);
  __m512 inner =
      _mm512_mul_ps(_mm512_set1_ps(DT_GELU_BETA), _mm512_fmadd_ps(_mm512_set1_ps(DT_GELU_KAPPA), x_cube, x));
  __m512 t = dt_tanhf_body_avx512_(inner, 0);
  __m512 left = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
  __m512 left_derivative = _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
  __m512 tanh_derivative = _mm512_fnmadd_ps(t, t, _mm512_set1_ps(1.0f));
  __m512 inner_derivative = _mm512_mul_ps(_mm512_set1_ps(DT_GELU_BETA),
                                          _mm512_fmadd_ps(_mm512_set1_ps(3.0f * DT_GELU_KAPPA), x_sq, _mm512_set1_ps(1.0f)));
  return _mm512_mul_ps(dout, _mm512_fmadd_ps(_mm512_mul_ps(left, tanh_derivative), inner_derivative, left_derivative));
}
