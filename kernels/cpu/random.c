/* random.c — the bulk draws of PyTorch's CPU generator (random/torch_generator.ts)
 * in native code: MT19937 words turned into float uniforms, uniform_, and torch
 * 1.13's AVX2 Box-Muller `normal_fill_16_AVX2` (the Cephes-style log256_ps and
 * sincos256_ps of avx_mathfun.h), bit for bit as the TypeScript reference in
 * random/box_muller_avx2.ts. torch builds those kernels with FMA contraction,
 * so each fused step is an explicit fmaf here (-ffp-contract=off holds
 * everywhere else). Host-only (dt_cpu_* extras): the CUDA library has none. */
#include "dt_vectorize.h" /* first: its pragma must cover the bodies below */
#include "cpu_internal.h"
#include <math.h>

#define DT_MT_N 624
#define DT_MT_M 397

/* ---- MT19937, as std::mt19937 ---------------------------------------------- */

static void dt_mt_twist_(uint32_t* w) {
  int i = 0;
  for (; i < DT_MT_N - DT_MT_M; i++) {
    uint32_t y = (w[i] & 0x80000000u) | (w[i + 1] & 0x7fffffffu);
    w[i] = w[i + DT_MT_M] ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
  }
  for (; i < DT_MT_N - 1; i++) {
    uint32_t y = (w[i] & 0x80000000u) | (w[i + 1] & 0x7fffffffu);
    w[i] = w[i + DT_MT_M - DT_MT_N] ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
  }
  uint32_t y = (w[DT_MT_N - 1] & 0x80000000u) | (w[0] & 0x7fffffffu);
  w[DT_MT_N - 1] = w[DT_MT_M - 1] ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
}

