/* emu_runtime.cpp — the emulated CUDA runtime (libdtrain_cudart_emu.so):
 * devices, memory, streams, events and kernel launches, with CUDA's names,
 * codes and ordering, strict where a GPU is.
 *
 * - Devices: DTRAIN_CUDA_EMU_DEVICES (default 8) per process, seen through
 *   CUDA_VISIBLE_DEVICES; the current device is per host thread, as CUDA's.
 *   Each has DTRAIN_CUDA_EMU_MEMORY_MB of memory (default 16384) and
 *   DTRAIN_CUDA_EMU_SMS multiprocessors (default 2, so grid-size caps derived
 *   from it are small and "more work than one grid" loops run in tests).
 * - Memory is host memory, tracked: fresh allocations are filled with 0xff
 *   (NaN in every float type), copies check that each side is the kind of
 *   memory the copy direction says and lies inside one allocation, cudaFree
 *   waits for the device, an unknown pointer is an error.
 * - Each stream is a host thread running its queue in order; events are
 *   completion markers, so a missing cudaStreamWaitEvent between two streams
 *   shows up as on a GPU. Copies from pageable memory return once the data
 *   is staged, copies into it wait, as CUDA's do.
 * - A kernel that breaks CUDA's rules fails the launch with a sticky
 *   cudaErrorLaunchFailure whose text says what happened where; every later
 *   call on that device returns it, as a GPU's corrupted context does. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include "emu_internal.h"

struct CUstream_st {
  int device;
  unsigned flags;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0, completed = 0;
  bool closing = false;
  std::condition_variable wake; /* the worker waits here for work */
};

namespace {

/* Set when an event's most recent record is reached on its stream. */
struct Marker {
  bool done = false;
};

}  // namespace

struct CUevent_st {
  int device;
  std::shared_ptr<Marker> latest; /* null: never recorded */
};

namespace {

constexpr size_t kDeviceAlign = 256;

enum AllocKind { kDeviceMemory, kPoolMemory, kPinnedMemory };
struct Alloc {
  size_t bytes;
  int device;
  AllocKind kind;
};

struct Device {
  int physical = 0;
  size_t total = 0, used = 0;
  std::atomic<int> sticky{cudaSuccess};
  char sticky_text[768] = "";
  CUstream_st* legacy = nullptr; /* stream 0 */
  int pool_tag = 0;              /* its address is the cudaMemPool_t */
};

/* Everything shared, behind one mutex; never freed (streams' host threads may
 * outlive static destructors at exit). */
struct State {
  std::mutex mu;
  std::condition_variable progress; /* a task finished: stream and event waiters re-check */
  bool ready = false;
  int sms = 2;
  std::vector<Device>* devices = nullptr;
  std::map<uintptr_t, Alloc> allocs;
  std::atomic<uint64_t> freed_generation{0}; /* frees so far (memcheck's lookup cache) */
  std::set<CUstream_st*> streams; /* live: usable by API calls */
  std::set<CUstream_st*> running; /* with a host thread, including destroyed ones still draining */
  std::set<CUevent_st*> events;
  std::map<const void*, int> func_smem; /* cudaFuncSetAttribute's dynamic shared memory */
};

State& S() {
  static State* s = new State();
  return *s;
}

thread_local int tl_device = 0;
thread_local cudaError_t tl_last = cudaSuccess;
thread_local cudaError_t tl_detail_code = cudaSuccess;
thread_local char tl_detail[768];

long env_long(const char* name, long fallback, long lo, long hi) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (*end || x < lo || x > hi) return fallback;
  return x;
}

/* Reads the configuration once (called with S().mu held). */
void init_locked() {
  State& s = S();
  if (s.ready) return;
  s.ready = true;
  int physical = (int)env_long("DTRAIN_CUDA_EMU_DEVICES", 8, 0, 64);
  s.sms = (int)env_long("DTRAIN_CUDA_EMU_SMS", 2, 1, 1024);
  size_t memory = (size_t)env_long("DTRAIN_CUDA_EMU_MEMORY_MB", 16384, 1, 1 << 24) << 20;
  std::vector<int> visible;
  const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) { /* as CUDA: the list stops at the first entry that is not a device */
    const char* p = cvd;
    while (*p) {
      char* end = nullptr;
      long id = strtol(p, &end, 10);
      if (end == p || id < 0 || id >= physical) break;
      visible.push_back((int)id);
      p = end;
      while (*p == ' ') p++;
      if (*p != ',') break;
      p++;
    }
  } else {
    for (int i = 0; i < physical; i++) visible.push_back(i);
  }
  s.devices = new std::vector<Device>(visible.size());
  for (size_t i = 0; i < visible.size(); i++) {
    (*s.devices)[i].physical = visible[i];
    (*s.devices)[i].total = memory;
  }
}

