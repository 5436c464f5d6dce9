/* cuda_emu.h — CUDA's language and the part of its runtime API that dtrain
 * uses, for compiling the .cu files of kernels/cuda with g++ into the emulated device
 * (libdtrain_cuda_emu.so). The execution model lives in
 * libdtrain_cudart_emu.so (emu_device.cpp, emu_runtime.cpp): every CUDA
 * thread of a block is a fiber, so __syncthreads and warp shuffles really
 * wait for the other threads; streams are host threads that keep CUDA's
 * ordering. Reached through the shims in include/ (cuda_runtime.h,
 * library_types.h), so the .cu files compile unchanged.
 *
 * Shared memory: a block runs on one host thread at a time, so `__shared__`
 * is a thread_local static — one copy per running block. Unlike a GPU's, it
 * keeps its contents from the previous block on that thread (a kernel that
 * reads shared memory before writing it is wrong either way); dynamic shared
 * memory (DT_DYNAMIC_SHARED) is poisoned at every block start. */
#pragma once
#ifndef __cplusplus
#error "cuda_emu.h is C++: compile .cu files with g++ -x c++"
#endif
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>
#include <utility>

#define DT_CUDA_EMU 1
#define DT_EMU_API extern "C" __attribute__((visibility("default")))
/* Code of the emulator itself that the sanitizer build (DTRAIN_EMU_RACECHECK,
 * DTRAIN_EMU_MEMCHECK: every load and store of a kernel is checked) must not
 * see as a kernel's accesses: the emulator's own per-thread state is no
 * shared memory. Does nothing in the plain build. */
#ifdef DT_EMU_SANITIZE
#define DT_EMU_UNCHECKED __attribute__((no_sanitize_thread, noinline))
#else
#define DT_EMU_UNCHECKED
#endif

/* ---- qualifiers --------------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __constant__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static thread_local

/* ---- vector types and launch geometry ------------------------------------------------ */

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(8))) uint2 {
  unsigned x, y;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
struct __attribute__((aligned(8))) int2 {
  int x, y;
};
struct __attribute__((aligned(16))) int4 {
  int x, y, z, w;
};
struct __attribute__((aligned(8))) float2 {
  float x, y;
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(16))) double2 {
  double x, y;
};