static inline uint32_t dt_mt_next_(uint32_t* w, int32_t* index) {
  if (*index >= DT_MT_N) {
    dt_mt_twist_(w);
    *index = 0;
  }
  uint32_t y = w[(*index)++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

static dt_status dt_mt_check_(const char* fn, const uint32_t* words, const int32_t* index, const float* out,
                              int64_t n) {
  DT_REQUIRE_(words && index, "%s: the generator state (words, index) is NULL", fn);
  DT_REQUIRE_(*index >= 0 && *index <= DT_MT_N, "%s: state index %d is outside [0, %d]", fn, *index, DT_MT_N);
  DT_REQUIRE_(n >= 0, "%s: count %lld is negative", fn, (long long)n);
  DT_REQUIRE_(out || n == 0, "%s: out is NULL for %lld elements", fn, (long long)n);
  return DT_OK;
}

/** out[i] = (u & 0xFFFFFF) * 2^-24 for the next n words u of the engine
 *  (uniform_real_distribution<float>(0, 1)); advances words / *index. */
DT_EXPORT dt_status dt_cpu_mt_unit(uint32_t* words, int32_t* index, float* out, int64_t n) {
  dt_status st = dt_mt_check_("dt_cpu_mt_unit", words, index, out, n);
  if (st) return st;
  for (int64_t i = 0; i < n; i++) out[i] = (float)(dt_mt_next_(words, index) & 0xffffffu) * 0x1p-24f;
  return DT_OK;
}

/** out[i] = fmaf(x, span, from) for the next n unit draws x: torch's uniform_. */
DT_EXPORT dt_status dt_cpu_mt_uniform(uint32_t* words, int32_t* index, float* out, int64_t n, float from,
                                      float span) {
  dt_status st = dt_mt_check_("dt_cpu_mt_uniform", words, index, out, n);
  if (st) return st;
  for (int64_t i = 0; i < n; i++) {
    out[i] = fmaf((float)(dt_mt_next_(words, index) & 0xffffffu) * 0x1p-24f, span, from);
  }
  return DT_OK;
}

/** out = a permutation of 0..n-1 as torch 1.13's CPU randperm draws it: the
 *  identity, then for i in 0..n-2 swap out[i] with out[i + u % (n - i)] for
 *  the next word u (the sampler's per-epoch shuffle; ~40x the cold JS loop). */
DT_EXPORT dt_status dt_cpu_randperm(uint32_t* words, int32_t* index, int32_t* out, int64_t n) {
  DT_REQUIRE_(words && index, "dt_cpu_randperm: the generator state (words, index) is NULL");
  DT_REQUIRE_(*index >= 0 && *index <= DT_MT_N, "dt_cpu_randperm: state index %d is outside [0, %d]", *index,
              DT_MT_N);
  DT_REQUIRE_(n >= 0 && n <= INT32_MAX, "dt_cpu_randperm: n %lld is outside [0, 2^31 - 1]", (long long)n);
  DT_REQUIRE_(out || n == 0, "dt_cpu_randperm: out is NULL for %lld elements", (long long)n);
  for (int64_t i = 0; i < n; i++) out[i] = (int32_t)i;
  for (int64_t i = 0; i + 1 < n; i++) {
    int64_t z = (int64_t)(dt_mt_next_(words, index) % (uint32_t)(n - i));
    int32_t t = out[i];
    out[i] = out[i + z];
    out[i + z] = t;
  }
  return DT_OK;
}

/* ---- Box-Muller, one lane of normal_fill_16_AVX2 ------------------------------ */

static inline float dt_bits_f_(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t dt_f_bits_(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* log256_ps for one lane: the natural log of x (NaN for x <= 0) */
static inline float dt_log256_(float input) {
  static const float p[9] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                             -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                             2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
  const float min_norm_pos = dt_bits_f_(0x00800000u), sqrthf = 0.707106781186547524f;
  const float q1 = -2.12194440e-4f, q2 = 0.693359375f;
  float in = input > min_norm_pos ? input : min_norm_pos;
  uint32_t bits = dt_f_bits_(in);
  float x = dt_bits_f_((bits & ~0x7f800000u) | 0x3f000000u); /* mantissa, exponent of 0.5: x in [0.5, 1) */
  float e = (float)((int32_t)(bits >> 23) - 0x7f + 1);
  int below = x < sqrthf;
  float tmp = below ? x : 0.0f;
  x = x - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x = x + tmp;
  float z = x * x;
  float y = p[0];
  for (int k = 1; k < 9; k++) y = fmaf(y, x, p[k]);
  y = y * x;
  y = fmaf(y, z, e * q1); /* y*z fused into "+ e*q1" */
  y = y - z * 0.5f;
  x = x + y;
  float r = x + e * q2;
  return input > 0.0f ? r : NAN;
}

/* sincos256_ps for one lane */
static inline void dt_sincos256_(float input, float* sin_out, float* cos_out) {
  const float fopi = 1.27323954473516f;
  const float dp1 = -0.78515625f, dp2 = -2.4187564849853515625e-4f, dp3 = -3.77489497744594108e-8f;
  const float s0 = -1.9515295891e-4f, s1 = 8.3321608736e-3f, s2 = -1.6666654611e-1f;
  const float c0 = 2.443315711809948e-5f, c1 = -1.388731625493765e-3f, c2 = 4.166664568298827e-2f;
  int negative = signbit(input) != 0;
  float x = fabsf(input);
  int32_t j = ((int32_t)(x * fopi) + 1) & ~1; /* the octant, rounded up to even */
  float y = (float)j;
  int sin_swap = (j & 4) != 0, use_sin_poly = (j & 2) == 0;
  x = fmaf(y, dp1, x);
  x = fmaf(y, dp2, x);
  x = fmaf(y, dp3, x);
  j -= 2;
  int cos_negative = (~j & 4) != 0, sin_negative = negative != sin_swap;
  float z = x * x;
  float c = fmaf(c0, z, c1);
  c = fmaf(c, z, c2);
  c = c * z;
  c = fmaf(c, z, -(z * 0.5f)); /* second y*z fused into "- z*0.5" */
  c = c + 1.0f;
  float s = fmaf(s0, z, s1);
  s = fmaf(s, z, s2);
  s = s * z;
  s = fmaf(s, x, x); /* y2*x fused into "+ x" */
  float sv = use_sin_poly ? s : c, cv = use_sin_poly ? c : s;
  *sin_out = sin_negative ? -sv : sv;
  *cos_out = cos_negative ? -cv : cv;
}

/* 16 uniforms at d -> 16 normals: lanes 0..7 give u1 = 1 - d[j], lanes 8..15 u2;
 * cos goes to j, sin to j + 8 */
DT_VEC_CLONES static void dt_normal_blocks_(float* data, int64_t blocks, float mean, float std) {
  const float two_pi = (float)(2.0 * 3.14159265358979323846);
  for (int64_t b = 0; b < blocks; b++) {
    float* d = data + b * 16;
    for (int j = 0; j < 8; j++) {
      float u1 = 1.0f - d[j], u2 = d[j + 8];
      float radius = sqrtf(-2.0f * dt_log256_(u1));
      float sn, cs;
      dt_sincos256_(two_pi * u2, &sn, &cs);
      d[j] = fmaf(radius * cs, std, mean);
      d[j + 8] = fmaf(radius * sn, std, mean);
    }
  }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define DT_AVX2_ __attribute__((target("avx2,fma")))

/* The same lanes eight at a time: the operations of dt_log256_ and
 * dt_sincos256_ one for one (these are avx_mathfun.h's own intrinsics). */
DT_AVX2_ static __m256 dt_log256_ps_(__m256 input) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 invalid = _mm256_cmp_ps(input, _mm256_setzero_ps(), _CMP_LE_OS);
  __m256 x = _mm256_max_ps(input, _mm256_castsi256_ps(_mm256_set1_epi32(0x00800000)));
  __m256i bits = _mm256_castps_si256(x);
  __m256i ex = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0x7f));
  x = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(~0x7f800000)), _mm256_set1_epi32(0x3f000000)));
  __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(ex), one);
  __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OS);
  __m256 tmp = _mm256_and_ps(x, below);
  x = _mm256_sub_ps(x, one);
  e = _mm256_sub_ps(e, _mm256_and_ps(one, below));
  x = _mm256_add_ps(x, tmp);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(7.0376836292e-2f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.1514610310e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.1676998740e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.2420140846e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.4249322787e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.6668057665e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(2.0000714765e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-2.4999993993e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(3.3333331174e-1f));
  y = _mm256_mul_ps(y, x);
  y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, _mm256_set1_ps(-2.12194440e-4f)));
  y = _mm256_sub_ps(y, _mm256_mul_ps(z, _mm256_set1_ps(0.5f)));
  x = _mm256_add_ps(x, y);
  x = _mm256_add_ps(x, _mm256_mul_ps(e, _mm256_set1_ps(0.693359375f)));
  return _mm256_blendv_ps(x, _mm256_set1_ps(NAN), invalid); /* NaN where input <= 0 */
}