int device_count() {
  std::lock_guard<std::mutex> lk(S().mu);
  init_locked();
  return (int)S().devices->size();
}

Device& dev(int d) { return (*S().devices)[(size_t)d]; }

/* Records err (with printf-style detail for cudaGetErrorString) as this
 * thread's last error and returns it. */
__attribute__((format(printf, 2, 3))) cudaError_t fail(cudaError_t err, const char* fmt, ...) {
  tl_last = err;
  tl_detail_code = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_detail, sizeof tl_detail, fmt, ap);
  va_end(ap);
  return err;
}

cudaError_t fail_plain(cudaError_t err) {
  tl_last = err;
  tl_detail_code = cudaSuccess;
  return err;
}

/* The current device, checked; sets *d. */
cudaError_t current(int* d) {
  int n = device_count();
  if (n == 0)
    return fail(cudaErrorNoDevice, "no CUDA-capable device is detected (emulated: CUDA_VISIBLE_DEVICES hides all %ld)",
                env_long("DTRAIN_CUDA_EMU_DEVICES", 8, 0, 64));
  if (tl_device < 0 || tl_device >= n) return fail_plain(cudaErrorInvalidDevice);
  *d = tl_device;
  return cudaSuccess;
}

cudaError_t sticky(int d) {
  int e = dev(d).sticky.load();
  return e ? fail_plain((cudaError_t)e) : cudaSuccess;
}

void set_sticky(int d, cudaError_t err, const std::string& text) {
  Device& D = dev(d);
  std::lock_guard<std::mutex> lk(S().mu);
  if (D.sticky.load()) return; /* the first failure is the one reported */
  snprintf(D.sticky_text, sizeof D.sticky_text, "%s", text.c_str());
  D.sticky.store(err);
}

/* ---- streams ------------------------------------------------------------------------ */

void worker_main(CUstream_st* s) {
  tl_device = s->device; /* work (and host functions) on a stream run with its device current, as CUDA's */
  State& st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  for (;;) {
    s->wake.wait(lk, [&] { return !s->queue.empty() || s->closing; });
    if (s->queue.empty()) break; /* destroyed and drained */
    std::function<void()> task = std::move(s->queue.front());
    s->queue.pop_front();
    lk.unlock();
    task();
    lk.lock();
    s->completed++;
    st.progress.notify_all();
  }
  st.running.erase(s);
  st.progress.notify_all();
  delete s;
}

CUstream_st* new_stream(int device, unsigned flags) {
  CUstream_st* s = new CUstream_st();
  s->device = device;
  s->flags = flags;
  S().running.insert(s); /* called with S().mu held */
  std::thread(worker_main, s).detach();
  return s;
}

/* The stream a call means (0: the device's legacy stream), checked against
 * the live streams; sets *out. */
cudaError_t resolve(cudaStream_t stream, CUstream_st** out) {
  int d;
  cudaError_t e = current(&d);
  if (e) return e;
  std::lock_guard<std::mutex> lk(S().mu);
  if (!stream) {
    Device& D = dev(d);
    if (!D.legacy) {
      D.legacy = new_stream(d, cudaStreamDefault);
      S().streams.insert(D.legacy);
    }
    *out = D.legacy;
    return cudaSuccess;
  }
  if (!S().streams.count(stream))
    return fail(cudaErrorInvalidResourceHandle,
                "invalid resource handle (emulated: stream %p does not exist or was destroyed)", (void*)stream);
  *out = stream;
  return cudaSuccess;
}

/* The host thread's current device must be the device of what it touches: CUDA's current device
 * is per thread, and a thread that never set it (a worker, a thread pool's) is on device 0, where a
 * real GPU makes a context of its own (hundreds of MiB on GPU 0 per rank) or fails. `what` names the
 * object ("a stream", "an event", "memory"). */
cudaError_t on_current_device(int device, const char* what, const char* api) {
  if (device == tl_device) return cudaSuccess;
  return fail(cudaErrorInvalidResourceHandle,
              "invalid resource handle (emulated: %s: %s of device %d touched by a host thread whose current device "
              "is %d; every thread that touches a device sets it first, with cudaSetDevice)",
              api, what, device, tl_device);
}

/* resolve() for the calls that do work on the stream: also on the calling thread's device. */
cudaError_t resolve_here(cudaStream_t stream, CUstream_st** out, const char* api) {
  cudaError_t e = resolve(stream, out);
  return e ? e : on_current_device((*out)->device, "a stream", api);
}

/* Queues fn on s; returns its ticket (s->completed >= ticket once it ran). */
uint64_t enqueue(CUstream_st* s, std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(S().mu);
  s->queue.push_back(std::move(fn));
  s->wake.notify_one();
  return ++s->enqueued;
}

