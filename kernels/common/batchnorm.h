/* batchnorm.h — batch normalisation of one channel of a tensor viewed as
 * (N, C, HW), in the pieces that a distributed (synchronised) batch norm
 * reduces across ranks between: channel sums, sums of squared deviations from
 * the (global) mean, the statistics and running-average update, the affine
 * output, and the backward's two sums and input gradient. Rounding follows
 * torch 1.13's CPU kernels: sums and the moments in double, the output as
 * x * alpha + beta with alpha = rstd * w and beta = b - mean * alpha. */
#pragma once
#include <math.h>
#include "dt_common.h"
#include "reduce.h"

/* Sum of channel c's N runs of HW values; run n starts at x + n * stride. */
DT_HD double dt_bn_channel_sum(const float* x, int64_t N, int64_t HW, int64_t stride) {
  double s = 0.0;
  for (int64_t n = 0; n < N; n++) s += dt_sum_f64(x + n * stride, HW);
  return s;
}

/* Sum of (x - mean)^2 over the same runs, in double. */
DT_HD double dt_bn_channel_sqdev(const float* x, int64_t N, int64_t HW, int64_t stride, double mean) {
  double s = 0.0;
  for (int64_t n = 0; n < N; n++) s += dt_sumsq_dev_f64(x + n * stride, HW, mean);
  return s;
}

/* Batch statistics of one channel from its sum and squared deviations over
 * `count` elements: the mean and 1 / sqrt(biased var + eps), both in double
 * as torch computes them, then rounded. */
DT_HD void dt_bn_stats_f(double sum, double sqdev, double count, double eps, float* mean, float* rstd) {
  *mean = (float)(sum / count);
  *rstd = (float)(1.0 / sqrt(sqdev / count + eps));
}

/* One running-average step: r = factor * v + (1 - factor) * r, in double. */
DT_HD float dt_bn_running_f(float r, double v, double factor) { return (float)(factor * v + (1.0 - factor) * (double)r); }

/* Eval-mode statistics from the running ones, in float as torch's eval path. */
DT_HD float dt_bn_eval_rstd_f(float running_var, float eps) { return 1.0f / sqrtf(running_var + eps); }

/* The affine form of one channel: out = x * alpha + beta. */
DT_HD void dt_bn_affine(float mean, float rstd, float w, float b, float* alpha, float* beta) {
  *alpha = rstd * w;
  *beta = b - mean * *alpha;
}
DT_HD float dt_bn_out_f(float x, float alpha, float beta) { return x * alpha + beta; }

/* The backward's sums over one channel: sum(dy) and sum((x - mean) * dy),
 * each product in float and the sums in double. */
DT_HD void dt_bn_channel_bwd_sums(const float* dy, const float* x, int64_t N, int64_t HW, int64_t stride, float mean,
                                  double* sum_dy, double* sum_dy_xmu) {
  double s = 0.0, d = 0.0;
  for (int64_t n = 0; n < N; n++) {
    const float* dyr = dy + n * stride;
    const float* xr = x + n * stride;
    double acc_s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, acc_d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= HW; i += 8) /* eight lanes, as reduce.h, so the adds overlap and vectorise */
      for (int k = 0; k < 8; k++) {
        acc_s[k] += (double)dyr[i + k];
        acc_d[k] += (double)((xr[i + k] - mean) * dyr[i + k]);
      }
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

/* The per-channel factors of the input gradient in training mode, from the
 * sums over all `count` elements (of every rank, for a synchronised norm):
 * k = sum_dy_xmu * rstd^2 / count and grad_mean = sum_dy / count, as torch. */
DT_HD void dt_bn_bwd_factors(double sum_dy, double sum_dy_xmu, double count, float rstd, float* k, float* grad_mean) {
  *k = (((float)sum_dy_xmu * rstd) * rstd) / (float)count;
  *grad_mean = (float)(sum_dy / count);
}

/* dx in training mode: (dy - grad_mean - (x - mean) * k) * rstd * w. */
DT_HD float dt_bn_dx_train_f(float dy, float x, float mean, float k, float grad_mean, float rstd, float w) {
  float proj = (x - mean) * k;
  return (((dy - grad_mean) - proj) * rstd) * w;
}

/* dx with fixed statistics (eval mode): dy * rstd * w. */
DT_HD float dt_bn_dx_eval_f(float dy, float rstd, float w) { return (dy * rstd) * w; }
