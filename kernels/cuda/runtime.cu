/* runtime.cu — identity, error text, memory and copies of the CUDA kernel
 * library, plus its dt_cuda_* extras (devices, streams, events, versions)
 * that the CPU library does not have. One process drives one GPU: the
 * library keeps that device's compute stream. */
#define DT_CUDA_RUNTIME_UNIT /* defines dt_cuda_count_work_ (cuda_internal.cuh) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define DT_ERROR_DEFINE /* this file owns dt_last_error()'s text */
#include "convert.h"
#include "cuda_internal.cuh"

#ifndef DT_BUILD_HASH
#define DT_BUILD_HASH "unknown"
#endif

dt_status dt_cuda_fail_(cudaError_t err, const char* what, const char* file, int line) {
  const char* base = strrchr(file, '/');
  dt_status st = err == cudaErrorMemoryAllocation ? DT_ERR_ALLOC : DT_ERR_CUDA;
  /* an out-of-memory error is not sticky: clear it so later calls are not blamed */
  if (err == cudaErrorMemoryAllocation) (void)cudaGetLastError();
  return dt_fail_(st, "%s failed: %s: %s (%s:%d)", what, cudaGetErrorName(err), cudaGetErrorString(err),
                  base ? base + 1 : file, line);
}

static int dt_sync_after_launch_ = -1; /* DTRAIN_CUDA_SYNC, read once */

static dt_status dt_sync_checked_(cudaStream_t stream) {
  DT_CHECK_CUDA(cudaStreamSynchronize(stream));
  return DT_OK;
}

dt_status dt_cuda_after_launch_(cudaStream_t stream, const char* kernel, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return dt_cuda_fail_(err, kernel, file, line);
  if (dt_sync_after_launch_ < 0) {
    const char* env = getenv("DTRAIN_CUDA_SYNC");
    dt_sync_after_launch_ = env && strcmp(env, "1") == 0;
  }
  if (dt_sync_after_launch_) {
    dt_status st = dt_sync_checked_(stream);
    if (st != DT_OK) return dt_with_context_(st, "kernel %s (launched at %s:%d)", kernel, file, line);
  }
  return DT_OK;
}

/* ---- the device and its compute stream ------------------------------------------------ */

static pthread_mutex_t dt_state_mu_ = PTHREAD_MUTEX_INITIALIZER;
static int dt_device_ = -1;          /* chosen by dt_cuda_set_device (or the current one on first use) */
static cudaStream_t dt_compute_ = 0; /* created on first use, on dt_device_ */
static int dt_sm_count_ = 0;
static dt_data_error_t* dt_data_error_ = NULL; /* device memory: the first data error, until reported */

/* The device this process chose, made the calling host thread's current device. CUDA's current
 * device is per thread: a thread that never set it (the NCCL watchdog's, a Deno worker's, a thread
 * of FFI's pool) is on device 0, where touching this process's streams, events or memory fails or
 * makes a context of its own on GPU 0 (hundreds of MiB there, per rank). Every entry point that
 * touches the device calls this first; a thread pays one cudaSetDevice, once. Before the device is
 * chosen it does nothing (the first use chooses the thread's current one). */
static __thread int dt_thread_device_ = -1;

dt_status dt_bind_thread_(void) {
  int d = __atomic_load_n(&dt_device_, __ATOMIC_ACQUIRE);
  if (d < 0 || dt_thread_device_ == d) return DT_OK;
  DT_CHECK_CUDA(cudaSetDevice(d));
  dt_thread_device_ = d;
  return DT_OK;
}

/* Creates the compute stream on the current device and makes the device's
 * memory pool keep freed scratch memory (its default gives it back at every
 * synchronisation). Called with dt_state_mu_ held. */
static dt_status dt_init_device_locked_(void) {
  int dev = 0;
  DT_CHECK_CUDA(cudaGetDevice(&dev));
  DT_CHECK_CUDA(cudaDeviceGetAttribute(&dt_sm_count_, cudaDevAttrMultiProcessorCount, dev));
  int pools = 0;
  DT_CHECK_CUDA(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev));
  DT_REQUIRE_(pools, "GPU %d does not support stream-ordered memory pools (cudaMallocAsync), which dtrain needs", dev);
  cudaMemPool_t pool;
  DT_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t keep = UINT64_MAX;
  DT_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  dt_data_error_t* record = NULL;
  DT_CHECK_CUDA(cudaMalloc((void**)&record, sizeof *record));
  DT_CHECK_CUDA(cudaMemset(record, 0, sizeof *record));
  cudaStream_t s;
  DT_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  dt_data_error_ = record;
  dt_compute_ = s;
  __atomic_store_n(&dt_device_, dev, __ATOMIC_RELEASE);
  dt_thread_device_ = dev;
  return DT_OK;
}

