/* rows.c — CPU loops of the row-wise kernels: softmax (with the causal mask)
 * and layer norm, forward and backward. Rows are split across threads; the
 * layer-norm weight/bias gradients are column sums, split by columns. The
 * arithmetic lives in kernels/common/softmax.h and layernorm.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <stdlib.h>
#include <string.h>
#include "convert.h"
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

/* ---- layer norm -----------------------------------------------------------------
 * f32 rows take the direct loops; other dtypes (and a residual to add) go
 * through per-thread f32 row buffers, converted once per row. */

typedef struct {
  float* ptr;
  size_t cap;
} row_buf_;

static __thread row_buf_ ln_buf_;

/* n floats of this thread's scratch (NULL when memory is short). */
static float* ln_reserve_(size_t n) {
  if (ln_buf_.cap >= n) return ln_buf_.ptr;
  float* p = malloc(n * sizeof(float));
  if (!p) return NULL;
  free(ln_buf_.ptr);
  ln_buf_.ptr = p;
  ln_buf_.cap = n;
  return p;
}

/* A row of n floats of dtype into f32 (the dtype test hoisted out of the loops, so they vectorise). */
DT_VEC_CLONES static void ln_load_row_(float* dst, const void* src, int32_t dtype, int64_t n) {
  if (dtype == DT_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (dtype == DT_BF16) {
    for (int64_t j = 0; j < n; j++) dst[j] = dt_bf16_to_f32(((const uint16_t*)src)[j]);
  } else {
    for (int64_t j = 0; j < n; j++) dst[j] = dt_f16_to_f32(((const uint16_t*)src)[j]);
  }
}

/* n f32 values rounded into a row of dtype. */
DT_VEC_CLONES static void ln_store_row_(void* dst, int32_t dtype, const float* src, int64_t n) {
  if (dtype == DT_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (dtype == DT_BF16) {
    for (int64_t j = 0; j < n; j++) ((uint16_t*)dst)[j] = dt_f32_to_bf16(src[j]);
  } else {
    for (int64_t j = 0; j < n; j++) ((uint16_t*)dst)[j] = dt_f32_to_f16(src[j]);
  }
}

/* Element size of a float dtype. */
static inline size_t ln_esize_(int32_t dtype) { return dtype == DT_F32 ? 4 : 2; }

typedef struct {
  void* out;
  float *mean, *rstd;
  const void* inp;
  const void* res;
  void* sum_out;
  const float *weight, *bias;
  int64_t C;
  float eps;
  int32_t out_dtype, inp_dtype, res_dtype;
  /* dt_layernorm_moments, or its AVX-512 form (the same bits) where dt_cpu_avx512_() */
  void (*moments)(const float* x, int64_t C, float eps, float* mean, float* rstd);
  /* with AVX-512, the moments of two rows at once (their chains of adds interleaved); else NULL */
  void (*moments2)(const float* x0, const float* x1, int64_t C, float eps, float* mean, float* rstd);
  int failed;
} ln_fwd_ctx_;

/* Row r's outputs from x (f32) and its moments; ybuf: C floats for an output that is neither f32 nor bf16. */
DT_VEC_CLONES static void ln_fwd_out_(const ln_fwd_ctx_* c, const float* x, int64_t r, float mean, float rstd,
                                      float* ybuf) {
  if (c->out_dtype == DT_F32) {
    float* y = (float*)c->out + r * c->C;
    if (c->weight && c->bias) {
      for (int64_t j = 0; j < c->C; j++) y[j] = dt_layernorm_out_f(x[j], mean, rstd, c->weight[j], c->bias[j]);
    } else {
      for (int64_t j = 0; j < c->C; j++)
        y[j] = dt_layernorm_out_f(x[j], mean, rstd, c->weight ? c->weight[j] : 1.0f, c->bias ? c->bias[j] : 0.0f);
    }
  } else if (c->out_dtype == DT_BF16 && c->weight && c->bias) {
    /* rounded as they are made, without a pass through a row buffer */
    uint16_t* y = (uint16_t*)c->out + r * c->C;
    for (int64_t j = 0; j < c->C; j++)
      y[j] = dt_f32_to_bf16(dt_layernorm_out_f(x[j], mean, rstd, c->weight[j], c->bias[j]));
  } else {
    float* y = ybuf;
    for (int64_t j = 0; j < c->C; j++)
      y[j] = dt_layernorm_out_f(x[j], mean, rstd, c->weight ? c->weight[j] : 1.0f, c->bias ? c->bias[j] : 0.0f);
    ln_store_row_((char*)c->out + (size_t)(r * c->C) * ln_esize_(c->out_dtype), c->out_dtype, y, c->C);
  }
  if (c->mean) c->mean[r] = mean;
  if (c->rstd) c->rstd[r] = rstd;
}

/* Row r's norm of x (f32); ybuf as above. */
DT_VEC_CLONES static void ln_fwd_row_(const ln_fwd_ctx_* c, const float* x, int64_t r, float* ybuf) {
  float mean, rstd;
  c->moments(x, c->C, c->eps, &mean, &rstd);
  ln_fwd_out_(c, x, r, mean, rstd, ybuf);
}

/* An f32 input plus a residual, the f32 sum kept: made straight into sum_out's row r and read
 * back from there (the same f32 adds as ln_fwd_range_'s general case, without copying the
 * input in and the sum out: 1.4 % of a bf16 GPT-mini step went to those copies; the checks
 * keep sum_out apart from inp and res). rb: C floats for a residual that is not f32. */
DT_VEC_CLONES static const float* ln_sum_row_(const ln_fwd_ctx_* c, int64_t r, float* rb) {
  const int64_t C = c->C;
  float* s = (float*)c->sum_out + r * C;
  const float* in = (const float*)c->inp + r * C;
  if (c->res_dtype == DT_BF16) { /* widened as it is added, without a pass through a row buffer */
    const uint16_t* rh = (const uint16_t*)c->res + r * C;
    for (int64_t j = 0; j < C; j++) s[j] = in[j] + dt_bf16_to_f32(rh[j]);
    return s;
  }
  const float* rr = rb;
  if (c->res_dtype == DT_F32) rr = (const float*)c->res + r * C;
  else ln_load_row_(rb, (const char*)c->res + (size_t)(r * C) * ln_esize_(c->res_dtype), c->res_dtype, C);
  for (int64_t j = 0; j < C; j++) s[j] = in[j] + rr[j];
  return s;
}

DT_VEC_CLONES static void ln_fwd_range_(void* vctx, int64_t r0, int64_t r1) {
  ln_fwd_ctx_* c = vctx;
  const int64_t C = c->C;
  int direct = c->inp_dtype == DT_F32 && !c->res;
  int summed = c->inp_dtype == DT_F32 && c->res && c->sum_out;
  /* scratch: the input row, the residual row, the output row */
  float* buf = direct && c->out_dtype == DT_F32 ? NULL : ln_reserve_((size_t)(3 * C));
  if (!buf && !(direct && c->out_dtype == DT_F32)) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  float *xb = buf, *rb = buf ? buf + C : NULL, *yb = buf ? buf + 2 * C : NULL;
  const size_t ie = ln_esize_(c->inp_dtype), re = ln_esize_(c->res_dtype);
  for (int64_t r = r0; r < r1; r++) {
    if (c->moments2 && (direct || summed) && r + 1 < r1) { /* two rows whose x stays where it is */
      const float* x0 = direct ? (const float*)c->inp + r * C : ln_sum_row_(c, r, rb);
      const float* x1 = direct ? (const float*)c->inp + (r + 1) * C : ln_sum_row_(c, r + 1, rb);
      float mean[2], rstd[2];
      c->moments2(x0, x1, C, c->eps, mean, rstd);
      ln_fwd_out_(c, x0, r, mean[0], rstd[0], yb);
      ln_fwd_out_(c, x1, r + 1, mean[1], rstd[1], yb);
      r++;
      continue;
    }
    const float* x;
    if (direct) {
      x = (const float*)c->inp + r * C;
    } else if (summed) {
      x = ln_sum_row_(c, r, rb);
    } else {
      /* x = inp + res, rounded to inp's dtype (what sum_out holds and backward reads) */
      ln_load_row_(xb, (const char*)c->inp + (size_t)(r * C) * ie, c->inp_dtype, C);
      if (c->res) {
        ln_load_row_(rb, (const char*)c->res + (size_t)(r * C) * re, c->res_dtype, C);
        if (c->inp_dtype == DT_F32) {
          for (int64_t j = 0; j < C; j++) xb[j] += rb[j];
        } else {
          for (int64_t j = 0; j < C; j++) xb[j] = dt_round_float(xb[j] + rb[j], c->inp_dtype);
        }
      }
      if (c->sum_out) ln_store_row_((char*)c->sum_out + (size_t)(r * C) * ie, c->inp_dtype, xb, C);
      x = xb;
    }
    ln_fwd_row_(c, x, r, yb);
  }
}

typedef struct {
  void* dinp;
  float *dweight, *dbias;
  const void *dout, *inp;
  const float *weight, *mean, *rstd;
  int64_t rows, C;
  int32_t dout_dtype, inp_dtype, dinp_dtype, flags;
  /* dt_layernorm_bwd_row, or its AVX-512 form (the same bits) where dt_cpu_avx512_() */
  void (*row)(float* dinp, const float* dout, const float* x, const float* weight, float mean, float rstd,
              int64_t C);
  int failed;
} ln_bwd_ctx_;

DT_VEC_CLONES static void ln_bwd_rows_range_(void* vctx, int64_t r0, int64_t r1) {
  ln_bwd_ctx_* c = vctx;
  const int64_t C = c->C;
  int direct = c->dout_dtype == DT_F32 && c->inp_dtype == DT_F32 && c->dinp_dtype == DT_F32 && !(c->flags & 1);
  float* buf = direct ? NULL : ln_reserve_((size_t)(3 * C));
  if (!direct && !buf) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    if (direct) {
      c->row((float*)c->dinp + r * C, (const float*)c->dout + r * C, (const float*)c->inp + r * C, c->weight,
          c->mean[r], c->rstd[r], C);
      continue;
    }
    float *dy = buf, *x = buf + C, *dx = buf + 2 * C;
    const size_t oe = ln_esize_(c->dinp_dtype);
    /* f32 rows are read in place, others widened into the row buffers */
    const float* dyr = dy;
    const float* xr = x;
    if (c->dout_dtype == DT_F32) dyr = (const float*)c->dout + r * C;
    else ln_load_row_(dy, (const char*)c->dout + (size_t)(r * C) * ln_esize_(c->dout_dtype), c->dout_dtype, C);
    if (c->inp_dtype == DT_F32) xr = (const float*)c->inp + r * C;
    else ln_load_row_(x, (const char*)c->inp + (size_t)(r * C) * ln_esize_(c->inp_dtype), c->inp_dtype, C);
    void* out = (char*)c->dinp + (size_t)(r * C) * oe;
    if (c->dinp_dtype == DT_F32 && !(c->flags & 1)) { /* an f32 gradient written in place, not copied */
      c->row(out, dyr, xr, c->weight, c->mean[r], c->rstd[r], C);
      continue;
    }
    c->row(dx, dyr, xr, c->weight, c->mean[r], c->rstd[r], C);
    if (c->flags & 1) { /* dinp += dx, in f32, rounded once */
      if (c->dinp_dtype == DT_F32) {
        const float* o = out;
        for (int64_t j = 0; j < C; j++) dx[j] += o[j];
      } else {
        ln_load_row_(dy, out, c->dinp_dtype, C);
        for (int64_t j = 0; j < C; j++) dx[j] += dy[j];
      }
    }
    ln_store_row_(out, c->dinp_dtype, dx, C);
  }
}

/* dweight[j] = sum_r dout[r,j] * xhat[r,j] and dbias[j] = sum_r dout[r,j]
 * for j in [j0, j1), in double, rows in order (added to what is there with flag 2). */
DT_VEC_CLONES static void ln_bwd_cols_range_(void* vctx, int64_t j0, int64_t j1) {
  const ln_bwd_ctx_* c = vctx;
  double acc_w[COL_TILE], acc_b[COL_TILE];
  int f32 = c->dout_dtype == DT_F32 && c->inp_dtype == DT_F32;
  for (int64_t t0 = j0; t0 < j1; t0 += COL_TILE) {
    int64_t width = j1 - t0 < COL_TILE ? j1 - t0 : COL_TILE;
    for (int64_t k = 0; k < width; k++) acc_w[k] = acc_b[k] = 0.0;
    for (int64_t r = 0; r < c->rows; r++) {
      float mean = c->mean[r], rstd = c->rstd[r];
      int64_t at = r * c->C + t0;
      if (f32) {
        const float* dy = (const float*)c->dout + at;
        const float* x = (const float*)c->inp + at;
        for (int64_t k = 0; k < width; k++) {
          acc_w[k] += (double)(dy[k] * dt_layernorm_xhat_f(x[k], mean, rstd));
          acc_b[k] += (double)dy[k];
        }
      } else { /* bf16/f16 widened into row buffers first (f32 read in place), so that both loops vectorise */
        float dyb[COL_TILE], xb[COL_TILE];
        const float* dy = dyb;
        const float* x = xb;
        if (c->dout_dtype == DT_F32) dy = (const float*)c->dout + at;
        else ln_load_row_(dyb, (const char*)c->dout + (size_t)at * ln_esize_(c->dout_dtype), c->dout_dtype, width);
        if (c->inp_dtype == DT_F32) x = (const float*)c->inp + at;
        else ln_load_row_(xb, (const char*)c->inp + (size_t)at * ln_esize_(c->inp_dtype), c->inp_dtype, width);
        for (int64_t k = 0; k < width; k++) {
          acc_w[k] += (double)(dy[k] * dt_layernorm_xhat_f(x[k], mean, rstd));
          acc_b[k] += (double)dy[k];
        }
      }
    }
    int add = c->flags & 2;
    for (int64_t k = 0; k < width; k++) {
      if (c->dweight) c->dweight[t0 + k] = (float)acc_w[k] + (add ? c->dweight[t0 + k] : 0.0f);
      if (c->dbias) c->dbias[t0 + k] = (float)acc_b[k] + (add ? c->dbias[t0 + k] : 0.0f);
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

DT_EXPORT dt_status dt_layernorm_fwd(void* out, float* mean, float* rstd, const void* inp, const float* weight,
                                     const float* bias, int64_t rows, int64_t C, float eps, int32_t out_dtype,
                                     int32_t inp_dtype, const void* res, int32_t res_dtype, void* sum_out,
                                     void* stream) {
  (void)stream;
  DT_TRY_(dt_check_layernorm_fwd(out, inp, rows, C, eps, out_dtype, inp_dtype, res, res_dtype, sum_out));
  if (rows == 0) return DT_OK;
  ln_fwd_ctx_ c = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .res = res, .sum_out = sum_out,
                   .weight = weight, .bias = bias, .C = C, .eps = eps, .out_dtype = out_dtype,
                   .inp_dtype = inp_dtype, .res_dtype = res_dtype,
                   .moments = dt_cpu_avx512_() ? dt_layernorm_moments_avx512_ : dt_layernorm_moments,
                   .moments2 = dt_cpu_avx512_() ? dt_layernorm_moments2_avx512_ : NULL};
  dt_parallel_for_(rows, row_grain_(C), ln_fwd_range_, &c);
  if (c.failed) return dt_fail_(DT_ERR_ALLOC, "dt_layernorm_fwd: cannot allocate a row of %lld floats", (long long)C);
  return DT_OK;
}

DT_EXPORT dt_status dt_layernorm_bwd(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                                     const float* weight, const float* mean, const float* rstd, int64_t rows,
                                     int64_t C, int32_t dout_dtype, int32_t inp_dtype, int32_t dinp_dtype,
                                     int32_t flags, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_layernorm_bwd(dinp, dout, inp, mean, rstd, rows, C, dout_dtype, inp_dtype, dinp_dtype, flags));
  ln_bwd_ctx_ c = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout, .inp = inp, .weight = weight,
                   .mean = mean, .rstd = rstd, .rows = rows, .C = C, .dout_dtype = dout_dtype,
                   .inp_dtype = inp_dtype, .dinp_dtype = dinp_dtype, .flags = flags,
                   .row = dt_cpu_avx512_() ? dt_layernorm_bwd_row_avx512_ : dt_layernorm_bwd_row};
  if (rows == 0) { /* the parameter gradients of an empty batch are zero */
    if (!(flags & 2))
      for (int64_t j = 0; j < C && (dweight || dbias); j++) {
        if (dweight) dweight[j] = 0.0f;
        if (dbias) dbias[j] = 0.0f;
      }
    return DT_OK;
  }
  dt_parallel_for_(rows, row_grain_(C), ln_bwd_rows_range_, &c);
  if (c.failed) return dt_fail_(DT_ERR_ALLOC, "dt_layernorm_bwd: cannot allocate rows of %lld floats", (long long)C);
  if (dweight || dbias) dt_parallel_for_(C, row_grain_(rows), ln_bwd_cols_range_, &c); /* a column costs `rows` */
  return DT_OK;
}
