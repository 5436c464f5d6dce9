/* crossentropy.h — softmax cross-entropy over one row of V logits (the fused
 * classifier): the row's log-sum-exp from its maximum and exp sum (folded
 * online, chunk by chunk), the row's loss, and the gradient of one logit
 * recomputed from the saved log-sum-exp, so no probabilities are stored. The
 * mean over valid rows is the caller's reduction. */
#pragma once
#include <math.h>
#include "dt_common.h"
#include "dt_math.h"
#include "reduce.h"

/* log(sum of exp(logit - max)) + max: the row's log-sum-exp, from its
 * maximum and its exp sum in double. */
DT_HD float dt_crossentropy_lse_f(float max, double sum) { return max + (float)log(sum); }

/* A valid row's loss: log_softmax(row)[target], negated. */
DT_HD float dt_crossentropy_loss_f(float logit_target, float lse) { return -(logit_target - lse); }

/* Two partial (maximum, exp sum) pairs of a row merged into one: the sums
 * are rescaled to the larger maximum (an empty part has max -inf, sum 0). */
DT_HD void dt_crossentropy_merge(float* max, double* sum, float max2, double sum2) {
  if (max2 == -INFINITY) return;
  if (*max == -INFINITY) {
    *max = max2;
    *sum = sum2;
    return;
  }
  float m = *max > max2 ? *max : max2;
  *sum = *sum * (double)dt_expf(*max - m) + sum2 * (double)dt_expf(max2 - m);
  *max = m;
}

/* A logit's probability from the row's log-sum-exp. */
DT_HD float dt_crossentropy_p_f(float logit, float lse) { return dt_expf(logit - lse); }

/* d loss / d logit j of a valid row: (p - [j == target]) * w, w = dloss / valid_rows. */
DT_HD float dt_crossentropy_grad_f(float p, int is_target, float w) {
  return is_target ? p * w - w : p * w;
}
