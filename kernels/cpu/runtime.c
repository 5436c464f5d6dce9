/* runtime.c — library identity, error text, memory and the thread pool of
 * the CPU kernel library. */
#define DT_ERROR_DEFINE /* this file owns dt_last_error()'s text */
#include "cpu_internal.h"
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef DT_BUILD_HASH
#define DT_BUILD_HASH "unknown"
#endif

DT_EXPORT int32_t dt_abi_version(void) { return DT_ABI_VERSION; }
DT_EXPORT const char* dt_last_error(void) { return dt_error_text_(); }
DT_EXPORT const char* dt_build_hash(void) { return DT_BUILD_HASH; }
DT_EXPORT const char* dt_backend_name(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "cpu-avx2";
  return "cpu-generic";
}

/* ---- memory ---------------------------------------------------------------- */

DT_EXPORT void* dt_alloc(int64_t bytes) {
  if (dt_check_alloc(bytes) != DT_OK) return NULL;
  void* p = NULL;
  size_t n = bytes == 0 ? 64 : (size_t)((bytes + 63) & ~63LL);
  int rc = posix_memalign(&p, 64, n);
  if (rc != 0) {
    dt_fail_(DT_ERR_ALLOC, "dt_alloc: cannot allocate %lld bytes: %s", (long long)bytes, strerror(rc));
    return NULL;
  }
  return p;
}

DT_EXPORT dt_status dt_free(void* p) {
  free(p);
  return DT_OK;
}

DT_EXPORT dt_status dt_memcpy(void* dst, const void* src, int64_t bytes, int32_t kind, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_memcpy(dst, src, bytes, kind));
  if (bytes > 0) memmove(dst, src, (size_t)bytes);
  return DT_OK;
}

DT_EXPORT dt_status dt_synchronize(void* stream) {
  (void)stream;
  return DT_OK;
}

/* Data errors (bad indices, values a cast cannot hold) are reported by the
 * call that finds them here, so none is ever left for later. */
DT_EXPORT dt_status dt_deferred_error(void* stream) {
  (void)stream;
  return DT_OK;
}

/* ---- thread pool -------------------------------------------------------------
 * A fixed set of workers that sleep on a condition variable between jobs. A job
 * splits [0, n) into one chunk per thread (the same chunks whoever runs them).
 * Chunks are claimed, not assigned: the caller and every worker that wakes
 * take the next unclaimed chunk until none is left, and the caller then waits
 * only for chunks already being run. So a worker that the scheduler does not
 * run soon (a machine with more busy threads than cores) costs the job
 * nothing: the caller runs its chunk too, instead of waiting a scheduler
 * slice for it. A claim names its job (the generation in the claim word's high
 * half), so a worker that wakes after its job ended claims nothing of the next. */

#define DT_MAX_THREADS 64

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  int nthreads;     /* including the calling thread */
  int job_threads;  /* chunks of the current job (one per taking-part thread) */
  int started;      /* workers created */
  uint64_t generation;
  dt_range_fn_ fn;
  void* ctx;
  int64_t n, chunk;
  /* (generation << 32) | next chunk to claim, for the current job */
  uint64_t claim;
  /* chunks of the current job that have finished */
  int64_t finished;
} dt_pool_t_;

static dt_pool_t_ pool_ = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
                           1, 1, 0, 0, NULL, NULL, 0, 0, 0, 0};