/* Work queued on s only if its device has no sticky error when it runs. */
uint64_t enqueue_device_work(CUstream_st* s, std::function<void()> fn) {
  int d = s->device;
  return enqueue(s, [d, fn = std::move(fn)] {
    if (!dev(d).sticky.load()) fn();
  });
}

/* Times the host waited for the device (a synchronisation, a copy into
 * pageable memory, a free): what dt_emu_host_waits reports. */
std::atomic<uint64_t> host_waits{0};

void wait_ticket(CUstream_st* s, uint64_t ticket) {
  host_waits.fetch_add(1);
  std::unique_lock<std::mutex> lk(S().mu);
  S().progress.wait(lk, [&] { return s->completed >= ticket; });
}

/* Waits for everything queued so far on every stream of device d. */
void wait_device(int d) {
  host_waits.fetch_add(1);
  std::vector<std::pair<CUstream_st*, uint64_t>> targets;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    for (CUstream_st* s : S().running)
      if (s->device == d) targets.push_back({s, s->enqueued});
  }
  std::unique_lock<std::mutex> lk(S().mu);
  for (auto& [s, t] : targets) {
    S().progress.wait(lk, [&, s = s, t = t] { return !S().running.count(s) || s->completed >= t; });
  }
}

/* ---- memory ---------------------------------------------------------------------------- */

/* The allocation holding [p, p + bytes), if any (called with S().mu held). */
const Alloc* find_locked(const void* p, size_t bytes, uintptr_t* base) {
  auto& m = S().allocs;
  auto it = m.upper_bound((uintptr_t)p);
  if (it == m.begin()) return nullptr;
  --it;
  uintptr_t a = it->first, q = (uintptr_t)p;
  if (q < a || q + (bytes ? bytes : 1) > a + (it->second.bytes ? it->second.bytes : 1)) return nullptr;
  if (base) *base = a;
  return &it->second;
}

bool is_device_range(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(S().mu);
  const Alloc* a = find_locked(p, bytes, nullptr);
  return a && a->kind != kPinnedMemory;
}

/* Whether p is inside any device allocation (whatever its size). */
bool is_device_pointer(const void* p) { return is_device_range(p, 1); }

/* The device of the device allocation holding p, or -1 (host or pinned memory). */
int device_of(const void* p) {
  std::lock_guard<std::mutex> lk(S().mu);
  const Alloc* a = find_locked(p, 1, nullptr);
  return a && a->kind != kPinnedMemory ? a->device : -1;
}

bool is_pinned(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(S().mu);
  const Alloc* a = find_locked(p, bytes, nullptr);
  return a && a->kind == kPinnedMemory;
}

cudaError_t allocate(void** out, size_t bytes, int d, AllocKind kind) {
  if (!out) return fail(cudaErrorInvalidValue, "invalid argument (emulated: null output pointer)");
  *out = nullptr;
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    if (kind != kPinnedMemory) {
      Device& D = dev(d);
      if (bytes > D.total - D.used)
        return fail(cudaErrorMemoryAllocation, "out of memory (emulated GPU %d: %zu of %zu bytes in use, %zu asked)", d,
                    D.used, D.total, bytes);
      D.used += bytes;
    }
  }
  /* memcheck: the allocation between two red zones, so that a kernel's access
   * just outside it lands in memory that is this allocation's and is reported */
  const size_t pad = dt_emu::sanitizers().mem ? dt_emu::kRedZoneBytes : 0;
  void* raw = nullptr;
  if (posix_memalign(&raw, kDeviceAlign, bytes + 2 * pad) != 0) {
    std::lock_guard<std::mutex> lk(S().mu);
    if (kind != kPinnedMemory) dev(d).used -= bytes;
    return fail(cudaErrorMemoryAllocation, "out of memory (emulated: the host has no %zu bytes)", bytes);
  }
  void* p = (char*)raw + pad;
  memset(p, 0xff, bytes); /* fresh memory reads as NaN, as a GPU's garbage would not reliably */
  std::lock_guard<std::mutex> lk(S().mu);
  S().allocs[(uintptr_t)p] = Alloc{bytes, kind == kPinnedMemory ? -1 : d, kind};
  *out = p;
  return cudaSuccess;
}

