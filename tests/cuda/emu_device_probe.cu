/* emu_device_probe.cu — scenarios that exercise the emulated CUDA device's
 * execution model and runtime, compiled by tests/cuda/emu_device_test.ts
 * with g++ against kernels/cuda_emu and run once per scenario (a failed
 * launch leaves the device's error sticky, as on a GPU). Each prints one line
 * that the test checks; the exit status is 0 unless a CUDA call failed that
 * the scenario expected to succeed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <atomic>
#include "cuda_internal.cuh" /* DT_LAUNCH and DT_DYNAMIC_SHARED, as the library's kernels use them */

#define LAUNCH DT_LAUNCH

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      printf("FAILED %s: %s: %s\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_));                 \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

/* ---- kernels ------------------------------------------------------------------------------- */

/* Sum of v over a block of any size through shared memory, tree order. */
__global__ void block_sum_k(const float* in, float* out, int n) {
  __shared__ float buf[1024];
  int t = threadIdx.x;
  buf[t] = t < n ? in[t] : 0.0f;
  __syncthreads();
  for (int half = 512; half > 0; half >>= 1) {
    if (t < half && t + half < (int)blockDim.x) buf[t] += buf[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

__global__ void votes_k(int* out) {
  int t = threadIdx.x;
  out[0] = __syncthreads_count(t % 3 == 0);
  out[1] = __syncthreads_and(t < 1000);
  out[2] = __syncthreads_or(t == 77);
  out[3] = __syncthreads_and(t >= 0);
}

/* Per warp: a shfl_down sum, an xor butterfly max, an inclusive shfl_up scan,
 * a broadcast and a ballot, written per thread. */
__global__ void warp_k(int* sums, int* maxes, int* scans, int* bcast, unsigned* ballots, int* seg) {
  int t = threadIdx.x, lane = t & 31;
  int v = t * 7 % 13;
  int s = v;
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  int m = v;
  for (int off = 16; off > 0; off >>= 1) {
    int o = __shfl_xor_sync(0xffffffffu, m, off);
    m = o > m ? o : m;
  }
  int scan = v;
  for (int off = 1; off < 32; off <<= 1) {
    int o = __shfl_up_sync(0xffffffffu, scan, off);
    if (lane >= off) scan += o;
  }
  sums[t] = s;
  maxes[t] = m;
  scans[t] = scan;
  bcast[t] = __shfl_sync(0xffffffffu, v, 5);
  ballots[t] = __ballot_sync(0xffffffffu, v > 6);
  seg[t] = __shfl_down_sync(0xffffffffu, v, 4, 8); /* within segments of 8 lanes */
}

/* A block of 40 threads: warp 1 has 8 lanes; its votes use the mask of its lanes. */
__global__ void partial_warp_k(unsigned* out) {
  int t = threadIdx.x;
  unsigned mask = __activemask();
  unsigned b = __ballot_sync(mask, t % 2 == 0);
  if ((t & 31) == 0) {
    out[(t >> 5) * 2] = mask;
    out[(t >> 5) * 2 + 1] = b;
  }
}

/* Block 0 reports what its dynamic shared memory held at the start (the
 * poison), block 1 the sum of n ones written into it. */
__global__ void dynamic_smem_k(float* out, int n, int report) {
  DT_DYNAMIC_SHARED(float, buf);
  int t = threadIdx.x;
  float first = buf[0];
  __syncthreads();
  for (int i = t; i < n; i += blockDim.x) buf[i] = 1.0f;
  __syncthreads();
  if (report && t == 0) {
    float s = 0;
    for (int i = 0; i < n; i++) s += buf[i];
    out[blockIdx.x] = blockIdx.x == 0 ? first : s;
  }
}

/* ---- rule breakers ---------------------------------------------------------------------------- */

__global__ void early_exit_then_barrier_k(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void two_barriers_k(int* out) {
  if (threadIdx.x % 2) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

__global__ void mask_excludes_caller_k(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 1); /* lanes 16-31 are left out */
}

__global__ void mask_names_missing_lanes_k(int* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1); /* blockDim 40: warp 1 has 8 lanes */
}

__global__ void deadlock_k(int* out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
  }
}

__global__ void reads_outside_mask_k(int* out) {
  /* lanes 0-15 shuffle among themselves, but lane 15 reads lane 16 */
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, (int)threadIdx.x, 1);
}

/* ---- atomics and block order -------------------------------------------------------------------- */

__global__ void atomics_k(float* fsum, unsigned long long* umin, int* order, int* next) {
  atomicAdd(fsum, 1.0f);
  atomicMin(umin, (unsigned long long)(blockIdx.x * blockDim.x + threadIdx.x) + 5);
  if (threadIdx.x == 0) order[atomicAdd(next, 1)] = blockIdx.x;
}

__global__ void write_k(int* p, int v) { *p = v; }

/* ---- scenarios ----------------------------------------------------------------------------------- */

static void print_sticky(const char* what) {
  cudaError_t e = cudaDeviceSynchronize();
  printf("%s: %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int scenario(const char* name) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (!strcmp(name, "barrier")) {
    const int n = 1000;
    float h[1024], *d, *o;
    for (int i = 0; i < n; i++) h[i] = (float)(i % 17);
    CHECK(cudaMalloc((void**)&d, sizeof h));
    CHECK(cudaMalloc((void**)&o, 3 * sizeof(float)));
    CHECK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, s));
    LAUNCH(block_sum_k, 3, 1024, 0, s, d, o, n);
    CHECK(cudaGetLastError());
    float r[3];
    CHECK(cudaMemcpyAsync(r, o, sizeof r, cudaMemcpyDeviceToHost, s));
    float want = 0;
    for (int i = 0; i < n; i++) want += h[i];
    printf("barrier sums %g %g %g want %g\n", r[0], r[1], r[2], want);
    return 0;
  }
  if (!strcmp(name, "votes")) {
    int* d;
    CHECK(cudaMalloc((void**)&d, 4 * sizeof(int)));
    LAUNCH(votes_k, 1, 1000, 0, s, d);
    int r[4];
    CHECK(cudaMemcpyAsync(r, d, sizeof r, cudaMemcpyDeviceToHost, s));
    printf("votes %d %d %d %d\n", r[0], r[1], r[2], r[3]);
    return 0;
  }
  if (!strcmp(name, "warps")) {
    const int n = 64;
    int *d;
    CHECK(cudaMalloc((void**)&d, 6 * n * sizeof(int)));
    LAUNCH(warp_k, 1, n, 0, s, d, d + n, d + 2 * n, d + 3 * n, (unsigned*)(d + 4 * n), d + 5 * n);
    int r[6 * n];
    CHECK(cudaMemcpyAsync(r, d, sizeof r, cudaMemcpyDeviceToHost, s));
    int bad = 0;
    for (int w = 0; w < 2; w++) {
      int v[32], sum = 0, mx = 0, run = 0;
      unsigned ballot = 0;
      for (int l = 0; l < 32; l++) {
        v[l] = (w * 32 + l) * 7 % 13;
        sum += v[l];
        mx = v[l] > mx ? v[l] : mx;
        if (v[l] > 6) ballot |= 1u << l;
      }
      for (int l = 0; l < 32; l++) {
        int t = w * 32 + l;
        run += v[l];
        int seg_src = (l & 7) + 4 < 8 ? l + 4 : l;
        bad += (l == 0 && r[t] != sum) + (r[n + t] != mx) + (r[2 * n + t] != run) + (r[3 * n + t] != v[5]) +
               ((unsigned)r[4 * n + t] != ballot) + (r[5 * n + t] != v[seg_src]);
      }
    }
    printf("warps mismatches %d\n", bad);
    return 0;
  }
  if (!strcmp(name, "partial-warp")) {
    unsigned* d;
    CHECK(cudaMalloc((void**)&d, 4 * sizeof(unsigned)));
    LAUNCH(partial_warp_k, 1, 40, 0, s, d);
    unsigned r[4];
    CHECK(cudaMemcpyAsync(r, d, sizeof r, cudaMemcpyDeviceToHost, s));
    printf("partial-warp %08x %08x %08x %08x\n", r[0], r[1], r[2], r[3]);
    return 0;
  }
  if (!strcmp(name, "dynamic-smem")) {
    float* d;
    CHECK(cudaMalloc((void**)&d, 2 * sizeof(float)));
    LAUNCH(dynamic_smem_k, 2, 64, 1024 * sizeof(float), s, d, 1024, 1);
    CHECK(cudaGetLastError());
    float r[2];
    CHECK(cudaMemcpyAsync(r, d, sizeof r, cudaMemcpyDeviceToHost, s));
    LAUNCH(dynamic_smem_k, 1, 64, 64 << 10, s, d, 16384, 0);
    cudaError_t without = cudaGetLastError();
    CHECK(cudaFuncSetAttribute((const void*)dynamic_smem_k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
    LAUNCH(dynamic_smem_k, 1, 64, 64 << 10, s, d, 16384, 0);
    cudaError_t with = cudaGetLastError();
    cudaError_t over = cudaFuncSetAttribute((const void*)dynamic_smem_k,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10);
    CHECK(cudaStreamSynchronize(s));
    printf("dynamic-smem poisoned %g sum %g; 64 KB without opt-in: %s, with: %s; 228 KB opt-in: %s\n", r[0], r[1],
           cudaGetErrorName(without), cudaGetErrorName(with), cudaGetErrorName(over));
    return 0;
  }
  if (!strcmp(name, "geometry")) {
    int* d;
    CHECK(cudaMalloc((void**)&d, 64));
    LAUNCH(write_k, 1, 1025, 0, s, d, 1);
    cudaError_t big = cudaGetLastError();
    const char* text = cudaGetErrorString(big);
    LAUNCH(write_k, dim3(1, 65536), 32, 0, s, d, 1);
    cudaError_t tall = cudaGetLastError();
    LAUNCH(write_k, dim3(1, 1, 1), dim3(8, 8, 65), 0, s, d, 1);
    cudaError_t deep = cudaGetLastError();
    LAUNCH(write_k, 0, 32, 0, s, d, 1);
    cudaError_t empty = cudaGetLastError();
    printf("geometry %s %s %s %s | %s\n", cudaGetErrorName(big), cudaGetErrorName(tall), cudaGetErrorName(deep),
           cudaGetErrorName(empty), text);
    return 0;
  }
  int* d;
  CHECK(cudaMalloc((void**)&d, 64 * sizeof(int)));
  if (!strcmp(name, "early-exit")) {
    LAUNCH(early_exit_then_barrier_k, 1, 64, 0, s, d);
  } else if (!strcmp(name, "two-barriers")) {
    LAUNCH(two_barriers_k, 1, 64, 0, s, d);
  } else if (!strcmp(name, "mask-excludes-caller")) {
    LAUNCH(mask_excludes_caller_k, 1, 32, 0, s, d);
  } else if (!strcmp(name, "mask-missing-lanes")) {
    LAUNCH(mask_names_missing_lanes_k, 1, 40, 0, s, d);
  } else if (!strcmp(name, "deadlock")) {
    LAUNCH(deadlock_k, 1, 32, 0, s, d);
  } else if (!strcmp(name, "outside-mask")) {
    LAUNCH(reads_outside_mask_k, 1, 32, 0, s, d);
  } else {
    printf("unknown scenario %s\n", name);
    return 2;
  }
  /* the launch itself is fine (the kernel breaks the rules while it runs), so
   * what the synchronisation reports is the launch failure, not a bad geometry */
  print_sticky(name);
  void* p;
  printf("after: cudaMalloc %s\n", cudaGetErrorName(cudaMalloc(&p, 16)));
  return 0;
}

/* Memory, copies, streams, events and devices. */
static int runtime_scenario(const char* name) {
  if (!strcmp(name, "memory")) {
    unsigned char* d;
    CHECK(cudaMalloc((void**)&d, 100));
    unsigned char h[100];
    CHECK(cudaMemcpy(h, d, 100, cudaMemcpyDeviceToHost));
    int poisoned = 1;
    for (int i = 0; i < 100; i++) poisoned &= h[i] == 0xff;
    cudaError_t wrong_dir = cudaMemcpy(h, d, 100, cudaMemcpyHostToDevice); /* dst is host memory */
    cudaError_t past_end = cudaMemcpy(d + 50, h, 51, cudaMemcpyHostToDevice);
    char past_text[256]; /* the emulator's detail lives until the next failure */
    snprintf(past_text, sizeof past_text, "%s", cudaGetErrorString(past_end));
    cudaError_t unknown_free = cudaFree(h);
    cudaError_t double_free = (cudaFree(d), cudaFree(d));
    size_t free_b, total_b;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    void* huge;
    cudaError_t oom = cudaMalloc(&huge, total_b + 1);
    printf("memory poisoned %d; wrong direction %s; past the end %s (%s); free of host memory %s; double free %s; "
           "too much %s\n",
           poisoned, cudaGetErrorName(wrong_dir), cudaGetErrorName(past_end), past_text,
           cudaGetErrorName(unknown_free), cudaGetErrorName(double_free), cudaGetErrorName(oom));
    return 0;
  }
  if (!strcmp(name, "ordering")) {
    /* stream a is held by a host function until the host releases it; stream b
     * reads what a writes, once without and once with cudaStreamWaitEvent */
    static std::atomic<int> release{0};
    cudaStream_t a, b;
    cudaEvent_t ev;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    int *x, *y1, *y2;
    CHECK(cudaMalloc((void**)&x, 4));
    CHECK(cudaMalloc((void**)&y1, 4));
    CHECK(cudaMalloc((void**)&y2, 4));
    CHECK(cudaMemsetAsync(x, 0, 4, a));
    CHECK(cudaStreamSynchronize(a));
    CHECK(cudaLaunchHostFunc(
        a, [](void*) { while (!release.load()) sched_yield(); }, nullptr));
    LAUNCH(write_k, 1, 1, 0, a, x, 42);
    CHECK(cudaEventRecord(ev, a));
    CHECK(cudaMemcpyAsync(y1, x, 4, cudaMemcpyDeviceToDevice, b)); /* no wait: runs now */
    CHECK(cudaStreamSynchronize(b));
    CHECK(cudaStreamWaitEvent(b, ev, 0));
    CHECK(cudaMemcpyAsync(y2, x, 4, cudaMemcpyDeviceToDevice, b));
    cudaError_t before = cudaEventQuery(ev);
    cudaError_t b_before = cudaStreamQuery(b);
    release.store(1);
    CHECK(cudaStreamSynchronize(b));
    cudaError_t after = cudaEventQuery(ev);
    int r1, r2;
    CHECK(cudaMemcpy(&r1, y1, 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&r2, y2, 4, cudaMemcpyDeviceToHost));
    printf("ordering without wait %d, with wait %d; event before release %s, stream b %s; after %s\n", r1, r2,
           cudaGetErrorName(before), cudaGetErrorName(b_before), cudaGetErrorName(after));
    return 0;
  }
  if (!strcmp(name, "staging")) {
    /* a pageable source may be reused as soon as cudaMemcpyAsync returns */
    static std::atomic<int> release{0};
    cudaStream_t a;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    int *d, h = 7, got;
    CHECK(cudaMalloc((void**)&d, 4));
    CHECK(cudaLaunchHostFunc(
        a, [](void*) { while (!release.load()) sched_yield(); }, nullptr));
    CHECK(cudaMemcpyAsync(d, &h, 4, cudaMemcpyHostToDevice, a));
    h = 8;
    release.store(1);
    CHECK(cudaMemcpyAsync(&got, d, 4, cudaMemcpyDeviceToHost, a)); /* into pageable memory: waits */
    printf("staging %d\n", got);
    return 0;
  }
  if (!strcmp(name, "atomics")) {
    cudaStream_t a;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    float* f;
    unsigned long long* u;
    int *order, *next;
    CHECK(cudaMalloc((void**)&f, 4));
    CHECK(cudaMalloc((void**)&u, 8));
    CHECK(cudaMalloc((void**)&order, 64 * 4));
    CHECK(cudaMalloc((void**)&next, 4));
    CHECK(cudaMemsetAsync(f, 0, 4, a));
    CHECK(cudaMemsetAsync(next, 0, 4, a));
    LAUNCH(atomics_k, 8, 96, 0, a, f, u, order, next); /* u starts as 0xff... (poison) */
    float rf;
    unsigned long long ru;
    int ro[8];
    CHECK(cudaMemcpyAsync(&rf, f, 4, cudaMemcpyDeviceToHost, a));
    CHECK(cudaMemcpyAsync(&ru, u, 8, cudaMemcpyDeviceToHost, a));
    CHECK(cudaMemcpyAsync(ro, order, sizeof ro, cudaMemcpyDeviceToHost, a));
    printf("atomics sum %g min %llu order", rf, ru);
    for (int i = 0; i < 8; i++) printf(" %d", ro[i]);
    printf("\n");
    return 0;
  }
  if (!strcmp(name, "devices")) {
    int n, here, there = -1;
    CHECK(cudaGetDeviceCount(&n));
    CHECK(cudaSetDevice(n - 1));
    CHECK(cudaGetDevice(&here));
    pthread_t t;
    pthread_create(
        &t, nullptr, [](void* out) -> void* {
          cudaGetDevice((int*)out);
          return nullptr;
        },
        &there);
    pthread_join(t, nullptr);
    char bus[32];
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, n - 1));
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, n - 1));
    /* a stream of this device used while another device is current */
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* d;
    CHECK(cudaMalloc((void**)&d, 4));
    CHECK(cudaSetDevice(0));
    LAUNCH(write_k, 1, 1, 0, s, d, 1);
    cudaError_t cross = cudaGetLastError();
    printf("devices %d; this thread %d, a new thread %d; bus %s; %s, %d SMs; launch on another device's stream %s\n",
           n, here, there, bus, p.name, p.multiProcessorCount, cudaGetErrorName(cross));
    return 0;
  }
  if (!strcmp(name, "thread-device")) {
    /* device 1's event, stream and memory, touched from a thread that never set a device (0) */
    static cudaEvent_t e;
    static cudaStream_t s;
    static int* d;
    CHECK(cudaSetDevice(1));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CHECK(cudaMalloc((void**)&d, 4));
    CHECK(cudaEventRecord(e, s));
    /* complete before the threads ask: a query before the stream's worker reached the record
       would answer "not ready", a right answer but not the one this scenario is about */
    CHECK(cudaEventSynchronize(e));
    static char text[3][400];
    static int set_first = 0;
    for (set_first = 0; set_first < 2; set_first++) {
      pthread_t t;
      pthread_create(
          &t, nullptr, [](void*) -> void* {
            if (set_first) cudaSetDevice(1);
            int h = 0;
            cudaError_t q = cudaEventQuery(e);
            snprintf(text[0], sizeof text[0], "%s", q ? cudaGetErrorString(q) : "ok");
            cudaError_t c = cudaMemcpyAsync(&h, d, 4, cudaMemcpyDeviceToHost, s);
            snprintf(text[1], sizeof text[1], "%s", c ? cudaGetErrorString(c) : "ok");
            cudaError_t m = cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost); /* the thread's own stream */
            snprintf(text[2], sizeof text[2], "%s", m ? cudaGetErrorString(m) : "ok");
            return nullptr;
          },
          nullptr);
      pthread_join(t, nullptr);
      printf("%s: query %s; copy on its stream %s; copy of its memory %s\n",
             set_first ? "device set first" : "device not set", text[0], text[1], text[2]);
    }
    return 0;
  }
  return scenario(name);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: emu_device_probe <scenario>\n");
    return 2;
  }
  return runtime_scenario(argv[1]);
}
