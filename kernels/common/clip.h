/* clip.h — the arithmetic of gradient clipping by global norm, as
 * torch.nn.utils.clip_grad_norm_ (1.13) and optim/clip.ts round it: each
 * tensor's norm is f32(sqrt(its sum of squares)), the norms are folded in
 * tensor order in f32 (each step a double sum rounded to f32), and the
 * coefficient is min(f32(max_norm / f32(total + 1e-6)), 1). */
#pragma once
#include <math.h>
#include "dt_common.h"

/* The global L2 norm (f32) from per-tensor sums of squares (double). */
DT_HD float dt_clip_total_f(const double* sumsq, int64_t num) {
  float total_sq = 0.0f;
  for (int64_t i = 0; i < num; i++) {
    float n = (float)sqrt(sumsq[i]);
    total_sq = (float)((double)total_sq + (double)(float)((double)n * (double)n));
  }
  return (float)sqrt((double)total_sq);
}

/* The factor every gradient is multiplied by (1 when the norm is within max_norm). */
DT_HD float dt_clip_coef_f(double max_norm, float total) {
  float coef = (float)(max_norm / (double)(float)((double)total + 1e-6));
  return coef < 1.0f ? coef : 1.0f;
}
