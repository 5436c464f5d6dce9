/* bn_relu_pool.h — batch norm's affine output, ReLU and 2x2 max pooling of
 * one window in one step (the common block of a small CNN): the same values
 * as dt_bn_apply, then dt_relu_fwd, then dt_maxpool2d_fwd's 2x2 window at
 * stride 2 (a window's elements in order, a NaN or a larger value taking
 * over, the first when all are equal), so the pooled outputs and indices are
 * the unfused ops' bits. */
#pragma once
#include "batchnorm.h"
#include "dt_common.h"
#include "elementwise.h"
#include "pool.h"

/* Output (oh, ow) of one plane (W wide): max over its 2x2 window of
 * relu(x * alpha + beta); *at gets the element's index ih * W + iw. */
DT_HD float dt_bn_relu_maxpool2x2(const float* plane, int64_t W, int64_t oh, int64_t ow, float alpha, float beta,
                                  int32_t* at) {
  const float* r0 = plane + 2 * oh * W + 2 * ow;
  float v[4] = {r0[0], r0[1], r0[W], r0[W + 1]};
  int32_t off[4] = {0, 1, (int32_t)W, (int32_t)W + 1};
  float best = dt_relu_f(dt_bn_out_f(v[0], alpha, beta));
  int32_t pick = 0;
  for (int k = 1; k < 4; k++) {
    float r = dt_relu_f(dt_bn_out_f(v[k], alpha, beta));
    int take = dt_maxpool_takes(r, best);
    best = take ? r : best;
    pick = take ? off[k] : pick;
  }
  *at = (int32_t)(2 * oh * W + 2 * ow) + pick;
  return best;
}
