/* emu_mma_probe.cu — the emulated device's mma.m16n8k16 and cp.async
 * (kernels/cuda/mma.cuh, kernels/cuda_emu/emu_mma.h), compiled by
 * tests/cuda/emu_mma_test.ts with g++ against kernels/cuda_emu and run once
 * per scenario. Each prints one line the test checks.
 *
 *   mma-bf16, mma-f16   one warp loads random A (16 x 16), B (16 x 8) and C
 *                       into fragments by the PTX ISA's layout, runs
 *                       d = a * b + c, writes D back by the same layout; the
 *                       host compares with a plain matrix product:
 *                       "mma <dtype>: max error E"
 *   mma-wrong-layout    the same with B's fragment loaded row by row (the
 *                       layout of A's rows, a plausible mistake): must differ
 *   mma-partial-warp    a block of 16 threads runs mma.sync: the launch fails
 *   cp-async            copies issued and committed in two groups: before a
 *                       wait the destination is still poisoned, wait_group 1
 *                       lands the first group only, wait_group 0 the rest,
 *                       and a 0-byte source zero-fills:
 *                       "cp.async: before <hex> after1 <hex> <hex> after0 <hex> zero <hex>" */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.cuh"
#include "mma.cuh"

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      printf("FAILED %s: %s: %s\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_));                 \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

static uint32_t pair_(const uint16_t* m, int i0, int i1) { return (uint32_t)m[i0] | (uint32_t)m[i1] << 16; }

/* a: A row-major 16 x 16; b: B row-major 16 x 8 (k rows); c, d: 16 x 8 row-major f32. */
template <int DT>
__global__ void mma_k(const uint16_t* a, const uint16_t* b, const float* c, float* d, int wrong) {
  int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t af[4], bf[2];
  af[0] = pair_(a, g * 16 + 2 * t, g * 16 + 2 * t + 1);
  af[1] = pair_(a, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1);
  af[2] = pair_(a, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9);
  af[3] = pair_(a, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9);
  if (!wrong) {
    bf[0] = pair_(b, (2 * t) * 8 + g, (2 * t + 1) * 8 + g);
    bf[1] = pair_(b, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g);
  } else { /* k and n swapped within the 8 x 8 halves */
    bf[0] = pair_(b, g * 8 + 2 * t, g * 8 + 2 * t + 1);
    bf[1] = pair_(b, (g + 8) * 8 + 2 * t, (g + 8) * 8 + 2 * t + 1);
  }
  float acc[4];
  for (int i = 0; i < 4; i++) acc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  dt_mma_16816_<DT>(acc, af, bf);
  for (int i = 0; i < 4; i++) d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
}

static int mma_scenario(int dt, int wrong, unsigned threads) {
  uint16_t ha[256], hb[128];
  float fa[256], fb[128], hc[128], hd[128];
  srand(12345);
  auto rnd = []() { return (float)rand() / RAND_MAX * 4.0f - 2.0f; };
  for (int i = 0; i < 256; i++) {
    ha[i] = dt == DT_BF16 ? dt_f32_to_bf16(rnd()) : dt_f32_to_f16(rnd());
    fa[i] = dt == DT_BF16 ? dt_bf16_to_f32(ha[i]) : dt_f16_to_f32(ha[i]);
  }
  for (int i = 0; i < 128; i++) {
    hb[i] = dt == DT_BF16 ? dt_f32_to_bf16(rnd()) : dt_f32_to_f16(rnd());
    fb[i] = dt == DT_BF16 ? dt_bf16_to_f32(hb[i]) : dt_f16_to_f32(hb[i]);
    hc[i] = rnd();
  }
  uint16_t *da, *db;
  float *dc, *dd;
  CHECK(cudaMalloc((void**)&da, sizeof ha));
  CHECK(cudaMalloc((void**)&db, sizeof hb));
  CHECK(cudaMalloc((void**)&dc, sizeof hc));
  CHECK(cudaMalloc((void**)&dd, sizeof hd));
  CHECK(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, hc, sizeof hc, cudaMemcpyHostToDevice));
  if (dt == DT_BF16)
    DT_LAUNCH(mma_k<DT_BF16>, 1, threads, 0, (cudaStream_t)0, da, db, dc, dd, wrong);
  else
    DT_LAUNCH(mma_k<DT_F16>, 1, threads, 0, (cudaStream_t)0, da, db, dc, dd, wrong);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("launch failed: %s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
    return 0;
  }
  CHECK(cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost));
  double worst = 0.0;
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) {
      double want = hc[r * 8 + n];
      for (int k = 0; k < 16; k++) want += (double)fa[r * 16 + k] * (double)fb[k * 8 + n];
      double err = fabs(hd[r * 8 + n] - want) / (fabs(want) + 1.0);
      if (err > worst) worst = err;
    }
  printf("mma %s: max error %.3e\n", dt == DT_BF16 ? "bf16" : "f16", worst);
  return 0;
}

__global__ void cp_async_k(const uint32_t* src, uint32_t* out) {
  DT_DYNAMIC_SHARED(uint32_t, sm); /* 12 words, poisoned at block start */
  if (threadIdx.x == 0) {
    dt_cp_async16_(sm, src, 16);
    dt_cp_async_commit_();
    dt_cp_async16_(sm + 4, src + 4, 16);
    dt_cp_async16_(sm + 8, src, 0);
    dt_cp_async_commit_();
    out[0] = sm[0];
    dt_cp_async_wait_<1>();
    out[1] = sm[0];
    out[2] = sm[4];
    dt_cp_async_wait_<0>();
    out[3] = sm[4];
    out[4] = sm[8];
  }
}

static int cp_async_scenario() {
  uint32_t hs[8], ho[5];
  for (int i = 0; i < 8; i++) hs[i] = 0x11111111u * (i + 1);
  uint32_t *ds, *dout;
  CHECK(cudaMalloc((void**)&ds, sizeof hs));
  CHECK(cudaMalloc((void**)&dout, sizeof ho));
  CHECK(cudaMemcpy(ds, hs, sizeof hs, cudaMemcpyHostToDevice));
  DT_LAUNCH(cp_async_k, 1, 32, 48, (cudaStream_t)0, ds, dout);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(ho, dout, sizeof ho, cudaMemcpyDeviceToHost));
  printf("cp.async: before %08x after1 %08x %08x after0 %08x zero %08x\n", ho[0], ho[1], ho[2], ho[3], ho[4]);
  return 0;
}

int main(int argc, char** argv) {
  const char* s = argc > 1 ? argv[1] : "";
  if (!strcmp(s, "mma-bf16")) return mma_scenario(DT_BF16, 0, 32);
  if (!strcmp(s, "mma-f16")) return mma_scenario(DT_F16, 0, 32);
  if (!strcmp(s, "mma-wrong-layout")) return mma_scenario(DT_BF16, 1, 32);
  if (!strcmp(s, "mma-partial-warp")) return mma_scenario(DT_BF16, 0, 16);
  if (!strcmp(s, "cp-async")) return cp_async_scenario();
  printf("unknown scenario '%s'\n", s);
  return 2;
}
