/* index.c — CPU loops of the dimension-wise index kernels on tensors viewed
 * as (outer, D, inner): dt_gather_dim (torch.gather) and dt_index_select,
 * and their backwards dt_scatter_add_dim and dt_index_add, which add in j
 * order within disjoint (o, column) blocks, so results are deterministic.
 * Every index is checked before anything is written. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "index.h"

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

static dt_status check_sizes_(const char* name, int64_t outer, int64_t D, int64_t J, int64_t inner, int64_t elem) {
  DT_REQUIRE_(outer >= 0 && D >= 0 && J >= 0 && inner >= 0,
              "%s: negative size (outer=%lld D=%lld J=%lld inner=%lld)", name, (long long)outer, (long long)D,
              (long long)J, (long long)inner);
  DT_REQUIRE_(elem >= 1 && elem <= 64, "%s: elem_bytes=%lld must be in [1, 64]", name, (long long)elem);
  int64_t a, b;
  DT_REQUIRE_(dt_mul_ok_(outer, inner, &a) && dt_mul_ok_(a, D > J ? D : J, &b) && dt_mul_ok_(b, elem, &b),
              "%s: size overflows (outer=%lld D=%lld J=%lld inner=%lld)", name, (long long)outer, (long long)D,
              (long long)J, (long long)inner);
  return DT_OK;
}

/* Checks idx[0:n] against [0, D); the error names the first bad one. */
static dt_status check_indices_(const char* name, const int32_t* idx, int64_t n, int64_t D) {
  for (int64_t k = 0; k < n; k++) {
    if (idx[k] < 0 || idx[k] >= D)
      return dt_fail_(DT_ERR_ARG, "%s: index %d at position %lld is outside [0, %lld)", name, idx[k], (long long)k,
                      (long long)D);
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_gather_dim(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D, int64_t J,
                                  int64_t inner, int64_t elem_bytes, void* stream) {
  (void)stream;
  dt_status st = check_sizes_("dt_gather_dim", outer, D, J, inner, elem_bytes);
  int64_t n = outer * J * inner;
  if (st != DT_OK || n == 0) return st;
  DT_REQUIRE_(idx, "dt_gather_dim: null idx");
  if ((st = check_indices_("dt_gather_dim", idx, n, D)) != DT_OK) return st;
  DT_REQUIRE_(out && inp, "dt_gather_dim: null pointer (out=%p inp=%p)", out, inp);
  index_ctx_ c = {out, inp, idx, D, J, inner, elem_bytes};
  dt_parallel_for_(n, COPY_GRAIN_BYTES / 16, gather_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_index_select(void* out, const void* inp, const int32_t* idx, int64_t outer, int64_t D,
                                    int64_t J, int64_t inner, int64_t elem_bytes, void* stream) {
  (void)stream;
  dt_status st = check_sizes_("dt_index_select", outer, D, J, inner, elem_bytes);
  if (st != DT_OK || outer * J * inner == 0) return st;
  DT_REQUIRE_(idx, "dt_index_select: null idx");
  if ((st = check_indices_("dt_index_select", idx, J, D)) != DT_OK) return st;
  DT_REQUIRE_(out && inp, "dt_index_select: null pointer (out=%p inp=%p)", out, inp);
  index_ctx_ c = {out, inp, idx, D, J, inner, elem_bytes};
  int64_t row_bytes = inner * elem_bytes;
  dt_parallel_for_(outer * J, row_bytes >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / row_bytes, select_rows_range_,
                   &c);
  return DT_OK;
}

static dt_status scatter_run_(const char* name, float* dinp, const float* dout, const int32_t* idx, int64_t outer,
                              int64_t D, int64_t J, int64_t inner, int per_element) {
  dt_status st = check_sizes_(name, outer, D, J, inner, 4);
  if (st != DT_OK || outer * D * inner == 0) {
    if (st == DT_OK && J > 0 && outer * inner > 0) /* D == 0 with indices to add: none can be valid */
      return dt_fail_(DT_ERR_ARG, "%s: %lld indices into an empty dimension (D=0)", name, (long long)J);
    return st;
  }
  DT_REQUIRE_(idx || J == 0, "%s: null idx", name);
  if ((st = check_indices_(name, idx, per_element ? outer * J * inner : J, D)) != DT_OK) return st;
  DT_REQUIRE_(dinp && (dout || J == 0), "%s: null pointer (dinp=%p dout=%p)", name, (void*)dinp, (const void*)dout);
  scatter_ctx_ c = {dinp, dout, idx, D, J, inner, (inner + COL_TILE - 1) / COL_TILE, per_element};
  int64_t per_item = (D + J) * (inner < COL_TILE ? inner : COL_TILE) * 4;
  dt_parallel_for_(outer * c.tiles, per_item >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / per_item, scatter_range_,
                   &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_scatter_add_dim(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                       int64_t J, int64_t inner, void* stream) {
  (void)stream;
  return scatter_run_("dt_scatter_add_dim", dinp, dout, idx, outer, D, J, inner, 1);
}

DT_EXPORT dt_status dt_index_add(float* dinp, const float* dout, const int32_t* idx, int64_t outer, int64_t D,
                                 int64_t J, int64_t inner, void* stream) {
  (void)stream;
  return scatter_run_("dt_index_add", dinp, dout, idx, outer, D, J, inner, 0);
}
