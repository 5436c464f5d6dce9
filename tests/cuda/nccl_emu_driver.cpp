/* nccl_emu_driver.cpp — drives the NCCL stand-in (kernels/nccl_emu) through
 * communicator lifecycles on the emulated CUDA device: the parent makes the
 * unique id, forks one process per rank, collects one line per rank, then
 * removes any shared-memory segment of the id that is left and says so.
 * tests/cuda/nccl_emu_test.ts compiles it (with AddressSanitizer, against
 * libdtrain_nccl_emu_asan.so, or without, against libdtrain_nccl_emu.so) and
 * runs one scenario per process:
 *
 *   nccl_emu_driver <scenario> <ranks>
 *
 * A rank's line is "rank R: <what happened>"; a rank process that crashes or
 * hangs past 60 s is reported as such. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <string>
#include "nccl.h"

static double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The rank's line goes to a pipe shared with the parent. */
static int out_fd = -1;
static int g_rank = 0;

__attribute__((format(printf, 1, 2))) static void say(const char* fmt, ...) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "rank %d: ", g_rank);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  if (write(out_fd, buf, (size_t)n) < 0) _exit(3);
}

#define CUDA(call)                                                                       \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      say("%s failed: %s", #call, cudaGetErrorString(e_));                               \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

#define NCCL(call)                                                                       \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) {                                                             \
      say("%s failed: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));  \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

static ncclConfig_t nonblocking_config() {
  ncclConfig_t c;
  memset(&c, 0, sizeof c);
  c.size = sizeof c;
  c.magic = NCCL_CONFIG_MAGIC;
  c.version = 22700;
  c.blocking = 0;
  return c;
}

/* A teardown call (ncclCommFinalize, ncclCommDestroy, ncclCommAbort) of a nonblocking
 * communicator answers ncclInProgress: polls ncclCommGetAsyncError until it reports the end
 * (the poll that does frees the communicator). */
static ncclResult_t finish(ncclComm_t comm, ncclResult_t r) {
  while (r == ncclInProgress) {
    ncclResult_t state;
    ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return q;
    r = state;
    if (r == ncclInProgress) usleep(500);
  }
  return r;
}

/* Starts a nonblocking communicator and polls it, at most `ms`; returns the
 * final async state (ncclInProgress when the time ran out). */
static ncclResult_t start(ncclComm_t* comm, ncclUniqueId id, int ranks, int rank, int ms) {
  ncclConfig_t cfg = nonblocking_config();
  ncclResult_t r = ncclCommInitRankConfig(comm, ranks, id, rank, &cfg);
  if (r != ncclInProgress && r != ncclSuccess) return r;
  double until = now_s() + ms / 1000.0;
  ncclResult_t state = ncclInProgress;
  while (now_s() < until) {
    if (ncclCommGetAsyncError(*comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress) return state;
    usleep(1000);
  }
  return state;
}

/* Polls a started collective: done when `done` event is reached, or the
 * communicator reports an error; gives up after ms. */
static ncclResult_t wait_for(ncclComm_t comm, cudaEvent_t done, int ms) {
  double until = now_s() + ms / 1000.0;
  while (now_s() < until) {
    if (cudaEventQuery(done) == cudaSuccess) return ncclSuccess;
    (void)cudaGetLastError(); /* not ready: an answer, not an error */
    ncclResult_t state;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclSuccess && state != ncclInProgress) return state;
    usleep(500);
  }
  return ncclInProgress;
}

static int collectives(ncclComm_t comm, int ranks, int rank) {
  cudaStream_t s;
  cudaEvent_t done;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const int n = 1003;
  float *buf, *gathered, *scattered;
  CUDA(cudaMalloc((void**)&buf, n * sizeof(float)));
  CUDA(cudaMalloc((void**)&gathered, (size_t)ranks * n * sizeof(float)));
  CUDA(cudaMalloc((void**)&scattered, n * sizeof(float)));
  float h[n], g[4 * n];
  for (int i = 0; i < n; i++) h[i] = (float)(rank + 1) + (float)i;
  CUDA(cudaMemcpyAsync(buf, h, sizeof h, cudaMemcpyHostToDevice, s));
  NCCL(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, s));
  CUDA(cudaEventRecord(done, s));
  ncclResult_t r = wait_for(comm, done, 20000);
  if (r != ncclSuccess) {
    say("allReduce did not complete: %s", ncclGetErrorString(r));
    return 1;
  }
  CUDA(cudaMemcpyAsync(h, buf, sizeof h, cudaMemcpyDeviceToHost, s));
  int bad = 0;
  float rank_sum = (float)(ranks * (ranks + 1) / 2);
  for (int i = 0; i < n; i++) bad += h[i] != rank_sum + (float)(ranks * i);
  /* broadcast from the last rank, then gather every rank's first n, then reduce-scatter them */
  for (int i = 0; i < n; i++) h[i] = (float)(rank * 1000 + i);
  CUDA(cudaMemcpyAsync(buf, h, sizeof h, cudaMemcpyHostToDevice, s));
  NCCL(ncclGroupStart());
  NCCL(ncclBroadcast(buf, buf, n, ncclFloat32, ranks - 1, comm, s));
  NCCL(ncclAllGather(buf, gathered, n, ncclFloat32, comm, s));
  NCCL(ncclGroupEnd());
  NCCL(ncclReduceScatter(gathered, scattered, n / ranks, ncclFloat32, ncclMax, comm, s));
  CUDA(cudaEventRecord(done, s));
  if ((r = wait_for(comm, done, 20000)) != ncclSuccess) {
    say("broadcast/allGather/reduceScatter did not complete: %s", ncclGetErrorString(r));
    return 1;
  }
  CUDA(cudaMemcpyAsync(g, gathered, (size_t)ranks * n * sizeof(float), cudaMemcpyDeviceToHost, s));
  for (int q = 0; q < ranks; q++)
    for (int i = 0; i < n; i++) bad += g[q * n + i] != (float)((ranks - 1) * 1000 + i);
  CUDA(cudaMemcpyAsync(h, scattered, (n / ranks) * sizeof(float), cudaMemcpyDeviceToHost, s));
  for (int i = 0; i < n / ranks; i++) bad += h[i] != (float)((ranks - 1) * 1000 + rank * (n / ranks) + i);
  say("collectives done, %d wrong values", bad);
  return 0;
}