dt_status dt_cuda_stream_(void* stream, cudaStream_t* out) {
  DT_TRY_(dt_bind_thread_());
  if (stream) {
    *out = (cudaStream_t)stream;
    return DT_OK;
  }
  cudaStream_t s = __atomic_load_n(&dt_compute_, __ATOMIC_ACQUIRE);
  if (!s) {
    pthread_mutex_lock(&dt_state_mu_);
    dt_status st = dt_compute_ ? DT_OK : dt_init_device_locked_();
    s = dt_compute_;
    pthread_mutex_unlock(&dt_state_mu_);
    if (st != DT_OK) return st;
  }
  *out = s;
  return DT_OK;
}

int dt_cuda_sm_count_(void) { return dt_sm_count_ > 0 ? dt_sm_count_ : 1; }

/* ---- scratch and read-back ------------------------------------------------------------ */

static dt_status dt_malloc_async_(void** out, size_t bytes, cudaStream_t stream) {
  DT_CHECK_CUDA(cudaMallocAsync(out, bytes, stream));
  return DT_OK;
}

dt_status dt_scratch_alloc_(void** out, size_t bytes, cudaStream_t stream, const char* who) {
  *out = NULL;
  dt_status st = dt_malloc_async_(out, bytes ? bytes : 16, stream);
  if (st != DT_OK) return dt_with_context_(st, "%s: cannot allocate %zu bytes of scratch memory", who, bytes);
  return DT_OK;
}

dt_status dt_scratch_free_(void* p, cudaStream_t stream) {
  if (p) DT_CHECK_CUDA(cudaFreeAsync(p, stream));
  return DT_OK;
}

dt_status dt_read_back_(void* host, const void* dev, size_t bytes, cudaStream_t stream) {
  DT_CHECK_CUDA_WORK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
  DT_CHECK_CUDA(cudaStreamSynchronize(stream));
  return DT_OK;
}

/* ---- data errors ------------------------------------------------------------------------ */

/* Records values[*first] unless nothing was marked or an earlier error is recorded. */
__global__ void dt_record_bad_k_(dt_data_error_t* rec, const unsigned long long* first, int32_t op, const void* values,
                                 int32_t values_dtype, int64_t limit, int64_t ignore_index) {
  unsigned long long i = *first;
  if (i == ~0ull || rec->op != DT_DATA_OK) return;
  rec->position = (int64_t)i;
  rec->value_dtype = values_dtype;
  if (dt_dtype_is_float(values_dtype)) rec->fvalue = (double)dt_load_float(values, values_dtype, (int64_t)i);
  else rec->ivalue = dt_load_int(values, values_dtype, (int64_t)i);
  rec->limit = limit;
  rec->ignore_index = ignore_index;
  rec->op = op;
}

dt_status dt_bad_begin_(unsigned long long** first, cudaStream_t s, const char* who) {
  DT_TRY_(dt_scratch_alloc_((void**)first, sizeof **first, s, who));
  DT_CHECK_CUDA_WORK(cudaMemsetAsync(*first, 0xff, sizeof **first, s));
  return DT_OK;
}

dt_status dt_bad_end_(unsigned long long* first, int32_t op, const void* values, int32_t values_dtype, int64_t limit,
                      int64_t ignore_index, cudaStream_t s) {
  DT_LAUNCH(dt_record_bad_k_, 1, 1, 0, s, dt_data_error_, first, op, values, values_dtype, limit, ignore_index);
  DT_CHECK_LAUNCH(s, "recording a data error");
  return dt_scratch_free_(first, s);
}

/* Records a batch-norm element count below 1 as data error `op`, unless an
 * earlier error is recorded. */
__global__ void dt_record_bad_count_k_(dt_data_error_t* rec, const double* count, int32_t op) {
  double c = *count;
  if (c >= 1.0 || rec->op != DT_DATA_OK) return;
  rec->position = 0;
  rec->value_dtype = DT_F32;
  rec->fvalue = c;
  rec->limit = 0;
  rec->ignore_index = 0;
  rec->op = op;
}

