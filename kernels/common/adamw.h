/* adamw.h — one element of torch 1.13's single-tensor AdamW step. The
 * scalars are Python floats (double) there and reach the float tensor ops
 * rounded to float; the bias corrections are computed in double. torch's AVX2
 * kernels round add_(alpha) and addcmul_ through an FMA, so these do too. */
#pragma once
#include <math.h>
#include "dt_common.h"

/* The per-step scalars, rounded where torch rounds them. */
typedef struct {
  float decay;          /* 1 - lr * weight_decay            (p.mul_) */
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bc2_sqrt;       /* sqrt(1 - beta2^step)              (divisor of sqrt(v)) */
  float eps;
  float neg_step_size;  /* -lr / (1 - beta1^step)            (addcdiv_ value) */
} dt_adamw_scalars;

DT_HD dt_adamw_scalars dt_adamw_make_scalars(double lr, double beta1, double beta2, double eps,
                                             double weight_decay, int64_t step) {
  dt_adamw_scalars s;
  double bc1 = 1.0 - pow(beta1, (double)step);
  double bc2 = 1.0 - pow(beta2, (double)step);
  s.decay = (float)(1.0 - lr * weight_decay);
  s.beta1 = (float)beta1;
  s.one_minus_beta1 = (float)(1.0 - beta1);
  s.beta2 = (float)beta2;
  s.one_minus_beta2 = (float)(1.0 - beta2);
  s.bc2_sqrt = (float)sqrt(bc2);
  s.eps = (float)eps;
  s.neg_step_size = (float)(-(lr / bc1));
  return s;
}

/* Updates p, m, v for one element with gradient g. */
DT_HD void dt_adamw_update(float* p, float g, float* m, float* v, const dt_adamw_scalars* s) {
  float pd = *p * s->decay;
  float mn = fmaf(g, s->one_minus_beta1, *m * s->beta1);
  float vn = fmaf(s->one_minus_beta2 * g, g, *v * s->beta2);
  float denom = sqrtf(vn) / s->bc2_sqrt + s->eps;
  *p = pd + (s->neg_step_size * mn) / denom;
  *m = mn;
  *v = vn;
}