/* Frees p, which must be an allocation of `kind` (called once nothing uses it). */
cudaError_t release(void* p, AllocKind kind, const char* api) {
  std::lock_guard<std::mutex> lk(S().mu);
  auto it = S().allocs.find((uintptr_t)p);
  if (it == S().allocs.end() || it->second.kind != kind)
    return fail(cudaErrorInvalidValue, "invalid argument (emulated: %s(%p): not a pointer that %s returned)", api, p,
                kind == kPinnedMemory ? "cudaMallocHost" : kind == kPoolMemory ? "cudaMallocAsync" : "cudaMalloc");
  if (kind != kPinnedMemory) dev(it->second.device).used -= it->second.bytes;
  S().allocs.erase(it);
  S().freed_generation.fetch_add(1);
  free((char*)p - (dt_emu::sanitizers().mem ? dt_emu::kRedZoneBytes : 0));
  return cudaSuccess;
}

/* The last allocation a kernel's access hit on this host thread, valid while
 * nothing was freed since (memcheck looks up every access of a kernel). */
struct HitCache {
  uintptr_t lo = 0, hi = 0;
  uint64_t generation = ~0ull;
};
thread_local HitCache tl_hit;

}  // namespace

bool dt_emu::memcheck_red_zone(const void* p, size_t n, std::string* why) {
  const uintptr_t q = (uintptr_t)p, end = q + (n ? n : 1);
  const uint64_t generation = S().freed_generation.load();
  if (tl_hit.generation == generation && q >= tl_hit.lo && end <= tl_hit.hi) return false;
  std::lock_guard<std::mutex> lk(S().mu);
  auto& m = S().allocs;
  auto next = m.upper_bound(q);
  if (next != m.begin()) {
    auto it = std::prev(next);
    const uintptr_t lo = it->first, hi = lo + it->second.bytes;
    if (q >= lo && end <= hi) {
      tl_hit = {lo, hi, generation};
      return false;
    }
    if (q < hi + kRedZoneBytes) {
      char text[200];
      if (q >= lo && q < hi)
        snprintf(text, sizeof text, "it starts at byte %zu of a %zu-byte allocation and runs %zu bytes past its end",
                 (size_t)(q - lo), it->second.bytes, (size_t)(end - hi));
      else
        snprintf(text, sizeof text, "%zu bytes past the end of a %zu-byte allocation", (size_t)(q - hi),
                 it->second.bytes);
      *why = text;
      return true;
    }
  }
  if (next != m.end() && end > next->first - kRedZoneBytes) {
    char text[200];
    snprintf(text, sizeof text, "%zu bytes before the start of a %zu-byte allocation",
             (size_t)(next->first - q), next->second.bytes);
    *why = text;
    return true;
  }
  return false;
}

namespace {

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    default: return "cudaMemcpyDefault";
  }
}

/* Checks that dst and src (spans of dst_span / src_span bytes) are the kinds
 * of memory `kind` says; resolves cudaMemcpyDefault. */