dt_status dt_bad_count_(const double* count, int32_t op, cudaStream_t s) {
  DT_LAUNCH(dt_record_bad_count_k_, 1, 1, 0, s, dt_data_error_, count, op);
  DT_CHECK_LAUNCH(s, "recording a data error");
  return DT_OK;
}

/* Reports (and forgets) the first data error that kernels recorded on the
 * device, in the CPU library's words; DT_OK when there is none. */
DT_EXPORT dt_status dt_deferred_error(void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_data_error_t rec;
  DT_TRY_(dt_read_back_(&rec, dt_data_error_, sizeof rec, s));
  if (rec.op == DT_DATA_OK) return DT_OK;
  DT_CHECK_CUDA_WORK(cudaMemsetAsync(dt_data_error_, 0, sizeof rec, s));
  return dt_fail_data_error_(&rec);
}

/* ---- library identity ------------------------------------------------------------------ */

DT_EXPORT int32_t dt_abi_version(void) { return DT_ABI_VERSION; }
DT_EXPORT const char* dt_last_error(void) { return dt_error_text_(); }
DT_EXPORT const char* dt_build_hash(void) { return DT_BUILD_HASH; }

static char dt_backend_name_text_[160];

static dt_status dt_current_device_prop_(cudaDeviceProp* prop) {
  int dev = 0;
  DT_CHECK_CUDA(cudaGetDevice(&dev));
  DT_CHECK_CUDA(cudaGetDeviceProperties(prop, dev));
  return DT_OK;
}

DT_EXPORT const char* dt_backend_name(void) {
  cudaDeviceProp prop;
  if (dt_current_device_prop_(&prop) != DT_OK) {
    snprintf(dt_backend_name_text_, sizeof dt_backend_name_text_, "cuda (no usable GPU: %s)", dt_error_text_());
  } else {
    snprintf(dt_backend_name_text_, sizeof dt_backend_name_text_, "cuda sm_%d%d (%s)", prop.major, prop.minor,
             prop.name);
  }
  return dt_backend_name_text_;
}

/* The CPU library's thread count has no meaning on a GPU; the value is kept
 * so that both libraries answer the same calls the same way. */
static int32_t dt_num_threads_ = 1;

DT_EXPORT dt_status dt_set_num_threads(int32_t n) {
  DT_TRY_(dt_check_set_num_threads(n, 64));
  dt_num_threads_ = n;
  return DT_OK;
}

DT_EXPORT int32_t dt_get_num_threads(void) { return dt_num_threads_; }

/* ---- memory ------------------------------------------------------------------------------
 * dt_alloc is plain cudaMalloc: tensor/allocator.ts already caches blocks by
 * size, so a second cache here would only hide memory from it. Scratch
 * memory of the kernels comes from the stream-ordered pool instead. */

static dt_status dt_malloc_(void** out, size_t bytes) {
  DT_CHECK_CUDA(cudaMalloc(out, bytes));
  return DT_OK;
}

DT_EXPORT void* dt_alloc(int64_t bytes) {
  if (dt_check_alloc(bytes) != DT_OK) return NULL;
  cudaStream_t s;
  if (dt_cuda_stream_(NULL, &s) != DT_OK) return NULL; /* picks the device on first use */
  void* p = NULL;
  dt_status st = dt_malloc_(&p, bytes == 0 ? 256 : (size_t)bytes);
  if (st != DT_OK) {
    dt_with_context_(st, "dt_alloc: cannot allocate %lld bytes on GPU %d", (long long)bytes, dt_device_);
    return NULL;
  }
  return p;
}

DT_EXPORT dt_status dt_free(void* p) {
  if (!p) return DT_OK;
  DT_TRY_(dt_bind_thread_());
  DT_CHECK_CUDA(cudaFree(p));
  return DT_OK;
}

DT_EXPORT dt_status dt_memcpy(void* dst, const void* src, int64_t bytes, int32_t kind, void* stream) {
  DT_TRY_(dt_check_memcpy(dst, src, bytes, kind));
  if (bytes == 0) return DT_OK;
  static const cudaMemcpyKind kinds[4] = {cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                          cudaMemcpyDeviceToDevice};
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_CHECK_CUDA_WORK(cudaMemcpyAsync(dst, src, (size_t)bytes, kinds[kind], s));
  /* the host must be able to read what it asked for as soon as this returns */
  if (kind == 2 || kind == 0) DT_CHECK_CUDA(cudaStreamSynchronize(s));
  return DT_OK;
}

DT_EXPORT dt_status dt_synchronize(void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_CHECK_CUDA(cudaStreamSynchronize(s));
  return DT_OK;
}

