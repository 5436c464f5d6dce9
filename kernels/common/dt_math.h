/* dt_math.h — expf and tanhf for the kernels, built only from IEEE +, *, /,
 * fmaf and bit moves, so the CPU library (vectorised or not) and the emulated
 * GPU produce identical bits; libm's expf/tanhf and CUDA's differ in the last
 * ulp. nvcc builds the real GPU's library with FMA contraction, which may fuse
 * the products written here as plain ones (within an ulp; nothing depends on
 * those bits being the CPU's, docs/GPU_KERNELS.md). Cephes' polynomials: exp within 1 ulp, tanh
 * within 2 ulps over the float range (checked exhaustively when written). */
#pragma once
#include <math.h>
#include "dt_common.h"

/* 2^k as a float for k in [-126, 127]. */
DT_HD float dt_exp2i_(int32_t k) {
  uint32_t u = (uint32_t)(k + 127) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* e^x: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2), a degree-7
 * polynomial for e^r, then 2^n applied in two halves so subnormal results
 * round once and large ones overflow to inf. NaN stays NaN. */
DT_HD float dt_expf(float x) {
  int is_nan = x != x;
  float xc = x < -105.0f ? -105.0f : (x > 89.0f ? 89.0f : x);
  xc = is_nan ? 0.0f : xc;
  float t = xc * 1.44269504088896341f;
  float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest integer (|t| < 2^22) */
  float r = fmaf(n, -0.693359375f, xc);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p, r * r, r) + 1.0f;
  int32_t k = (int32_t)n; /* [-152, 128] */
  int32_t k1 = k >> 1;    /* floor(k / 2): both halves stay in [-76, 64] */
  float res = (p * dt_exp2i_(k1)) * dt_exp2i_(k - k1);
  return is_nan ? x : res;
}

/* The larger of a and b; a NaN in b never wins (as the CPU's `b > a ? b : a`
 * row maxima), so a row's maximum is the same on both libraries. */
DT_HD float dt_maxf(float a, float b) { return b > a ? b : a; }

/* x is NaN (what isnan says, without relying on a libm macro's device form). */
DT_HD int dt_isnan_f(float x) { return x != x; }

/* tanh(x): an odd polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1) above
 * (which saturates to exactly 1), the sign restored last (tanh(-0) = -0). */
DT_HD float dt_tanhf(float x) {
  float z = fabsf(x);
  float s = z * z;
  float poly = -5.70498872745e-3f;
  poly = fmaf(poly, s, 2.06390887954e-2f);
  poly = fmaf(poly, s, -5.37397155531e-2f);
  poly = fmaf(poly, s, 1.33314422036e-1f);
  poly = fmaf(poly, s, -3.33332819422e-1f);
  float small = fmaf(poly * s, z, z);
  float large = 1.0f - 2.0f / (dt_expf(z + z) + 1.0f);
  return copysignf(z < 0.625f ? small : large, x);
}

/* ln(x): x = 2^e * m with m in [sqrt(1/2), sqrt(2)), then Cephes' degree-9
 * polynomial for ln(1 + f), f = m - 1, and e ln2 added in two parts. Within
 * 1 ulp; subnormals are scaled up first; ln(0) = -inf, ln(<0) = NaN,
 * ln(inf) = inf, NaN stays NaN. Written branch-free so loops vectorise. */
DT_HD float dt_logf(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  int sub = (u & 0x7f800000u) == 0;
  float xs = sub ? x * 8388608.0f : x; /* 2^23: subnormals become normal */
  memcpy(&u, &xs, 4);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 126 - (sub ? 23 : 0); /* xs = 2^e * m, m in [1/2, 1) */
  uint32_t mu = (u & 0x007fffffu) | 0x3f000000u;
  float m;
  memcpy(&m, &mu, 4);
  int low = m < 0.707106781186547524f;
  float fe = (float)(e - low);
  float f = low ? (m + m) - 1.0f : m - 1.0f;
  float z = f * f;
  float p = 7.0376836292e-2f;
  p = fmaf(p, f, -1.1514610310e-1f);
  p = fmaf(p, f, 1.1676998740e-1f);
  p = fmaf(p, f, -1.2420140846e-1f);
  p = fmaf(p, f, 1.4249322787e-1f);
  p = fmaf(p, f, -1.6668057665e-1f);
  p = fmaf(p, f, 2.0000714765e-1f);
  p = fmaf(p, f, -2.4999993993e-1f);
  p = fmaf(p, f, 3.3333331174e-1f);
  float y = (p * f) * z;
  y = fmaf(fe, -2.12194440e-4f, y);
  y = fmaf(z, -0.5f, y);
  float r = f + y;
  r = fmaf(fe, 0.693359375f, r);
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  r = x == INFINITY ? x : r;
  return x != x ? x : r;
}
