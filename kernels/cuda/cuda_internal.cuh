/* cuda_internal.cuh — what the CUDA kernel files share: the check macros
 * that *return* a status (never exit or print), the stream a call runs on,
 * launch geometry, block reductions and stream-ordered scratch memory. The
 * error text and argument checks are kernels/common's (dt_error.h,
 * dt_checks.h), shared with the CPU library. Not part of the exported ABI. */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include "dt_checks.h"
#include "dt_common.h"
#include "dt_error.h"
#include "dt_math.h"
#include "reduce.h"

/* ---- error text ------------------------------------------------------------------ */

/* Records "<what> failed: <cudaGetErrorName>: <cudaGetErrorString> (file:line)"
 * and returns DT_ERR_CUDA (DT_ERR_ALLOC for an out-of-memory error). */
dt_status dt_cuda_fail_(cudaError_t err, const char* what, const char* file, int line);

/* Counts the device work this library queues (dt_cuda_work_count): kind 0 a
 * kernel launch, 1 a cuBLASLt matmul, 2 a memset or device copy. runtime.cu
 * defines it; this weak no-op serves programs that use the header without
 * the library (tests/cuda/emu_device_probe.cu). */
void dt_cuda_count_work_(int kind);
#ifndef DT_CUDA_RUNTIME_UNIT
__attribute__((weak)) void dt_cuda_count_work_(int kind) { (void)kind; }
#endif

/* Every CUDA runtime call goes through this: on failure it returns from the
 * enclosing function with the runtime's own error text. */
