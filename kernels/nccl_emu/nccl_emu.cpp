/* nccl_emu.cpp — an NCCL stand-in for the emulated CUDA device
 * (libdtrain_nccl_emu.so, loaded in place of libnccl under cuda-emu): the
 * calls dtrain makes, with NCCL's signatures, return codes and semantics,
 * over the shared-memory collectives of libdtrain_shm.so (same machine).
 *
 * - ncclGetUniqueId names the communicator's segments inside the 128-byte id.
 * - ncclCommInitRank(Config) takes the calling host thread's current device
 *   (as NCCL does); with config.blocking = 0 it returns ncclInProgress and
 *   ncclCommGetAsyncError reports the end of the start. Ranks that share a
 *   device are refused ("Duplicate GPU detected"), as NCCL does.
 * - Collectives check their arguments (device memory of the communicator's
 *   device, a stream of that device), are queued on the stream and complete
 *   asynchronously; a failure is reported by ncclCommGetAsyncError.
 * - ncclCommAbort makes every wait of this rank and of its peers stop with an
 *   error, also during the start; ncclCommDestroy waits for the queued work;
 *   ncclCommFinalize flushes it. On a nonblocking communicator each answers
 *   ncclInProgress and ends only while ncclCommGetAsyncError is polled
 *   (DTRAIN_NCCL_EMU_TEARDOWN_POLLS polls, default 3), as NCCL 2.14+ may; the
 *   poll that reports the end of a destroy or abort frees the communicator.
 *   Either frees the communicator, once: a second call on it is a use after
 *   free, as with NCCL (the AddressSanitizer build, -DDT_NCCL_EMU_ASAN,
 *   reports it; the normal build keeps a list of live communicators and
 *   answers ncclInvalidArgument instead).
 *
 * Waits happen on a small control segment of the stand-in's own ("<id>-ctl":
 * per-rank posted operation counts, the abort word, a futex), so every one of
 * them can be aborted; a shared-memory collective is entered only once every
 * rank has posted it, so it completes at once unless a process dies, which
 * the shm library notices. Settings: DTRAIN_NCCL_EMU_TIMEOUT_MS (default 30
 * minutes: NCCL itself never gives up; dtrain's process group aborts first),
 * DTRAIN_SHM_CHUNK_BYTES, DTRAIN_SHM_SPIN_US. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <cuda_runtime.h> /* the emulated runtime's (kernels/cuda_emu) */
#include "nccl.h"

#define NCCL_API extern "C" __attribute__((visibility("default")))

/* ---- libdtrain_shm.so (its exported functions only) -------------------------------------- */

extern "C" {
int32_t dt_shm_open(const char* name, int32_t rank, int32_t world, int64_t chunk_bytes, int64_t spin_ns,
                    int32_t flags, int64_t timeout_ms, uint64_t* out_handle);
int32_t dt_shm_close(void* g);
int32_t dt_shm_abort(void* g, int32_t status, const char* reason);
int32_t dt_shm_allreduce(void* g, void* buf, int64_t count, int32_t dtype, int32_t redop, int64_t timeout_ms);
int32_t dt_shm_broadcast(void* g, void* buf, int64_t count, int32_t dtype, int32_t root, int64_t timeout_ms);
int32_t dt_shm_allgather(void* g, void* out, const void* inp, int64_t count, int32_t dtype, int64_t timeout_ms);
int32_t dt_shm_reduce_scatter(void* g, void* out, const void* inp, int64_t count, int32_t dtype, int32_t redop,
                              int64_t timeout_ms);
const char* dt_last_error(void); /* the shm library's: it is first among this library's dependencies */
}

