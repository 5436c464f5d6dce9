/* softmax.h — softmax(scale * x) over one row of a (rows, cols) matrix, with
 * the optional causal mask, and its backward. Sums are kept in double; the
 * rounding of the rest follows torch 1.13's _vec_softmax_lastdim:
 * exp(z - max) stored, then multiplied by the float 1 / sum; exp is
 * dt_expf (dt_math.h), so CPU and GPU round alike. */
#pragma once
#include <math.h>
#include "dt_common.h"
#include "dt_math.h"
#include "reduce.h"

/* Columns of row r that the causal mask leaves visible: j <= r % causal_t
 * (all cols when causal_t <= 0). Never 0, so a masked row cannot occur. */
DT_HD int64_t dt_softmax_visible_cols(int64_t r, int64_t cols, int64_t causal_t) {
  if (causal_t <= 0) return cols;
  int64_t visible = r % causal_t + 1;
  return visible < cols ? visible : cols;
}

/* exp(z - max) of one visible column, z = scale * x rounded to float first. */
DT_HD float dt_softmax_exp_f(float z, float max) { return dt_expf(z - max); }

/* out[0:cols] = softmax(scale * inp[0:visible]), masked columns exactly 0. */
DT_HD void dt_softmax_row(float* out, const float* inp, int64_t cols, int64_t visible, float scale) {
  float max = -INFINITY;
  for (int64_t j = 0; j < visible; j++) {
    float z = scale * inp[j];
    max = z > max ? z : max;
  }
  for (int64_t j = 0; j < visible; j++) out[j] = dt_softmax_exp_f(scale * inp[j], max); /* vectorises */
  double sum = dt_sum_f64(out, visible);
  float inv_sum = 1.0f / (float)sum;
  for (int64_t j = 0; j < visible; j++) out[j] *= inv_sum;
  for (int64_t j = visible; j < cols; j++) out[j] = 0.0f;
}

/* dinp = scale * ((dout - sum_j dout*out) * out) over one row. */
DT_HD void dt_softmax_bwd_row(float* dinp, const float* dout, const float* out, int64_t cols, float scale) {
  float dot_f = (float)dt_dot_f64(dout, out, cols);
  for (int64_t j = 0; j < cols; j++) dinp[j] = ((dout[j] - dot_f) * out[j]) * scale;
}

/* out[0:cols] = log_softmax(inp[0:cols]) as torch's _vec_log_softmax_lastdim
 * rounds it: (x - max) - ln(sum_j e^(x_j - max)), the sum in double. out is
 * the scratch of the exponentials first. */
DT_HD void dt_log_softmax_row(float* out, const float* inp, int64_t cols) {
  float max = -INFINITY;
  for (int64_t j = 0; j < cols; j++) max = inp[j] > max ? inp[j] : max;
  for (int64_t j = 0; j < cols; j++) out[j] = dt_expf(inp[j] - max);
  float lse = dt_logf((float)dt_sum_f64(out, cols));
  for (int64_t j = 0; j < cols; j++) out[j] = (inp[j] - max) - lse;
}

/* dinp = dout - e^out * sum_j(dout) over one row (log-softmax backward). */
DT_HD void dt_log_softmax_bwd_row(float* dinp, const float* dout, const float* out, int64_t cols) {
  float sum = (float)dt_sum_f64(dout, cols);
  for (int64_t j = 0; j < cols; j++) dinp[j] = dout[j] - dt_expf(out[j]) * sum;
}

/* Softmax (or log-softmax when is_log) of one column x[0], x[stride], ...,
 * x[(D - 1) * stride], the same arithmetic as the row forms above. */
DT_HD void dt_softmax_col(float* out, const float* x, int64_t D, int64_t stride, int is_log) {
  float max = -INFINITY;
  for (int64_t d = 0; d < D; d++) max = x[d * stride] > max ? x[d * stride] : max;
  double sum = 0.0;
  for (int64_t d = 0; d < D; d++) {
    float e = dt_expf(x[d * stride] - max);
    if (!is_log) out[d * stride] = e;
    sum += (double)e;
  }
  if (is_log) {
    float lse = dt_logf((float)sum);
    for (int64_t d = 0; d < D; d++) out[d * stride] = (x[d * stride] - max) - lse;
  } else {
    float inv_sum = 1.0f / (float)sum;
    for (int64_t d = 0; d < D; d++) out[d * stride] *= inv_sum;
  }
}

/* The backward of dt_softmax_col: dinp from dout and the forward's out. */
DT_HD void dt_softmax_bwd_col(float* dinp, const float* dout, const float* out, int64_t D, int64_t stride,
                              int is_log) {
  double acc = 0.0;
  for (int64_t d = 0; d < D; d++)
    acc += is_log ? (double)dout[d * stride] : (double)dout[d * stride] * (double)out[d * stride];
  float s = (float)acc;
  for (int64_t d = 0; d < D; d++) {
    int64_t k = d * stride;
    dinp[k] = is_log ? dout[k] - dt_expf(out[k]) * s : (dout[k] - s) * out[k];
  }
}
