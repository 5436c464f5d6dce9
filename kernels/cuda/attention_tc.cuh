/* attention_tc.cuh — causal/full attention on tensor cores (attention_tc.cu),
 * which dt_attention_fwd/bwd (attention.cu) call for bf16 and f16 inputs with
 * head dimensions up to 128; other calls keep attention.cu's f32 kernels.
 * Same arguments, outputs and log-sum-exp layout as those. */
#pragma once
#include "cuda_internal.cuh"

/* Whether the tensor-core kernels take a call of this dtype and head dimension. */
static inline int dt_attention_tc_takes_(int32_t dtype, int64_t D) {
  return (dtype == DT_BF16 || dtype == DT_F16) && D <= 128;
}

dt_status dt_attention_tc_fwd_(void* out, float* lse, const void* qkv, int32_t dtype, int64_t B, int64_t T, int64_t H,
                               int64_t D, int32_t causal, float scale, cudaStream_t s);

/* `delta` is scratch of B * H * T floats (rowsum(dO * O) per query row). */
dt_status dt_attention_tc_bwd_(void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                               const float* lse, int32_t dtype, int64_t B, int64_t T, int64_t H, int64_t D,
                               int32_t causal, float scale, cudaStream_t s);
