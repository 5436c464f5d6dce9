/* batchnorm.c — CPU loops of the batch-norm kernels on tensors viewed as
 * (N, C, HW), split across threads by channel. The launchers are the steps
 * between which a synchronised batch norm all-reduces: dt_bn_sum ->
 * dt_bn_sqdev -> dt_bn_finalize -> dt_bn_apply forward, dt_bn_bwd_reduce ->
 * dt_bn_bwd_apply backward. Arithmetic: kernels/common/batchnorm.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "batchnorm.h"
#include "ops_checks.h"

#define BN_GRAIN_ELEMS (1 << 14)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  int64_t N, C, HW;
  const float *x, *dy, *mean, *rstd, *weight, *bias;
  float *out, *dweight, *dbias;
  double* acc;        /* sums out (dt_bn_sum, dt_bn_sqdev, dt_bn_bwd_reduce) */
  const double* cacc; /* sums in (dt_bn_sqdev, dt_bn_bwd_apply) */
  double count;
} bn_ctx_;

DT_VEC_CLONES static void sum_range_(void* vctx, int64_t c0, int64_t c1) {
  const bn_ctx_* c = vctx;
  for (int64_t ch = c0; ch < c1; ch++) c->acc[ch] = dt_bn_channel_sum(c->x + ch * c->HW, c->N, c->HW, c->C * c->HW);
}

DT_VEC_CLONES static void sqdev_range_(void* vctx, int64_t c0, int64_t c1) {
  const bn_ctx_* c = vctx;
  for (int64_t ch = c0; ch < c1; ch++)
    c->acc[ch] = dt_bn_channel_sqdev(c->x + ch * c->HW, c->N, c->HW, c->C * c->HW, c->cacc[ch] / c->count);
}

DT_VEC_CLONES static void apply_range_(void* vctx, int64_t c0, int64_t c1) {
  const bn_ctx_* c = vctx;
  for (int64_t ch = c0; ch < c1; ch++) {
    float alpha, beta;
    dt_bn_affine(c->mean[ch], c->rstd[ch], c->weight ? c->weight[ch] : 1.0f, c->bias ? c->bias[ch] : 0.0f, &alpha,
                 &beta);
    for (int64_t n = 0; n < c->N; n++) {
      int64_t off = (n * c->C + ch) * c->HW;
      for (int64_t i = 0; i < c->HW; i++) c->out[off + i] = dt_bn_out_f(c->x[off + i], alpha, beta);
    }
  }
}

