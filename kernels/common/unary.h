/* unary.h — per-element arithmetic of dt_unary_fwd/bwd (exp, log, sigmoid,
 * tanh, sqrt, pow by a scalar, clamp), shared by the CPU and CUDA loops. The
 * transcendental parts are dt_math.h's, so both libraries round alike; the
 * order of operations follows torch 1.13's CPU kernels (named per op). */
#pragma once
#include <math.h>
#include "dt_common.h"
#include "dt_math.h"

/* Unary op codes of dt_unary_fwd/bwd; a and b are the op's scalars. */
enum {
  DT_UN_EXP = 0,
  DT_UN_LOG = 1,
  DT_UN_SIGMOID = 2,
  DT_UN_TANH = 3,
  DT_UN_SQRT = 4,
  DT_UN_POW = 5,   /* x ^ a */
  DT_UN_CLAMP = 6, /* min(max(x, a), b); -inf / +inf for a missing bound */
  DT_UN_COUNT = 7
};

DT_HD int dt_unary_op_valid(int32_t op) { return op >= 0 && op < DT_UN_COUNT; }

/* x ^ p with torch's pow_tensor_scalar special cases (2, 3, 0.5, -0.5, -1,
 * -2 computed by multiplication, sqrt and division); other exponents use powf. */
DT_HD float dt_pow_f(float x, float p) {
  if (p == 2.0f) return x * x;
  if (p == 3.0f) return (x * x) * x;
  if (p == 0.5f) return sqrtf(x);
  if (p == -0.5f) return 1.0f / sqrtf(x);
  if (p == -1.0f) return 1.0f / x;
  if (p == -2.0f) return 1.0f / (x * x);
  if (p == 1.0f) return x;
  if (p == 0.0f) return 1.0f;
  return powf(x, p);
}

/* torch.sigmoid: 1 / (1 + e^-x). */
DT_HD float dt_sigmoid_f(float x) { return 1.0f / (1.0f + dt_expf(-x)); }

/* torch.clamp: NaN stays NaN (both comparisons are false). */
DT_HD float dt_clamp_f(float x, float lo, float hi) {
  float y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

/* One forward element; the caller has validated op. */
DT_HD float dt_unary_f(int32_t op, float x, float a, float b) {
  switch (op) {
    case DT_UN_EXP: return dt_expf(x);
    case DT_UN_LOG: return dt_logf(x);
    case DT_UN_SIGMOID: return dt_sigmoid_f(x);
    case DT_UN_TANH: return dt_tanhf(x);
    case DT_UN_SQRT: return sqrtf(x);
    case DT_UN_POW: return dt_pow_f(x, a);
    default: return dt_clamp_f(x, a, b); /* DT_UN_CLAMP */
  }
}

/* One backward element: dinp from dout, the input x and the forward output y,
 * as torch's derivatives.yaml writes each:
 *   exp: dout * y            log: dout / x           sigmoid: dout * (1 - y) * y
 *   tanh: dout * (1 - y*y)   sqrt: dout / (2 * y)
 *   pow: 0 when a == 0, else dout * (a * x^(a-1))
 *   clamp: dout where a <= x <= b, else 0 */
DT_HD float dt_unary_grad_f(int32_t op, float dout, float x, float y, float a, float b) {
  switch (op) {
    case DT_UN_EXP: return dout * y;
    case DT_UN_LOG: return dout / x;
    case DT_UN_SIGMOID: return (dout * (1.0f - y)) * y;
    case DT_UN_TANH: return dout * (1.0f - y * y);
    case DT_UN_SQRT: return dout / (2.0f * y);
    case DT_UN_POW: return a == 0.0f ? 0.0f : dout * (a * dt_pow_f(x, a - 1.0f));
    default: return (x >= a && x <= b) ? dout : 0.0f; /* DT_UN_CLAMP */
  }
}

/* torch.where on one element: c != 0 picks a, else b. */
DT_HD float dt_where_f(uint8_t c, float a, float b) { return c ? a : b; }
