/* layernorm.h — layer norm over one row of C values: moments (two passes in
 * double, biased variance, eps inside the sqrt; sounder than torch's float
 * Welford, so means differ from torch's in the last bits), the normalised
 * output, and the row's input gradient. The weight/bias gradients are column
 * sums over rows, left to the caller's loop. */
#pragma once
#include <math.h>
#include "dt_common.h"
#include "reduce.h"

/* 1 / sqrt(var + eps): IEEE sqrt and division, the same bits on both libraries. */
DT_HD float dt_layernorm_rstd_f(float var, float eps) { return 1.0f / sqrtf(var + eps); }

/* mean and rstd = 1 / sqrt(var + eps) of x[0:C] (C >= 1). */
DT_HD void dt_layernorm_moments(const float* x, int64_t C, float eps, float* mean_out, float* rstd_out) {
  double mean = dt_sum_f64(x, C) / (double)C;
  float var = (float)(dt_sumsq_dev_f64(x, C, mean) / (double)C);
  *mean_out = (float)mean;
  *rstd_out = dt_layernorm_rstd_f(var, eps);
}

/* The normalised value xhat = (x - mean) * rstd. torch computes the FMA
 * x * rstd + (-rstd * mean); both err by about U * |mean| * rstd (the f32 mean
 * carries that much), but this form gives exactly 0 where x == mean, so a
 * constant row normalises to b instead of rounding noise times 1/sqrt(eps). */
DT_HD float dt_layernorm_xhat_f(float x, float mean, float rstd) { return (x - mean) * rstd; }

/* One output: xhat * w + b, fused into one FMA as torch's AVX2 kernel rounds it. */
DT_HD float dt_layernorm_out_f(float x, float mean, float rstd, float w, float b) {
  return fmaf(dt_layernorm_xhat_f(x, mean, rstd), w, b);
}

/* dinp[0:C] for one row: with xhat as above and g = dout * w,
 * dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)). weight may be NULL (1). */
DT_HD void dt_layernorm_bwd_row(float* dinp, const float* dout, const float* x, const float* weight, float mean,
                                float rstd, int64_t C) {
  double acc_g[8] = {0, 0, 0, 0, 0, 0, 0, 0}, acc_gx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= C; j += 8) /* eight lanes, as reduce.h, so the adds overlap */
    for (int k = 0; k < 8; k++) {
      float g = weight ? dout[j + k] * weight[j + k] : dout[j + k];
      acc_g[k] += g;
      acc_gx[k] += (double)g * (double)dt_layernorm_xhat_f(x[j + k], mean, rstd);
    }
  double sum_g = dt_fold8_(acc_g), sum_g_xhat = dt_fold8_(acc_gx);
  for (; j < C; j++) {
    float g = weight ? dout[j] * weight[j] : dout[j];
    sum_g += g;
    sum_g_xhat += (double)g * (double)dt_layernorm_xhat_f(x[j], mean, rstd);
  }
  float mean_g = (float)(sum_g / (double)C);
  float mean_g_xhat = (float)(sum_g_xhat / (double)C);
  for (j = 0; j < C; j++) {
    float g = weight ? dout[j] * weight[j] : dout[j];
    float xhat = dt_layernorm_xhat_f(x[j], mean, rstd);
    dinp[j] = rstd * ((g - mean_g) - xhat * mean_g_xhat);
  }
}