/* Where the running CUDA thread is; the device sets it before resuming a thread. */
struct dt_emu_where {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
extern __attribute__((visibility("default"))) thread_local const dt_emu_where* dt_emu_current_;

#define threadIdx (dt_emu_current_->thread_idx)
#define blockIdx (dt_emu_current_->block_idx)
#define blockDim (dt_emu_current_->block_dim)
#define gridDim (dt_emu_current_->grid_dim)
static constexpr int warpSize = 32;

/* ---- block and warp synchronisation (emu_device.cpp) ---------------------------------- */

enum {
  DT_EMU_SHFL = 0,
  DT_EMU_SHFL_UP = 1,
  DT_EMU_SHFL_DOWN = 2,
  DT_EMU_SHFL_XOR = 3,
  DT_EMU_BALLOT = 4,
  DT_EMU_ANY = 5,
  DT_EMU_ALL = 6,
  DT_EMU_SYNCWARP = 7
};
enum { DT_EMU_BAR = 0, DT_EMU_BAR_COUNT = 1, DT_EMU_BAR_AND = 2, DT_EMU_BAR_OR = 3 };

/* A block barrier (kind DT_EMU_BAR*) reached at `site` ("file:line"); returns
 * the vote over the block. */
DT_EMU_API int dt_emu_barrier(int kind, int pred, const char* site);
/* A warp operation among the lanes of `mask`: `value` is this lane's
 * contribution; returns what this lane receives (a shuffled value or a vote). */
DT_EMU_API uint64_t dt_emu_warp(int kind, unsigned mask, uint64_t value, int arg, int width, const void* site);
/* The lanes of the calling thread's warp that exist and have not exited. */
DT_EMU_API unsigned dt_emu_activemask(void);
/* The running block's dynamic shared memory (the launch's smem bytes). */
DT_EMU_API void* dt_emu_dynamic_shared(void);

/* Barriers are macros so that each knows its place in the source: threads
 * of a block meeting different __syncthreads is an error the device names. */
#define DT_EMU_STR2_(x) #x
#define DT_EMU_STR_(x) DT_EMU_STR2_(x)
#define DT_EMU_HERE __FILE__ ":" DT_EMU_STR_(__LINE__)
#define __syncthreads() ((void)dt_emu_barrier(DT_EMU_BAR, 0, DT_EMU_HERE))
#define __syncthreads_count(p) dt_emu_barrier(DT_EMU_BAR_COUNT, (p), DT_EMU_HERE)
#define __syncthreads_and(p) dt_emu_barrier(DT_EMU_BAR_AND, (p), DT_EMU_HERE)
#define __syncthreads_or(p) dt_emu_barrier(DT_EMU_BAR_OR, (p), DT_EMU_HERE)

template <typename T>
inline T dt_emu_shfl_(int kind, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = dt_emu_warp(kind, mask, bits, arg, width, nullptr);
  T out;
  memcpy(&out, &bits, sizeof out);
  return out;
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return dt_emu_shfl_(DT_EMU_SHFL, mask, v, src, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return dt_emu_shfl_(DT_EMU_SHFL_UP, mask, v, (int)delta, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return dt_emu_shfl_(DT_EMU_SHFL_DOWN, mask, v, (int)delta, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return dt_emu_shfl_(DT_EMU_SHFL_XOR, mask, v, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int p) {
  return (unsigned)dt_emu_warp(DT_EMU_BALLOT, mask, p != 0, 0, 32, nullptr);
}
inline int __any_sync(unsigned mask, int p) { return (int)dt_emu_warp(DT_EMU_ANY, mask, p != 0, 0, 32, nullptr); }
inline int __all_sync(unsigned mask, int p) { return (int)dt_emu_warp(DT_EMU_ALL, mask, p != 0, 0, 32, nullptr); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { dt_emu_warp(DT_EMU_SYNCWARP, mask, 0, 0, 32, nullptr); }
inline unsigned __activemask() { return dt_emu_activemask(); }

/* Memory fences: blocks of one kernel and other streams run on other host threads. */
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T>
inline T __ldg(const T* p) { return *p; }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __clzll(unsigned long long x) { return x ? __builtin_clzll(x) : 64; }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __ffsll(unsigned long long x) { return __builtin_ffsll((long long)x); }

/* ---- atomics: real ones (other blocks and streams run on other host threads) ---------- */

template <typename T>
inline T dt_emu_atomic_update_(T* p, T (*f)(T, T), T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, f(old, v), true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename F>
inline F dt_emu_atomic_float_(F* p, F (*f)(F, F), F v) {
  using U = typename std::conditional<sizeof(F) == 4, uint32_t, uint64_t>::type;
  U* q = (U*)p;
  U old = __atomic_load_n(q, __ATOMIC_RELAXED), next;
  for (;;) {
    F a, r;
    memcpy(&a, &old, sizeof a);
    r = f(a, v);
    memcpy(&next, &r, sizeof next);
    if (__atomic_compare_exchange_n(q, &old, next, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return a;
  }
}
#define DT_EMU_INT_ATOMICS_(T)                                                                                   \
  inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }                           \
  inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }                           \
  inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }                         \
  inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }                           \
  inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }                             \
  inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }                           \
  inline T atomicMin(T* p, T v) {                                                                                \
    return dt_emu_atomic_update_<T>(p, [](T a, T b) { return b < a ? b : a; }, v);                               \
  }                                                                                                              \
  inline T atomicMax(T* p, T v) {                                                                                \
    return dt_emu_atomic_update_<T>(p, [](T a, T b) { return b > a ? b : a; }, v);                               \
  }                                                                                                              \
  inline T atomicCAS(T* p, T expected, T desired) {                                                              \
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);               \
    return expected;                                                                                             \
  }
DT_EMU_INT_ATOMICS_(int)
DT_EMU_INT_ATOMICS_(unsigned)
DT_EMU_INT_ATOMICS_(long long)
DT_EMU_INT_ATOMICS_(unsigned long long)
#undef DT_EMU_INT_ATOMICS_
inline float atomicAdd(float* p, float v) {
  return dt_emu_atomic_float_<float>(p, [](float a, float b) { return a + b; }, v);
}
inline double atomicAdd(double* p, double v) {
  return dt_emu_atomic_float_<double>(p, [](double a, double b) { return a + b; }, v);
}
inline float atomicExch(float* p, float v) {
  return dt_emu_atomic_float_<float>(p, [](float, float b) { return b; }, v);
}

/* ---- the runtime API (emu_runtime.cpp; values as CUDA's headers) ----------------------- */

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999
} cudaError_t;

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrMemoryPoolsSupported = 115
} cudaDeviceAttr;

