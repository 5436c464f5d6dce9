/* shm_runtime.c — identity and error text of the shared-memory collective
 * library (libdtrain_shm.so): the same dt_abi_version / dt_last_error pair
 * as the kernel libraries, so ffi/native.ts loads and checks it the same way. */
#define DT_ERROR_DEFINE /* this file owns dt_last_error()'s text */
#include "shm_internal.h"
#include <time.h>

#ifndef DT_BUILD_HASH
#define DT_BUILD_HASH "unknown"
#endif

int64_t dt_shm_now_ns_(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

DT_EXPORT int32_t dt_abi_version(void) { return DT_ABI_VERSION; }
DT_EXPORT const char* dt_last_error(void) { return dt_error_text_(); }
DT_EXPORT const char* dt_build_hash(void) { return DT_BUILD_HASH; }
