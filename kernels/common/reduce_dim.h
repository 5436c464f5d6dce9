/* reduce_dim.h — reductions along one dimension of a tensor viewed as
 * (outer, D, inner): the reduce op codes, the max/min update step (torch's
 * rule: a larger value, or the first NaN, replaces the best; ties keep the
 * first index), and one whole column, for a GPU thread per output. */
#pragma once
#include <math.h>
#include "dt_common.h"

enum { DT_RED_SUM = 0, DT_RED_MEAN = 1, DT_RED_MAX = 2, DT_RED_MIN = 3, DT_RED_COUNT = 4 };

DT_HD int dt_reduce_op_valid(int32_t op) { return op >= 0 && op < DT_RED_COUNT; }

/* Whether v replaces the current best of a max (want_max) or min; once the
 * best is NaN nothing replaces it. */
DT_HD int dt_extreme_better(float v, float best, int want_max) {
  if (best != best) return 0;
  if (v != v) return 1;
  return want_max ? v > best : v < best;
}

/* Reduces x[0], x[stride], ..., x[(D - 1) * stride] by op: the sum in double
 * (mean divides it by D), or the max/min with the index of its first
 * occurrence. D >= 1 for max and min. */
DT_HD void dt_reduce_col(int32_t op, const float* x, int64_t D, int64_t stride, float* value, int32_t* index) {
  if (op == DT_RED_SUM || op == DT_RED_MEAN) {
    double s = 0.0;
    for (int64_t d = 0; d < D; d++) s += (double)x[d * stride];
    *value = op == DT_RED_MEAN ? (float)(s / (double)D) : (float)s;
    *index = 0;
    return;
  }
  int want_max = op == DT_RED_MAX;
  float best = x[0];
  int32_t at = 0;
  for (int64_t d = 1; d < D; d++) {
    float v = x[d * stride];
    if (dt_extreme_better(v, best, want_max)) {
      best = v;
      at = (int32_t)d;
    }
  }
  *value = best;
  *index = at;
}
