/* sgd.h — one element of torch 1.13's single-tensor SGD step (weight decay,
 * momentum buffer, dampening, nesterov). Every `add(x, alpha=a)` of the
 * torch code rounds through an FMA in its AVX2 kernels, so it does here. */
#pragma once
#include <math.h>
#include "dt_common.h"

typedef struct {
  float neg_lr, momentum, one_minus_dampening, weight_decay;
  int nesterov, first, use_momentum, use_weight_decay;
} dt_sgd_scalars;

DT_HD dt_sgd_scalars dt_sgd_make_scalars(double lr, double momentum, double dampening, double weight_decay,
                                         int32_t nesterov, int32_t first) {
  dt_sgd_scalars s;
  s.neg_lr = (float)(-lr);
  s.momentum = (float)momentum;
  s.one_minus_dampening = (float)(1.0 - dampening);
  s.weight_decay = (float)weight_decay;
  s.nesterov = nesterov != 0;
  s.first = first != 0;
  s.use_momentum = momentum != 0.0;
  s.use_weight_decay = weight_decay != 0.0;
  return s;
}

/* Updates p (and buf when momentum != 0) for one element with gradient g. */
DT_HD void dt_sgd_update(float* p, float g, float* buf, const dt_sgd_scalars* s) {
  float d = s->use_weight_decay ? fmaf(*p, s->weight_decay, g) : g; /* g.add(p, alpha=wd) */
  if (s->use_momentum) {
    float b = s->first ? d : fmaf(d, s->one_minus_dampening, *buf * s->momentum);
    *buf = b;
    d = s->nesterov ? fmaf(b, s->momentum, d) : b;
  }
  *p = fmaf(d, s->neg_lr, *p); /* p.add_(d, alpha=-lr) */
}
