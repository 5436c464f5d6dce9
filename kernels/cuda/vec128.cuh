/* vec128.cuh — 128-bit loads and stores of float data of any dtype (4 f32,
 * or 8 bf16/f16 per access) for the memory-bound kernels, and the split of a
 * run of elements into a scalar head up to the first 16-byte boundary,
 * aligned 16-byte vectors, and a scalar tail. Values are widened to f32 on
 * load and rounded once on store (convert.h). */
#pragma once
#include "convert.h"
#include "cuda_internal.cuh"

/* Elements of dtype DT in 16 bytes. */
template <int DT>
struct dt_vec_ {
  static constexpr int N = DT == DT_F32 ? 4 : 8;
};

/* The 16 bytes at p (16-byte aligned) as N floats. */
template <int DT>
__device__ __forceinline__ void dt_vec_load_(float* out, const void* p) {
  uint4 raw = *(const uint4*)p;
  if (DT == DT_F32) {
    memcpy(out, &raw, 16);
  } else {
    uint16_t h[8];
    memcpy(h, &raw, 16);
    DT_UNROLL
    for (int i = 0; i < 8; i++) out[i] = DT == DT_BF16 ? dt_bf16_to_f32(h[i]) : dt_f16_to_f32(h[i]);
  }
}

/* N floats rounded into the 16 bytes at p (16-byte aligned). */
template <int DT>
__device__ __forceinline__ void dt_vec_store_(void* p, const float* in) {
  uint4 raw;
  if (DT == DT_F32) {
    memcpy(&raw, in, 16);
  } else {
    uint16_t h[8];
    DT_UNROLL
    for (int i = 0; i < 8; i++) h[i] = DT == DT_BF16 ? dt_f32_to_bf16(in[i]) : dt_f32_to_f16(in[i]);
    memcpy(&raw, h, 16);
  }
  *(uint4*)p = raw;
}

/* How a run of n elements of DT at p splits: `head` scalar elements up to the
 * first 16-byte boundary, `vecs` aligned vectors, the rest scalar. A run at
 * an address that is not a multiple of the element size (never the case for
 * dt_alloc memory) is all head. */
template <int DT>
struct dt_vec_split_ {
  int64_t head, vecs;
  __device__ __forceinline__ dt_vec_split_(const void* p, int64_t n) {
    constexpr int64_t es = DT == DT_F32 ? 4 : 2;
    uintptr_t a = (uintptr_t)p;
    if (a % es) {
      head = n;
      vecs = 0;
      return;
    }
    int64_t h = (int64_t)((16 - a % 16) % 16) / es;
    head = h < n ? h : n;
    vecs = (n - head) / dt_vec_<DT>::N;
  }
};
