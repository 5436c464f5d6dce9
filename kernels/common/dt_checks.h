/* dt_checks.h — the argument checks of the kernel ABI, written once for both
 * kernel libraries, so the CPU and the CUDA library refuse the same calls with
 * the same status and the same text (tests/cuda/arg_checks_test.ts holds them
 * to it). Host code only.
 *
 * dt_check_<symbol>() returns DT_OK when the call may go ahead. An empty call
 * (n == 0, rows == 0, ...) is valid as soon as the checks that come before
 * its shortcut pass; the launcher then returns DT_OK itself, so later checks
 * (null pointers of data that would not be read) never refuse it. Errors
 * found in the data rather than the arguments (an index out of range, a value
 * an integer cast cannot hold) are worded by the dt_fail_*_ functions at the
 * end: the CPU library finds them during the call, the CUDA one on the device
 * and reports them later through dt_deferred_error, with the same words. */
#pragma once
#include "convert.h"
#include "dt_common.h"
#include "dt_error.h"
#include "elementwise.h"

/* a * b into *out; 0 when the product overflows int64 or an operand is negative. */
static inline int dt_mul_ok_(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return 0;
  return !__builtin_mul_overflow(a, b, out);
}

/* Name of a dtype code, for error text. */
static inline const char* dt_dtype_name(int32_t dtype) {
  switch (dtype) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_I64: return "i64";
    case DT_U8: return "u8";
    default: return "unknown";
  }
}

/* ---- runtime and memory ------------------------------------------------------------- */

static inline dt_status dt_check_set_num_threads(int32_t n, int32_t max) {
  DT_REQUIRE_(n >= 1 && n <= max, "dt_set_num_threads: %d is not in [1, %d]", n, max);
  return DT_OK;
}

static inline dt_status dt_check_alloc(int64_t bytes) {
  DT_REQUIRE_(bytes >= 0, "dt_alloc: negative size %lld", (long long)bytes);
  return DT_OK;
}

static inline dt_status dt_check_memcpy(const void* dst, const void* src, int64_t bytes, int32_t kind) {
  DT_REQUIRE_(bytes >= 0, "dt_memcpy: negative size %lld", (long long)bytes);
  DT_REQUIRE_(kind >= 0 && kind <= 3, "dt_memcpy: kind %d is not 0 (h2h), 1 (h2d), 2 (d2h) or 3 (d2d)", kind);
  if (bytes == 0) return DT_OK;
  DT_REQUIRE_(dst && src, "dt_memcpy: null pointer");
  return DT_OK;
}

/* ---- conversions ---------------------------------------------------------------------- */