namespace {

constexpr char kIdMagic[16] = "dtrain-nccl-emu";
constexpr uint64_t kCtlMagic = 0x316c74636c63636eull; /* "ncclctl1" */
constexpr int kMaxRanks = 256;
constexpr int64_t kSliceNs = 100 * 1000 * 1000; /* waits look at aborts, deadlines and peers this often */

/* The id: magic, then the segment name. */
struct IdLayout {
  char magic[16];
  char name[96];
  char pad[16];
};
static_assert(sizeof(IdLayout) == NCCL_UNIQUE_ID_BYTES, "the id is 128 bytes");

enum RankState : int32_t { kAbsent = 0, kAttached = 1, kClosed = 2 };

struct CtlRank {
  std::atomic<uint64_t> posted; /* the last operation this rank is ready to run */
  std::atomic<int32_t> pid;
  std::atomic<int32_t> state;
  char pad[48];
};

/* The control segment, shared by the ranks of one communicator. */
struct Ctl {
  uint64_t magic;
  int32_t world;
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> wake; /* futex word: bumped on every post, attach, close and abort */
  std::atomic<uint32_t> registered;
  std::atomic<int32_t> aborted_by; /* 0, or 1 + the rank that aborted */
  char abort_text[256];
  CtlRank ranks[];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free");

enum CommState { kStarting, kReady, kFailed };

}  // namespace

struct ncclComm {
  uint32_t magic;
  int rank, world, device;
  std::string name;
  std::mutex mu;
  std::condition_variable cv;
  CommState state = kStarting;
  ncclResult_t error = ncclSuccess; /* the start's or the first collective's failure */
  std::string error_text;
  bool aborted = false;       /* ncclCommAbort called */
  bool released = false;      /* the user's handle is gone (abort or destroy) */
  int refs = 1;               /* the user's handle + queued operations + the start */
  uint64_t issued = 0;        /* operations queued */
  uint64_t finished = 0;      /* operations run (or skipped) */
  int active = 0;             /* operations using the control segment or the shm group */
  Ctl* ctl = nullptr;
  size_t ctl_bytes = 0;
  bool ctl_unlinked = false;
  void* shm = nullptr; /* the dt_shm_t handle */
  std::thread starter;
  int64_t timeout_ms;
  bool blocking = true;
  /* nonblocking teardown (NCCL 2.14+ semantics): ncclCommFinalize, ncclCommDestroy and
   * ncclCommAbort answer ncclInProgress, and the communicator finishes them only while
   * ncclCommGetAsyncError is polled, after `teardown_polls` more polls; nothing is freed before */
  enum { kNoTeardown, kFinalizing, kFinalized, kReclaiming } teardown_state = kNoTeardown;
  int teardown_polls = 0;
};

namespace {

constexpr uint32_t kCommMagic = 0x4c43434e; /* "NCCL" */

thread_local char tl_last_error[512];

__attribute__((format(printf, 2, 3))) ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_last_error, sizeof tl_last_error, fmt, ap);
  va_end(ap);
  return r;
}

int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end;
  long long x = strtoll(v, &end, 10);
  return *end || x <= 0 ? fallback : (int64_t)x;
}

/* ---- live communicators ---------------------------------------------------------------------- */

std::mutex live_mu;
std::set<ncclComm*>* live = new std::set<ncclComm*>(); /* never freed: used at exit by host threads */

/* Whether `comm` is a communicator the user may still use. The AddressSanitizer
 * build trusts the handle, as NCCL does, so that a use after free is reported. */
bool usable(ncclComm* comm, const char* api) {
#ifdef DT_NCCL_EMU_ASAN
  if (!comm || comm->magic != kCommMagic) return false;
#else
  {
    std::lock_guard<std::mutex> lk(live_mu);
    if (!comm || !live->count(comm)) {
      fail(ncclInvalidArgument, "%s: communicator %p is not live (never created, or aborted or destroyed already)",
           api, (void*)comm);
      return false;
    }
  }
#endif
  /* a communicator whose destroy or abort is still in progress answers ncclCommGetAsyncError only */
  std::lock_guard<std::mutex> lk(comm->mu);
  if (comm->released && strcmp(api, "ncclCommGetAsyncError") != 0) {
    fail(ncclInvalidArgument, "%s: communicator %p is not live (its %s is in progress)", api, (void*)comm,
         comm->aborted ? "abort" : "destroy");
    return false;
  }
  return true;
}

/* How many ncclCommGetAsyncError polls a nonblocking teardown takes (DTRAIN_NCCL_EMU_TEARDOWN_POLLS,
 * default 3; 0 finishes at once, as a blocking one). */
int teardown_polls() { return (int)env_int("DTRAIN_NCCL_EMU_TEARDOWN_POLLS", 3); }

/* Communicators allocated and not yet freed (for the lifecycle tests). */
std::atomic<int> allocated{0};

void unref(ncclComm* comm) {
  bool last;
  {
    std::lock_guard<std::mutex> lk(comm->mu);
    last = --comm->refs == 0;
  }
  if (last) {
    comm->magic = 0;
    delete comm;
    allocated.fetch_sub(1);
  }
}

/* ---- the control segment ---------------------------------------------------------------------- */

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void wake_all(Ctl* ctl) {
  ctl->wake.fetch_add(1);
  syscall(SYS_futex, (uint32_t*)&ctl->wake, FUTEX_WAKE, 1 << 30, nullptr, nullptr, 0);
}

/* A process that exited; a zombie (not reaped yet) counts as gone. */
bool pid_gone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) == -1 && errno == ESRCH) return true;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

std::string ctl_name(const ncclComm* c) { return c->name + "-ctl"; }
std::string pg_name(const ncclComm* c) { return c->name + "-pg"; }

/* Why a wait of `comm` must stop, or ncclSuccess: this rank aborted, a peer
 * aborted, a rank in `peers` (a bit per rank; null: all) is gone, the deadline. */
