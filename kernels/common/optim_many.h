/* optim_many.h — the layout shared by the one-launch optimizer steps
 * (dt_adamw_many, dt_sgd_many, and dt_zero_many of zero_grad): each tensor is cut into chunks of
 * DT_OPTIM_CHUNK elements, tensor t owning chunks [first[t], first[t+1]), so
 * one grid walks every parameter of a model. The per-element arithmetic is
 * adamw.h's and sgd.h's, with each tensor's scalars made once on the host:
 * the same bits as one dt_adamw / dt_sgd call per tensor. */
#pragma once
#include "adamw.h"
#include "dt_common.h"
#include "sgd.h"

/* Elements per chunk: 16 per thread of a 256-thread block. */
#define DT_OPTIM_CHUNK 4096

/* One tensor of dt_adamw_many, as the device reads it. */
typedef struct {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  dt_adamw_scalars s;
} dt_adamw_entry;

/* One tensor of dt_sgd_many (buf NULL when momentum is 0). */
typedef struct {
  float* p;
  const float* g;
  float* buf;
  int64_t n;
  dt_sgd_scalars s;
} dt_sgd_entry;

/* One tensor of dt_zero_many. */
typedef struct {
  float* p;
  int64_t n;
} dt_zero_entry;

DT_HD int64_t dt_optim_chunks(int64_t n) { return (n + DT_OPTIM_CHUNK - 1) / DT_OPTIM_CHUNK; }

/* The tensor that owns chunk c: the last t with first[t] <= c (an empty
 * tensor owns no chunk, so the last such t is never one). */
DT_HD int64_t dt_optim_chunk_owner(const int64_t* first, int64_t num, int64_t c) {
  int64_t lo = 0, hi = num - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (first[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