struct ThreadInit {
  ncclUniqueId id;
  int ranks, rank;
  ncclComm_t comm;
  ncclResult_t result;
  std::string text; /* ncclGetLastError of that thread */
};

static int run_rank(const std::string& scenario, ncclUniqueId id, int ranks, int rank) {
  g_rank = rank;
  ncclComm_t comm = nullptr;
  if (scenario == "collectives") {
    CUDA(cudaSetDevice(rank));
    ncclResult_t r = start(&comm, id, ranks, rank, 20000);
    if (r != ncclSuccess) {
      say("start failed: %s: %s", ncclGetErrorString(r), ncclGetLastError(comm));
      return 1;
    }
    int device = -1, count = 0, me = -1;
    NCCL(ncclCommCuDevice(comm, &device));
    NCCL(ncclCommCount(comm, &count));
    NCCL(ncclCommUserRank(comm, &me));
    if (device != rank || count != ranks || me != rank) say("wrong identity %d %d %d", device, count, me);
    if (collectives(comm, ranks, rank)) return 1;
    NCCL(finish(comm, ncclCommDestroy(comm)));
    return 0;
  }
  if (scenario == "duplicate-gpu") { /* every rank on GPU 0 */
    ncclResult_t r = start(&comm, id, ranks, rank, 20000);
    say("start: %s: %s", ncclGetErrorString(r), ncclGetLastError(comm));
    NCCL(finish(comm, ncclCommAbort(comm)));
    return 0;
  }
  if (scenario == "init-on-another-thread") {
    /* the device is chosen on the main thread, the blocking start runs on
     * another (as on a Deno worker): NCCL sees that thread's device, 0 */
    CUDA(cudaSetDevice(rank));
    ThreadInit t = {id, ranks, rank, nullptr, ncclSuccess, ""};
    pthread_t th;
    pthread_create(
        &th, nullptr,
        [](void* p) -> void* {
          ThreadInit* t = (ThreadInit*)p;
          t->result = ncclCommInitRank(&t->comm, t->ranks, t->id, t->rank);
          t->text = ncclGetLastError(nullptr);
          return nullptr;
        },
        &t);
    pthread_join(th, nullptr);
    say("blocking start on another thread: %s: %s; communicator %s", ncclGetErrorString(t.result), t.text.c_str(),
        t.comm ? "left behind" : "none");
    return 0;
  }
  CUDA(cudaSetDevice(rank));
  if (scenario == "init-timeout") { /* the last rank never starts */
    if (rank == ranks - 1) {
      say("stays away");
      return 0;
    }
    ncclResult_t r = start(&comm, id, ranks, rank, 300);
    double t0 = now_s();
    NCCL(finish(comm, ncclCommAbort(comm)));
    say("after 300 ms the start was %s; abort took %s", ncclGetErrorString(r), now_s() - t0 < 2 ? "< 2 s" : "too long");
    return 0;
  }
  ncclResult_t r = start(&comm, id, ranks, rank, 20000);
  if (r != ncclSuccess) {
    say("start failed: %s: %s", ncclGetErrorString(r), ncclGetLastError(comm));
    return 1;
  }
  cudaStream_t s;
  cudaEvent_t done;
  float* buf;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA(cudaMalloc((void**)&buf, 64 * sizeof(float)));
  if (scenario == "abort-once" || scenario == "double-abort") {
    /* rank 0 aborts instead of joining the collective; the others must stop */
    if (rank == 0) {
      NCCL(finish(comm, ncclCommAbort(comm)));
      if (scenario == "double-abort") { /* a use after free: AddressSanitizer stops here */
        ncclResult_t again = ncclCommAbort(comm);
        say("aborted; aborted again: %s: %s", ncclGetErrorString(again), ncclGetLastError(nullptr));
        return 0;
      }
      say("aborted");
      return 0;
    }
    NCCL(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, s));
    CUDA(cudaEventRecord(done, s));
    double t0 = now_s();
    r = wait_for(comm, done, 20000);
    say("allReduce: %s within %s: %s", ncclGetErrorString(r), now_s() - t0 < 5 ? "5 s" : "too long",
        ncclGetLastError(comm));
    NCCL(finish(comm, ncclCommAbort(comm)));
    return 0;
  }
  if (scenario == "peer-exits") { /* the last rank dies without a word */
    if (rank == ranks - 1) _exit(0);
    NCCL(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, s));
    CUDA(cudaEventRecord(done, s));
    r = wait_for(comm, done, 20000);
    say("allReduce: %s: %s", ncclGetErrorString(r), ncclGetLastError(comm));
    NCCL(finish(comm, ncclCommAbort(comm)));
    return 0;
  }
  if (scenario == "bad-arguments") {
    float host[64];
    cudaStream_t other;
    CUDA(cudaSetDevice((rank + 1) % 8));
    CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CUDA(cudaSetDevice(rank));
    ncclResult_t on_host = ncclAllReduce(host, host, 64, ncclFloat32, ncclSum, comm, s);
    std::string host_text = ncclGetLastError(nullptr);
    ncclResult_t wrong_stream = ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, other);
    std::string stream_text = ncclGetLastError(nullptr);
    ncclResult_t prod = ncclAllReduce(buf, buf, 64, ncclFloat32, ncclProd, comm, s);
    ncclResult_t root = ncclBroadcast(buf, buf, 64, ncclFloat32, ranks, comm, s);
    ncclResult_t too_long = ncclAllReduce(buf, buf, 65, ncclFloat32, ncclSum, comm, s);
    say("host memory: %s (%s); another device's stream: %s (%s); prod: %s; root %d: %s; 65 of 64 floats: %s",
        ncclGetErrorString(on_host), host_text.c_str(), ncclGetErrorString(wrong_stream), stream_text.c_str(),
        ncclGetErrorString(prod), ranks, ncclGetErrorString(root), ncclGetErrorString(too_long));
    NCCL(finish(comm, ncclCommDestroy(comm)));
    return 0;
  }
  say("unknown scenario %s", scenario.c_str());
  return 2;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nccl_emu_driver <scenario> <ranks>\n");
    return 2;
  }
  std::string scenario = argv[1];
  int ranks = atoi(argv[2]);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  const char* name = id.internal + 16; /* the stand-in's segment name, after its magic */
  int fds[2];
  if (pipe(fds) != 0) return 2;
  pid_t pids[16];
  for (int r = 0; r < ranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(fds[0]);
      out_fd = fds[1];
      alarm(60);
      int status = run_rank(scenario, id, ranks, r);
      g_rank = r;
      cudaDeviceSynchronize(); /* queued collectives of an aborted communicator drain */
      say("live communicators %d", dt_nccl_emu_live_communicators());
      exit(status); /* exit, not _exit: LeakSanitizer checks at exit */
    }
  }
  close(fds[1]);
  std::string lines;
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0) lines.append(buf, (size_t)got);
  int failed = 0;
  for (int r = 0; r < ranks; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (WIFSIGNALED(status)) printf("rank %d: killed by signal %d\n", r, WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0) printf("rank %d: exit status %d\n", r, WEXITSTATUS(status));
    failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  fputs(lines.c_str(), stdout);
  int left = 0;
  for (const char* suffix : {"-ctl", "-pg"}) {
    std::string seg = std::string(name) + suffix;
    if (shm_unlink(seg.c_str()) == 0) left++;
  }
  printf("segments left: %d\n", left);
  return failed ? 1 : 0;
}