ncclResult_t should_stop(ncclComm* c, int64_t deadline, const char* what, bool check_pids) {
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->aborted) return fail(ncclInvalidUsage, "%s on rank %d: the communicator was aborted", what, c->rank);
  }
  Ctl* ctl = c->ctl;
  if (ctl) {
    int32_t by = ctl->aborted_by.load();
    if (by)
      return fail(ncclRemoteError, "%s on rank %d: rank %d aborted the communicator: %s", what, c->rank, by - 1,
                  ctl->abort_text);
    for (int q = 0; q < c->world; q++) {
      CtlRank* r = &ctl->ranks[q];
      bool closed = r->state.load() == kClosed;
      if (!closed && !(check_pids && pid_gone(r->pid.load()))) continue;
      /* A peer may have destroyed its communicator or exited because of an abort
       * made after aborted_by was read above: the abort is stored before the peer
       * can see it, so a second read names the cause, not its consequence. */
      by = ctl->aborted_by.load();
      if (by)
        return fail(ncclRemoteError, "%s on rank %d: rank %d aborted the communicator: %s", what, c->rank, by - 1,
                    ctl->abort_text);
      if (closed) return fail(ncclRemoteError, "%s on rank %d: rank %d destroyed its communicator", what, c->rank, q);
      return fail(ncclRemoteError, "%s on rank %d: rank %d (pid %d) exited", what, c->rank, q, r->pid.load());
    }
  }
  if (now_ns() > deadline)
    return fail(ncclSystemError, "%s on rank %d: no progress for %lld ms (DTRAIN_NCCL_EMU_TIMEOUT_MS)", what, c->rank,
                (long long)c->timeout_ms);
  return ncclSuccess;
}

/* Waits until done() holds, or a reason to stop (see should_stop). */
template <typename Done>
ncclResult_t ctl_wait(ncclComm* c, Done done, const char* what) {
  int64_t deadline = now_ns() + c->timeout_ms * 1000000LL, next_pids = 0;
  for (int spins = 0;; spins++) {
    uint32_t seen = c->ctl->wake.load();
    if (done()) return ncclSuccess;
    int64_t t = now_ns();
    bool check_pids = t >= next_pids;
    if (check_pids) next_pids = t + kSliceNs;
    ncclResult_t r = should_stop(c, deadline, what, check_pids);
    if (r != ncclSuccess) return r;
    if (spins < 200) {
      sched_yield();
      continue;
    }
    futex_wait(&c->ctl->wake, seen, kSliceNs);
  }
}

/* Rank 0 creates the control segment; the others map it once it exists. */
ncclResult_t ctl_attach(ncclComm* c) {
  std::string name = ctl_name(c);
  size_t bytes = sizeof(Ctl) + (size_t)c->world * sizeof(CtlRank);
  int fd = -1;
  if (c->rank == 0) {
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return fail(ncclSystemError, "cannot create /dev/shm%s: %s", name.c_str(), strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      return fail(ncclSystemError, "cannot size /dev/shm%s: %s", name.c_str(), strerror(e));
    }
  } else {
    int64_t deadline = now_ns() + c->timeout_ms * 1000000LL;
    for (;;) {
      fd = shm_open(name.c_str(), O_RDWR, 0600);
      struct stat st;
      if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= bytes) break;
      if (fd >= 0) close(fd);
      fd = -1;
      ncclResult_t r = should_stop(c, deadline, "the communicator start (waiting for rank 0)", false);
      if (r != ncclSuccess) return r;
      usleep(1000);
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (c->rank == 0) shm_unlink(name.c_str());
    return fail(ncclSystemError, "cannot map /dev/shm%s: %s", name.c_str(), strerror(errno));
  }
  Ctl* ctl = (Ctl*)p;
  if (c->rank == 0) {
    ctl->magic = kCtlMagic;
    ctl->world = c->world;
    ctl->ready.store(1);
  } else {
    int64_t deadline = now_ns() + c->timeout_ms * 1000000LL;
    while (!ctl->ready.load()) {
      ncclResult_t r = should_stop(c, deadline, "the communicator start (waiting for rank 0)", false);
      if (r != ncclSuccess) {
        munmap(p, bytes);
        return r;
      }
      usleep(1000);
    }
  }
  std::lock_guard<std::mutex> lk(c->mu);
  c->ctl = ctl;
  c->ctl_bytes = bytes;
  return ncclSuccess;
}

/* Publishes this rank's abort so that every peer's wait stops. */
void publish_abort(ncclComm* c, const char* why) {
  Ctl* ctl;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    ctl = c->ctl;
  }
  if (!ctl) return;
  int32_t none = 0;
  if (ctl->aborted_by.load() == 0) {
    snprintf(ctl->abort_text, sizeof ctl->abort_text, "%s", why);
    ctl->aborted_by.compare_exchange_strong(none, c->rank + 1);
  }
  wake_all(ctl);
}