DT_AVX2_ static void dt_sincos256_ps_(__m256 input, __m256* s_out, __m256* c_out) {
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000));
  __m256 sign_sin = _mm256_and_ps(input, sign_mask);
  __m256 x = _mm256_andnot_ps(sign_mask, input);
  __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(1.27323954473516f)));
  j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
  __m256 y = _mm256_cvtepi32_ps(j);
  __m256i swap_sin = _mm256_slli_epi32(_mm256_and_si256(j, _mm256_set1_epi32(4)), 29);
  __m256 poly_mask = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), _mm256_setzero_si256()));
  x = _mm256_fmadd_ps(y, _mm256_set1_ps(-0.78515625f), x);
  x = _mm256_fmadd_ps(y, _mm256_set1_ps(-2.4187564849853515625e-4f), x);
  x = _mm256_fmadd_ps(y, _mm256_set1_ps(-3.77489497744594108e-8f), x);
  __m256i j2 = _mm256_sub_epi32(j, _mm256_set1_epi32(2));
  __m256 sign_cos = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_andnot_si256(j2, _mm256_set1_epi32(4)), 29));
  sign_sin = _mm256_xor_ps(sign_sin, _mm256_castsi256_ps(swap_sin));
  __m256 z = _mm256_mul_ps(x, x);
  __m256 c = _mm256_fmadd_ps(_mm256_set1_ps(2.443315711809948e-5f), z, _mm256_set1_ps(-1.388731625493765e-3f));
  c = _mm256_fmadd_ps(c, z, _mm256_set1_ps(4.166664568298827e-2f));
  c = _mm256_mul_ps(c, z);
  c = _mm256_fmadd_ps(c, z, _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, _mm256_set1_ps(0.5f))));
  c = _mm256_add_ps(c, _mm256_set1_ps(1.0f));
  __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(-1.9515295891e-4f), z, _mm256_set1_ps(8.3321608736e-3f));
  s = _mm256_fmadd_ps(s, z, _mm256_set1_ps(-1.6666654611e-1f));
  s = _mm256_mul_ps(s, z);
  s = _mm256_fmadd_ps(s, x, x);
  __m256 sv = _mm256_blendv_ps(c, s, poly_mask), cv = _mm256_blendv_ps(s, c, poly_mask);
  *s_out = _mm256_xor_ps(sv, sign_sin);
  *c_out = _mm256_xor_ps(cv, sign_cos);
}

DT_AVX2_ static void dt_normal_blocks_avx2_(float* data, int64_t blocks, float mean, float std) {
  const __m256 two_pi = _mm256_set1_ps((float)(2.0 * 3.14159265358979323846));
  const __m256 vmean = _mm256_set1_ps(mean), vstd = _mm256_set1_ps(std);
  for (int64_t b = 0; b < blocks; b++) {
    float* d = data + b * 16;
    __m256 u1 = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(d));
    __m256 u2 = _mm256_loadu_ps(d + 8);
    __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), dt_log256_ps_(u1)));
    __m256 sn, cs;
    dt_sincos256_ps_(_mm256_mul_ps(two_pi, u2), &sn, &cs);
    _mm256_storeu_ps(d, _mm256_fmadd_ps(_mm256_mul_ps(radius, cs), vstd, vmean));
    _mm256_storeu_ps(d + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, sn), vstd, vmean));
  }
}
#endif

/** Replaces data[0 .. 16 * blocks), which holds uniforms in [0, 1), by normals
 *  with mean and std (both f32), 16 at a time as torch's normal_fill_16_AVX2
 *  (with AVX2 and FMA where the CPU has them; the same bits either way). */
DT_EXPORT dt_status dt_cpu_normal_fill16(float* data, int64_t blocks, float mean, float std) {
  DT_REQUIRE_(blocks >= 0, "dt_cpu_normal_fill16: block count %lld is negative", (long long)blocks);
  DT_REQUIRE_(data || blocks == 0, "dt_cpu_normal_fill16: data is NULL for %lld blocks", (long long)blocks);
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    dt_normal_blocks_avx2_(data, blocks, mean, std);
    return DT_OK;
  }
#endif
  dt_normal_blocks_(data, blocks, mean, std);
  return DT_OK;
}
