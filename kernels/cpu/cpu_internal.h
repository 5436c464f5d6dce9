/* cpu_internal.h — helpers shared by the CPU kernel files: error text, the
 * thread pool, and argument checks. Not part of the exported ABI. */
#pragma once
#include "dt_common.h"

/* Records the error text for dt_last_error() and returns status. */
dt_status dt_fail_(dt_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs fn(ctx, begin, end) over [0, n) split into contiguous chunks across the
 * pool's threads (the calling thread takes one). Chunks are at least `grain`. */
typedef void (*dt_range_fn_)(void* ctx, int64_t begin, int64_t end);
void dt_parallel_for_(int64_t n, int64_t grain, dt_range_fn_ fn, void* ctx);
int dt_num_threads_(void);

#define DT_REQUIRE_(cond, ...) \
  do {                         \
    if (!(cond)) return dt_fail_(DT_ERR_ARG, __VA_ARGS__); \
  } while (0)
