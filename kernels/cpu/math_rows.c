/* math_rows.c — exp, tanh, tanh GELU and GELU's gradient over contiguous f32
 * arrays, the loops that unary.c, elementwise.c, mixed_dtype.c and gemm_ex.c
 * share: 16 lanes of AVX-512 intrinsics (dt_math_avx512.h) where the CPU has
 * AVX-512F and DTRAIN_CPU_ISA allows it, else the scalar bodies of
 * dt_math.h and gelu.h vectorised by the compiler. The same bits either way
 * (tests/kernels/math_rows_test.ts compares the two); on a Zen 5 core the
 * intrinsics spend about half the time of GCC's vectorisation of the scalar
 * bodies (its selects and the 2^k built from bits). */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "dt_math_avx512.h"
#include "gelu.h"
#include "gemm_internal.h"

#define AVX512_ __attribute__((target("avx512f")))

/* out[j] = F(x[j]) for j < n, 16 at a time, the tail masked. */
#define MAP_AVX512_(name, F)                                                                 \
  AVX512_ static void name(float* out, const float* x, int64_t n) {                          \
    int64_t j = 0;                                                                           \
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out + j, F(_mm512_loadu_ps(x + j)));       \
    if (j < n) {                                                                             \
      __mmask16 k = (__mmask16)((1u << (n - j)) - 1);                                        \
      _mm512_mask_storeu_ps(out + j, k, F(_mm512_maskz_loadu_ps(k, x + j)));                 \
    }                                                                                        \
  }

MAP_AVX512_(exp_avx512_, dt_expf_avx512_)
MAP_AVX512_(tanh_avx512_, dt_tanhf_avx512_)
MAP_AVX512_(gelu_avx512_, dt_gelu_avx512_)

AVX512_ static void gelu_grad_avx512_(float* out, const float* dout, const float* x, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(out + j, dt_gelu_grad_avx512_(_mm512_loadu_ps(dout + j), _mm512_loadu_ps(x + j)));
  if (j < n) {
    __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(out + j, k,
                          dt_gelu_grad_avx512_(_mm512_maskz_loadu_ps(k, dout + j), _mm512_maskz_loadu_ps(k, x + j)));
  }
}

DT_VEC_CLONES static void exp_plain_(float* out, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = dt_expf(x[j]);
}

DT_VEC_CLONES static void tanh_plain_(float* out, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = dt_tanhf(x[j]);
}

DT_VEC_CLONES static void gelu_plain_(float* out, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = dt_gelu_f(x[j]);
}

DT_VEC_CLONES static void gelu_grad_plain_(float* out, const float* dout, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = dt_gelu_grad_f(dout[j], x[j]);
}

/* Whether the loops take the intrinsics: the GEMM's choice of kernel, which
 * is AVX-512 only on a CPU with AVX-512F and under a DTRAIN_CPU_ISA that
 * allows it (so tests can run both forms on one machine). A bad
 * DTRAIN_CPU_ISA is the GEMM's to report: here it means the plain loops. */
int dt_cpu_avx512_(void) {
  const dt_gemm_isa_* isa = NULL;
  return dt_gemm_pick_isa_(&isa) == DT_OK && isa == &dt_gemm_isa_avx512_;
}

void dt_exp_rows_(float* out, const float* x, int64_t n) {
  if (dt_cpu_avx512_()) exp_avx512_(out, x, n);
  else exp_plain_(out, x, n);
}

void dt_tanh_rows_(float* out, const float* x, int64_t n) {
  if (dt_cpu_avx512_()) tanh_avx512_(out, x, n);
  else tanh_plain_(out, x, n);
}

void dt_gelu_rows_(float* out, const float* x, int64_t n) {
  if (dt_cpu_avx512_()) gelu_avx512_(out, x, n);
  else gelu_plain_(out, x, n);
}

void dt_gelu_grad_rows_(float* out, const float* dout, const float* x, int64_t n) {
  if (dt_cpu_avx512_()) gelu_grad_avx512_(out, dout, x, n);
  else gelu_grad_plain_(out, dout, x, n);
}
