/* dropout.h — the dropout mask and scale for one element. Element i of a
 * call is kept when dt_hash_u32(seed, offset + i) >= p * 2^32, so forward and
 * backward (and CPU and GPU) recompute the same mask from (seed, offset). */
#pragma once
#include "dt_common.h"

/* The keep threshold for drop probability p in [0, 1]: 2^32 when p == 1 (drop all). */
DT_HD uint64_t dt_dropout_threshold(float p) {
  return (uint64_t)((double)p * 4294967296.0);
}

/* The factor applied to kept elements, 1 / (1 - p) rounded to float (0 when p == 1). */
DT_HD float dt_dropout_scale(float p) {
  return p >= 1.0f ? 0.0f : (float)(1.0 / (1.0 - (double)p));
}

/* x * scale where element `index` is kept, else 0. */
DT_HD float dt_dropout_apply(float x, uint64_t seed, uint64_t index, uint64_t threshold, float scale) {
  return (uint64_t)dt_hash_u32(seed, index) >= threshold ? x * scale : 0.0f;
}
