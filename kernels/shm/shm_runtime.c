/* shm_runtime.c — identity and error text of the shared-memory collective
 * library (libdtrain_shm.so): the same dt_abi_version / dt_last_error pair
 * as the kernel libraries, so ffi/native.ts loads and checks it the same way. */
#include "shm_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#ifndef DT_BUILD_HASH
#define DT_BUILD_HASH "unknown"
#endif

static __thread char dt_shm_error_[1024];

dt_status dt_shm_fail_(dt_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dt_shm_error_, sizeof dt_shm_error_, fmt, ap);
  va_end(ap);
  return status;
}

const char* dt_shm_error_text_(void) { return dt_shm_error_; }

int64_t dt_shm_now_ns_(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

DT_EXPORT int32_t dt_abi_version(void) { return DT_ABI_VERSION; }
DT_EXPORT const char* dt_last_error(void) { return dt_shm_error_; }
DT_EXPORT const char* dt_build_hash(void) { return DT_BUILD_HASH; }
