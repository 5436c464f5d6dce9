/* reduce.h — sums in double over a contiguous run of floats, with a fixed
 * eight-lane pattern so the result depends only on the data (never on the
 * thread split) and eight adds are in flight at once, and the first-maximum
 * search of dt_argmax_rows. */
#pragma once
#include <math.h>
#include "dt_common.h"

/* Folds eight lane sums in a fixed tree order. */
DT_HD double dt_fold8_(const double* acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum of x[0:len] in double: eight interleaved lanes, then the tail. */
DT_HD double dt_sum_f64(const float* x, int64_t len) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k];
  double s = dt_fold8_(acc);
  for (; i < len; i++) s += (double)x[i];
  return s;
}

/* sum of x[i]^2 over x[0:len] in double, same lane pattern as dt_sum_f64. */
DT_HD double dt_sumsq_f64(const float* x, int64_t len) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k] * (double)x[i + k];
  double s = dt_fold8_(acc);
  for (; i < len; i++) s += (double)x[i] * (double)x[i];
  return s;
}

/* sum of (x[i] - mean)^2 over x[0:len] in double, same lane pattern. */
DT_HD double dt_sumsq_dev_f64(const float* x, int64_t len, double mean) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; k++) {
      double d = (double)x[i + k] - mean;
      acc[k] += d * d;
    }
  double s = dt_fold8_(acc);
  for (; i < len; i++) {
    double d = (double)x[i] - mean;
    s += d * d;
  }
  return s;
}

/* sum of a[i] * b[i] over [0:len] in double (exact products), same lane pattern. */
DT_HD double dt_dot_f64(const float* a, const float* b, int64_t len) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; k++) acc[k] += (double)a[i + k] * (double)b[i + k];
  double s = dt_fold8_(acc);
  for (; i < len; i++) s += (double)a[i] * (double)b[i];
  return s;
}

/* Index of the first maximum of x[0:cols] (cols >= 1); a NaN counts as the
 * maximum, so the first NaN wins (as torch.argmax). */
DT_HD int32_t dt_argmax_row(const float* x, int64_t cols) {
  float best = x[0];
  int64_t at = 0;
  if (isnan(best)) return 0;
  for (int64_t j = 1; j < cols; j++) {
    float v = x[j];
    if (isnan(v)) return (int32_t)j;
    if (v > best) {
      best = v;
      at = j;
    }
  }
  return (int32_t)at;
}
