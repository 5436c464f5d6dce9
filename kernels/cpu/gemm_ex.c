/* gemm_ex.c — dt_gemm_ex on the CPU: one product whose C may be f32 under
 * bf16/f16 operands, with cuBLASLt's epilogues (bias, bias + GELU keeping the
 * pre-activation, bias gradient). The product is dt_gemm's kernels with an
 * f32 C (bf16 operands through vdpbf16ps where the CPU has it, f16 widened
 * while packing), then each element gets its epilogue in f32 and one
 * rounding into C, as cuBLASLt does. The emulated
 * cuBLASLt (kernels/cublaslt_emu) runs this function, so the GPU library's
 * descriptors are checked against these results. Epilogue arithmetic:
 * kernels/common/gemm_epilogue.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <stdlib.h>
#include "convert.h"
#include "cpu_internal.h"
#include "gemm_epilogue.h"
#include "gemm_internal.h"

/* Element-wise work per thread chunk. */
#define EPI_GRAIN (1 << 14)

DT_EXPORT dt_status dt_gemm(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                            int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
                            void* stream);

/* ---- kernels ------------------------------------------------------------------------ */

typedef struct {
  const float* acc; /* the f32 product, row stride lacc */
  int64_t lacc;
  void* C;
  int32_t c_dtype;
  int64_t N, ldc;
  float beta; /* applied here when C is not the accumulator */
  int32_t epilogue;
  const void* bias;
  void* aux;
  int64_t ldaux;
} epi_ctx_;

/* The f32 forms, written so that they vectorise: out = acc + bias (+ gelu). */
DT_VEC_CLONES static void epi_f32_row_(float* out, const float* a, const float* bias, float* aux, int32_t epilogue,
                                       int64_t N) {
  if (epilogue == DT_EPI_BIAS) {
    for (int64_t j = 0; j < N; j++) out[j] = dt_epilogue_pre_f(a[j], bias[j]);
  } else if (epilogue == DT_EPI_GELU_BIAS) {
    for (int64_t j = 0; j < N; j++) aux[j] = dt_epilogue_pre_f(a[j], bias[j]);
    dt_gelu_rows_(out, aux, N);
  } else if (out != a) {
    for (int64_t j = 0; j < N; j++) out[j] = a[j];
  }
}

/* n f32 values rounded into a bf16 or f16 row (written so that bf16 vectorises). */
DT_VEC_CLONES static void store_low_row_(void* dst, int32_t dtype, const float* src, int64_t n) {
  uint16_t* d = dst;
  if (dtype == DT_BF16) {
    for (int64_t j = 0; j < n; j++) d[j] = dt_f32_to_bf16(src[j]);
  } else {
    for (int64_t j = 0; j < n; j++) d[j] = dt_f32_to_f16(src[j]);
  }
}

/* The bf16/f16 C of beta 0: each row's f32 epilogue as epi_f32_row_ into row
 * buffers, then one rounding into C (and aux); NULL when memory is short. */
DT_VEC_CLONES static int epi_low_rows_(const epi_ctx_* c, int64_t r0, int64_t r1) {
  const int64_t N = c->N;
  float* buf = malloc((size_t)(3 * N) * sizeof(float));
  if (!buf) return 0;
  float *bias = buf, *pre = buf + N, *out = buf + 2 * N;
  int with_bias = c->epilogue == DT_EPI_BIAS || c->epilogue == DT_EPI_GELU_BIAS;
  for (int64_t j = 0; with_bias && j < N; j++) bias[j] = dt_load_float(c->bias, c->c_dtype, j);
  size_t es = 2;
  for (int64_t i = r0; i < r1; i++) {
    const float* a = c->acc + i * c->lacc;
    void* crow = (char*)c->C + (size_t)(i * c->ldc) * es;
    if (!with_bias) {
      store_low_row_(crow, c->c_dtype, a, N);
      continue;
    }
    for (int64_t j = 0; j < N; j++) pre[j] = dt_epilogue_pre_f(a[j], bias[j]);
    if (c->epilogue == DT_EPI_GELU_BIAS) {
      dt_gelu_rows_(out, pre, N);
      store_low_row_((char*)c->aux + (size_t)(i * c->ldaux) * es, c->c_dtype, pre, N);
      store_low_row_(crow, c->c_dtype, out, N);
    } else {
      store_low_row_(crow, c->c_dtype, pre, N);
    }
  }
  free(buf);
  return 1;
}

