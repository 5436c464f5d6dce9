/* reduce_dim.c — CPU loops of dt_reduce_dim: sum, mean, max and min along
 * one dimension of a tensor viewed as (outer, D, inner). Contiguous rows
 * (inner = 1) reduce with reduce.h's fixed eight-lane sums; otherwise a tile
 * of inner columns is reduced at once so reads stay contiguous. Sums are in
 * double in an order fixed by the layout, so any thread count gives the same
 * bits. The compare step is reduce_dim.h's. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "reduce.h"
#include "ops_checks.h"
#include "reduce_dim.h"

#define REDUCE_GRAIN_ELEMS (1 << 15)
/* Columns reduced together in the inner > 1 case (stack accumulators). */
#define COL_TILE 256

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  int32_t op;
  float* out;
  int32_t* idx;
  const float* inp;
  int64_t D, inner, tiles; /* tiles: column tiles per outer index */
} reduce_ctx_;

/* Work item = one row (inner == 1). */
static void rows_range_(void* vctx, int64_t r0, int64_t r1) {
  const reduce_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    const float* x = c->inp + r * c->D;
    float v;
    int32_t at = 0;
    if (c->op == DT_RED_SUM || c->op == DT_RED_MEAN) {
      double s = dt_sum_f64(x, c->D);
      v = c->op == DT_RED_MEAN ? (float)(s / (double)c->D) : (float)s;
    } else {
      dt_reduce_col(c->op, x, c->D, 1, &v, &at);
    }
    if (c->out) c->out[r] = v;
    if (c->idx) c->idx[r] = at;
  }
}

/* Work item = one (outer index, tile of columns): rows of the tile are read
 * contiguously, d in order. */
DT_VEC_CLONES static void tiles_range_(void* vctx, int64_t t0, int64_t t1) {
  const reduce_ctx_* c = vctx;
  for (int64_t t = t0; t < t1; t++) {
    int64_t o = t / c->tiles, j0 = (t % c->tiles) * COL_TILE;
    int64_t width = c->inner - j0 < COL_TILE ? c->inner - j0 : COL_TILE;
    const float* base = c->inp + o * c->D * c->inner + j0;
    float* out = c->out ? c->out + o * c->inner + j0 : NULL;
    int32_t* idx = c->idx ? c->idx + o * c->inner + j0 : NULL;
    if (c->op == DT_RED_SUM || c->op == DT_RED_MEAN) {
      double acc[COL_TILE];
      for (int64_t k = 0; k < width; k++) acc[k] = 0.0;
      for (int64_t d = 0; d < c->D; d++) {
        const float* row = base + d * c->inner;
        for (int64_t k = 0; k < width; k++) acc[k] += (double)row[k];
      }
      for (int64_t k = 0; k < width; k++)
        out[k] = c->op == DT_RED_MEAN ? (float)(acc[k] / (double)c->D) : (float)acc[k];
    } else {
      float best[COL_TILE];
      int32_t at[COL_TILE];
      int want_max = c->op == DT_RED_MAX;
      for (int64_t k = 0; k < width; k++) {
        best[k] = base[k];
        at[k] = 0;
      }
      for (int64_t d = 1; d < c->D; d++) {
        const float* row = base + d * c->inner;
        for (int64_t k = 0; k < width; k++) {
          if (dt_extreme_better(row[k], best[k], want_max)) {
            best[k] = row[k];
            at[k] = (int32_t)d;
          }
        }
      }
      for (int64_t k = 0; k < width; k++) {
        if (out) out[k] = best[k];
        if (idx) idx[k] = at[k];
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_reduce_dim(int32_t op, float* out, int32_t* idx, const float* inp, int64_t outer, int64_t D,
                                  int64_t inner, void* stream) {
  (void)stream;
  int64_t rows = 0;
  DT_TRY_(dt_check_reduce_dim(op, out, idx, inp, outer, D, inner, &rows));
  if (rows == 0) return DT_OK;
  if (D == 0) { /* torch: the sum of nothing is 0, the mean NaN */
    for (int64_t r = 0; r < rows; r++) out[r] = op == DT_RED_MEAN ? NAN : 0.0f;
    return DT_OK;
  }
  reduce_ctx_ c = {op, out, idx, inp, D, inner, (inner + COL_TILE - 1) / COL_TILE};
  if (inner == 1) {
    dt_parallel_for_(outer, D >= REDUCE_GRAIN_ELEMS ? 1 : REDUCE_GRAIN_ELEMS / D, rows_range_, &c);
  } else {
    int64_t per_item = D * (inner < COL_TILE ? inner : COL_TILE);
    dt_parallel_for_(outer * c.tiles, per_item >= REDUCE_GRAIN_ELEMS ? 1 : REDUCE_GRAIN_ELEMS / per_item,
                     tiles_range_, &c);
  }
  return DT_OK;
}
