/* crossentropy.h — softmax cross-entropy over one row of V logits: the
 * max-subtracted log-sum-exp, the row's loss and saved probabilities, and the
 * gradient of one logit. The mean over valid rows is the caller's reduction. */
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

/* probs[0:V] = softmax(logits); returns logsumexp(logits) - logits[target]
 * (target in [0, V), checked by the caller). */
DT_HD float dt_crossentropy_row(float* probs, const float* logits, int64_t V, int64_t target) {
  float max = -INFINITY;
  for (int64_t j = 0; j < V; j++) max = logits[j] > max ? logits[j] : max;
  for (int64_t j = 0; j < V; j++) probs[j] = dt_expf(logits[j] - max); /* vectorises */
  double sum = dt_sum_f64(probs, V);
  float inv_sum = 1.0f / (float)sum;
  for (int64_t j = 0; j < V; j++) probs[j] *= inv_sum;
  return dt_crossentropy_loss_f(logits[target], dt_crossentropy_lse_f(max, sum));
}

/* d loss / d logit j of a valid row: (p - [j == target]) * w, w = dloss / valid_rows. */
DT_HD float dt_crossentropy_grad_f(float p, int is_target, float w) {
  return is_target ? p * w - w : p * w;
}
