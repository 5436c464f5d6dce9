/* reduce.c — CPU loops of the reductions: dt_reduce_bcast (the gradient of a
 * broadcast operand), dt_sumsq (also of many tensors at once, and the
 * gradient clipping built on it) and dt_argmax_rows. Sums run in double in an
 * order fixed by the data layout, so any thread count gives the same bits. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <stdlib.h>
#include "clip.h"
#include "cpu_internal.h"
#include "reduce.h"

/* Elements summed per parallel work item; partial sums of these blocks are
 * folded in block order. */
#define SUM_BLOCK (1 << 14)
#define REDUCE_GRAIN (1 << 15)
/* Columns accumulated at once in the trailing-broadcast case (stack doubles). */
#define COL_TILE 256

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  float* out;
  const float* inp;
  int64_t n, bn, inner;
} bcast_ctx_;

/* out[j] for j in [j0, j1) when inner == 1: column sums of a (rows, bn) matrix
 * whose last row may be partial, one tile of columns at a time. */
DT_VEC_CLONES static void reduce_cols_range_(void* vctx, int64_t j0, int64_t j1) {
  const bcast_ctx_* c = vctx;
  double acc[COL_TILE];
  for (int64_t t0 = j0; t0 < j1; t0 += COL_TILE) {
    int64_t width = j1 - t0 < COL_TILE ? j1 - t0 : COL_TILE;
    for (int64_t k = 0; k < width; k++) acc[k] = 0.0;
    for (int64_t base = 0; base < c->n; base += c->bn) {
      int64_t w = c->n - base - t0 < width ? c->n - base - t0 : width; /* the last row may be partial */
      const float* row = c->inp + base + t0;
      for (int64_t k = 0; k < w; k++) acc[k] += (double)row[k];
    }
    for (int64_t k = 0; k < width; k++) c->out[t0 + k] = (float)acc[k];
  }
}

/* out[j] for j in [j0, j1) when inner > 1: the sum of every inner-long run
 * whose run index is j modulo bn. */
static void reduce_runs_range_(void* vctx, int64_t j0, int64_t j1) {
  const bcast_ctx_* c = vctx;
  for (int64_t j = j0; j < j1; j++) {
    double s = 0.0;
    for (int64_t start = j * c->inner; start < c->n; start += c->bn * c->inner) {
      int64_t len = c->n - start < c->inner ? c->n - start : c->inner;
      s += dt_sum_f64(c->inp + start, len);
    }
    c->out[j] = (float)s;
  }
}

typedef struct {
  double* partial;
  const float* inp;
  int64_t n;
} sumsq_ctx_;

DT_VEC_CLONES static void sumsq_blocks_range_(void* vctx, int64_t b0, int64_t b1) {
  const sumsq_ctx_* c = vctx;
  for (int64_t b = b0; b < b1; b++) {
    int64_t start = b * SUM_BLOCK;
    int64_t len = c->n - start < SUM_BLOCK ? c->n - start : SUM_BLOCK;
    c->partial[b] = dt_sumsq_f64(c->inp + start, len);
  }
}

typedef struct {
  int32_t* out;
  const float* inp;
  int64_t cols;
} argmax_ctx_;

static void argmax_range_(void* vctx, int64_t r0, int64_t r1) {
  const argmax_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) c->out[r] = dt_argmax_row(c->inp + r * c->cols, c->cols);
}

/* Rows per chunk so a chunk holds about `elems` elements. */
static int64_t row_grain_(int64_t cols, int64_t elems) {
  return cols >= elems ? 1 : elems / (cols > 0 ? cols : 1);
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_reduce_bcast(float* out, const float* inp, int64_t n, int64_t bn, int64_t inner,
                                    void* stream) {
  (void)stream;
  DT_TRY_(dt_check_reduce_bcast(out, inp, n, bn, inner));
  bcast_ctx_ c = {out, inp, n, bn, inner};
  int64_t per_output = n / bn + 1; /* elements summed into each out[j], about */
  dt_parallel_for_(bn, row_grain_(per_output, REDUCE_GRAIN), inner == 1 ? reduce_cols_range_ : reduce_runs_range_,
                   &c);
  return DT_OK;
}

/* *out = sum of inp[i]^2 in double: blocks in parallel, folded in block order. */
static dt_status sumsq_(double* out, const float* inp, int64_t n) {
  int64_t blocks = (n + SUM_BLOCK - 1) / SUM_BLOCK;
  double stack_partial[64];
  double* partial = blocks <= 64 ? stack_partial : malloc((size_t)blocks * sizeof(double));
  if (!partial) return dt_fail_(DT_ERR_ALLOC, "dt_sumsq: cannot allocate %lld partial sums", (long long)blocks);
  sumsq_ctx_ c = {partial, inp, n};
  dt_parallel_for_(blocks, 2, sumsq_blocks_range_, &c);
  double total = 0.0;
  for (int64_t b = 0; b < blocks; b++) total += partial[b];
  if (partial != stack_partial) free(partial);
  *out = total;
  return DT_OK;
}

DT_EXPORT dt_status dt_sumsq(double* out, const float* inp, int64_t n, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_sumsq(out, inp, n));
  return sumsq_(out, inp, n);
}

/* out[i] = dt_sumsq of tensor i: the same sums, one call for every gradient. */
DT_EXPORT dt_status dt_sumsq_many(double* out, const void* const* ptrs, const int64_t* counts, int64_t num,
                                  void* stream) {
  (void)stream;
  DT_TRY_(dt_check_sumsq_many(out, ptrs, counts, num));
  for (int64_t i = 0; i < num; i++) DT_TRY_(sumsq_(&out[i], (const float*)ptrs[i], counts[i]));
  return DT_OK;
}

DT_EXPORT dt_status dt_scale(float* out, const float* inp, int64_t n, float alpha, void* stream);

/* Clipping to a global norm: sumsq = the tensors' sums of squares, *total the
 * norm (clip.h), then every element multiplied by the coefficient, as dt_scale
 * would (max_norm = +inf: the norm only). */
DT_EXPORT dt_status dt_clip_grad_norm(float* total, double* sumsq, void* const* ptrs, const int64_t* counts,
                                      int64_t num, double max_norm, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_clip_grad_norm(total, sumsq, (const void* const*)ptrs, counts, num, max_norm));
  for (int64_t i = 0; i < num; i++) DT_TRY_(sumsq_(&sumsq[i], (const float*)ptrs[i], counts[i]));
  *total = dt_clip_total_f(sumsq, num);
  if (isinf(max_norm)) return DT_OK;
  float coef = dt_clip_coef_f(max_norm, *total);
  for (int64_t i = 0; i < num; i++) DT_TRY_(dt_scale((float*)ptrs[i], (const float*)ptrs[i], counts[i], coef, NULL));
  return DT_OK;
}

DT_EXPORT dt_status dt_argmax_rows(int32_t* out, const float* inp, int64_t rows, int64_t cols, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_argmax_rows(out, inp, rows, cols));
  if (rows == 0) return DT_OK;
  argmax_ctx_ c = {out, inp, cols};
  dt_parallel_for_(rows, row_grain_(cols, REDUCE_GRAIN), argmax_range_, &c);
  return DT_OK;
}