/* ---- the start ------------------------------------------------------------------------------------ */

ncclResult_t start(ncclComm* c) {
  ncclResult_t r = ctl_attach(c);
  if (r != ncclSuccess) return r;
  Ctl* ctl = c->ctl;
  if (ctl->magic != kCtlMagic || ctl->world != c->world)
    return fail(ncclInvalidUsage, "rank %d started a communicator of %d ranks, but rank 0 started one of %d", c->rank,
                c->world, ctl->world);
  CtlRank* me = &ctl->ranks[c->rank];
  int32_t none = 0;
  if (!me->pid.compare_exchange_strong(none, (int32_t)getpid()))
    return fail(ncclInvalidUsage, "rank %d joined the communicator twice (pids %d and %d)", c->rank, none,
                (int)getpid());
  me->state.store(kAttached);
  ctl->registered.fetch_add(1);
  wake_all(ctl);
  r = ctl_wait(c, [&] { return ctl->registered.load() == (uint32_t)c->world; }, "the communicator start");
  if (r != ncclSuccess) return r;
  /* everyone is here: the shm group's rendezvous completes at once */
  uint64_t handle = 0;
  int64_t chunk = env_int("DTRAIN_SHM_CHUNK_BYTES", 1 << 20), spin_us = env_int("DTRAIN_SHM_SPIN_US", 50);
  const char* debug = getenv("DTRAIN_DISTRIBUTED_DEBUG");
  int32_t flags = debug && !strcmp(debug, "DETAIL") ? 1 : 0; /* DT_SHM_FLAG_DETAIL */
  if (dt_shm_open(pg_name(c).c_str(), c->rank, c->world, chunk, spin_us * 1000, flags, c->timeout_ms, &handle) != 0)
    return fail(ncclSystemError, "the communicator start on rank %d: %s", c->rank, dt_last_error());
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->shm = (void*)(uintptr_t)handle;
  }
  if (c->rank == 0) { /* every rank has it mapped: nothing needs the name any more */
    shm_unlink(ctl_name(c).c_str());
    c->ctl_unlinked = true;
  }
  /* NCCL refuses two ranks on one GPU of one host: each rank learns every rank's bus id and host
   * identity (NCCL_HOSTID when set, as NCCL's host hash takes it, else the host name), so ranks
   * that share a device as two "hosts" (the launcher's GPU sharing) pass, as on a real GPU */
  enum { kBusId = 16, kHostId = 112, kIdentity = kBusId + kHostId };
  std::vector<char> ids((size_t)c->world * kIdentity);
  char mine[kIdentity] = {0};
  if (cudaDeviceGetPCIBusId(mine, kBusId, c->device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, "cudaDeviceGetPCIBusId(%d) failed", c->device);
  const char* hostid = getenv("NCCL_HOSTID");
  if (hostid && *hostid) strncpy(mine + kBusId, hostid, kHostId - 1);
  else gethostname(mine + kBusId, kHostId - 1);
  if (dt_shm_allgather(c->shm, ids.data(), mine, kIdentity, 5 /* DT_U8 */, c->timeout_ms) != 0)
    return fail(ncclSystemError, "the communicator start on rank %d: %s", c->rank, dt_last_error());
  for (int q = 0; q < c->world; q++) {
    if (q != c->rank && memcmp(&ids[(size_t)q * kIdentity], mine, kIdentity) == 0)
      return fail(ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %s", c->rank, q,
                  mine);
  }
  return ncclSuccess;
}

/* Runs the start and records how it ended (on the calling thread or the starter's). */
void run_start(ncclComm* c) {
  ncclResult_t r = start(c);
  std::lock_guard<std::mutex> lk(c->mu);
  c->state = r == ncclSuccess ? kReady : kFailed;
  if (r != ncclSuccess) {
    c->error = r;
    c->error_text = tl_last_error;
  }
  c->cv.notify_all();
}

/* Frees what the communicator holds in the system: the shm group (peers
 * waiting on this rank fail at once), the control segment and its name. */
void teardown(ncclComm* c) {
  if (c->starter.joinable()) c->starter.join(); /* the start ends promptly once aborted */
  std::unique_lock<std::mutex> lk(c->mu);
  /* operations still waiting stop (aborted), and a shm call completes: every rank is in it */
  c->cv.wait(lk, [&] { return c->active == 0; });
  if (c->ctl) {
    c->ctl->ranks[c->rank].state.store(kClosed);
    wake_all(c->ctl);
  }
  if (c->shm) dt_shm_close(c->shm);
  c->shm = nullptr;
  if (c->ctl) {
    if (c->rank == 0 && !c->ctl_unlinked) shm_unlink(ctl_name(c).c_str());
    munmap(c->ctl, c->ctl_bytes);
    c->ctl = nullptr;
  } else if (c->rank == 0 && c->state != kReady) {
    shm_unlink(ctl_name(c).c_str()); /* created but not mapped yet, or never: either way gone */
  }
}