DT_VEC_CLONES static void epi_range_(void* vctx, int64_t r0, int64_t r1) {
  const epi_ctx_* c = vctx;
  if (c->c_dtype == DT_F32 && c->beta == 0.0f) {
    for (int64_t i = r0; i < r1; i++)
      epi_f32_row_((float*)c->C + i * c->ldc, c->acc + i * c->lacc, c->bias, (float*)c->aux + i * c->ldaux,
                    c->epilogue, c->N);
    return;
  }
  if (c->beta == 0.0f && epi_low_rows_(c, r0, r1)) return;
  for (int64_t i = r0; i < r1; i++) {
    const float* a = c->acc + i * c->lacc;
    for (int64_t j = 0; j < c->N; j++) {
      float v = a[j];
      if (c->beta != 0.0f) v += c->beta * dt_load_float(c->C, c->c_dtype, i * c->ldc + j);
      if (c->epilogue == DT_EPI_BIAS || c->epilogue == DT_EPI_GELU_BIAS)
        v = dt_epilogue_pre_f(v, dt_load_float(c->bias, c->c_dtype, j));
      if (c->epilogue == DT_EPI_GELU_BIAS) {
        dt_store_float(c->aux, c->c_dtype, i * c->ldaux + j, v);
        v = dt_gelu_f(v);
      }
      dt_store_float(c->C, c->c_dtype, i * c->ldc + j, v);
    }
  }
}

typedef struct {
  const void* A;
  int32_t dtype, c_dtype, trans_a;
  int64_t K, lda;
  void* bias;
} bgrad_ctx_;

/* Columns whose sums one pass over the rows keeps (on the stack). */
#define BGRAD_COLS 256

/* bias[i] = sum over k of op(A)[i, k], in double (k in order), rounded once.
 * op(A) = A^T (A stored K x M) sums columns: rows are read contiguously, a
 * block of BGRAD_COLS columns at a time. */
DT_VEC_CLONES static void bgrad_range_(void* vctx, int64_t i0, int64_t i1) {
  const bgrad_ctx_* c = vctx;
  if (!c->trans_a) {
    for (int64_t i = i0; i < i1; i++) {
      double s = 0.0;
      for (int64_t k = 0; k < c->K; k++) s += (double)dt_load_float(c->A, c->dtype, i * c->lda + k);
      dt_store_float(c->bias, c->c_dtype, i, (float)s);
    }
    return;
  }
  const uint16_t* half = c->dtype == DT_F32 ? NULL : (const uint16_t*)c->A;
  double acc[BGRAD_COLS];
  for (int64_t j0 = i0; j0 < i1; j0 += BGRAD_COLS) {
    int64_t n = i1 - j0 < BGRAD_COLS ? i1 - j0 : BGRAD_COLS;
    for (int64_t j = 0; j < n; j++) acc[j] = 0.0;
    for (int64_t k = 0; k < c->K; k++) {
      if (c->dtype == DT_F32) {
        const float* row = (const float*)c->A + k * c->lda + j0;
        for (int64_t j = 0; j < n; j++) acc[j] += (double)row[j];
      } else if (c->dtype == DT_BF16) { /* widened in the loop (a shift), so that it vectorises */
        const uint16_t* row = half + k * c->lda + j0;
        for (int64_t j = 0; j < n; j++) acc[j] += (double)dt_bf16_to_f32(row[j]);
      } else {
        for (int64_t j = 0; j < n; j++) acc[j] += (double)dt_load_float(c->A, c->dtype, k * c->lda + j0 + j);
      }
    }
    for (int64_t j = 0; j < n; j++) dt_store_float(c->bias, c->c_dtype, j0 + j, (float)acc[j]);
  }
}

/* ---- launcher --------------------------------------------------------------------------- */

/* The calling thread's f32 product buffer, kept between calls up to KEEP_FLOATS
 * (a fresh allocation of megabytes costs its page faults on every call);
 * larger products get a buffer of their own, freed after the call. */
#define KEEP_FLOATS ((size_t)16 << 20)
static __thread struct {
  float* ptr;
  size_t cap;
} kept_;

