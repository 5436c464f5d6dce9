/* rows.c — CPU loops of the row-wise kernels: softmax (with the causal mask)
 * and layer norm, forward and backward. Rows are split across threads; the
 * layer-norm weight/bias gradients are column sums, split by columns. The
 * arithmetic lives in kernels/common/softmax.h and layernorm.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "layernorm.h"
#include "softmax.h"

/* Elements per thread chunk for row kernels (exp or a few passes per element). */
#define ROW_GRAIN_ELEMS (1 << 14)
/* Columns whose weight/bias gradient one pass accumulates (stack doubles). */
#define COL_TILE 128

/* Rows per chunk so a chunk holds about ROW_GRAIN_ELEMS elements. */
static int64_t row_grain_(int64_t cols) {
  return cols >= ROW_GRAIN_ELEMS ? 1 : ROW_GRAIN_ELEMS / cols;
}

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  float* out;
  const float* inp;
  const float* other; /* backward: the saved softmax output */
  int64_t cols, causal_t;
  float scale;
} softmax_ctx_;

DT_VEC_CLONES static void softmax_range_(void* vctx, int64_t r0, int64_t r1) {
  const softmax_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    int64_t visible = dt_softmax_visible_cols(r, c->cols, c->causal_t);
    dt_softmax_row(c->out + r * c->cols, c->inp + r * c->cols, c->cols, visible, c->scale);
  }
}

DT_VEC_CLONES static void softmax_bwd_range_(void* vctx, int64_t r0, int64_t r1) {
  const softmax_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++)
    dt_softmax_bwd_row(c->out + r * c->cols, c->inp + r * c->cols, c->other + r * c->cols, c->cols, c->scale);
}

typedef struct {
  float *out, *mean, *rstd;
  const float *inp, *weight, *bias;
  int64_t C;
  float eps;
} ln_fwd_ctx_;

DT_VEC_CLONES static void ln_fwd_range_(void* vctx, int64_t r0, int64_t r1) {
  const ln_fwd_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    const float* x = c->inp + r * c->C;
    float* y = c->out + r * c->C;
    float mean, rstd;
    dt_layernorm_moments(x, c->C, c->eps, &mean, &rstd);
    if (c->weight && c->bias) {
      for (int64_t j = 0; j < c->C; j++) y[j] = dt_layernorm_out_f(x[j], mean, rstd, c->weight[j], c->bias[j]);
    } else {
      for (int64_t j = 0; j < c->C; j++)
        y[j] = dt_layernorm_out_f(x[j], mean, rstd, c->weight ? c->weight[j] : 1.0f, c->bias ? c->bias[j] : 0.0f);
    }
    if (c->mean) c->mean[r] = mean;
    if (c->rstd) c->rstd[r] = rstd;
  }
}

typedef struct {
  float *dinp, *dweight, *dbias;
  const float *dout, *inp, *weight, *mean, *rstd;
  int64_t rows, C;
} ln_bwd_ctx_;

DT_VEC_CLONES static void ln_bwd_rows_range_(void* vctx, int64_t r0, int64_t r1) {
  const ln_bwd_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++)
    dt_layernorm_bwd_row(c->dinp + r * c->C, c->dout + r * c->C, c->inp + r * c->C, c->weight, c->mean[r],
                         c->rstd[r], c->C);
}

/* dweight[j] = sum_r dout[r,j] * xhat[r,j] and dbias[j] = sum_r dout[r,j]
 * for j in [j0, j1), in double, rows in order. */
DT_VEC_CLONES static void ln_bwd_cols_range_(void* vctx, int64_t j0, int64_t j1) {
  const ln_bwd_ctx_* c = vctx;
  double acc_w[COL_TILE], acc_b[COL_TILE];
  for (int64_t t0 = j0; t0 < j1; t0 += COL_TILE) {
    int64_t width = j1 - t0 < COL_TILE ? j1 - t0 : COL_TILE;
    for (int64_t k = 0; k < width; k++) acc_w[k] = acc_b[k] = 0.0;
    for (int64_t r = 0; r < c->rows; r++) {
      const float* dy = c->dout + r * c->C + t0;
      const float* x = c->inp + r * c->C + t0;
      float mean = c->mean[r], rstd = c->rstd[r];
      for (int64_t k = 0; k < width; k++) {
        acc_w[k] += (double)(dy[k] * dt_layernorm_xhat_f(x[k], mean, rstd));
        acc_b[k] += (double)dy[k];
      }
    }
    for (int64_t k = 0; k < width; k++) {
      if (c->dweight) c->dweight[t0 + k] = (float)acc_w[k];
      if (c->dbias) c->dbias[t0 + k] = (float)acc_b[k];
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_softmax_fwd(float* out, const float* inp, int64_t rows, int64_t cols, int64_t causal_t,
                                   float scale, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_softmax_fwd(out, inp, rows, cols, causal_t));
  if (rows == 0) return DT_OK;
  softmax_ctx_ c = {out, inp, NULL, cols, causal_t, scale};
  dt_parallel_for_(rows, row_grain_(cols), softmax_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_softmax_bwd(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols,
                                   float scale, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_softmax_bwd(dinp, dout, out, rows, cols));
  if (rows == 0) return DT_OK;
  softmax_ctx_ c = {dinp, dout, out, cols, 0, scale};
  dt_parallel_for_(rows, row_grain_(cols), softmax_bwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                     const float* bias, int64_t rows, int64_t C, float eps, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_layernorm_fwd(out, inp, rows, C, eps));
  if (rows == 0) return DT_OK;
  ln_fwd_ctx_ c = {out, mean, rstd, inp, weight, bias, C, eps};
  dt_parallel_for_(rows, row_grain_(C), ln_fwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_layernorm_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, int64_t rows,
                                     int64_t C, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_layernorm_bwd(dinp, dout, inp, mean, rstd, rows, C));
  ln_bwd_ctx_ c = {dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, C};
  if (rows == 0) { /* the parameter gradients of an empty batch are zero */
    for (int64_t j = 0; j < C && (dweight || dbias); j++) {
      if (dweight) dweight[j] = 0.0f;
      if (dbias) dbias[j] = 0.0f;
    }
    return DT_OK;
  }
  dt_parallel_for_(rows, row_grain_(C), ln_bwd_rows_range_, &c);
  if (dweight || dbias) dt_parallel_for_(C, row_grain_(rows), ln_bwd_cols_range_, &c); /* a column costs `rows` */
  return DT_OK;
}
