/* emu_sanitize_probe.cu — planted bugs and clean patterns for the emulated
 * device's sanitizers, compiled by tests/cuda/emu_sanitize_test.ts with the
 * sanitizer build's instrumentation (the flags of libdtrain_cuda_emu_sanitize.so)
 * and run once per scenario under DTRAIN_EMU_RACECHECK=1 or
 * DTRAIN_EMU_MEMCHECK=1. Test-only: these kernels are in no library. Each
 * scenario prints one line: "ok ..." when every launch succeeded, or
 * "launch failed: <the device's error text>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.cuh" /* DT_LAUNCH and DT_DYNAMIC_SHARED, as the library's kernels use them */

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      printf("launch failed: %s\n", cudaGetErrorString(e_));                                             \
      exit(0);                                                                                           \
    }                                                                                                    \
  } while (0)

/* ---- planted bugs ------------------------------------------------------------------------- */

/* Each thread writes its slot and reads its neighbour's with no __syncthreads between. */
__global__ void planted_race_missing_barrier(float* out) {
  __shared__ float slot[256];
  int t = threadIdx.x;
  slot[t] = (float)t;
  out[t] = slot[(t + 1) % blockDim.x];
}

/* Lanes of one warp exchange through shared memory with no __syncwarp (warp-synchronous code a
 * GPU since Volta does not keep in lockstep). */
__global__ void planted_race_missing_syncwarp(float* out) {
  __shared__ float lane_value[32];
  int t = threadIdx.x;
  lane_value[t] = (float)t;
  out[t] = lane_value[t ^ 1];
}

/* A block reduction that reuses its shared slot for the next sum without a barrier: thread 0
 * writes the next partial while others may still read the previous total. */
__global__ void planted_race_reused_slot(const float* in, float* out) {
  __shared__ float total;
  int t = threadIdx.x;
  if (t == 0) total = in[0];
  __syncthreads();
  float first = total;
  if (t == 0) total = in[1]; /* missing __syncthreads before this write */
  __syncthreads();
  out[t] = first + total;
}

/* Reads one element past the end of its input (the bound should be i < n). */
__global__ void planted_oob_read(const float* in, float* out, int n) {
  int i = threadIdx.x;
  if (i <= n) out[i % n] = in[i];
}

/* Writes one element before the start of its output. */
__global__ void planted_oob_write(float* out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i - 1] = 1.0f;
}

/* Dynamic shared memory indexed past the launch's size. */
__global__ void planted_oob_shared(float* out) {
  DT_DYNAMIC_SHARED(float, s);
  int t = threadIdx.x;
  s[t + 1] = (float)t;
  __syncthreads();
  out[t] = s[t];
}

/* ---- clean patterns (no finding expected) ------------------------------------------------- */

/* Tree sum with a barrier per level. */
__global__ void clean_block_sum(const float* in, float* out) {
  __shared__ float buf[256];
  int t = threadIdx.x;
  buf[t] = in[t];
  __syncthreads();
  for (int half = (int)blockDim.x / 2; half > 0; half >>= 1) {
    if (t < half) buf[t] += buf[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

/* The warp exchange, ordered by __syncwarp; then a shuffle sum and an atomic per warp. */
__global__ void clean_warp_exchange(float* out, float* total) {
  __shared__ float lane_value[64];
  int t = threadIdx.x;
  lane_value[t] = (float)t;
  __syncwarp();
  float v = lane_value[t ^ 1];
  __syncwarp();
  lane_value[t] = v * 2.0f; /* overwrites what a neighbour read: ordered by the __syncwarp */
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if ((t & 31) == 0) atomicAdd(total, v);
  out[t] = lane_value[t];
}

/* Every thread swaps its value into one word: the survivor depends on the order threads run. */
__global__ void order_dependent_exchange(int* last) { atomicExch(last, (int)threadIdx.x); }

/* ---- scenarios ---------------------------------------------------------------------------- */

static float* device_floats(int n, float value) {
  float* d = nullptr;
  CHECK(cudaMalloc((void**)&d, sizeof(float) * (size_t)n));
  float* h = (float*)malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++) h[i] = value + (float)i;
  CHECK(cudaMemcpy(d, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

int main(int argc, char** argv) {
  const char* s = argc > 1 ? argv[1] : "";
  float* a = device_floats(256, 1.0f);
  float* b = device_floats(256, 0.0f);
  if (!strcmp(s, "race-barrier")) {
    DT_LAUNCH(planted_race_missing_barrier, 2, 256, 0, 0, b);
  } else if (!strcmp(s, "race-syncwarp")) {
    DT_LAUNCH(planted_race_missing_syncwarp, 1, 32, 0, 0, b);
  } else if (!strcmp(s, "race-reused-slot")) {
    DT_LAUNCH(planted_race_reused_slot, 1, 64, 0, 0, a, b);
  } else if (!strcmp(s, "oob-read")) {
    float* small = device_floats(100, 0.0f);
    DT_LAUNCH(planted_oob_read, 1, 128, 0, 0, small, b, 100);
  } else if (!strcmp(s, "oob-write")) {
    DT_LAUNCH(planted_oob_write, 1, 64, 0, 0, b, 64);
  } else if (!strcmp(s, "oob-shared")) {
    DT_LAUNCH(planted_oob_shared, 1, 64, 64 * sizeof(float), 0, b);
  } else if (!strcmp(s, "clean")) {
    float* total = device_floats(1, 0.0f);
    CHECK(cudaMemset(total, 0, sizeof(float)));
    DT_LAUNCH(clean_block_sum, 3, 256, 0, 0, a, b);
    DT_LAUNCH(clean_warp_exchange, 2, 64, 0, 0, b, total);
    float t = 0;
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&t, total, sizeof t, cudaMemcpyDeviceToHost));
    printf("ok clean warp total %g\n", t);
    return 0;
  } else if (!strcmp(s, "order")) {
    int* last = nullptr;
    CHECK(cudaMalloc((void**)&last, sizeof(int)));
    DT_LAUNCH(order_dependent_exchange, 1, 256, 0, 0, last);
    int v = -1;
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&v, last, sizeof v, cudaMemcpyDeviceToHost));
    printf("ok order last %d\n", v);
    return 0;
  } else {
    printf("unknown scenario %s\n", s);
    return 2;
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  printf("ok %s\n", s);
  return 0;
}
