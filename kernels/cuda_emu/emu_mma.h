/* emu_mma.h — the emulated device's tensor-core MMA and asynchronous copies,
 * the API of kernels/cuda/mma.cuh (which includes this file under
 * DT_CUDA_EMU; the fragment layout is documented there).
 *
 * mma.sync is warp-collective: every lane puts its A and B registers in its
 * warp's slots, the warp meets at __syncwarp (all 32 lanes must be there, as
 * the instruction requires; the emulator fails the launch otherwise), each
 * lane computes its own four outputs from the operands the layout spreads
 * over the other lanes, and the warp meets again before the slots can be
 * reused. The slots are per block (thread_local, like __shared__: a block's
 * fibers share one host thread). Rounding: the sixteen products are exact
 * (bf16 x bf16 and f16 x f16 fit in a double), summed in double in k order,
 * the accumulator added, one rounding to f32 — within the tensor core's own
 * (unspecified order, at least f32) accumulation error of the real thing.
 *
 * cp.async is deferred, not synchronous: a copy is recorded when issued,
 * grouped at commit, and performed when a wait lets its group complete, so a
 * kernel that reads a tile before waiting for it reads stale or poisoned
 * shared memory, as it could on a GPU. A kernel waits for all of its groups
 * before it exits (the attention kernels end each tile with wait_group 0). */
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <vector>

namespace dt_emu_mma {

/* The running CUDA thread's index in its block, and its warp and lane. */
inline unsigned linear_thread_() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

struct Operands {
  uint32_t a[4];
  uint32_t b[2];
};

/* The operand slots of the calling thread's warp. */
DT_EMU_UNCHECKED inline Operands* warp_slots_() {
  static thread_local Operands slots[32][32]; /* 1024 threads: 32 warps of 32 lanes */
  return slots[linear_thread_() / 32];
}

template <int DT>
inline float element_(uint32_t reg, int high) {
  uint16_t h = (uint16_t)(high ? reg >> 16 : reg & 0xffffu);
  return DT == DT_BF16 ? dt_bf16_to_f32(h) : dt_f16_to_f32(h);
}

/* A[r][k] of the warp's A fragments. */
template <int DT>
inline float a_at_(const Operands* w, int r, int k) {
  int lane = (r % 8) * 4 + (k % 8) / 2;
  int reg = (r >= 8) + 2 * (k >= 8);
  return element_<DT>(w[lane].a[reg], k % 2);
}

/* B[k][n] of the warp's B fragments. */
template <int DT>
inline float b_at_(const Operands* w, int k, int n) {
  int lane = n * 4 + (k % 8) / 2;
  return element_<DT>(w[lane].b[k >= 8], k % 2);
}

/* One pending asynchronous copy. */
struct Copy {
  void* dst;
  const void* src;
  int n;
};

/* The asynchronous copies of one CUDA thread: issued but not yet committed,
 * and the committed groups, oldest first. */
struct CopyState {
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> groups;
};

/* (on the heap, and kept for the host thread's life: its block of thread-locals holds the `__shared__`
 * variables, which racecheck watches, and this is no memory of the kernel's) */
DT_EMU_UNCHECKED inline CopyState& copy_state_() {
  static thread_local std::vector<CopyState>* states = new std::vector<CopyState>(1024);
  return (*states)[linear_thread_()];
}

}  // namespace dt_emu_mma

template <int DT>
inline uint32_t dt_mma_pack_(float lo, float hi) {
  if (DT == DT_BF16) return (uint32_t)dt_f32_to_bf16(lo) | (uint32_t)dt_f32_to_bf16(hi) << 16;
  return (uint32_t)dt_f32_to_f16(lo) | (uint32_t)dt_f32_to_f16(hi) << 16;
}

template <int DT>
inline void dt_mma_16816_(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(DT == DT_BF16 || DT == DT_F16, "mma.m16n8k16 takes bf16 or f16 operands");
  using namespace dt_emu_mma;
  Operands* w = warp_slots_();
  const int lane = (int)(linear_thread_() % 32), g = lane / 4, t = lane % 4;
  memcpy(w[lane].a, a, sizeof w[lane].a);
  memcpy(w[lane].b, b, sizeof w[lane].b);
  __syncwarp(0xffffffffu); /* every lane's operands are in */
  float out[4];
  for (int i = 0; i < 4; i++) {
    int r = g + 8 * (i / 2), n = 2 * t + i % 2;
    double acc = 0.0;
    for (int k = 0; k < 16; k++) acc += (double)a_at_<DT>(w, r, k) * (double)b_at_<DT>(w, k, n);
    out[i] = (float)(acc + (double)d[i]);
  }
  __syncwarp(0xffffffffu); /* every lane has read them: the slots may be refilled */
  memcpy(d, out, sizeof out);
}

/* 2^x, correctly rounded (the GPU's ex2.approx is within 2 ulp of it). */
inline float dt_ex2_(float x) { return (float)exp2((double)x); }

inline void dt_cp_async16_(void* smem, const void* gmem, int n) {
  dt_emu_mma::copy_state_().open.push_back({smem, gmem, n});
}

inline void dt_cp_async_commit_() {
  dt_emu_mma::CopyState& s = dt_emu_mma::copy_state_();
  s.groups.push_back(std::move(s.open));
  s.open.clear();
}

template <int N>
inline void dt_cp_async_wait_() {
  dt_emu_mma::CopyState& s = dt_emu_mma::copy_state_();
  size_t done = s.groups.size() > (size_t)N ? s.groups.size() - N : 0;
  for (size_t gi = 0; gi < done; gi++) {
    for (const dt_emu_mma::Copy& c : s.groups[gi]) {
      memset(c.dst, 0, 16);
      if (c.n > 0) memcpy(c.dst, c.src, (size_t)c.n);
    }
  }
  s.groups.erase(s.groups.begin(), s.groups.begin() + (long)done);
}