/* Claims the next chunk of job `gen` (of `chunks`); -1 when none is left or the job is over. */
static int64_t dt_pool_claim_(uint64_t gen, int64_t chunks) {
  uint64_t v = __atomic_load_n(&pool_.claim, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((v >> 32) != (gen & 0xffffffffu) || (int64_t)(v & 0xffffffffu) >= chunks) return -1;
    if (__atomic_compare_exchange_n(&pool_.claim, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return (int64_t)(v & 0xffffffffu);
  }
}

/* Runs claimed chunks of job `gen` until none is left; returns how many this thread ran. */
static int64_t dt_pool_run_chunks_(uint64_t gen, int64_t chunks, dt_range_fn_ fn, void* ctx, int64_t n,
                                   int64_t chunk) {
  int64_t ran = 0;
  for (int64_t c; (c = dt_pool_claim_(gen, chunks)) >= 0;) {
    int64_t begin = chunk * c, end = begin + chunk;
    if (end > n) end = n;
    if (begin < end) fn(ctx, begin, end);
    ran++;
  }
  return ran;
}

static void* dt_worker_(void* arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool_.mu);
  for (;;) {
    while (pool_.generation == seen) pthread_cond_wait(&pool_.work_cv, &pool_.mu);
    seen = pool_.generation;
    dt_range_fn_ fn = pool_.fn;
    void* ctx = pool_.ctx;
    int64_t n = pool_.n, chunk = pool_.chunk, chunks = pool_.job_threads;
    pthread_mutex_unlock(&pool_.mu);
    int64_t ran = dt_pool_run_chunks_(seen, chunks, fn, ctx, n, chunk);
    pthread_mutex_lock(&pool_.mu);
    /* the job is still this one while a chunk of it has not finished: the caller waits for them */
    if (ran > 0 && (pool_.finished += ran) == chunks) pthread_cond_signal(&pool_.done_cv);
  }
  return NULL;
}

static int dt_default_threads_(void) {
  const char* env = getenv("DTRAIN_NUM_THREADS");
  if (env && atoi(env) > 0) return atoi(env);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int pool_initialised_ = 0;

DT_EXPORT dt_status dt_set_num_threads(int32_t n) {
  DT_TRY_(dt_check_set_num_threads(n, DT_MAX_THREADS));
  pthread_mutex_lock(&pool_.mu);
  pool_initialised_ = 1;
  while (pool_.started < n - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, dt_worker_, (void*)(intptr_t)(pool_.started + 1));
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      pthread_mutex_unlock(&pool_.mu);
      return dt_fail_(DT_ERR_SYS, "dt_set_num_threads: pthread_create: %s", strerror(rc));
    }
    pool_.started++;
  }
  pool_.nthreads = n;
  pthread_mutex_unlock(&pool_.mu);
  return DT_OK;
}

int dt_num_threads_(void) {
  if (!pool_initialised_) {
    int n = dt_default_threads_();
    if (n > DT_MAX_THREADS) n = DT_MAX_THREADS;
    dt_set_num_threads(n);
  }
  return pool_.nthreads;
}

DT_EXPORT int32_t dt_get_num_threads(void) { return dt_num_threads_(); }

/* One job at a time: a call from a second thread (a background data-loader
 * kernel) or from inside a job runs serially instead of waiting for the pool. */
static int pool_busy_ = 0;

void dt_parallel_for_(int64_t n, int64_t grain, dt_range_fn_ fn, void* ctx) {
  if (n <= 0) return;
  int threads = dt_num_threads_();
  if (grain < 1) grain = 1;
  int64_t max_chunks = (n + grain - 1) / grain;
  if (threads > max_chunks) threads = (int)max_chunks;
  if (threads <= 1 || __atomic_exchange_n(&pool_busy_, 1, __ATOMIC_ACQUIRE)) {
    fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&pool_.mu);
  pool_.job_threads = threads;
  pool_.fn = fn;
  pool_.ctx = ctx;
  pool_.n = n;
  pool_.chunk = (n + threads - 1) / threads;
  pool_.finished = 0;
  uint64_t gen = ++pool_.generation;
  __atomic_store_n(&pool_.claim, (gen & 0xffffffffu) << 32, __ATOMIC_RELEASE);
  int64_t chunk = pool_.chunk;
  pthread_cond_broadcast(&pool_.work_cv);
  pthread_mutex_unlock(&pool_.mu);
  int64_t ran = dt_pool_run_chunks_(gen, threads, fn, ctx, n, chunk);
  pthread_mutex_lock(&pool_.mu);
  pool_.finished += ran;
  while (pool_.finished < threads) pthread_cond_wait(&pool_.done_cv, &pool_.mu);
  pthread_mutex_unlock(&pool_.mu);
  __atomic_store_n(&pool_busy_, 0, __ATOMIC_RELEASE);
}