/* ---- dt_cuda_* extras: devices ---------------------------------------------------------- */

DT_EXPORT dt_status dt_cuda_device_count(int32_t* out) {
  DT_REQUIRE_(out, "dt_cuda_device_count: null out");
  int n = 0;
  DT_CHECK_CUDA(cudaGetDeviceCount(&n));
  *out = n;
  return DT_OK;
}

static dt_status dt_set_device_locked_(int32_t device) {
  DT_CHECK_CUDA(cudaSetDevice(device));
  return dt_init_device_locked_();
}

/* Chooses the GPU of this process; must come before any other call that
 * touches the GPU, and cannot change afterwards. */
DT_EXPORT dt_status dt_cuda_set_device(int32_t device) {
  int n = 0;
  DT_CHECK_CUDA(cudaGetDeviceCount(&n));
  DT_REQUIRE_(device >= 0 && device < n, "dt_cuda_set_device: device %d does not exist (%d visible GPUs)", device, n);
  pthread_mutex_lock(&dt_state_mu_);
  dt_status st = DT_OK;
  if (dt_compute_ && dt_device_ != device) {
    st = dt_fail_(DT_ERR_ARG, "dt_cuda_set_device: this process already uses GPU %d; one process drives one GPU",
                  dt_device_);
  } else if (!dt_compute_) {
    st = dt_set_device_locked_(device);
  }
  pthread_mutex_unlock(&dt_state_mu_);
  return st;
}

/* The GPU this library runs on (-1 before the first call that needs one). */
DT_EXPORT int32_t dt_cuda_get_device(void) { return dt_device_; }

/* out[0..5] = major, minor, multiprocessors, total memory bytes, L2 bytes, memory bus width (bits). */
DT_EXPORT dt_status dt_cuda_device_info(int32_t device, char* name, int64_t name_len, int64_t* out) {
  DT_REQUIRE_(name && name_len > 0 && out, "dt_cuda_device_info: null output");
  cudaDeviceProp prop;
  DT_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  snprintf(name, (size_t)name_len, "%s", prop.name);
  out[0] = prop.major;
  out[1] = prop.minor;
  out[2] = prop.multiProcessorCount;
  out[3] = (int64_t)prop.totalGlobalMem;
  out[4] = prop.l2CacheSize;
  out[5] = prop.memoryBusWidth;
  return DT_OK;
}

/* out[0] = driver version, out[1] = runtime version (e.g. 13000 for 13.0). */
DT_EXPORT dt_status dt_cuda_versions(int32_t* out) {
  DT_REQUIRE_(out, "dt_cuda_versions: null out");
  int drv = 0, rt = 0;
  DT_CHECK_CUDA(cudaDriverGetVersion(&drv));
  DT_CHECK_CUDA(cudaRuntimeGetVersion(&rt));
  out[0] = drv;
  out[1] = rt;
  return DT_OK;
}

/* out[0] = free bytes, out[1] = total bytes of the current GPU. */
/* ---- counting the device work (DTRAIN_COUNT_CALLS) -------------------------------------- */

static unsigned long long dt_work_counts_[3];

void dt_cuda_count_work_(int kind) { __atomic_fetch_add(&dt_work_counts_[kind], 1ull, __ATOMIC_RELAXED); }

/* out[3] = kernel launches, cuBLASLt matmuls, memsets and device copies this
 * library has queued since it was loaded (on any stream). */
DT_EXPORT dt_status dt_cuda_work_count(int64_t* out) {
  DT_REQUIRE_(out, "dt_cuda_work_count: null out");
  for (int k = 0; k < 3; k++) out[k] = (int64_t)__atomic_load_n(&dt_work_counts_[k], __ATOMIC_RELAXED);
  return DT_OK;
}

DT_EXPORT dt_status dt_cuda_mem_info(int64_t* out) {
  DT_REQUIRE_(out, "dt_cuda_mem_info: null out");
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(NULL, &s));
  size_t free_b = 0, total_b = 0;
  DT_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  out[0] = (int64_t)free_b;
  out[1] = (int64_t)total_b;
  return DT_OK;
}

/* ---- dt_cuda_* extras: streams and events ------------------------------------------------ */

/* The library's compute stream (what a NULL stream argument means). */
DT_EXPORT dt_status dt_cuda_compute_stream(void** out) {
  DT_REQUIRE_(out, "dt_cuda_compute_stream: null out");
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(NULL, &s));
  *out = (void*)s;
  return DT_OK;
}

