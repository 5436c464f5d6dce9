/* index.c — CPU loops of the dimension-wise index kernels on tensors viewed
 * as (outer, D, inner): dt_gather_dim (torch.gather) and dt_index_select,
 * and their backwards dt_scatter_add_dim and dt_index_add, which add in j
 * order within disjoint (o, column) blocks, so results are deterministic.
 * Every index is checked before anything is written. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "index.h"
#include "ops_checks.h"

#define COPY_GRAIN_BYTES (1 << 18)
/* Columns of a scatter block (one work item: an outer index and a tile). */
#define COL_TILE 512

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  char* out;
  const char* inp;
  const int32_t* idx;
  int64_t D, J, inner, elem;
} index_ctx_;

/* Work item = one output element of dt_gather_dim. */
static void gather_range_(void* vctx, int64_t k0, int64_t k1) {
  const index_ctx_* c = vctx;
  for (int64_t k = k0; k < k1; k++)
    memcpy(c->out + k * c->elem, c->inp + dt_gather_dim_src(k, c->idx, c->D, c->J, c->inner) * c->elem,
           (size_t)c->elem);
}

/* Work item = one (o, j) row of inner elements of dt_index_select. */
static void select_rows_range_(void* vctx, int64_t r0, int64_t r1) {
  const index_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    int64_t k = r * c->inner;
    memcpy(c->out + k * c->elem, c->inp + dt_index_select_src(k, c->idx, c->D, c->J, c->inner) * c->elem,
           (size_t)(c->inner * c->elem));
  }
}

typedef struct {
  float* dinp;
  const float* dout;
  const int32_t* idx;
  int64_t D, J, inner, tiles;
  int per_element; /* 1: dt_scatter_add_dim (idx per element), 0: dt_index_add (idx per j) */
} scatter_ctx_;

/* Work item = (o, tile of columns): zero its D x width block of dinp, then
 * add dout rows j = 0..J-1 into the rows their indices name. */
DT_VEC_CLONES static void scatter_range_(void* vctx, int64_t t0, int64_t t1) {
  const scatter_ctx_* c = vctx;
  for (int64_t t = t0; t < t1; t++) {
    int64_t o = t / c->tiles, i0 = (t % c->tiles) * COL_TILE;
    int64_t width = c->inner - i0 < COL_TILE ? c->inner - i0 : COL_TILE;
    float* dst = c->dinp + o * c->D * c->inner + i0;
    for (int64_t d = 0; d < c->D; d++) memset(dst + d * c->inner, 0, (size_t)width * sizeof(float));
    for (int64_t j = 0; j < c->J; j++) {
      int64_t row = (o * c->J + j) * c->inner + i0;
      const float* src = c->dout + row;
      if (c->per_element) {
        const int32_t* ix = c->idx + row;
        for (int64_t k = 0; k < width; k++) dst[(int64_t)ix[k] * c->inner + k] += src[k];
      } else {
        float* d = dst + (int64_t)c->idx[j] * c->inner;
        for (int64_t k = 0; k < width; k++) d[k] += src[k];
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

/* The first of idx[0:n] outside [0, D), worded as dt_fail_index_ (a data error). */
static dt_status check_indices_(const char* name, const int32_t* idx, int64_t n, int64_t D) {
  for (int64_t k = 0; k < n; k++)
    if (idx[k] < 0 || idx[k] >= D) return dt_fail_index_(name, idx[k], k, D);
  return DT_OK;
}

DT_EXPORT dt_status dt_gather_dim(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D, int64_t J,
                                  int64_t inner, int64_t elem_bytes, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_gather_dim(out, inp, idx, outer, D, J, inner, elem_bytes));
  int64_t n = outer * J * inner;
  if (n == 0) return DT_OK;
  DT_TRY_(check_indices_("dt_gather_dim", idx, n, D));
  index_ctx_ c = {out, inp, idx, D, J, inner, elem_bytes};
  dt_parallel_for_(n, COPY_GRAIN_BYTES / 16, gather_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_index_select(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D,
                                    int64_t J, int64_t inner, int64_t elem_bytes, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_index_select(out, inp, idx, outer, D, J, inner, elem_bytes));
  if (outer * J * inner == 0) return DT_OK;
  DT_TRY_(check_indices_("dt_index_select", idx, J, D));
  index_ctx_ c = {out, inp, idx, D, J, inner, elem_bytes};
  int64_t row_bytes = inner * elem_bytes;
  dt_parallel_for_(outer * J, row_bytes >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / row_bytes, select_rows_range_,
                   &c);
  return DT_OK;
}

/* The shared run of the two backwards, once their argument checks passed:
 * every index is checked before anything is written. */
static dt_status scatter_run_(const char* name, float* dinp, const float* dout, const int32_t* idx, int64_t outer,
                              int64_t D, int64_t J, int64_t inner, int per_element) {
  if (outer * D * inner == 0) return DT_OK;
  DT_TRY_(check_indices_(name, idx, per_element ? outer * J * inner : J, D));
  scatter_ctx_ c = {dinp, dout, idx, D, J, inner, (inner + COL_TILE - 1) / COL_TILE, per_element};
  int64_t per_item = (D + J) * (inner < COL_TILE ? inner : COL_TILE) * 4;
  dt_parallel_for_(outer * c.tiles, per_item >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / per_item, scatter_range_,
                   &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_scatter_add_dim(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                       int64_t J, int64_t inner, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_scatter_add_dim(dinp, dout, idx, outer, D, J, inner));
  return scatter_run_("dt_scatter_add_dim", dinp, dout, idx, outer, D, J, inner, 1);
}

DT_EXPORT dt_status dt_index_add(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                 int64_t J, int64_t inner, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_index_add(dinp, dout, idx, outer, D, J, inner));
  return scatter_run_("dt_index_add", dinp, dout, idx, outer, D, J, inner, 0);
}