cudaError_t check_copy(void* dst, size_t dst_span, const void* src, size_t src_span, cudaMemcpyKind* kind) {
  bool dst_dev = is_device_range(dst, dst_span), src_dev = is_device_range(src, src_span);
  if (*kind == cudaMemcpyDefault)
    *kind = (cudaMemcpyKind)((src_dev ? 2 : 0) + (dst_dev ? 1 : 0) == 3 ? 3
                             : src_dev                                 ? 2
                             : dst_dev                                 ? 1
                                                                       : 0);
  bool want_dst = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
  bool want_src = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
  if ((int)*kind < 0 || (int)*kind > 3) return fail_plain(cudaErrorInvalidMemcpyDirection);
  if (want_dst != dst_dev)
    return fail(cudaErrorInvalidValue, "invalid argument (emulated: %s: dst %p %s)", kind_name(*kind), dst,
                want_dst ? (is_device_pointer(dst) ? "runs past the end of its device allocation"
                                                   : "is not device memory")
                         : "is device memory");
  if (want_src != src_dev)
    return fail(cudaErrorInvalidValue, "invalid argument (emulated: %s: src %p %s)", kind_name(*kind), src,
                want_src ? (is_device_pointer(src) ? "runs past the end of its device allocation"
                                                   : "is not device memory")
                         : "is device memory");
  return cudaSuccess;
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

const char* error_text(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

const char* base_name(const char* path) {
  const char* s = strrchr(path, '/');
  return s ? s + 1 : path;
}

}  // namespace

/* ---- errors and versions --------------------------------------------------------------- */

DT_EMU_API cudaError_t cudaGetLastError(void) {
  int d = tl_device;
  if (device_count() > d && d >= 0 && dev(d).sticky.load()) return (cudaError_t)dev(d).sticky.load();
  cudaError_t e = tl_last;
  tl_last = cudaSuccess;
  return e;
}

DT_EMU_API cudaError_t cudaPeekAtLastError(void) {
  int d = tl_device;
  if (device_count() > d && d >= 0 && dev(d).sticky.load()) return (cudaError_t)dev(d).sticky.load();
  return tl_last;
}

DT_EMU_API const char* cudaGetErrorName(cudaError_t err) { return error_name(err); }

/* The runtime's text, with the emulator's detail when it has one for this code. */
DT_EMU_API const char* cudaGetErrorString(cudaError_t err) {
  int d = tl_device;
  if (err != cudaSuccess && device_count() > d && d >= 0 && dev(d).sticky.load() == (int)err &&
      dev(d).sticky_text[0])
    return dev(d).sticky_text;
  if (err != cudaSuccess && tl_detail_code == err) return tl_detail;
  return error_text(err);
}

DT_EMU_API cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return fail_plain(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail_plain(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

/* ---- devices ------------------------------------------------------------------------------ */

DT_EMU_API cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail_plain(cudaErrorInvalidValue);
  *count = device_count();
  return *count ? cudaSuccess : fail_plain(cudaErrorNoDevice);
}

DT_EMU_API cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail_plain(cudaErrorInvalidValue);
  int d;
  cudaError_t e = current(&d);
  if (e) return e;
  *device = d;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaSetDevice(int device) {
  int n = device_count();
  if (n == 0) return fail_plain(cudaErrorNoDevice);
  if (device < 0 || device >= n)
    return fail(cudaErrorInvalidDevice, "invalid device ordinal (emulated: device %d of %d)", device, n);
  tl_device = device;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail_plain(cudaErrorInvalidValue);
  int n = device_count();
  if (device < 0 || device >= n) return fail_plain(n ? cudaErrorInvalidDevice : cudaErrorNoDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "dtrain emulated GPU %d (host CPU)", dev(device).physical);
  prop->totalGlobalMem = dev(device).total;
  prop->sharedMemPerBlock = dt_emu::kDefaultSharedPerBlock;
  prop->sharedMemPerBlockOptin = dt_emu::kMaxSharedPerBlockOptin;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = dt_emu::kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = dt_emu::kMaxThreadsPerBlock;
  prop->maxThreadsDim[2] = dt_emu::kMaxBlockDimZ;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = (int)dt_emu::kMaxGridY;
  prop->maxGridSize[2] = (int)dt_emu::kMaxGridZ;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = S().sms;
  prop->l2CacheSize = 4 << 20;
  prop->memoryBusWidth = 64;
  prop->pciBusID = 0x10 + dev(device).physical;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail_plain(cudaErrorInvalidValue);
  int n = device_count();
  if (device < 0 || device >= n) return fail_plain(n ? cudaErrorInvalidDevice : cudaErrorNoDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = dt_emu::kMaxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = S().sms; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)dt_emu::kMaxSharedPerBlockOptin; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    default: return fail(cudaErrorInvalidValue, "invalid argument (emulated: attribute %d is not emulated)", (int)attr);
  }
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  int n = device_count();
  if (!bus_id || len < 13) return fail_plain(cudaErrorInvalidValue);
  if (device < 0 || device >= n) return fail_plain(n ? cudaErrorInvalidDevice : cudaErrorNoDevice);
  snprintf(bus_id, (size_t)len, "0000:%02x:00.0", 0x10 + dev(device).physical);
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaDeviceSynchronize(void) {
  int d;
  cudaError_t e = current(&d);
  if (e) return e;
  wait_device(d);
  return sticky(d);
}

DT_EMU_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  int d;
  cudaError_t e = current(&d);
  if (e) return e;
  if (!free_bytes || !total_bytes) return fail_plain(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(S().mu);
  *total_bytes = dev(d).total;
  *free_bytes = dev(d).total - dev(d).used;
  return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------------- */

DT_EMU_API cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  int d;
  cudaError_t e = current(&d);
  if (e || (e = sticky(d))) return e;
  return allocate(ptr, bytes, d, kDeviceMemory);
}

/* As CUDA's: waits for the device, so no queued work still uses the memory.
 * It also frees memory of cudaMallocAsync, as CUDA allows. */
DT_EMU_API cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  int d = -1;
  AllocKind kind = kDeviceMemory;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    const Alloc* a = find_locked(ptr, 1, nullptr);
    if (a && a->kind != kPinnedMemory) d = a->device, kind = a->kind;
  }
  if (d < 0) return release(ptr, kDeviceMemory, "cudaFree"); /* says why */
  wait_device(d);
  return release(ptr, kind, "cudaFree");
}

DT_EMU_API cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return allocate(ptr, bytes, -1, kPinnedMemory); }

DT_EMU_API cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  int n = device_count();
  for (int d = 0; d < n; d++) wait_device(d); /* queued copies may still read it */
  return release(ptr, kPinnedMemory, "cudaFreeHost");
}

DT_EMU_API cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaMallocAsync");
  if (e || (e = sticky(s->device))) return e;
  return allocate(ptr, bytes, s->device, kPoolMemory);
}