static inline dt_status dt_check_fill(const void* out, int32_t dtype, int64_t n, double value) {
  DT_REQUIRE_(dt_dtype_size(dtype) > 0, "dt_fill: unknown dtype %d", dtype);
  DT_REQUIRE_(n >= 0, "dt_fill: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out, "dt_fill: null pointer");
  DT_REQUIRE_(dt_dtype_is_float(dtype) || dt_float_truncates_into(value, dtype),
              "dt_fill: value %.17g does not fit in %s", value, dt_dtype_name(dtype));
  return DT_OK;
}

static inline dt_status dt_check_cast(const void* out, int32_t out_dtype, const void* inp, int32_t inp_dtype,
                                      int64_t n) {
  DT_REQUIRE_(dt_dtype_size(out_dtype) > 0, "dt_cast: unknown output dtype %d", out_dtype);
  DT_REQUIRE_(dt_dtype_size(inp_dtype) > 0, "dt_cast: unknown input dtype %d", inp_dtype);
  DT_REQUIRE_(n >= 0, "dt_cast: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_cast: null pointer (out=%p inp=%p)", out, inp);
  return DT_OK;
}

/* ---- elementwise ------------------------------------------------------------------------ */

static inline dt_status dt_check_binary(int32_t op, const float* out, const float* a, const float* b, int64_t n,
                                        int64_t bn, int64_t inner) {
  DT_REQUIRE_(dt_binary_op_valid(op), "dt_binary: unknown op %d (expected DT_OP_ADD..DT_OP_DIV, 0..3)", op);
  DT_REQUIRE_(n >= 0, "dt_binary: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(bn >= 1 && inner >= 1, "dt_binary: broadcast bn=%lld inner=%lld must both be >= 1", (long long)bn,
              (long long)inner);
  DT_REQUIRE_(out && a && b, "dt_binary: null pointer (out=%p a=%p b=%p)", (const void*)out, (const void*)a,
              (const void*)b);
  return DT_OK;
}

static inline dt_status dt_check_scale(const float* out, const float* inp, int64_t n) {
  DT_REQUIRE_(n >= 0, "dt_scale: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_scale: null pointer (out=%p inp=%p)", (const void*)out, (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_axpy(const float* y, const float* x, int64_t n) {
  DT_REQUIRE_(n >= 0, "dt_axpy: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(y && x, "dt_axpy: null pointer (y=%p x=%p)", (const void*)y, (const void*)x);
  return DT_OK;
}

/* ReLU and GELU, forward (needs_y = 0) and backward (y is dout). */
static inline dt_status dt_check_unary(const char* name, const float* out, const float* x, const float* y,
                                       int needs_y, int64_t n) {
  DT_REQUIRE_(n >= 0, "%s: negative size n=%lld", name, (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && x && (y || !needs_y), "%s: null pointer", name);
  return DT_OK;
}

static inline dt_status dt_check_dropout(const char* name, const float* out, const float* inp, int64_t n, float p,
                                         int64_t offset) {
  DT_REQUIRE_(n >= 0, "%s: negative size n=%lld", name, (long long)n);
  DT_REQUIRE_(p >= 0.0f && p <= 1.0f, "%s: drop probability p=%g is outside [0, 1]", name, (double)p);
  DT_REQUIRE_(offset >= 0, "%s: negative offset %lld", name, (long long)offset);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "%s: null pointer", name);
  return DT_OK;
}

/* ---- reductions ------------------------------------------------------------------------- */

static inline dt_status dt_check_reduce_bcast(const float* out, const float* inp, int64_t n, int64_t bn,
                                              int64_t inner) {
  DT_REQUIRE_(n >= 0, "dt_reduce_bcast: negative size n=%lld", (long long)n);
  DT_REQUIRE_(bn >= 1 && inner >= 1, "dt_reduce_bcast: broadcast bn=%lld inner=%lld must both be >= 1",
              (long long)bn, (long long)inner);
  DT_REQUIRE_(out && (inp || n == 0), "dt_reduce_bcast: null pointer (out=%p inp=%p)", (const void*)out,
              (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_sumsq(const double* out, const float* inp, int64_t n) {
  DT_REQUIRE_(n >= 0, "dt_sumsq: negative size n=%lld", (long long)n);
  DT_REQUIRE_(out && (inp || n == 0), "dt_sumsq: null pointer (out=%p inp=%p)", (const void*)out, (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_argmax_rows(const int32_t* out, const float* inp, int64_t rows, int64_t cols) {
  DT_REQUIRE_(rows >= 0, "dt_argmax_rows: negative rows=%lld", (long long)rows);
  if (rows == 0) return DT_OK;
  DT_REQUIRE_(cols >= 1 && cols <= INT32_MAX, "dt_argmax_rows: cols=%lld must be in [1, 2^31)", (long long)cols);
  DT_REQUIRE_(out && inp, "dt_argmax_rows: null pointer (out=%p inp=%p)", (const void*)out, (const void*)inp);
  return DT_OK;
}

/* ---- rows: softmax and layer norm --------------------------------------------------------- */

/* Sizes of a (rows, cols) row op, then that rows*cols does not overflow. */
static inline dt_status dt_check_row_sizes(const char* name, int64_t rows, int64_t cols) {
  DT_REQUIRE_(rows >= 0, "%s: negative rows=%lld", name, (long long)rows);
  DT_REQUIRE_(cols >= 1 || rows == 0, "%s: cols=%lld must be >= 1", name, (long long)cols);
  int64_t total;
  DT_REQUIRE_(dt_mul_ok_(rows, cols, &total), "%s: rows*cols overflows (%lld x %lld)", name, (long long)rows,
              (long long)cols);
  return DT_OK;
}

static inline dt_status dt_check_softmax_fwd(const float* out, const float* inp, int64_t rows, int64_t cols,
                                             int64_t causal_t) {
  DT_TRY_(dt_check_row_sizes("dt_softmax_fwd", rows, cols));
  DT_REQUIRE_(causal_t >= 0, "dt_softmax_fwd: negative causal_t=%lld (0 = no mask)", (long long)causal_t);
  if (rows == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_softmax_fwd: null pointer (out=%p inp=%p)", (const void*)out, (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_softmax_bwd(const float* dinp, const float* dout, const float* out, int64_t rows,
                                             int64_t cols) {
  DT_TRY_(dt_check_row_sizes("dt_softmax_bwd", rows, cols));
  if (rows == 0) return DT_OK;
  DT_REQUIRE_(dinp && dout && out, "dt_softmax_bwd: null pointer (dinp=%p dout=%p out=%p)", (const void*)dinp,
              (const void*)dout, (const void*)out);
  return DT_OK;
}

static inline dt_status dt_check_layernorm_fwd(const float* out, const float* inp, int64_t rows, int64_t C,
                                               float eps) {
  DT_TRY_(dt_check_row_sizes("dt_layernorm_fwd", rows, C));
  DT_REQUIRE_(eps >= 0.0f, "dt_layernorm_fwd: eps=%g must be >= 0", (double)eps);
  if (rows == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_layernorm_fwd: null pointer (out=%p inp=%p)", (const void*)out, (const void*)inp);
  return DT_OK;
}

/* rows == 0 is valid and still writes zero parameter gradients. */
static inline dt_status dt_check_layernorm_bwd(const float* dinp, const float* dout, const float* inp,
                                               const float* mean, const float* rstd, int64_t rows, int64_t C) {
  DT_TRY_(dt_check_row_sizes("dt_layernorm_bwd", rows, C));
  if (rows == 0) return DT_OK;
  DT_REQUIRE_(dinp && dout && inp && mean && rstd,
              "dt_layernorm_bwd: null pointer (dinp=%p dout=%p inp=%p mean=%p rstd=%p)", (const void*)dinp,
              (const void*)dout, (const void*)inp, (const void*)mean, (const void*)rstd);
  return DT_OK;
}

/* ---- embedding, cross-entropy, gather ------------------------------------------------------ */

/* Sizes of both embedding calls; positions are counted in int32 on the GPU. */
static inline dt_status dt_check_embedding_sizes(const char* name, int64_t n, int64_t V, int64_t C) {
  DT_REQUIRE_(n >= 0 && V >= 0 && C >= 0, "%s: negative size (n=%lld V=%lld C=%lld)", name, (long long)n,
              (long long)V, (long long)C);
  int64_t elems, bytes;
  DT_REQUIRE_(dt_mul_ok_(n > V ? n : V, C, &elems) && dt_mul_ok_(elems, (int64_t)sizeof(float), &bytes),
              "%s: size overflows (n=%lld V=%lld C=%lld)", name, (long long)n, (long long)V, (long long)C);
  DT_REQUIRE_(n <= INT32_MAX, "%s: n=%lld positions exceed 2^31 - 1", name, (long long)n);
  return DT_OK;
}

/* Indices are checked after this (they are data), then C == 0 returns. */
static inline dt_status dt_check_embedding_fwd(const float* out, const int32_t* idx, const float* table, int64_t n,
                                               int64_t V, int64_t C) {
  DT_TRY_(dt_check_embedding_sizes("dt_embedding_fwd", n, V, C));
  if (n == 0) return DT_OK;
  DT_REQUIRE_(idx, "dt_embedding_fwd: null idx");
  if (C == 0) return DT_OK;
  DT_REQUIRE_(out && table, "dt_embedding_fwd: null pointer (out=%p table=%p)", (const void*)out,
              (const void*)table);
  return DT_OK;
}

/* Indices are checked after this; V == 0 or C == 0 writes nothing. */
static inline dt_status dt_check_embedding_bwd(const float* dtable, const float* dout, const int32_t* idx, int64_t n,
                                               int64_t V, int64_t C) {
  DT_TRY_(dt_check_embedding_sizes("dt_embedding_bwd", n, V, C));
  DT_REQUIRE_(idx || n == 0, "dt_embedding_bwd: null idx");
  if (V == 0 || C == 0) return DT_OK;
  DT_REQUIRE_(dtable && (dout || n == 0), "dt_embedding_bwd: null pointer (dtable=%p dout=%p)", (const void*)dtable,
              (const void*)dout);
  return DT_OK;
}

static inline dt_status dt_check_crossentropy_sizes(const char* name, const int32_t* targets, int64_t rows,
                                                    int64_t V) {
  DT_REQUIRE_(rows >= 0, "%s: negative rows=%lld", name, (long long)rows);
  DT_REQUIRE_(V >= 1 && V <= INT32_MAX, "%s: V=%lld must be in [1, 2^31)", name, (long long)V);
  int64_t total;
  DT_REQUIRE_(dt_mul_ok_(rows, V, &total), "%s: rows*V overflows (%lld x %lld)", name, (long long)rows,
              (long long)V);
  DT_REQUIRE_(targets || rows == 0, "%s: null targets", name);
  return DT_OK;
}

/* Targets are checked after this (they are data). */
static inline dt_status dt_check_crossentropy_fwd(const float* loss, const float* probs, const float* logits,
                                                  const int32_t* targets, int64_t rows, int64_t V) {
  DT_TRY_(dt_check_crossentropy_sizes("dt_crossentropy_fwd", targets, rows, V));
  DT_REQUIRE_(loss && ((probs && logits) || rows == 0),
              "dt_crossentropy_fwd: null pointer (loss=%p probs=%p logits=%p)", (const void*)loss,
              (const void*)probs, (const void*)logits);
  return DT_OK;
}

static inline dt_status dt_check_crossentropy_bwd(const float* dlogits, const float* probs, const int32_t* targets,
                                                  const float* dloss, int64_t rows, int64_t V) {
  DT_TRY_(dt_check_crossentropy_sizes("dt_crossentropy_bwd", targets, rows, V));
  if (rows == 0) return DT_OK;
  DT_REQUIRE_(dlogits && probs && dloss, "dt_crossentropy_bwd: null pointer (dlogits=%p probs=%p dloss=%p)",
              (const void*)dlogits, (const void*)probs, (const void*)dloss);
  return DT_OK;
}

/* Indices are checked after this (only >= 0: the ABI passes no row count for
 * inp); row_bytes == 0 then returns. */
static inline dt_status dt_check_gather_rows(const void* out, const void* inp, const int32_t* idx, int64_t n,
                                             int64_t row_bytes) {
  DT_REQUIRE_(n >= 0 && row_bytes >= 0, "dt_gather_rows: negative size (n=%lld row_bytes=%lld)", (long long)n,
              (long long)row_bytes);
  int64_t total;
  DT_REQUIRE_(dt_mul_ok_(n, row_bytes, &total), "dt_gather_rows: size overflows (n=%lld row_bytes=%lld)",
              (long long)n, (long long)row_bytes);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(idx, "dt_gather_rows: null idx");
  if (row_bytes == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_gather_rows: null pointer (out=%p inp=%p)", out, inp);
  return DT_OK;
}

/* ---- layout --------------------------------------------------------------------------------- */

/* dt_slice_cols and dt_scatter_cols: sizes, the column range, overflow. */
static inline dt_status dt_check_cols(const char* name, const void* a, const void* b, int64_t rows,
                                      int64_t wide_cols, int64_t start, int64_t len, int64_t elem_bytes) {
  DT_REQUIRE_(rows >= 0 && wide_cols >= 0 && len >= 0, "%s: negative size (rows=%lld cols=%lld len=%lld)", name,
              (long long)rows, (long long)wide_cols, (long long)len);
  DT_REQUIRE_(elem_bytes >= 1, "%s: elem_bytes=%lld must be >= 1", name, (long long)elem_bytes);
  DT_REQUIRE_(start >= 0 && start <= wide_cols && len <= wide_cols - start,
              "%s: columns [%lld, %lld + %lld) are outside [0, %lld)", name, (long long)start, (long long)start,
              (long long)len, (long long)wide_cols);
  int64_t row_bytes, total;
  DT_REQUIRE_(dt_mul_ok_(wide_cols, elem_bytes, &row_bytes) && dt_mul_ok_(rows, row_bytes, &total),
              "%s: size overflows (rows=%lld cols=%lld elem_bytes=%lld)", name, (long long)rows, (long long)wide_cols,
              (long long)elem_bytes);
  DT_REQUIRE_((a && b) || rows == 0 || len == 0, "%s: null pointer", name);
  return DT_OK;
}

/* *total = the bytes moved (0: nothing to do). */
static inline dt_status dt_check_transpose_0213(const void* out, const void* inp, int64_t A, int64_t B, int64_t C,
                                                int64_t D, int64_t elem_bytes, int64_t* total) {
  DT_REQUIRE_(A >= 0 && B >= 0 && C >= 0 && D >= 0, "dt_transpose_0213: negative dimension (%lld, %lld, %lld, %lld)",
              (long long)A, (long long)B, (long long)C, (long long)D);
  DT_REQUIRE_(elem_bytes >= 1, "dt_transpose_0213: elem_bytes=%lld must be >= 1", (long long)elem_bytes);
  int64_t row, plane;
  DT_REQUIRE_(dt_mul_ok_(D, elem_bytes, &row) && dt_mul_ok_(B, C, &plane) && dt_mul_ok_(plane, row, &plane) &&
                  dt_mul_ok_(A, plane, total),
              "dt_transpose_0213: size overflows (%lld, %lld, %lld, %lld) x %lld bytes", (long long)A, (long long)B,
              (long long)C, (long long)D, (long long)elem_bytes);
  if (*total == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_transpose_0213: null pointer (out=%p inp=%p)", out, inp);
  return DT_OK;
}

/* ---- GEMM --------------------------------------------------------------------------------------- */

/* ld fits a rows x cols matrix, and the batch's byte span fits in int64 (so no
 * pointer arithmetic of either library can overflow). */
static inline dt_status dt_check_gemm_matrix_(const char* name, const char* ld_name, int64_t rows, int64_t cols,
                                              int64_t ld, int64_t batch, int64_t stride, const char* stride_name,
                                              int64_t esize) {
  DT_REQUIRE_(ld >= cols, "dt_gemm: %s = %lld is too small for %s stored as %lld x %lld: expected %s >= %lld", ld_name,
              (long long)ld, name, (long long)rows, (long long)cols, ld_name, (long long)cols);
  DT_REQUIRE_(stride >= 0, "dt_gemm: %s = %lld is negative: expected a stride >= 0 (in elements)", stride_name,
              (long long)stride);
  int64_t span, tmp;
  int overflow = __builtin_mul_overflow(rows, ld, &span) || __builtin_mul_overflow(batch, stride, &tmp) ||
                 __builtin_add_overflow(span, tmp, &span) || __builtin_mul_overflow(span, esize, &span);
  DT_REQUIRE_(!overflow,
              "dt_gemm: %s of %lld x %lld (ld %lld) in %lld batches of stride %lld spans more than 2^63 bytes", name,
              (long long)rows, (long long)cols, (long long)ld, (long long)batch, (long long)stride);
  return DT_OK;
}

/* Every check of dt_gemm. Valid calls then take one of three roads in both
 * libraries: nothing (M, N or batch is 0), C = beta * C (K == 0 or alpha == 0:
 * A and B are not read, as in BLAS), or the product. */
static inline dt_status dt_check_gemm(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N,
                                      int64_t K, float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                                      const void* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
                                      int64_t stride_c) {
  DT_REQUIRE_(dtype == DT_F32 || dtype == DT_BF16 || dtype == DT_F16,
              "dt_gemm: dtype %d is not supported: expected DT_F32 (0), DT_BF16 (1) or DT_F16 (2)", dtype);
  DT_REQUIRE_(trans_a == 0 || trans_a == 1, "dt_gemm: transA = %d: expected 0 or 1", trans_a);
  DT_REQUIRE_(trans_b == 0 || trans_b == 1, "dt_gemm: transB = %d: expected 0 or 1", trans_b);
  DT_REQUIRE_(M >= 0, "dt_gemm: M = %lld is negative", (long long)M);
  DT_REQUIRE_(N >= 0, "dt_gemm: N = %lld is negative", (long long)N);
  DT_REQUIRE_(K >= 0, "dt_gemm: K = %lld is negative", (long long)K);
  DT_REQUIRE_(batch >= 0, "dt_gemm: batch = %lld is negative", (long long)batch);
  int64_t esize = (int64_t)dt_dtype_size(dtype);
  DT_TRY_(dt_check_gemm_matrix_(trans_a ? "A (transA = 1)" : "A (transA = 0)", "lda", trans_a ? K : M,
                                trans_a ? M : K, lda, batch, stride_a, "strideA", esize));
  DT_TRY_(dt_check_gemm_matrix_(trans_b ? "B (transB = 1)" : "B (transB = 0)", "ldb", trans_b ? N : K,
                                trans_b ? K : N, ldb, batch, stride_b, "strideB", esize));
  DT_TRY_(dt_check_gemm_matrix_("C", "ldc", M, N, ldc, batch, stride_c, "strideC", esize));
  if (M == 0 || N == 0 || batch == 0) return DT_OK;
  DT_REQUIRE_(C != NULL, "dt_gemm: C is NULL for a %lld x %lld output", (long long)M, (long long)N);
  DT_REQUIRE_(batch == 1 || stride_c >= (M - 1) * ldc + N,
              "dt_gemm: strideC = %lld makes the %lld x %lld outputs (ldc %lld) of consecutive batches overlap: "
              "expected strideC >= %lld",
              (long long)stride_c, (long long)M, (long long)N, (long long)ldc, (long long)((M - 1) * ldc + N));
  if (K == 0 || alpha == 0.0f) return DT_OK;
  DT_REQUIRE_(A != NULL && B != NULL, "dt_gemm: %s is NULL for a product with M = %lld, N = %lld, K = %lld",
              A == NULL ? "A" : "B", (long long)M, (long long)N, (long long)K);
  return DT_OK;
}

/* ---- optimizers and loss scaling ------------------------------------------------------------- */

static inline dt_status dt_check_adamw(const float* p, const float* g, const float* m, const float* v, int64_t n,
                                       double beta1, double beta2, int64_t step) {
  DT_REQUIRE_(n >= 0, "dt_adamw: negative size n=%lld", (long long)n);
  DT_REQUIRE_(step >= 1, "dt_adamw: step=%lld must be >= 1 (the first step is 1)", (long long)step);
  DT_REQUIRE_(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0, "dt_adamw: betas (%g, %g) must be in [0, 1)",
              beta1, beta2);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(p && g && m && v, "dt_adamw: null pointer (p=%p g=%p m=%p v=%p)", (const void*)p, (const void*)g,
              (const void*)m, (const void*)v);
  return DT_OK;
}

static inline dt_status dt_check_sgd(const float* p, const float* g, const float* buf, int64_t n, double momentum,
                                     double dampening, int32_t nesterov) {
  DT_REQUIRE_(n >= 0, "dt_sgd: negative size n=%lld", (long long)n);
  DT_REQUIRE_(!nesterov || (momentum > 0.0 && dampening == 0.0),
              "dt_sgd: nesterov needs momentum > 0 and dampening 0 (got momentum=%g dampening=%g)", momentum,
              dampening);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(p && g && (buf || momentum == 0.0), "dt_sgd: null pointer (p=%p g=%p buf=%p, momentum=%g)",
              (const void*)p, (const void*)g, (const void*)buf, momentum);
  return DT_OK;
}

/* The host tables of a one-launch optimizer step: sizes, steps, betas and
 * pointers of every tensor, each refusal naming the tensor. */
static inline dt_status dt_check_adamw_many(float* const* p, const float* const* g, float* const* m, float* const* v,
                                            const int64_t* counts, const int64_t* steps, const double* hyper,
                                            int64_t num) {
  DT_REQUIRE_(num >= 0, "dt_adamw_many: negative tensor count %lld", (long long)num);
  if (num == 0) return DT_OK;
  DT_REQUIRE_(p && g && m && v && counts && steps && hyper,
              "dt_adamw_many: null table (params=%p grads=%p exp_avgs=%p exp_avg_sqs=%p counts=%p steps=%p hyper=%p)",
              (const void*)p, (const void*)g, (const void*)m, (const void*)v, (const void*)counts,
              (const void*)steps, (const void*)hyper);
  for (int64_t t = 0; t < num; t++) {
    double beta1 = hyper[5 * t + 1], beta2 = hyper[5 * t + 2];
    DT_REQUIRE_(counts[t] >= 0, "dt_adamw_many: tensor %lld has a negative size %lld", (long long)t,
                (long long)counts[t]);
    DT_REQUIRE_(steps[t] >= 1, "dt_adamw_many: tensor %lld: step=%lld must be >= 1 (the first step is 1)",
                (long long)t, (long long)steps[t]);
    DT_REQUIRE_(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0,
                "dt_adamw_many: tensor %lld: betas (%g, %g) must be in [0, 1)", (long long)t, beta1, beta2);
    DT_REQUIRE_(counts[t] == 0 || (p[t] && g[t] && m[t] && v[t]),
                "dt_adamw_many: tensor %lld of %lld elements has a null pointer (p=%p g=%p m=%p v=%p)", (long long)t,
                (long long)counts[t], (const void*)p[t], (const void*)g[t], (const void*)m[t], (const void*)v[t]);
  }
  return DT_OK;
}

static inline dt_status dt_check_sgd_many(float* const* p, const float* const* g, float* const* buf,
                                          const int64_t* counts, const double* hyper, const int32_t* flags,
                                          int64_t num) {
  DT_REQUIRE_(num >= 0, "dt_sgd_many: negative tensor count %lld", (long long)num);
  if (num == 0) return DT_OK;
  DT_REQUIRE_(p && g && buf && counts && hyper && flags,
              "dt_sgd_many: null table (params=%p grads=%p bufs=%p counts=%p hyper=%p flags=%p)", (const void*)p,
              (const void*)g, (const void*)buf, (const void*)counts, (const void*)hyper, (const void*)flags);
  for (int64_t t = 0; t < num; t++) {
    double momentum = hyper[4 * t + 1], dampening = hyper[4 * t + 2];
    DT_REQUIRE_(counts[t] >= 0, "dt_sgd_many: tensor %lld has a negative size %lld", (long long)t,
                (long long)counts[t]);
    DT_REQUIRE_(!flags[2 * t] || (momentum > 0.0 && dampening == 0.0),
                "dt_sgd_many: tensor %lld: nesterov needs momentum > 0 and dampening 0 (got momentum=%g dampening=%g)",
                (long long)t, momentum, dampening);
    DT_REQUIRE_(counts[t] == 0 || (p[t] && g[t] && (buf[t] || momentum == 0.0)),
                "dt_sgd_many: tensor %lld of %lld elements has a null pointer (p=%p g=%p buf=%p, momentum=%g)",
                (long long)t, (long long)counts[t], (const void*)p[t], (const void*)g[t], (const void*)buf[t],
                momentum);
  }
  return DT_OK;
}

static inline dt_status dt_check_zero_many(float* const* p, const int64_t* counts, int64_t num) {
  DT_REQUIRE_(num >= 0, "dt_zero_many: negative tensor count %lld", (long long)num);
  if (num == 0) return DT_OK;
  DT_REQUIRE_(p && counts, "dt_zero_many: null table (ptrs=%p counts=%p)", (const void*)p, (const void*)counts);
  for (int64_t t = 0; t < num; t++) {
    DT_REQUIRE_(counts[t] >= 0, "dt_zero_many: tensor %lld has a negative size %lld", (long long)t,
                (long long)counts[t]);
    DT_REQUIRE_(counts[t] == 0 || p[t], "dt_zero_many: tensor %lld of %lld elements is a null pointer", (long long)t,
                (long long)counts[t]);
  }
  return DT_OK;
}

/* ---- mixed-dtype elementwise ops (dt_binary_ex, dt_gelu_*_ex) ------------------------------------ */

static inline int dt_check_float_dtype_(int32_t dtype) {
  return dtype == DT_F32 || dtype == DT_BF16 || dtype == DT_F16;
}

static inline dt_status dt_check_binary_ex(int32_t op, const void* out, int32_t out_dtype, const void* a,
                                           int32_t a_dtype, const void* b, int32_t b_dtype, int64_t n, int64_t bn,
                                           int64_t inner) {
  DT_REQUIRE_(op >= DT_OP_ADD && op <= DT_OP_DIV, "dt_binary_ex: unknown op %d (expected DT_OP_ADD..DT_OP_DIV, 0..3)",
              op);
  DT_REQUIRE_(dt_check_float_dtype_(out_dtype) && dt_check_float_dtype_(a_dtype) && dt_check_float_dtype_(b_dtype),
              "dt_binary_ex: dtypes out=%s a=%s b=%s must be f32, bf16 or f16", dt_dtype_name(out_dtype),
              dt_dtype_name(a_dtype), dt_dtype_name(b_dtype));
  DT_REQUIRE_(n >= 0, "dt_binary_ex: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(bn >= 1 && inner >= 1, "dt_binary_ex: broadcast bn=%lld inner=%lld must both be >= 1", (long long)bn,
              (long long)inner);
  DT_REQUIRE_(out && a && b, "dt_binary_ex: null pointer (out=%p a=%p b=%p)", out, a, b);
  return DT_OK;
}

static inline dt_status dt_check_gelu_ex(const char* name, const void* out, const void* x, const void* y, int needs_y,
                                         int64_t n, int32_t dtype) {
  DT_REQUIRE_(dt_check_float_dtype_(dtype), "%s: dtype %s must be f32, bf16 or f16", name, dt_dtype_name(dtype));
  DT_REQUIRE_(n >= 0, "%s: negative size n=%lld", name, (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && x && (y || !needs_y), "%s: null pointer", name);
  return DT_OK;
}

static inline dt_status dt_check_unscale(const float* g, int64_t n, const float* found_inf) {
  DT_REQUIRE_(n >= 0, "dt_unscale_check: negative size n=%lld", (long long)n);
  DT_REQUIRE_(found_inf, "dt_unscale_check: null found_inf");
  if (n == 0) return DT_OK;
  DT_REQUIRE_(g, "dt_unscale_check: null g");
  return DT_OK;
}

/* ---- errors found in the data ------------------------------------------------------------------ */

/* An index outside [0, limit) (limit < 0: only negative indices are known to be bad). */
static inline dt_status dt_fail_index_(const char* name, int64_t value, int64_t position, int64_t limit) {
  if (limit >= 0)
    return dt_fail_(DT_ERR_ARG, "%s: index %lld at position %lld is outside [0, %lld)", name, (long long)value,
                    (long long)position, (long long)limit);
  return dt_fail_(DT_ERR_ARG, "%s: index %lld at position %lld is negative", name, (long long)value,
                  (long long)position);
}

/* A batch-norm element count (all-reduced for a synchronised norm) below 1:
 * no statistics exist. */
static inline dt_status dt_fail_bn_count_(const char* name, double count) {
  return dt_fail_(DT_ERR_ARG, "%s: the element count %g must be >= 1", name, count);
}

/* A cross-entropy target that is neither in [0, V) nor ignore_index. */
static inline dt_status dt_fail_target_(const char* name, int64_t target, int64_t row, int64_t V,
                                        int64_t ignore_index) {
  return dt_fail_(DT_ERR_ARG, "%s: target %lld at row %lld is outside [0, %lld) (ignore_index %lld)", name,
                  (long long)target, (long long)row, (long long)V, (long long)ignore_index);
}

/* ---- many tensors at once (gradient norm and clipping) -------------------------------- */

/* ptrs[i] (counts[i] f32 elements) for i < num: host arrays describing device (or CPU) tensors. */
static inline dt_status dt_check_tensor_list(const char* name, const void* const* ptrs, const int64_t* counts,
                                             int64_t num) {
  DT_REQUIRE_(num >= 0, "%s: negative tensor count %lld", name, (long long)num);
  if (num == 0) return DT_OK;
  DT_REQUIRE_(ptrs && counts, "%s: null tensor list (ptrs=%p counts=%p)", name, (const void*)ptrs,
              (const void*)counts);
  for (int64_t i = 0; i < num; i++) {
    DT_REQUIRE_(counts[i] >= 0, "%s: tensor %lld has a negative size %lld", name, (long long)i, (long long)counts[i]);
    DT_REQUIRE_(ptrs[i] || counts[i] == 0, "%s: tensor %lld of %lld elements is a null pointer", name, (long long)i,
                (long long)counts[i]);
  }
  return DT_OK;
}

static inline dt_status dt_check_sumsq_many(const double* out, const void* const* ptrs, const int64_t* counts,
                                            int64_t num) {
  DT_TRY_(dt_check_tensor_list("dt_sumsq_many", ptrs, counts, num));
  DT_REQUIRE_(out || num == 0, "dt_sumsq_many: null out");
  return DT_OK;
}

static inline dt_status dt_check_clip_grad_norm(const float* total, const double* sumsq, const void* const* ptrs,
                                                const int64_t* counts, int64_t num, double max_norm) {
  DT_TRY_(dt_check_tensor_list("dt_clip_grad_norm", ptrs, counts, num));
  DT_REQUIRE_(total && (sumsq || num == 0), "dt_clip_grad_norm: null pointer (total=%p sumsq=%p)",
              (const void*)total, (const void*)sumsq);
  DT_REQUIRE_(max_norm >= 0.0, "dt_clip_grad_norm: max_norm=%g must be >= 0 (+inf: no clipping)", max_norm);
  return DT_OK;
}

/* Element `index` of a dt_cast input that the integer type out_dtype cannot
 * hold: fvalue for float inputs, ivalue for integer ones. */
static inline dt_status dt_fail_cast_value_(int32_t inp_dtype, int32_t out_dtype, int64_t index, double fvalue,
                                            int64_t ivalue) {
  if (dt_dtype_is_float(inp_dtype))
    return dt_fail_(DT_ERR_ARG, "dt_cast: %s value %.9g at index %lld does not fit in %s", dt_dtype_name(inp_dtype),
                    fvalue, (long long)index, dt_dtype_name(out_dtype));
  return dt_fail_(DT_ERR_ARG, "dt_cast: %s value %lld at index %lld is outside the %s range", dt_dtype_name(inp_dtype),
                  (long long)ivalue, (long long)index, dt_dtype_name(out_dtype));
}

/* The CPU library's words for a data error the device recorded. */
static inline dt_status dt_fail_data_error_(const dt_data_error_t* e) {
  switch (e->op) {
    case DT_DATA_EMBEDDING_FWD: return dt_fail_index_("dt_embedding_fwd", e->ivalue, e->position, e->limit);
    case DT_DATA_EMBEDDING_BWD: return dt_fail_index_("dt_embedding_bwd", e->ivalue, e->position, e->limit);
    case DT_DATA_GATHER_ROWS: return dt_fail_index_("dt_gather_rows", e->ivalue, e->position, e->limit);
    case DT_DATA_CROSSENTROPY_FWD:
      return dt_fail_target_("dt_crossentropy_fwd", e->ivalue, e->position, e->limit, e->ignore_index);
    case DT_DATA_CROSSENTROPY_BWD:
      return dt_fail_target_("dt_crossentropy_bwd", e->ivalue, e->position, e->limit, e->ignore_index);
    case DT_DATA_CAST:
      return dt_fail_cast_value_(e->value_dtype, (int32_t)e->limit, e->position, e->fvalue, e->ivalue);
    case DT_DATA_GATHER_DIM: return dt_fail_index_("dt_gather_dim", e->ivalue, e->position, e->limit);
    case DT_DATA_INDEX_SELECT: return dt_fail_index_("dt_index_select", e->ivalue, e->position, e->limit);
    case DT_DATA_SCATTER_ADD_DIM: return dt_fail_index_("dt_scatter_add_dim", e->ivalue, e->position, e->limit);
    case DT_DATA_INDEX_ADD: return dt_fail_index_("dt_index_add", e->ivalue, e->position, e->limit);
    case DT_DATA_MAXPOOL2D_BWD: return dt_fail_index_("dt_maxpool2d_bwd", e->ivalue, e->position, e->limit);
    case DT_DATA_BN_SQDEV: return dt_fail_bn_count_("dt_bn_sqdev", e->fvalue);
    case DT_DATA_BN_FINALIZE: return dt_fail_bn_count_("dt_bn_finalize", e->fvalue);
    case DT_DATA_BN_BWD_APPLY: return dt_fail_bn_count_("dt_bn_bwd_apply", e->fvalue);
    default: return dt_fail_(DT_ERR_INTERNAL, "dt_deferred_error: unknown data error code %d", (int)e->op);
  }
}