static float* product_buffer_(size_t floats) {
  if (floats > KEEP_FLOATS) return malloc(floats * sizeof(float));
  if (kept_.cap < floats) {
    float* p = malloc(floats * sizeof(float));
    if (!p) return NULL;
    free(kept_.ptr);
    kept_.ptr = p;
    kept_.cap = floats;
  }
  return kept_.ptr;
}

DT_EXPORT dt_status dt_gemm_ex(int32_t ab_dtype, int32_t c_dtype, int32_t trans_a, int32_t trans_b, int64_t M,
                               int64_t N, int64_t K, float alpha, const void* A, int64_t lda, const void* B,
                               int64_t ldb, float beta, void* C, int64_t ldc, int32_t epilogue, void* bias, void* aux,
                               int64_t ldaux, void* stream) {
  (void)stream;
  float* acc = NULL;
  dt_status st = DT_OK;
  DT_TRY_(dt_check_gemm_ex(ab_dtype, c_dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue, bias,
                           aux, ldaux));
  if (M == 0 || (N == 0 && epilogue != DT_EPI_BGRAD)) return DT_OK;
  if (N == 0) goto bias_gradient; /* no C, but op(A)'s row sums are still asked for */
  if (ab_dtype == c_dtype && epilogue == DT_EPI_NONE)
    return dt_gemm(ab_dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, 0, 0, 0, NULL);
  int product = K > 0 && alpha != 0.0f;
  /* bf16 operands, C and bias with vdpbf16ps: the epilogue in the kernel's tile store (the same bits,
   * without the f32 product's pass through memory) */
  if (product && ab_dtype == DT_BF16 && c_dtype == DT_BF16 && beta == 0.0f &&
      (epilogue == DT_EPI_BIAS || epilogue == DT_EPI_GELU_BIAS) && dt_gemm_bf16_dot_available_()) {
    dt_gemm_bf16_epi_ e = {.epilogue = epilogue, .bias = bias, .aux = aux, .ldaux = ldaux};
    return dt_gemm_bf16_epi_ex_(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, &e);
  }
  /* the f32 product: in C itself when it is f32 (beta applied by the product) */
  int in_place = c_dtype == DT_F32;
  int64_t lacc = in_place ? ldc : N;
  if (in_place) {
    acc = C;
  } else {
    acc = product_buffer_((size_t)(M * N));
    if (!acc) {
      st = dt_fail_(DT_ERR_ALLOC, "dt_gemm_ex: cannot allocate the %lld x %lld f32 product", (long long)M,
                    (long long)N);
      goto done;
    }
  }
  st = dt_gemm_f32c_(ab_dtype, trans_a, trans_b, M, N, product ? K : 0, product ? alpha : 0.0f, A, lda, B, ldb,
                     in_place ? beta : 0.0f, acc, lacc);
  if (st != DT_OK) goto done;
  if (!in_place || epilogue == DT_EPI_BIAS || epilogue == DT_EPI_GELU_BIAS) {
    epi_ctx_ e = {.acc = acc, .lacc = lacc, .C = C, .c_dtype = c_dtype, .N = N, .ldc = ldc,
                  .beta = in_place ? 0.0f : beta, .epilogue = epilogue == DT_EPI_BGRAD ? DT_EPI_NONE : epilogue,
                  .bias = bias, .aux = aux, .ldaux = ldaux};
    dt_parallel_for_(M, N >= EPI_GRAIN ? 1 : EPI_GRAIN / N + 1, epi_range_, &e);
  }
bias_gradient:
  if (epilogue == DT_EPI_BGRAD && st == DT_OK) {
    bgrad_ctx_ g = {.A = A, .dtype = ab_dtype, .c_dtype = c_dtype, .trans_a = trans_a, .K = K, .lda = lda,
                    .bias = bias};
    int64_t grain = K >= EPI_GRAIN ? 1 : EPI_GRAIN / (K + 1) + 1;
    if (trans_a && grain < BGRAD_COLS) grain = BGRAD_COLS; /* whole column blocks per thread */
    dt_parallel_for_(M, grain, bgrad_range_, &g);
  }
done:
  if (acc != C && acc != kept_.ptr) free(acc);
  return st;
}
