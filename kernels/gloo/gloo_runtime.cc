/* gloo_runtime.cc — identity and error text of libdtrain_gloo.so: the same
 * dt_abi_version / dt_last_error / dt_build_hash trio as the other native
 * libraries, so ffi/native.ts loads and checks it the same way. */
#include <cstdarg>
#include <cstdio>
#include <ctime>

#include "gloo_internal.h"

#ifndef DT_BUILD_HASH
#define DT_BUILD_HASH "unknown"
#endif

static thread_local char dt_gloo_error_[2048];

dt_status dt_gloo_fail_(dt_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dt_gloo_error_, sizeof dt_gloo_error_, fmt, ap);
  va_end(ap);
  return status;
}

const char* dt_gloo_error_text_() { return dt_gloo_error_; }

std::string dt_gloo_text_(const std::exception& e) {
  std::string text = e.what();
  if (!text.empty() && text[0] == '[') {
    size_t end = text.find("] ");
    if (end != std::string::npos) text = text.substr(end + 2);
  }
  return text;
}

int64_t dt_gloo_now_ms_() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

DT_EXPORT int32_t dt_abi_version(void) { return DT_ABI_VERSION; }
DT_EXPORT const char* dt_last_error(void) { return dt_gloo_error_; }
DT_EXPORT const char* dt_build_hash(void) { return DT_BUILD_HASH; }

#include <gloo/config.h>
#define DT_GLOO_STR_(x) #x
#define DT_GLOO_XSTR_(x) DT_GLOO_STR_(x)
/** The version of Gloo this library was built against, e.g. "0.5.0". */
DT_EXPORT const char* dt_gloo_version(void) {
  return DT_GLOO_XSTR_(GLOO_VERSION_MAJOR) "." DT_GLOO_XSTR_(GLOO_VERSION_MINOR) "." DT_GLOO_XSTR_(GLOO_VERSION_PATCH);
}
