/* index.h — the index arithmetic of the dimension-wise gathers, for tensors
 * viewed as (outer, D, inner) with J picks along D: where output element k of
 * dt_gather_dim (one index per element) and of dt_index_select (one index per
 * j) reads from. Their backwards add into the same positions. */
#pragma once
#include "dt_common.h"

/* Input offset of output element k = (o, j, i) of dt_gather_dim:
 * (o, idx[k], i). */
DT_HD int64_t dt_gather_dim_src(int64_t k, const int32_t* idx, int64_t D, int64_t J, int64_t inner) {
  int64_t i = k % inner, o = k / (J * inner);
  return (o * D + idx[k]) * inner + i;
}

/* Input offset of output element k = (o, j, i) of dt_index_select:
 * (o, idx[j], i). */
DT_HD int64_t dt_index_select_src(int64_t k, const int32_t* idx, int64_t D, int64_t J, int64_t inner) {
  int64_t i = k % inner, j = (k / inner) % J, o = k / (J * inner);
  return (o * D + idx[j]) * inner + i;
}