/* Returns the memory to the pool when the stream reaches this point. */
DT_EMU_API cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaFreeAsync");
  if (e) return e;
  if (!ptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    auto it = S().allocs.find((uintptr_t)ptr);
    if (it == S().allocs.end() || it->second.kind != kPoolMemory)
      return fail(cudaErrorInvalidValue, "invalid argument (emulated: cudaFreeAsync(%p): not from cudaMallocAsync)",
                  ptr);
  }
  enqueue(s, [ptr] { release(ptr, kPoolMemory, "cudaFreeAsync"); });
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  int n = device_count();
  if (!pool) return fail_plain(cudaErrorInvalidValue);
  if (device < 0 || device >= n) return fail_plain(n ? cudaErrorInvalidDevice : cudaErrorNoDevice);
  *pool = (cudaMemPool_t)(void*)&dev(device).pool_tag;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  int n = device_count();
  bool known = false;
  for (int d = 0; d < n; d++) known |= (void*)pool == (void*)&dev(d).pool_tag;
  if (!known || !value || attr != cudaMemPoolAttrReleaseThreshold) return fail_plain(cudaErrorInvalidValue);
  return cudaSuccess; /* the emulated pool hands memory back to the host at once */
}

DT_EMU_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (!attr) return fail_plain(cudaErrorInvalidValue);
  memset(attr, 0, sizeof *attr);
  std::lock_guard<std::mutex> lk(S().mu);
  uintptr_t base;
  const Alloc* a = find_locked(ptr, 1, &base);
  if (!a) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
    attr->hostPointer = (void*)ptr;
  } else if (a->kind == kPinnedMemory) {
    attr->type = cudaMemoryTypeHost;
    attr->device = tl_device;
    attr->hostPointer = attr->devicePointer = (void*)ptr;
  } else {
    attr->type = cudaMemoryTypeDevice;
    attr->device = a->device;
    attr->devicePointer = (void*)ptr;
  }
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                       cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaMemcpyAsync");
  if (e || (e = sticky(s->device))) return e;
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue, "invalid argument (emulated: null pointer in a copy)");
  if ((e = check_copy(dst, bytes, src, bytes, &kind))) return e;
  for (const void* p : {(const void*)dst, src}) {
    int d = device_of(p);
    if (d >= 0 && (e = on_current_device(d, "memory", "cudaMemcpyAsync"))) return e;
  }
  if (kind == cudaMemcpyHostToDevice && !is_pinned(src, bytes)) {
    /* pageable source: staged now, so the caller may reuse it at once */
    std::shared_ptr<char> staged(new char[bytes], std::default_delete<char[]>());
    memcpy(staged.get(), src, bytes);
    enqueue_device_work(s, [dst, staged, bytes] { memcpy(dst, staged.get(), bytes); });
    return cudaSuccess;
  }
  uint64_t ticket = enqueue_device_work(s, [dst, src, bytes] { memmove(dst, src, bytes); });
  /* into pageable memory (or host to host): the data is there when this returns */
  if ((kind == cudaMemcpyDeviceToHost && !is_pinned(dst, bytes)) || kind == cudaMemcpyHostToHost) {
    wait_ticket(s, ticket);
    return sticky(s->device);
  }
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  return e ? e : cudaStreamSynchronize(nullptr);
}

DT_EMU_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                         size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaMemcpy2DAsync");
  if (e || (e = sticky(s->device))) return e;
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidValue, "invalid argument (emulated: width %zu exceeds a pitch (%zu, %zu))", width,
                dpitch, spitch);
  if (!dst || !src) return fail(cudaErrorInvalidValue, "invalid argument (emulated: null pointer in a copy)");
  if (kind != cudaMemcpyDeviceToDevice)
    return fail(cudaErrorNotSupported, "operation not supported (emulated: cudaMemcpy2DAsync only device to device)");
  size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  if ((e = check_copy(dst, dspan, src, sspan, &kind))) return e;
  enqueue_device_work(s, [=] {
    for (size_t r = 0; r < height; r++) memmove((char*)dst + r * dpitch, (const char*)src + r * spitch, width);
  });
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaMemsetAsync");
  if (e || (e = sticky(s->device))) return e;
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(ptr, bytes))
    return fail(cudaErrorInvalidValue, "invalid argument (emulated: cudaMemsetAsync(%p, %zu bytes): %s)", ptr, bytes,
                is_device_pointer(ptr) ? "runs past the end of its device allocation" : "not device memory");
  if ((e = on_current_device(device_of(ptr), "memory", "cudaMemsetAsync"))) return e;
  enqueue_device_work(s, [=] { memset(ptr, value, bytes); });
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  return e ? e : cudaStreamSynchronize(nullptr);
}

