/* fsync_batch.c — flushing several files and folders to disk at once, for the
 * checkpoint's commit (train/checkpoint/save.ts): one thread per path, so the
 * file system commits them together (ext4 and XFS gather concurrent fsyncs
 * into one journal commit) instead of one commit after another. Host-only:
 * not part of the kernel ABI.
 *
 * Each path is opened again read-only and fsynced: fsync flushes the inode,
 * whichever descriptor asks, and since Linux 4.13 a writeback error nobody has
 * seen yet is reported to a descriptor opened after it, so nothing written
 * through another descriptor is missed. */
#include "cpu_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define DT_FSYNC_MAX_PATHS 64

typedef struct {
  const char* path;
  int err;         /* errno of the failed step, 0 when durable */
  const char* what; /* the failed step: "open" or "fsync" */
} dt_fsync_job_t;

static void* dt_fsync_one_(void* arg) {
  dt_fsync_job_t* j = (dt_fsync_job_t*)arg;
  int fd = open(j->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    j->err = errno;
    j->what = "open";
    return NULL;
  }
  if (fsync(fd) != 0) {
    j->err = errno;
    j->what = "fsync";
  }
  close(fd);
  return NULL;
}

/** Flushes the `n` files and folders named in `paths` (n NUL-terminated
 *  strings, back to back) to disk, all at once; returns when every one is
 *  durable, or DT_ERR_SYS naming the first path (in the given order) that
 *  failed and why. */
DT_EXPORT dt_status dt_cpu_fsync_paths(const char* paths, int32_t n) {
  if (n < 0 || n > DT_FSYNC_MAX_PATHS) {
    return dt_fail_(DT_ERR_ARG, "dt_cpu_fsync_paths: %d paths, expected 0 to %d", n, DT_FSYNC_MAX_PATHS);
  }
  if (n > 0 && !paths) return dt_fail_(DT_ERR_ARG, "dt_cpu_fsync_paths: paths is NULL but n is %d", n);
  dt_fsync_job_t jobs[DT_FSYNC_MAX_PATHS];
  pthread_t threads[DT_FSYNC_MAX_PATHS];
  int started[DT_FSYNC_MAX_PATHS];
  const char* p = paths;
  for (int32_t i = 0; i < n; i++) {
    jobs[i] = (dt_fsync_job_t){p, 0, NULL};
    p += strlen(p) + 1;
  }
  /* the calling thread takes the first path itself; a thread that cannot be started is done inline */
  for (int32_t i = 1; i < n; i++) started[i] = pthread_create(&threads[i], NULL, dt_fsync_one_, &jobs[i]) == 0;
  if (n > 0) dt_fsync_one_(&jobs[0]);
  for (int32_t i = 1; i < n; i++) {
    if (started[i]) pthread_join(threads[i], NULL);
    else dt_fsync_one_(&jobs[i]);
  }
  for (int32_t i = 0; i < n; i++) {
    if (jobs[i].err) {
      return dt_fail_(DT_ERR_SYS, "%s of %s failed: %s", jobs[i].what, jobs[i].path, strerror(jobs[i].err));
    }
  }
  return DT_OK;
}