/* dt_bn_channel_bwd_sums with its eight lanes as two vectors of four doubles
 * (GCC does not vectorise the scalar body's mix of float and double): the
 * same additions lane by lane, the same fold and tail, so the same bits. The
 * vector helpers are always inlined: no call ABI is involved. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v4f_ __attribute__((vector_size(16)));
typedef double v4d_ __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void bwd_sums_(const float* dy, const float* x, int64_t N, int64_t HW,
                                                            int64_t stride, float mean, double* sum_dy,
                                                            double* sum_dy_xmu) {
  double s = 0.0, d = 0.0;
  for (int64_t n = 0; n < N; n++) {
    const float* dyr = dy + n * stride;
    const float* xr = x + n * stride;
    v4d_ s0 = {0, 0, 0, 0}, s1 = s0, d0 = s0, d1 = s0;
    int64_t i = 0;
    for (; i + 8 <= HW; i += 8) {
      v4f_ ylo, yhi, xlo, xhi;
      memcpy(&ylo, dyr + i, sizeof ylo);
      memcpy(&yhi, dyr + i + 4, sizeof yhi);
      memcpy(&xlo, xr + i, sizeof xlo);
      memcpy(&xhi, xr + i + 4, sizeof xhi);
      s0 += __builtin_convertvector(ylo, v4d_);
      s1 += __builtin_convertvector(yhi, v4d_);
      d0 += __builtin_convertvector((xlo - mean) * ylo, v4d_);
      d1 += __builtin_convertvector((xhi - mean) * yhi, v4d_);
    }
    double acc_s[8] = {s0[0], s0[1], s0[2], s0[3], s1[0], s1[1], s1[2], s1[3]};
    double acc_d[8] = {d0[0], d0[1], d0[2], d0[3], d1[0], d1[1], d1[2], d1[3]};
    double rs = dt_fold8_(acc_s), rd = dt_fold8_(acc_d);
    for (; i < HW; i++) {
      rs += (double)dyr[i];
      rd += (double)((xr[i] - mean) * dyr[i]);
    }
    s += rs;
    d += rd;
  }
  *sum_dy = s;
  *sum_dy_xmu = d;
}

DT_VEC_CLONES static void bwd_reduce_range_(void* vctx, int64_t c0, int64_t c1) {
  const bn_ctx_* c = vctx;
  for (int64_t ch = c0; ch < c1; ch++) {
    double s, d;
    bwd_sums_(c->dy + ch * c->HW, c->x + ch * c->HW, c->N, c->HW, c->C * c->HW, c->mean[ch], &s, &d);
    c->acc[ch] = s;
    c->acc[c->C + ch] = d;
    if (c->dweight) c->dweight[ch] = (float)(d * (double)c->rstd[ch]);
    if (c->dbias) c->dbias[ch] = (float)s;
  }
}

DT_VEC_CLONES static void bwd_apply_range_(void* vctx, int64_t c0, int64_t c1) {
  const bn_ctx_* c = vctx;
  for (int64_t ch = c0; ch < c1; ch++) {
    float w = c->weight ? c->weight[ch] : 1.0f, rstd = c->rstd[ch], mean = c->mean[ch];
    float k = 0.0f, grad_mean = 0.0f;
    if (c->cacc) dt_bn_bwd_factors(c->cacc[ch], c->cacc[c->C + ch], c->count, rstd, &k, &grad_mean);
    for (int64_t n = 0; n < c->N; n++) {
      int64_t off = (n * c->C + ch) * c->HW;
      const float *dy = c->dy + off, *x = c->x + off;
      float* dx = c->out + off;
      if (c->cacc) {
        for (int64_t i = 0; i < c->HW; i++) dx[i] = dt_bn_dx_train_f(dy[i], x[i], mean, k, grad_mean, rstd, w);
      } else {
        for (int64_t i = 0; i < c->HW; i++) dx[i] = dt_bn_dx_eval_f(dy[i], rstd, w);
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

static int64_t channel_grain_(int64_t per_channel) {
  return per_channel >= BN_GRAIN_ELEMS ? 1 : BN_GRAIN_ELEMS / (per_channel > 0 ? per_channel : 1);
}

DT_EXPORT dt_status dt_bn_sum(double* acc, const float* inp, int64_t N, int64_t C, int64_t HW, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_sum(acc, inp, N, C, HW));
  bn_ctx_ c = {.N = N, .C = C, .HW = HW, .x = inp, .acc = acc};
  dt_parallel_for_(C, channel_grain_(N * HW), sum_range_, &c);
  acc[C] = (double)(N * HW);
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_sqdev(double* sq, const float* inp, const double* acc, int64_t N, int64_t C, int64_t HW,
                                void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_sqdev(sq, inp, acc, N, C, HW));
  if (C == 0) return DT_OK;
  if (!(acc[C] >= 1.0)) return dt_fail_bn_count_("dt_bn_sqdev", acc[C]);
  bn_ctx_ c = {.N = N, .C = C, .HW = HW, .x = inp, .acc = sq, .cacc = acc, .count = acc[C]};
  dt_parallel_for_(C, channel_grain_(N * HW), sqdev_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_finalize(float* mean, float* rstd, float* running_mean, float* running_var,
                                   int64_t* num_batches, const double* acc, const double* sq, int64_t C, double eps,
                                   double momentum, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_finalize(mean, rstd, acc, sq, C, eps, momentum));
  double count = acc[C];
  if (!(count >= 1.0)) return dt_fail_bn_count_("dt_bn_finalize", count);
  double factor = momentum;
  if (num_batches) {
    *num_batches += 1;
    if (momentum == -1.0) factor = 1.0 / (double)*num_batches;
  } else if (momentum == -1.0) {
    factor = 0.0; /* no counter to average over: the running statistics stay */
  }
  for (int64_t ch = 0; ch < C; ch++) {
    dt_bn_stats_f(acc[ch], sq[ch], count, eps, &mean[ch], &rstd[ch]);
    if (running_mean) running_mean[ch] = dt_bn_running_f(running_mean[ch], acc[ch] / count, factor);
    /* torch updates with the unbiased variance; with one element it is inf or NaN there too */
    if (running_var) running_var[ch] = dt_bn_running_f(running_var[ch], sq[ch] / (count - 1.0), factor);
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_eval_stats(float* mean, float* rstd, const float* running_mean, const float* running_var,
                                     int64_t C, double eps, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_eval_stats(mean, rstd, running_mean, running_var, C, eps));
  if (C == 0) return DT_OK;
  for (int64_t ch = 0; ch < C; ch++) {
    mean[ch] = running_mean[ch];
    rstd[ch] = dt_bn_eval_rstd_f(running_var[ch], (float)eps);
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_apply(float* out, const float* inp, const float* mean, const float* rstd,
                                const float* weight, const float* bias, int64_t N, int64_t C, int64_t HW,
                                void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_apply(out, inp, mean, rstd, N, C, HW));
  if (N * C * HW == 0) return DT_OK;
  bn_ctx_ c = {.N = N, .C = C, .HW = HW, .x = inp, .mean = mean, .rstd = rstd, .weight = weight, .bias = bias,
               .out = out};
  dt_parallel_for_(C, channel_grain_(N * HW), apply_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_bwd_reduce(double* acc, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* mean, const float* rstd, int64_t N, int64_t C, int64_t HW,
                                     void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_bwd_reduce(acc, dout, inp, mean, rstd, N, C, HW));
  if (C == 0) return DT_OK;
  bn_ctx_ c = {.N = N, .C = C, .HW = HW, .x = inp, .dy = dout, .mean = mean, .rstd = rstd, .dweight = dweight,
               .dbias = dbias, .acc = acc};
  dt_parallel_for_(C, channel_grain_(2 * N * HW), bwd_reduce_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_bwd_apply(float* dinp, const float* dout, const float* inp, const float* mean,
                                    const float* rstd, const float* weight, const double* acc, const double* count,
                                    int64_t N, int64_t C, int64_t HW, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_bwd_apply(dinp, dout, inp, mean, rstd, acc, count, N, C, HW));
  if (N * C * HW == 0) return DT_OK;
  if (acc && !(*count >= 1.0)) return dt_fail_bn_count_("dt_bn_bwd_apply", *count);
  bn_ctx_ c = {.N = N, .C = C, .HW = HW, .x = inp, .dy = dout, .mean = mean, .rstd = rstd, .weight = weight,
               .out = dinp, .cacc = acc, .count = acc ? *count : 0.0};
  dt_parallel_for_(C, channel_grain_(2 * N * HW), bwd_apply_range_, &c);
  return DT_OK;
}
