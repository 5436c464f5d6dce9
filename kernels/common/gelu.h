/* gelu.h — tanh-approximate GELU on one element, forward and exact backward,
 * as torch 1.13 computes F.gelu(x, approximate="tanh") in its AVX2 kernels:
 * the compiler fuses x + kappa*x^3, 1 - t*t, 1 + 3*kappa*x^2 and the final
 * sum into FMAs there, so these bodies spell those fmaf calls out. tanh is
 * dt_tanhf (dt_math.h), so CPU and GPU round alike. */
#pragma once
#include "dt_common.h"
#include "dt_math.h"

#define DT_GELU_BETA 0.7978845608028654f /* sqrt(2/pi) = M_SQRT2 * M_2_SQRTPI * 0.5 */
#define DT_GELU_KAPPA 0.044715f

/* 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))) */
DT_HD float dt_gelu_f(float x) {
  float x_cube = x * (x * x);
  float inner = DT_GELU_BETA * fmaf(DT_GELU_KAPPA, x_cube, x);
  return (0.5f * x) * (1.0f + dt_tanhf(inner));
}

/* dout * d/dx gelu(x), term by term as torch's GeluBackward (tanh). */
DT_HD float dt_gelu_grad_f(float dout, float x) {
  float x_sq = x * x;
  float x_cube = x * x_sq;
  float inner = DT_GELU_BETA * fmaf(DT_GELU_KAPPA, x_cube, x);
  float t = dt_tanhf(inner);
  float left = 0.5f * x;
  float left_derivative = 0.5f * (1.0f + t);
  float tanh_derivative = fmaf(-t, t, 1.0f);
  float inner_derivative = DT_GELU_BETA * fmaf(3.0f * DT_GELU_KAPPA, x_sq, 1.0f);
  return dout * fmaf(left * tanh_derivative, inner_derivative, left_derivative);
}