/* ---- streams --------------------------------------------------------------------------------- */

DT_EMU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  int d;
  cudaError_t e = current(&d);
  if (e || (e = sticky(d))) return e;
  if (!stream) return fail_plain(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(S().mu);
  CUstream_st* s = new_stream(d, flags);
  S().streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

/* Returns at once; the stream's queued work still runs, then its thread ends. */
DT_EMU_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> lk(S().mu);
  if (!stream || !S().streams.count(stream))
    return fail(cudaErrorInvalidResourceHandle, "invalid resource handle (emulated: stream %p does not exist)",
                (void*)stream);
  for (Device& D : *S().devices)
    if (D.legacy == stream) return fail(cudaErrorInvalidResourceHandle, "invalid resource handle (the legacy stream)");
  S().streams.erase(stream);
  stream->closing = true;
  stream->wake.notify_one();
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaStreamSynchronize");
  if (e) return e;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    ticket = s->enqueued;
  }
  wait_ticket(s, ticket);
  return sticky(s->device);
}

DT_EMU_API cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s;
  cudaError_t e = resolve_here(stream, &s, "cudaStreamQuery");
  if (e || (e = sticky(s->device))) return e;
  std::lock_guard<std::mutex> lk(S().mu);
  return s->completed == s->enqueued ? cudaSuccess : fail_plain(cudaErrorNotReady);
}

DT_EMU_API cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  CUstream_st* s;
  cudaError_t e = resolve(stream, &s);
  if (e) return e;
  if (!device) return fail_plain(cudaErrorInvalidValue);
  *device = s->device;
  return cudaSuccess;
}

/* fn runs on the stream's host thread when the stream reaches it (also after
 * a sticky error, so that what it owns is still released). */
DT_EMU_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  CUstream_st* s;
  cudaError_t e = resolve(stream, &s);
  if (e) return e;
  if (!fn) return fail_plain(cudaErrorInvalidValue);
  enqueue(s, [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

/* ---- events ------------------------------------------------------------------------------------ */

namespace {
cudaError_t check_event(cudaEvent_t event) {
  std::lock_guard<std::mutex> lk(S().mu);
  if (!event || !S().events.count(event))
    return fail(cudaErrorInvalidResourceHandle, "invalid resource handle (emulated: event %p does not exist)",
                (void*)event);
  return cudaSuccess;
}

/* The event's most recent record, or null. */
std::shared_ptr<Marker> latest(cudaEvent_t event) {
  std::lock_guard<std::mutex> lk(S().mu);
  return event->latest;
}
}  // namespace

DT_EMU_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  (void)flags;
  int d;
  cudaError_t e = current(&d);
  if (e || (e = sticky(d))) return e;
  if (!event) return fail_plain(cudaErrorInvalidValue);
  CUevent_st* ev = new CUevent_st();
  ev->device = d;
  std::lock_guard<std::mutex> lk(S().mu);
  S().events.insert(ev);
  *event = ev;
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

DT_EMU_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  cudaError_t e = check_event(event);
  if (e) return e;
  std::lock_guard<std::mutex> lk(S().mu);
  S().events.erase(event);
  delete event; /* queued records hold their marker, not the event */
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  cudaError_t e = check_event(event);
  CUstream_st* s;
  if (e || (e = resolve_here(stream, &s, "cudaEventRecord")) || (e = sticky(s->device))) return e;
  if (event->device != s->device)
    return fail(cudaErrorInvalidResourceHandle,
                "invalid resource handle (emulated: event of device %d recorded on a stream of device %d)",
                event->device, s->device);
  auto m = std::make_shared<Marker>();
  {
    std::lock_guard<std::mutex> lk(S().mu);
    event->latest = m;
  }
  enqueue(s, [m] {
    std::lock_guard<std::mutex> lk(S().mu);
    m->done = true;
  });
  return cudaSuccess;
}

/* Work queued on `stream` after this waits for the event's most recent record. */
DT_EMU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  (void)flags;
  cudaError_t e = check_event(event);
  CUstream_st* s;
  if (e || (e = resolve_here(stream, &s, "cudaStreamWaitEvent")) || (e = sticky(s->device))) return e;
  std::shared_ptr<Marker> m = latest(event);
  if (!m) return cudaSuccess; /* never recorded: nothing to wait for */
  enqueue(s, [m] {
    std::unique_lock<std::mutex> lk(S().mu);
    S().progress.wait(lk, [&] { return m->done; });
  });
  return cudaSuccess;
}

DT_EMU_API cudaError_t cudaEventQuery(cudaEvent_t event) {
  cudaError_t e = check_event(event);
  if (e || (e = on_current_device(event->device, "an event", "cudaEventQuery")) || (e = sticky(event->device)))
    return e;
  std::shared_ptr<Marker> m = latest(event);
  std::lock_guard<std::mutex> lk(S().mu);
  return !m || m->done ? cudaSuccess : fail_plain(cudaErrorNotReady);
}