/* ---- collectives ---------------------------------------------------------------------------------- */

enum OpKind { kAllReduce, kBroadcast, kAllGather, kReduceScatter };

struct Op {
  ncclComm* comm;
  uint64_t seq;
  OpKind kind;
  const void* send;
  void* recv;
  size_t count; /* per rank (allGather: sent; reduceScatter: received) */
  int32_t dtype;
  int32_t redop;
  int root;
  size_t esize;
};

const char* op_name(OpKind k) {
  switch (k) {
    case kAllReduce: return "AllReduce";
    case kBroadcast: return "Broadcast";
    case kAllGather: return "AllGather";
    default: return "ReduceScatter";
  }
}

/* Runs on the stream's host thread when the stream reaches the operation.
 * An operation that fails, or comes after a failure, keeps its stream
 * waiting until the communicator is aborted or destroyed, as a GPU stream
 * waits for an NCCL kernel that cannot finish: the failure is seen through
 * ncclCommGetAsyncError, never as a completed stream. */
void run_op(void* p) {
  Op* op = (Op*)p;
  ncclComm* c = op->comm;
  char what[96];
  snprintf(what, sizeof what, "%s #%llu", op_name(op->kind), (unsigned long long)op->seq);
  bool skip;
  {
    std::unique_lock<std::mutex> lk(c->mu);
    /* operations of one communicator run in the order they were issued, whatever their streams */
    c->cv.wait(lk, [&] { return c->finished + 1 == op->seq || c->aborted || c->error != ncclSuccess; });
    skip = c->aborted || c->error != ncclSuccess;
    if (!skip) c->active++; /* teardown waits for it */
  }
  ncclResult_t r = ncclSuccess;
  if (!skip) {
    Ctl* ctl = c->ctl;
    ctl->ranks[c->rank].posted.store(op->seq);
    wake_all(ctl);
    r = ctl_wait(c, [&] {
      for (int q = 0; q < c->world; q++)
        if (ctl->ranks[q].posted.load() < op->seq) return false;
      return true;
    }, what);
  }
  if (!skip && r == ncclSuccess) {
    int32_t st = 0;
    size_t bytes = op->count * op->esize;
    switch (op->kind) {
      case kAllReduce:
        if (op->send != op->recv) memcpy(op->recv, op->send, bytes);
        st = dt_shm_allreduce(c->shm, op->recv, (int64_t)op->count, op->dtype, op->redop, c->timeout_ms);
        break;
      case kBroadcast:
        if (c->rank == op->root && op->send != op->recv) memcpy(op->recv, op->send, bytes);
        st = dt_shm_broadcast(c->shm, op->recv, (int64_t)op->count, op->dtype, op->root, c->timeout_ms);
        break;
      case kAllGather: { /* in place (send inside recv) goes through a copy */
        std::vector<char> own((const char*)op->send, (const char*)op->send + bytes);
        st = dt_shm_allgather(c->shm, op->recv, own.data(), (int64_t)op->count, op->dtype, c->timeout_ms);
        break;
      }
      default: {
        std::vector<char> out(bytes);
        st = dt_shm_reduce_scatter(c->shm, out.data(), op->send, (int64_t)op->count, op->dtype, op->redop,
                                   c->timeout_ms);
        if (st == 0) memcpy(op->recv, out.data(), bytes);
      }
    }
    if (st != 0) r = fail(ncclRemoteError, "%s on rank %d: %s", what, c->rank, dt_last_error());
  }
  /* a failure here also stops the peers (they would wait for this rank) */
  if (!skip && r != ncclSuccess && !c->aborted) publish_abort(c, tl_last_error);
  {
    std::unique_lock<std::mutex> lk(c->mu);
    if (r != ncclSuccess && c->error == ncclSuccess && !c->aborted) {
      c->error = r;
      c->error_text = tl_last_error;
    }
    if (!skip) c->active--;
    c->cv.notify_all();
    if (r != ncclSuccess || skip) c->cv.wait(lk, [&] { return c->aborted || c->released; });
    c->finished++;
    c->cv.notify_all();
  }
  delete op;
  unref(c);
}

/* ncclDataType_t -> the shm library's dtype code, and the element size. */
bool shm_dtype(ncclDataType_t t, int32_t* code, size_t* esize) {
  switch (t) {
    case ncclUint8: *code = 5, *esize = 1; return true;
    case ncclInt32: *code = 3, *esize = 4; return true;
    case ncclInt64: *code = 4, *esize = 8; return true;
    case ncclFloat16: *code = 2, *esize = 2; return true;
    case ncclFloat32: *code = 0, *esize = 4; return true;
    case ncclFloat64: *code = 6, *esize = 8; return true;
    case ncclBfloat16: *code = 1, *esize = 2; return true;
    default: return false;
  }
}

