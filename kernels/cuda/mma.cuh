/* mma.cuh — the tensor-core and asynchronous-copy instructions the attention
 * kernels use, as one small device API with two implementations: inline PTX
 * under nvcc (sm_80 and newer: the library is built for sm_80 and sm_90), and
 * an emulation for the emulated device (kernels/cuda_emu/emu_mma.h) that
 * keeps the exact per-lane fragment layout, so a kernel that puts an element
 * in the wrong lane computes a wrong product there too.
 *
 * dt_mma_16816_<DT>(d, a, b): d += a * b, one warp-collective
 *   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32.
 *   A is 16 x 16 (row-major), B is 16 x 8 (column-major), D is 16 x 8 f32.
 *   Lane l, g = l / 4, t = l % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16
 *   with floating point type"); a register holds two elements, the lower
 *   column (A) or row (B) in its low 16 bits:
 *     a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
 *     a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
 *     b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
 *     d[0..1] = D[g][2t, 2t+1]  d[2..3] = D[g+8][2t, 2t+1]
 * dt_mma_pack_<DT>(lo, hi): two f32 rounded (to nearest even) into one register.
 * dt_ex2_(x): 2^x by the special-function unit (ex2.approx, about 2 ulp;
 *   2^-inf = 0), the exponential of FlashAttention's softmax.
 * dt_cp_async16_(smem, gmem, n): 16 bytes global -> shared, asynchronously;
 *   only the first n (0 or 16) are read, the rest is zero (rows past the end).
 * dt_cp_async_commit_(): closes the group of copies issued so far.
 * dt_cp_async_wait_<N>(): waits until at most N committed groups are pending
 *   (then a __syncthreads makes the data visible to the block). */
#pragma once
#include "cuda_internal.cuh"

#ifdef DT_CUDA_EMU
#include "../cuda_emu/emu_mma.h"
#else

template <int DT>
__device__ __forceinline__ uint32_t dt_mma_pack_(float lo, float hi) {
  uint32_t r;
  if (DT == DT_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <int DT>
__device__ __forceinline__ void dt_mma_16816_(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if (DT == DT_BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ float dt_ex2_(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void dt_cp_async16_(void* smem, const void* gmem, int n) {
  uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(n) : "memory");
}

__device__ __forceinline__ void dt_cp_async_commit_() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void dt_cp_async_wait_() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif
