/* attention_internal.h — what attention.c hands the bf16 heads of
 * attention_bf16_avx512.c: one call's arguments, and the per-head entry
 * points (call only where dt_gemm_bf16_dot_available_()). Not exported. */
#pragma once
#include <stdint.h>

typedef struct {
  void* out;       /* fwd: (B, T, H*D); bwd: dqkv (B, T, 3*H*D); bf16 */
  float* lse;      /* (B, H, T) */
  const void* qkv; /* (B, T, 3*H*D) */
  const void* dout;
  const void* fwd_out;
  int32_t causal;
  int64_t T, H, D;
  float scale;
} dt_att_args_;

/* Head bh (= batch * H + head) forward / backward; *failed set (atomically)
 * when the scratch cannot be allocated. */
void dt_att_bf16_fwd_head_(const dt_att_args_* c, int64_t bh, int* failed);
void dt_att_bf16_bwd_head_(const dt_att_args_* c, int64_t bh, int* failed);