typedef enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 } cudaMemPoolAttr;
typedef enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
typedef enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
} cudaMemoryType;

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int memoryBusWidth;
  int pciBusID;
  int pciDeviceID;
  int pciDomainID;
};

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUmemPoolHandle_st* cudaMemPool_t;
typedef void (*cudaHostFn_t)(void* user_data);

DT_EMU_API cudaError_t cudaGetLastError(void);
DT_EMU_API cudaError_t cudaPeekAtLastError(void);
DT_EMU_API const char* cudaGetErrorName(cudaError_t err);
DT_EMU_API const char* cudaGetErrorString(cudaError_t err);
DT_EMU_API cudaError_t cudaDriverGetVersion(int* version);
DT_EMU_API cudaError_t cudaRuntimeGetVersion(int* version);
DT_EMU_API cudaError_t cudaGetDeviceCount(int* count);
DT_EMU_API cudaError_t cudaGetDevice(int* device);
DT_EMU_API cudaError_t cudaSetDevice(int device);
DT_EMU_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
DT_EMU_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
DT_EMU_API cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device);
DT_EMU_API cudaError_t cudaDeviceSynchronize(void);
DT_EMU_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
DT_EMU_API cudaError_t cudaMalloc(void** ptr, size_t bytes);
DT_EMU_API cudaError_t cudaFree(void* ptr);
DT_EMU_API cudaError_t cudaMallocHost(void** ptr, size_t bytes);
DT_EMU_API cudaError_t cudaFreeHost(void* ptr);
DT_EMU_API cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
DT_EMU_API cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
DT_EMU_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
DT_EMU_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
DT_EMU_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr);
DT_EMU_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
DT_EMU_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                       cudaStream_t stream);
DT_EMU_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                         size_t height, cudaMemcpyKind kind, cudaStream_t stream);
DT_EMU_API cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
DT_EMU_API cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream);
DT_EMU_API cudaError_t cudaStreamCreate(cudaStream_t* stream);
DT_EMU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
DT_EMU_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
DT_EMU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
DT_EMU_API cudaError_t cudaStreamQuery(cudaStream_t stream);
DT_EMU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
DT_EMU_API cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device);
DT_EMU_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);
DT_EMU_API cudaError_t cudaEventCreate(cudaEvent_t* event);
DT_EMU_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
DT_EMU_API cudaError_t cudaEventDestroy(cudaEvent_t event);
DT_EMU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
DT_EMU_API cudaError_t cudaEventQuery(cudaEvent_t event);
DT_EMU_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
DT_EMU_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);

/* How many times the host has waited for the device (synchronisations, copies
 * into pageable memory, frees) in this process. */
DT_EMU_API uint64_t dt_emu_host_waits(void);

/* ---- kernel launch --------------------------------------------------------------------- */

/* Checks the geometry and queues `grid` blocks of `invoke(closure)` per CUDA
 * thread on `stream`; `destroy(closure)` runs once they are done. A bad
 * geometry sets cudaErrorInvalidConfiguration for cudaGetLastError, as a
 * GPU launch does. */
DT_EMU_API void dt_emu_launch(const char* kernel, const char* file, int line, const void* func, dim3 grid, dim3 block,
                              size_t smem, cudaStream_t stream, void (*invoke)(void*), void* closure,
                              void (*destroy)(void*));

namespace dt_emu {
template <typename F>
void invoke_(void* f) {
  (*(F*)f)();
}
template <typename F>
void destroy_(void* f) {
  delete (F*)f;
}
/* kernel<<<grid, block, smem, stream>>>(args...): the arguments are converted
 * to the kernel's parameter types now, as a launch captures them. */
template <typename... P, typename... A>
void launch(const char* name, const char* file, int line, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
            cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel launch needs one argument per parameter");
  auto run = [kernel, ... a = (std::decay_t<P>)std::forward<A>(args)]() { kernel(a...); };
  using F = decltype(run);
  dt_emu_launch(name, file, line, (const void*)kernel, grid, block, smem, stream, &invoke_<F>, new F(std::move(run)),
                &destroy_<F>);
}
}  // namespace dt_emu
