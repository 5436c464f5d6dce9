/* dt_error.h — how every native library of dtrain reports a failure: a status
 * code returned to the caller, with printf-style text kept per thread for
 * dt_last_error(), and the macros that return them. Host code only; the CPU,
 * CUDA and shared-memory libraries all take it from here. The one file of a
 * library that owns dt_last_error() defines DT_ERROR_DEFINE before including
 * it, which emits the definitions there and nowhere else. */
#pragma once
#include <stdarg.h>
#include <stdio.h>
#include "dt_common.h"

/* Longest error text kept (longer text is cut). */
#define DT_ERROR_TEXT_MAX 1024

/* Records printf-style text for dt_last_error() and returns status. */
DT_EXTERN_C dt_status dt_fail_(dt_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* Puts "<context>: " in front of the current error text and returns status. */
DT_EXTERN_C dt_status dt_with_context_(dt_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* The current thread's error text (what dt_last_error() returns). */
DT_EXTERN_C const char* dt_error_text_(void);

/* Returns DT_ERR_ARG with the text when cond does not hold. */
#define DT_REQUIRE_(cond, ...)                             \
  do {                                                     \
    if (!(cond)) return dt_fail_(DT_ERR_ARG, __VA_ARGS__); \
  } while (0)

/* Propagates a failed dt_status from a helper. */
#define DT_TRY_(expr)                   \
  do {                                  \
    dt_status dt_st_ = (expr);          \
    if (dt_st_ != DT_OK) return dt_st_; \
  } while (0)

#ifdef DT_ERROR_DEFINE
static __thread char dt_error_buf_[DT_ERROR_TEXT_MAX];

DT_EXTERN_C dt_status dt_fail_(dt_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dt_error_buf_, sizeof dt_error_buf_, fmt, ap);
  va_end(ap);
  return status;
}

DT_EXTERN_C dt_status dt_with_context_(dt_status status, const char* fmt, ...) {
  char rest[DT_ERROR_TEXT_MAX];
  memcpy(rest, dt_error_buf_, sizeof rest);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dt_error_buf_, sizeof dt_error_buf_, fmt, ap);
  va_end(ap);
  /* then ": " and the earlier text, cut at the buffer's end */
  size_t at = n < 0 ? 0 : (size_t)n < sizeof dt_error_buf_ ? (size_t)n : sizeof dt_error_buf_ - 1;
  const char* tail[2] = {": ", rest};
  for (int part = 0; part < 2; part++)
    for (const char* c = tail[part]; *c && at + 1 < sizeof dt_error_buf_; c++) dt_error_buf_[at++] = *c;
  dt_error_buf_[at] = 0;
  return status;
}

DT_EXTERN_C const char* dt_error_text_(void) { return dt_error_buf_; }
#endif
