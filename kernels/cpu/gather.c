/* gather.c — CPU loops of the index-driven row copies: dt_embedding_fwd/bwd
 * (table rows by token id; the backward adds in index order, so it is
 * deterministic) and dt_gather_rows (data-loader collation). Indices are all
 * checked before anything is written. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"

#define COPY_GRAIN_BYTES (1 << 18)

static int64_t grain_for_(int64_t bytes_per_item) {
  return bytes_per_item >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / (bytes_per_item > 0 ? bytes_per_item : 1);
}

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  char* out;
  const char* table;
  const int32_t* idx;
  int64_t row_bytes;
} gather_ctx_;

static void gather_range_(void* vctx, int64_t i0, int64_t i1) {
  const gather_ctx_* c = vctx;
  /* Rows of one 4- or 8-byte element (labels, table lookups) as typed loads: a memcpy call per
   * element costs ~10x more. memcpy of a fixed size compiles to one unaligned-safe load. */
  if (c->row_bytes == 4) {
    for (int64_t i = i0; i < i1; i++) {
      uint32_t v;
      memcpy(&v, c->table + (int64_t)c->idx[i] * 4, 4);
      memcpy(c->out + i * 4, &v, 4);
    }
    return;
  }
  if (c->row_bytes == 8) {
    for (int64_t i = i0; i < i1; i++) {
      uint64_t v;
      memcpy(&v, c->table + (int64_t)c->idx[i] * 8, 8);
      memcpy(c->out + i * 8, &v, 8);
    }
    return;
  }
  for (int64_t i = i0; i < i1; i++)
    memcpy(c->out + i * c->row_bytes, c->table + (int64_t)c->idx[i] * c->row_bytes, (size_t)c->row_bytes);
}

typedef struct {
  float* dtable;
  const float* dout;
  const int32_t* idx;
  int64_t n, C;
} embed_bwd_ctx_;

/* Columns [j0, j1) of dtable: zero, then add dout rows in index order. Each
 * thread owns whole columns, so no two threads touch the same element. */
DT_VEC_CLONES static void embed_bwd_cols_range_(void* vctx, int64_t j0, int64_t j1) {
  const embed_bwd_ctx_* c = vctx;
  for (int64_t i = 0; i < c->n; i++) {
    float* dst = c->dtable + (int64_t)c->idx[i] * c->C;
    const float* src = c->dout + i * c->C;
    for (int64_t j = j0; j < j1; j++) dst[j] += src[j];
  }
}

/* ---- launchers ---------------------------------------------------------------- */

/* Checks every index against [0, limit) (limit < 0: only >= 0 is known). */
static dt_status check_indices_(const char* name, const int32_t* idx, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = idx[i];
    if (v < 0 || (limit >= 0 && v >= limit)) return dt_fail_index_(name, v, i, limit);
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_embedding_fwd(float* out, const int32_t* idx, const float* table, int64_t n, int64_t V,
                                     int64_t C, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_embedding_fwd(out, idx, table, n, V, C));
  if (n == 0) return DT_OK;
  dt_status st = check_indices_("dt_embedding_fwd", idx, n, V);
  if (st != DT_OK || C == 0) return st;
  gather_ctx_ c = {(char*)out, (const char*)table, idx, C * (int64_t)sizeof(float)};
  dt_parallel_for_(n, grain_for_(c.row_bytes), gather_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_embedding_bwd(float* dtable, const float* dout, const int32_t* idx, int64_t n, int64_t V,
                                     int64_t C, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_embedding_bwd(dtable, dout, idx, n, V, C));
  dt_status st = check_indices_("dt_embedding_bwd", idx, n, V);
  if (st != DT_OK || V == 0 || C == 0) return st;
  memset(dtable, 0, (size_t)(V * C) * sizeof(float));
  embed_bwd_ctx_ c = {dtable, dout, idx, n, C};
  /* a column costs n additions; split columns so a chunk has ~64K of them */
  int64_t grain = n >= (1 << 16) ? 1 : (1 << 16) / (n > 0 ? n : 1);
  dt_parallel_for_(C, grain, embed_bwd_cols_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_gather_rows(void* out, const void* inp, const int32_t* idx, int64_t n, int64_t row_bytes,
                                   void* stream) {
  (void)stream;
  DT_TRY_(dt_check_gather_rows(out, inp, idx, n, row_bytes));
  if (n == 0) return DT_OK;
  /* The ABI passes no row count for inp, so only negative indices can be refused. */
  dt_status st = check_indices_("dt_gather_rows", idx, n, -1);
  if (st != DT_OK || row_bytes == 0) return st;
  gather_ctx_ c = {out, inp, idx, row_bytes};
  dt_parallel_for_(n, grain_for_(row_bytes), gather_range_, &c);
  return DT_OK;
}