DT_EMU_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  cudaError_t e = check_event(event);
  if (e || (e = on_current_device(event->device, "an event", "cudaEventSynchronize"))) return e;
  std::shared_ptr<Marker> m = latest(event);
  host_waits.fetch_add(1);
  if (m) {
    std::unique_lock<std::mutex> lk(S().mu);
    S().progress.wait(lk, [&] { return m->done; });
  }
  return sticky(event->device);
}

/* ---- the emulator's own --------------------------------------------------------------------------- */

/* How many times the host has waited for the device so far, in this process:
 * tests hold calls that must not synchronise to it. */
DT_EMU_API uint64_t dt_emu_host_waits(void) { return host_waits.load(); }

/* ---- kernels ------------------------------------------------------------------------------------ */

DT_EMU_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func || attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      (size_t)value > dt_emu::kMaxSharedPerBlockOptin)
    return fail(cudaErrorInvalidValue, "invalid argument (emulated: dynamic shared memory %d bytes, at most %zu)",
                value, dt_emu::kMaxSharedPerBlockOptin);
  std::lock_guard<std::mutex> lk(S().mu);
  S().func_smem[func] = value;
  return cudaSuccess;
}

DT_EMU_API void dt_emu_launch(const char* kernel, const char* file, int line, const void* func, dim3 grid, dim3 block,
                              size_t smem, cudaStream_t stream, void (*invoke)(void*), void* closure,
                              void (*destroy)(void*)) {
  CUstream_st* s;
  cudaError_t e = resolve(stream, &s);
  if (!e) e = sticky(s->device);
  if (!e && s->device != tl_device)
    e = fail(cudaErrorInvalidResourceHandle,
             "invalid resource handle (emulated: %s launched on a stream of device %d while device %d is current)",
             kernel, s->device, tl_device);
  size_t smem_limit = dt_emu::kDefaultSharedPerBlock;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    auto it = S().func_smem.find(func);
    if (it != S().func_smem.end() && (size_t)it->second > smem_limit) smem_limit = (size_t)it->second;
  }
  uint64_t threads = (uint64_t)block.x * block.y * block.z;
  const char* at = base_name(file);
  if (e) {
  } else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    e = fail(cudaErrorInvalidConfiguration,
             "invalid configuration argument (emulated: %s at %s:%d: grid (%u,%u,%u) block (%u,%u,%u) has a zero "
             "extent)",
             kernel, at, line, grid.x, grid.y, grid.z, block.x, block.y, block.z);
  } else if (threads > (uint64_t)dt_emu::kMaxThreadsPerBlock || block.z > (unsigned)dt_emu::kMaxBlockDimZ) {
    e = fail(cudaErrorInvalidConfiguration,
             "invalid configuration argument (emulated: %s at %s:%d: block (%u,%u,%u) has %llu threads; at most %d, "
             "and z at most %d)",
             kernel, at, line, block.x, block.y, block.z, (unsigned long long)threads, dt_emu::kMaxThreadsPerBlock,
             dt_emu::kMaxBlockDimZ);
  } else if (grid.x > 2147483647u || grid.y > dt_emu::kMaxGridY || grid.z > dt_emu::kMaxGridZ) {
    e = fail(cudaErrorInvalidConfiguration,
             "invalid configuration argument (emulated: %s at %s:%d: grid (%u,%u,%u) exceeds (2^31-1, %u, %u))", kernel,
             at, line, grid.x, grid.y, grid.z, dt_emu::kMaxGridY, dt_emu::kMaxGridZ);
  } else if (smem > smem_limit) {
    e = fail(cudaErrorInvalidValue,
             "invalid argument (emulated: %s at %s:%d asks for %zu bytes of dynamic shared memory; the limit is %zu, "
             "%zu after cudaFuncSetAttribute)",
             kernel, at, line, smem, smem_limit, dt_emu::kMaxSharedPerBlockOptin);
  }
  if (e) {
    destroy(closure);
    return;
  }
  int d = s->device;
  dt_emu::Launch l = {kernel, at, line, grid, block, smem, invoke, closure, destroy};
  enqueue(s, [l, d] {
    std::string why;
    if (!dev(d).sticky.load() && !dt_emu::run_grid(l, &why)) {
      set_sticky(d, cudaErrorLaunchFailure,
                 std::string("unspecified launch failure (emulated device: kernel ") + l.kernel + " launched at " +
                     l.file + ":" + std::to_string(l.line) + ": " + why + ")");
    }
    l.destroy(l.closure);
  });
}
