/* elementwise.h — per-element arithmetic of the simple elementwise kernels
 * (dt_binary, dt_scale, dt_axpy, dt_relu_*), shared by the CPU and CUDA loops.
 * Where torch 1.13's AVX2 kernels round through a fused multiply-add (add_
 * with alpha), the body calls fmaf explicitly so both backends round alike. */
#pragma once
#include <math.h>
#include "dt_common.h"

/* One DT_OP_* on two floats; the caller has validated op. */
DT_HD float dt_binary_f(int32_t op, float a, float b) {
  switch (op) {
    case DT_OP_ADD: return a + b;
    case DT_OP_SUB: return a - b;
    case DT_OP_MUL: return a * b;
    default: return a / b; /* DT_OP_DIV */
  }
}

DT_HD int dt_binary_op_valid(int32_t op) { return op >= DT_OP_ADD && op <= DT_OP_DIV; }

/* y + alpha * x as torch's `y.add_(x, alpha=alpha)` rounds it (one fma). */
DT_HD float dt_axpy_f(float y, float alpha, float x) { return fmaf(x, alpha, y); }

/* torch.relu: NaN stays NaN (clamp_min semantics), negatives become 0. */
DT_HD float dt_relu_f(float x) { return x < 0.0f ? 0.0f : x; }

/* ReLU gradient as documented in ffi/symbols.ts: dout where inp > 0, else 0. */
DT_HD float dt_relu_grad_f(float dout, float inp) { return inp > 0.0f ? dout : 0.0f; }