/* A new non-blocking stream (the communication stream of a process group). */
DT_EXPORT dt_status dt_cuda_stream_create(void** out) {
  DT_REQUIRE_(out, "dt_cuda_stream_create: null out");
  cudaStream_t unused;
  DT_TRY_(dt_cuda_stream_(NULL, &unused)); /* on the library's device */
  cudaStream_t s;
  DT_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *out = (void*)s;
  return DT_OK;
}

DT_EXPORT dt_status dt_cuda_stream_destroy(void* stream) {
  DT_REQUIRE_(stream, "dt_cuda_stream_destroy: null stream (the compute stream is the library's own)");
  DT_TRY_(dt_bind_thread_());
  DT_CHECK_CUDA(cudaStreamDestroy((cudaStream_t)stream));
  return DT_OK;
}

DT_EXPORT dt_status dt_cuda_event_create(void** out) {
  DT_REQUIRE_(out, "dt_cuda_event_create: null out");
  cudaStream_t unused;
  DT_TRY_(dt_cuda_stream_(NULL, &unused));
  cudaEvent_t e;
  DT_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *out = (void*)e;
  return DT_OK;
}

DT_EXPORT dt_status dt_cuda_event_destroy(void* event) {
  DT_REQUIRE_(event, "dt_cuda_event_destroy: null event");
  DT_TRY_(dt_bind_thread_());
  DT_CHECK_CUDA(cudaEventDestroy((cudaEvent_t)event));
  return DT_OK;
}

/* Records `event` on `stream` (NULL: the compute stream). */
DT_EXPORT dt_status dt_cuda_event_record(void* event, void* stream) {
  DT_REQUIRE_(event, "dt_cuda_event_record: null event");
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_CHECK_CUDA(cudaEventRecord((cudaEvent_t)event, s));
  return DT_OK;
}

/* Work queued on `stream` from now on waits for `event` (on the GPU; the host does not wait). */
DT_EXPORT dt_status dt_cuda_stream_wait_event(void* stream, void* event) {
  DT_REQUIRE_(event, "dt_cuda_stream_wait_event: null event");
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_CHECK_CUDA(cudaStreamWaitEvent(s, (cudaEvent_t)event, 0));
  return DT_OK;
}

/* *done = 1 when everything before the event's record has finished, else 0. */
DT_EXPORT dt_status dt_cuda_event_query(void* event, int32_t* done) {
  DT_REQUIRE_(event && done, "dt_cuda_event_query: null argument");
  DT_TRY_(dt_bind_thread_()); /* the NCCL watchdog's thread calls this */
  cudaError_t result;
  DT_CHECK_CUDA_ALLOW(cudaEventQuery((cudaEvent_t)event), cudaErrorNotReady, &result);
  /* "not ready" is an answer, not an error: keep it out of the launch checks */
  if (result == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
  *done = result == cudaSuccess;
  return DT_OK;
}

DT_EXPORT dt_status dt_cuda_event_synchronize(void* event) {
  DT_REQUIRE_(event, "dt_cuda_event_synchronize: null event");
  DT_TRY_(dt_bind_thread_());
  DT_CHECK_CUDA(cudaEventSynchronize((cudaEvent_t)event));
  return DT_OK;
}

/* ---- dt_cuda_* extras: pinned host memory --------------------------------------------------- */

static dt_status dt_malloc_host_(void** out, size_t bytes) {
  DT_CHECK_CUDA(cudaMallocHost(out, bytes));
  return DT_OK;
}

/* Page-locked host memory: copies from and to it run asynchronously. */
DT_EXPORT void* dt_cuda_host_alloc(int64_t bytes) {
  if (bytes < 0) {
    dt_fail_(DT_ERR_ARG, "dt_cuda_host_alloc: negative size %lld", (long long)bytes);
    return NULL;
  }
  void* p = NULL;
  dt_status st = dt_bind_thread_();
  if (st == DT_OK) st = dt_malloc_host_(&p, bytes == 0 ? 64 : (size_t)bytes);
  if (st != DT_OK) {
    dt_with_context_(st, "dt_cuda_host_alloc: cannot allocate %lld pinned bytes", (long long)bytes);
    return NULL;
  }
  return p;
}

DT_EXPORT dt_status dt_cuda_host_free(void* p) {
  if (!p) return DT_OK;
  DT_TRY_(dt_bind_thread_());
  DT_CHECK_CUDA(cudaFreeHost(p));
  return DT_OK;
}