#define DT_CHECK_CUDA(call)                                                   \
  do {                                                                        \
    cudaError_t dt_err_ = (call);                                             \
    if (dt_err_ != cudaSuccess) return dt_cuda_fail_(dt_err_, #call, __FILE__, __LINE__); \
  } while (0)

/* DT_CHECK_CUDA of a memset or copy queued on the device, counted as device
 * work (dt_cuda_work_count). */
#define DT_CHECK_CUDA_WORK(call)   \
  do {                             \
    dt_cuda_count_work_(2);        \
    DT_CHECK_CUDA(call);           \
  } while (0)

/* Like DT_CHECK_CUDA, but `allowed` is an answer rather than an error (e.g.
 * cudaErrorNotReady from a query); the call's result is left in *result. */
#define DT_CHECK_CUDA_ALLOW(call, allowed, result)                            \
  do {                                                                        \
    cudaError_t dt_err_ = (call);                                             \
    *(result) = dt_err_;                                                      \
    if (dt_err_ != cudaSuccess && dt_err_ != (allowed))                       \
      return dt_cuda_fail_(dt_err_, #call, __FILE__, __LINE__);               \
  } while (0)

/* After every kernel launch: a launch-configuration error is reported at
 * once; with DTRAIN_CUDA_SYNC=1 the stream is also synchronised so that an
 * error inside the kernel is reported by the call that launched it. */
dt_status dt_cuda_after_launch_(cudaStream_t stream, const char* kernel, const char* file, int line);
#define DT_CHECK_LAUNCH(stream, kernel) DT_TRY_(dt_cuda_after_launch_((stream), (kernel), __FILE__, __LINE__))

/* ---- streams and device ------------------------------------------------------------ */

/* The stream a kernel call runs on: `stream` itself, or the library's
 * compute stream when it is NULL (created on first use). */
/* Makes the process's device current on the calling host thread (runtime.cu); dt_cuda_stream_
 * calls it, and so does every entry point that touches the device without a stream. */
dt_status dt_bind_thread_(void);
dt_status dt_cuda_stream_(void* stream, cudaStream_t* out);

/* Number of multiprocessors of the current device (cached; 1 before any device). */
int dt_cuda_sm_count_(void);

/* ---- kernel launches ---------------------------------------------------------------
 * Every kernel is launched through DT_LAUNCH, so that the same source builds
 * for the GPU (nvcc) and for the emulated device (g++ and
 * kernels/cuda_emu/cuda_emu.h, where `<<<...>>>` is not C++). A launch is
 * asynchronous and is followed by DT_CHECK_LAUNCH. DT_DYNAMIC_SHARED declares
 * the launch's dynamic shared memory (its smem bytes) as an array `name` of T. */
#ifdef DT_CUDA_EMU
#define DT_LAUNCH(kernel, grid, block, smem, stream, ...) \
  (dt_cuda_count_work_(0),                                \
   dt_emu::launch(#kernel, __FILE__, __LINE__, kernel, (grid), (block), (smem), (stream), __VA_ARGS__))
#define DT_DYNAMIC_SHARED(T, name) T* const name = (T*)dt_emu_dynamic_shared()
#else
#define DT_LAUNCH(kernel, grid, block, smem, stream, ...) (dt_cuda_count_work_(0), kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__))
#define DT_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif


/* Full unrolling of a loop with a constant trip count, so that the arrays it
 * indexes stay in registers (nvcc; the emulated device's g++ ignores it). */
#ifdef __CUDACC__
#define DT_UNROLL _Pragma("unroll")
#else
#define DT_UNROLL
#endif

/* ---- launch geometry --------------------------------------------------------------- */

#define DT_BLOCK 256

/* Blocks for a grid-stride loop over n items: enough to fill the device,
 * never more than needed, at least 1. */
static inline unsigned dt_grid_for_(int64_t n, int block) {
  int64_t want = (n + block - 1) / block;
  int64_t cap = (int64_t)dt_cuda_sm_count_() * 32;
  if (want > cap) want = cap;
  if (want < 1) want = 1;
  return (unsigned)want;
}

/* Blocks for a row-per-block loop over `rows` rows: at most 64 per
 * multiprocessor (each block then loops over several rows). */
static inline unsigned dt_row_grid_(int64_t rows) {
  int64_t cap = (int64_t)dt_cuda_sm_count_() * 64;
  return (unsigned)(rows < 1 ? 1 : rows > cap ? cap : rows);
}

#define DT_GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- block reductions (blockDim.x a multiple of 32, at most 1024) ------------------- */

/* The sum of v over the block, returned to every thread. The tree is fixed
 * by the block shape, so the result depends only on the data. */
__device__ __forceinline__ double dt_block_sum_(double v) {
  __shared__ double partial[32];
  __shared__ double total;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads(); /* a previous call may still be reading `total` */
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double s = lane < warps ? partial[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

/* The maximum of v over the block (NaN-free inputs or -INFINITY), to every thread. */
__device__ __forceinline__ float dt_block_max_(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int off = 16; off > 0; off >>= 1) v = dt_maxf(v, __shfl_down_sync(0xffffffffu, v, off));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < warps ? partial[lane] : -INFINITY;
    for (int off = 16; off > 0; off >>= 1) s = dt_maxf(s, __shfl_down_sync(0xffffffffu, s, off));
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

/* ---- reduce.h's eight-lane sums, by eight threads --------------------------------------
 * dt_sum_f64 and its siblings keep eight lane sums (element i < len - len % 8
 * in lane i % 8, in order), fold them in dt_fold8_'s tree, then add the tail
 * in order. An aligned group of eight threads of a warp (lane = threadIdx.x &
 * 7) reproduces that bit for bit: each thread keeps one lane, the group
 * shares them by shuffles and every thread of the group returns the same sum
 * of elem(0..len-1) (elem(i) returns the double to add; it is called once
 * per element by its lane's thread, and for the tail by every thread of the
 * group). The whole warp must make the call (len 0 for an idle group). */
template <typename F>
__device__ __forceinline__ double dt_lanes8_sum_(int64_t len, F elem) {
  int lane = threadIdx.x & 7, base = threadIdx.x & 24;
  int64_t full = len - len % 8;
  double acc = 0.0;
  for (int64_t i = lane; i < full; i += 8) acc += elem(i);
  double a[8];
  for (int k = 0; k < 8; k++) a[k] = __shfl_sync(0xffffffffu, acc, base + k);
  double s = dt_fold8_(a);
  for (int64_t i = full; i < len; i++) s += elem(i);
  return s;
}

/* The loop of a kernel that gives each row an aligned group of eight threads:
 * r runs over this group's rows, and on while any group of its warp has one
 * (the warp stays together for dt_lanes8_sum_'s shuffles), so the body tests
 * r < rows itself. The step is a multiple of 4 groups: r & 3 never changes.
 * blockDim.x must be a multiple of 32. */
#define DT_ROWS_BY_8(r, rows)                                                               \
  for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3; r - (r & 3) < (rows); \
       r += ((int64_t)gridDim.x * blockDim.x) >> 3)

/* Blocks of DT_BLOCK threads for DT_ROWS_BY_8 over `rows` rows (grid-capped). */
static inline unsigned dt_grid_by_8_(int64_t rows) { return dt_grid_for_(rows * 8, DT_BLOCK); }

/* ---- scratch memory and host read-back ---------------------------------------------- */

/* Device scratch that lives in stream order on `stream` (cudaMallocAsync from
 * the device's pool, which keeps freed memory cached). */
dt_status dt_scratch_alloc_(void** out, size_t bytes, cudaStream_t stream, const char* who);
dt_status dt_scratch_free_(void* p, cudaStream_t stream);

/* Copies `bytes` of device memory to host memory and waits for it (and for
 * everything queued before it on the stream). */
dt_status dt_read_back_(void* host, const void* dev, size_t bytes, cudaStream_t stream);

/* ---- data errors found on the device ------------------------------------------------
 * A kernel that meets a bad index or a value an integer cast cannot hold does
 * not stop: it poisons what it cannot compute and marks the element in a
 * scratch word (dt_mark_bad_); after the launch, dt_bad_end_ records the first
 * marked element in the device's dt_data_error_t unless an earlier error is
 * recorded there, and dt_deferred_error reports it with the CPU library's
 * words. So no call reads its data back, and the error still names the op,
 * the position and the value. */

/* One launch's scratch word, all ones (nothing marked). */
dt_status dt_bad_begin_(unsigned long long** first, cudaStream_t s, const char* who);
/* Queues the recording of the launch's first marked element (values[position]
 * of dtype values_dtype is the bad value), then frees the word. */
dt_status dt_bad_end_(unsigned long long* first, int32_t op, const void* values, int32_t values_dtype, int64_t limit,
                      int64_t ignore_index, cudaStream_t s);

/* Queues the check of a batch-norm element count on the device: one below 1
 * is recorded as data error `op` (the kernels that read it poison their
 * outputs themselves). */
dt_status dt_bad_count_(const double* count, int32_t op, cudaStream_t s);

/* Marks element i bad (the smallest index wins, whatever the thread order). */
__device__ __forceinline__ void dt_mark_bad_(unsigned long long* first, int64_t i) {
  atomicMin(first, (unsigned long long)i);
}