bool shm_redop(ncclRedOp_t op, int32_t* code) {
  switch (op) {
    case ncclSum: *code = 0; return true;
    case ncclAvg: *code = 1; return true;
    case ncclMax: *code = 2; return true;
    case ncclMin: *code = 3; return true;
    default: return false;
  }
}

/* p (bytes long) is device memory of `device`. */
bool on_device(const void* p, size_t bytes, int device) {
  if (bytes == 0) return true;
  cudaPointerAttributes a, b;
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice && a.device == device &&
         cudaPointerGetAttributes(&b, (const char*)p + bytes - 1) == cudaSuccess && b.type == cudaMemoryTypeDevice;
}

struct Deferred {
  Op* op;
  cudaStream_t stream;
};
thread_local int tl_group_depth = 0;
thread_local std::vector<Deferred>* tl_group = nullptr;

ncclResult_t launch(Op* op, cudaStream_t stream) {
  if (cudaLaunchHostFunc(stream, run_op, op) != cudaSuccess) {
    ncclComm* c = op->comm;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      c->finished++; /* never runs */
      c->cv.notify_all();
    }
    delete op;
    unref(c);
    return fail(ncclUnhandledCudaError, "cudaLaunchHostFunc failed: %s", cudaGetErrorString(cudaGetLastError()));
  }
  return ncclSuccess;
}

/* Checks a collective's arguments and queues it on `stream` (or, inside a
 * group, when the group ends). */
ncclResult_t enqueue(OpKind kind, const void* send, size_t send_bytes, void* recv, size_t recv_bytes, size_t count,
                     ncclDataType_t type, ncclRedOp_t redop, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* name = op_name(kind);
  if (!usable(comm, name)) return ncclInvalidArgument;
  int32_t dtype, op_code = -1;
  size_t esize;
  if (!shm_dtype(type, &dtype, &esize))
    return fail(ncclInvalidArgument, "%s : the stand-in does not support datatype %d", name, (int)type);
  if (kind == kAllReduce || kind == kReduceScatter) {
    if (!shm_redop(redop, &op_code))
      return fail(ncclInvalidArgument, "%s : the stand-in does not support reduction operation %d", name, (int)redop);
  }
  ncclComm* c = comm;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->state == kStarting)
      return fail(ncclInvalidUsage, "%s : the communicator is still starting (ncclCommGetAsyncError says ncclInProgress)",
                  name);
    if (c->state == kFailed || c->error != ncclSuccess)
      return fail(c->error, "%s : the communicator failed earlier: %s", name, c->error_text.c_str());
  }
  if (kind == kBroadcast && (root < 0 || root >= c->world))
    return fail(ncclInvalidArgument, "Broadcast : invalid root %d (communicator of %d ranks)", root, c->world);
  send_bytes *= esize;
  recv_bytes *= esize;
  bool needs_send = kind != kBroadcast || c->rank == root;
  if (needs_send && !on_device(send, send_bytes, c->device))
    return fail(ncclInvalidArgument, "%s : sendbuff %p is not %zu bytes of memory on CUDA device %d", name, send,
                send_bytes, c->device);
  if (!on_device(recv, recv_bytes, c->device))
    return fail(ncclInvalidArgument, "%s : recvbuff %p is not %zu bytes of memory on CUDA device %d", name, recv,
                recv_bytes, c->device);
  int stream_device = -1;
  if (cudaStreamGetDevice(stream, &stream_device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, "%s : invalid stream %p: %s", name, (void*)stream,
                cudaGetErrorString(cudaGetLastError()));
  if (stream_device != c->device)
    return fail(ncclInvalidUsage, "%s : the stream belongs to CUDA device %d, the communicator to device %d", name,
                stream_device, c->device);
  Op* op = new Op{c, 0, kind, send, recv, count, dtype, op_code, root, esize};
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->refs++;
    op->seq = ++c->issued;
  }
  if (tl_group_depth > 0) {
    if (!tl_group) tl_group = new std::vector<Deferred>();
    tl_group->push_back({op, stream});
    return ncclSuccess;
  }
  return launch(op, stream);
}

ncclResult_t release(ncclComm* c, bool abort, const char* api);

