/* shm_sched.c — how long the kernel lets a rank's thread run before it picks
 * another: ranks that meet at a barrier every step ask for a short slice.
 *
 * Linux's EEVDF scheduler (6.12 and later) takes a per-thread slice request
 * through sched_setattr's sched_runtime for SCHED_OTHER and SCHED_BATCH
 * threads (100 µs to 100 ms). A shorter slice gives a thread an earlier
 * deadline, so when its peer's arrival wakes it on a core another program
 * holds, it runs within about its slice instead of after that program's
 * (~3 ms by default), while its share of the CPU stays what it was. On a
 * busy machine a rank that waits that long makes every other rank wait too,
 * once per step. Older kernels ignore the request: the granted slice reads 0. */
#define _GNU_SOURCE
#include "shm_internal.h"
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr (uapi linux/sched/types.h), version 1 (56 bytes). */
typedef struct {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
} dt_shm_sched_attr_t;

#ifndef SCHED_BATCH
#define SCHED_BATCH 3
#endif

/** Asks the kernel for a scheduler slice of `slice_ns` for the calling thread
 *  (0: the kernel's default again), keeping its policy and nice value; writes
 *  the slice the kernel now reports for the thread: the request as clamped,
 *  or the default for 0; 0 where it reports none (a kernel before 6.12, or a
 *  real-time thread, which is left alone). */
DT_EXPORT dt_status dt_shm_request_slice(int64_t slice_ns, int64_t* out_granted_ns) {
  if (!out_granted_ns) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_request_slice: out_granted_ns is NULL");
  *out_granted_ns = 0;
  if (slice_ns < 0) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_request_slice: slice %lld ns is negative", (long long)slice_ns);
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
  dt_shm_sched_attr_t a;
  memset(&a, 0, sizeof a);
  if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0) != 0) {
    return dt_shm_fail_(DT_ERR_SYS, "dt_shm_request_slice: sched_getattr failed: %s", strerror(errno));
  }
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) return DT_OK;
  a.size = sizeof a;
  a.sched_flags = 0;
  a.sched_runtime = (uint64_t)slice_ns; /* policy and nice as they were: the same share of the CPU */
  if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) {
    return dt_shm_fail_(DT_ERR_SYS, "dt_shm_request_slice: sched_setattr(slice %lld ns) failed: %s",
                        (long long)slice_ns, strerror(errno));
  }
  memset(&a, 0, sizeof a);
  if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0) == 0) *out_granted_ns = (int64_t)a.sched_runtime;
#else
  (void)slice_ns;
#endif
  return DT_OK;
}
