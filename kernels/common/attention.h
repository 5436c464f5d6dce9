/* attention.h — scaled dot-product self-attention without the T x T matrix
 * (flash attention), the arithmetic both kernel libraries share: the online
 * softmax of one query row over tiles of keys (running maximum m and sum l,
 * rescaled when m grows), the log-sum-exp saved for backward, and the
 * backward's dS = P (dP - delta) with delta = rowsum(dO * O). Tiling and the
 * order of the sums are the callers' (kernels/cpu/attention.c,
 * kernels/cuda/attention.cu); rows and keys are never longer than one tile. */
#pragma once
#include <math.h>
#include "dt_common.h"
#include "dt_math.h"

/* Largest head dimension either library takes (FlashAttention's limit too). */
#define DT_ATTENTION_MAX_D 256

/* Keys [0, end) that query rows [0, rows_end) can see: all T without the
 * causal mask, else up to the last row's own position. */
DT_HD int64_t dt_attention_key_end(int64_t rows_end, int64_t T, int32_t causal) {
  return causal && rows_end < T ? rows_end : T;
}

/* Whether query `row` sees key `key`. */
DT_HD int dt_attention_visible(int64_t row, int64_t key, int32_t causal) { return !causal || key <= row; }

/* exp(s - m) of a score against the row's running maximum; a masked score
 * (-inf) weighs exactly 0, also while m is still -inf. */
DT_HD float dt_attention_p_f(float s, float m) { return s == -INFINITY ? 0.0f : dt_expf(s - m); }

/* The factor that rescales a row's sum and output when its maximum moves
 * from m_old to m_new (0 while nothing was seen: m_old = -inf). */
DT_HD float dt_attention_rescale_f(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : dt_expf(m_old - m_new);
}

/* The row's log-sum-exp of its scaled scores, m + log(l), saved for backward
 * (l >= 1 once a key is visible: the maximum's own term is exp(0)). */
DT_HD float dt_attention_lse_f(float m, float l) { return m + (float)log((double)l); }

/* A probability recomputed in backward from the saved log-sum-exp. */
DT_HD float dt_attention_p_lse_f(float s, float lse) { return dt_expf(s - lse); }

/* The gradient of one scaled score: P (dP - delta), delta = rowsum(dO * O). */
DT_HD float dt_attention_ds_f(float p, float dp, float delta) { return p * (dp - delta); }