/* A new communicator of `world` ranks named by `id`, on the calling thread's device. */
ncclResult_t create(ncclComm_t* out, int world, ncclUniqueId id, int rank, bool blocking) {
  if (!out) return fail(ncclInvalidArgument, "ncclCommInitRank : comm is NULL");
  *out = nullptr;
  const IdLayout* l = (const IdLayout*)id.internal;
  if (memcmp(l->magic, kIdMagic, sizeof kIdMagic) != 0 || l->name[0] != '/' || !memchr(l->name, 0, sizeof l->name))
    return fail(ncclInvalidArgument, "ncclCommInitRank : the unique id was not made by ncclGetUniqueId of this "
                "stand-in");
  if (world < 1 || world > kMaxRanks)
    return fail(ncclInvalidArgument, "ncclCommInitRank : invalid nranks %d (1 to %d)", world, kMaxRanks);
  if (rank < 0 || rank >= world)
    return fail(ncclInvalidArgument, "ncclCommInitRank : invalid rank %d (nranks %d)", rank, world);
  int device;
  if (cudaGetDevice(&device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclCommInitRank : cudaGetDevice failed: %s",
                cudaGetErrorString(cudaGetLastError()));
  ncclComm* c = new ncclComm();
  allocated.fetch_add(1);
  c->magic = kCommMagic;
  c->rank = rank;
  c->world = world;
  c->device = device;
  c->name = l->name;
  c->timeout_ms = env_int("DTRAIN_NCCL_EMU_TIMEOUT_MS", 30 * 60 * 1000);
  c->blocking = blocking;
#ifndef DT_NCCL_EMU_ASAN /* there a communicator nobody frees is a leak LeakSanitizer reports */
  {
    std::lock_guard<std::mutex> lk(live_mu);
    live->insert(c);
  }
#endif
  *out = c;
  if (blocking) {
    run_start(c);
    if (c->state != kFailed) return ncclSuccess;
    /* as NCCL: a blocking start that failed leaves no communicator behind */
    ncclResult_t r = c->error;
    std::string text = c->error_text;
    *out = nullptr;
    release(c, true, "ncclCommInitRank");
    return fail(r, "%s", text.c_str());
  }
  c->refs++; /* the starter's */
  c->starter = std::thread([c] {
    run_start(c);
    unref(c);
  });
  return ncclInProgress;
}

/* Frees what release() left for the end of a teardown: the handle leaves the live list. */
void reclaim(ncclComm* c) {
#ifndef DT_NCCL_EMU_ASAN
  {
    std::lock_guard<std::mutex> lk(live_mu);
    live->erase(c);
  }
#endif
  teardown(c);
  unref(c);
}

/* Takes the user's handle away: aborted (peers stop waiting) or not. A nonblocking communicator
 * answers ncclInProgress and is freed by the ncclCommGetAsyncError poll that reports the end. */
ncclResult_t release(ncclComm* c, bool abort, const char* api) {
  if (!usable(c, api)) return ncclInvalidArgument;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->released = true;
    if (abort) c->aborted = true;
    c->cv.notify_all();
  }
  if (abort) {
    publish_abort(c, "ncclCommAbort was called");
  } else {
    /* destroy: the queued work finishes first (or fails) */
    std::unique_lock<std::mutex> lk(c->mu);
    c->cv.wait(lk, [&] { return c->finished == c->issued || c->error != ncclSuccess || c->state != kReady; });
    if (c->state == kStarting) c->aborted = true;
  }
  int polls = c->blocking ? 0 : teardown_polls();
  if (polls > 0) {
    std::lock_guard<std::mutex> lk(c->mu);
    c->teardown_state = ncclComm::kReclaiming;
    c->teardown_polls = polls;
    return ncclInProgress;
  }
  reclaim(c);
  return ncclSuccess;
}

}  // namespace

/* ---- the API ---------------------------------------------------------------------------------- */

/* Not NCCL's: how many communicators of this process are not freed yet, so
 * tests can tell that each was freed exactly once (AddressSanitizer reports
 * the second time, this the missing one). */
NCCL_API int dt_nccl_emu_live_communicators(void) { return allocated.load(); }

NCCL_API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion : version is NULL");
  *version = 22700; /* the API of NCCL 2.27 */
  return ncclSuccess;
}

NCCL_API const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

/* The stand-in's own words for the last failure: the communicator's, or this thread's. */
NCCL_API const char* ncclGetLastError(ncclComm_t comm) {
#ifndef DT_NCCL_EMU_ASAN
  if (comm) {
    std::lock_guard<std::mutex> lk(live_mu);
    if (!live->count(comm)) return tl_last_error;
  }
#endif
  if (comm && comm->magic == kCommMagic) {
    std::lock_guard<std::mutex> lk(comm->mu);
    if (comm->error != ncclSuccess) {
      snprintf(tl_last_error, sizeof tl_last_error, "%s", comm->error_text.c_str());
    }
  }
  return tl_last_error;
}

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId : id is NULL");
  static std::atomic<unsigned> counter{0};
  memset(id, 0, sizeof *id);
  IdLayout* l = (IdLayout*)id->internal;
  memcpy(l->magic, kIdMagic, sizeof kIdMagic);
  unsigned nonce = (unsigned)now_ns() ^ (unsigned)getpid() * 2654435761u;
  snprintf(l->name, sizeof l->name, "/dtrain-nccl-%d-%u-%08x", (int)getpid(), counter.fetch_add(1), nonce);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return create(comm, nranks, id, rank, true);
}

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                             ncclConfig_t* config) {
  bool blocking = true;
  if (config) {
    if (config->magic != NCCL_CONFIG_MAGIC || config->size < sizeof(ncclConfig_t))
      return fail(ncclInvalidArgument, "ncclCommInitRankConfig : config was not set up with NCCL_CONFIG_INITIALIZER");
    if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
      return fail(ncclInvalidArgument, "ncclCommInitRankConfig : config.blocking = %d (0 or 1)", config->blocking);
    blocking = config->blocking != 0;
  }
  return create(comm, nranks, id, rank, blocking);
}

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!async_error) return fail(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError is NULL");
  if (!usable(comm, "ncclCommGetAsyncError")) return ncclInvalidArgument;
  bool reclaim_now = false;
  {
    std::lock_guard<std::mutex> lk(comm->mu);
    if (comm->teardown_state == ncclComm::kFinalizing || comm->teardown_state == ncclComm::kReclaiming) {
      /* a finalize ends once the queued work has (and the polls are spent) */
      bool drained = comm->finished == comm->issued || comm->error != ncclSuccess || comm->aborted;
      if (!drained || --comm->teardown_polls > 0) {
        *async_error = ncclInProgress;
        return ncclSuccess;
      }
      if (comm->teardown_state == ncclComm::kFinalizing) {
        comm->teardown_state = ncclComm::kFinalized;
      } else {
        reclaim_now = true;
      }
    }
    /* the end of a destroy or abort is a success (also of a communicator that never started) */
    *async_error = reclaim_now || comm->aborted ? ncclSuccess : comm->state == kStarting ? ncclInProgress : comm->error;
  }
  if (reclaim_now) reclaim(comm); /* the poll that reports the end frees it: later calls are a use after free */
  return ncclSuccess;
}

/* ncclCommFinalize: flushes the queued work; nonblocking, ncclInProgress until polled done. */
NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!usable(comm, "ncclCommFinalize")) return ncclInvalidArgument;
  std::unique_lock<std::mutex> lk(comm->mu);
  if (comm->teardown_state != ncclComm::kNoTeardown)
    return fail(ncclInvalidUsage, "ncclCommFinalize : communicator %p was finalized already", (void*)comm);
  if (comm->state == kStarting)
    return fail(ncclInvalidUsage, "ncclCommFinalize : the communicator is still starting");
  if (!comm->blocking && teardown_polls() > 0) {
    comm->teardown_state = ncclComm::kFinalizing;
    comm->teardown_polls = teardown_polls();
    return ncclInProgress;
  }
  comm->cv.wait(lk, [&] { return comm->finished == comm->issued || comm->error != ncclSuccess; });
  comm->teardown_state = ncclComm::kFinalized;
  return comm->error;
}

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess; /* as NCCL: aborting nothing is fine */
  return release(comm, true, "ncclCommAbort");
}

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return fail(ncclInvalidArgument, "ncclCommDestroy : comm is NULL");
  return release(comm, false, "ncclCommDestroy");
}

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!count || !usable(comm, "ncclCommCount")) return ncclInvalidArgument;
  *count = comm->world;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!rank || !usable(comm, "ncclCommUserRank")) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!device || !usable(comm, "ncclCommCuDevice")) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclGroupStart(void) {
  tl_group_depth++;
  return ncclSuccess;
}

/* Issues the group's collectives, in the order they were called. */
NCCL_API ncclResult_t ncclGroupEnd(void) {
  if (tl_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd : not inside a group");
  if (--tl_group_depth > 0 || !tl_group) return ncclSuccess;
  std::vector<Deferred> ops;
  ops.swap(*tl_group);
  ncclResult_t first = ncclSuccess;
  for (Deferred& d : ops) {
    ncclResult_t r = launch(d.op, d.stream);
    if (first == ncclSuccess) first = r;
  }
  return first;
}

NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(kAllReduce, sendbuff, count, recvbuff, count, count, datatype, op, 0, comm, stream);
}

NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(kBroadcast, sendbuff, count, recvbuff, count, count, datatype, ncclSum, root, comm, stream);
}

NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
  size_t world = usable(comm, "AllGather") ? (size_t)comm->world : 0;
  if (!world) return ncclInvalidArgument;
  return enqueue(kAllGather, sendbuff, sendcount, recvbuff, sendcount * world, sendcount, datatype, ncclSum, 0, comm,
                 stream);
}

NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  size_t world = usable(comm, "ReduceScatter") ? (size_t)comm->world : 0;
  if (!world) return ncclInvalidArgument;
  return enqueue(kReduceScatter, sendbuff, recvcount * world, recvbuff, recvcount, recvcount, datatype, op, 0, comm,
                 stream);
}
