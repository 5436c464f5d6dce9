/* softmax_dim.c — CPU loops of dt_softmax_dim_fwd/bwd: softmax and
 * log-softmax along any dimension of a tensor viewed as (outer, D, inner).
 * Rows (inner = 1) use softmax.h's row bodies — the same bits as
 * dt_softmax_fwd —, other dims its column bodies, one column at a time. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "ops_checks.h"
#include "softmax.h"

#define SOFTMAX_GRAIN_ELEMS (1 << 14)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  float* out;
  const float* inp;
  const float* saved; /* backward: the forward's output */
  int64_t D, inner;
  int is_log;
} softmax_dim_ctx_;

/* Work item = one row (inner == 1). */
DT_VEC_CLONES static void fwd_rows_range_(void* vctx, int64_t r0, int64_t r1) {
  const softmax_dim_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    if (c->is_log) dt_log_softmax_row(c->out + r * c->D, c->inp + r * c->D, c->D);
    else dt_softmax_row(c->out + r * c->D, c->inp + r * c->D, c->D, c->D, 1.0f);
  }
}

DT_VEC_CLONES static void bwd_rows_range_(void* vctx, int64_t r0, int64_t r1) {
  const softmax_dim_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    if (c->is_log) dt_log_softmax_bwd_row(c->out + r * c->D, c->inp + r * c->D, c->saved + r * c->D, c->D);
    else dt_softmax_bwd_row(c->out + r * c->D, c->inp + r * c->D, c->saved + r * c->D, c->D, 1.0f);
  }
}

/* Work item = one column (o, i) of D elements at stride inner. */
static void fwd_cols_range_(void* vctx, int64_t k0, int64_t k1) {
  const softmax_dim_ctx_* c = vctx;
  for (int64_t k = k0; k < k1; k++) {
    int64_t base = (k / c->inner) * c->D * c->inner + k % c->inner;
    dt_softmax_col(c->out + base, c->inp + base, c->D, c->inner, c->is_log);
  }
}

static void bwd_cols_range_(void* vctx, int64_t k0, int64_t k1) {
  const softmax_dim_ctx_* c = vctx;
  for (int64_t k = k0; k < k1; k++) {
    int64_t base = (k / c->inner) * c->D * c->inner + k % c->inner;
    dt_softmax_bwd_col(c->out + base, c->inp + base, c->saved + base, c->D, c->inner, c->is_log);
  }
}

/* ---- launchers ---------------------------------------------------------------- */

static void run_(softmax_dim_ctx_* c, int64_t outer, dt_range_fn_ rows, dt_range_fn_ cols) {
  if (c->inner == 1) {
    dt_parallel_for_(outer, c->D >= SOFTMAX_GRAIN_ELEMS ? 1 : SOFTMAX_GRAIN_ELEMS / c->D, rows, c);
  } else {
    dt_parallel_for_(outer * c->inner, c->D >= SOFTMAX_GRAIN_ELEMS ? 1 : SOFTMAX_GRAIN_ELEMS / c->D, cols, c);
  }
}

DT_EXPORT dt_status dt_softmax_dim_fwd(float* out, const float* inp, int64_t outer, int64_t D, int64_t inner,
                                       int32_t is_log, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_softmax_dim_fwd(out, inp, outer, D, inner, is_log));
  if (outer == 0 || D == 0 || inner == 0) return DT_OK;
  softmax_dim_ctx_ c = {out, inp, NULL, D, inner, is_log};
  run_(&c, outer, fwd_rows_range_, fwd_cols_range_);
  return DT_OK;
}

DT_EXPORT dt_status dt_softmax_dim_bwd(float* dinp, const float* dout, const float* out, int64_t outer, int64_t D,
                                       int64_t inner, int32_t is_log, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_softmax_dim_bwd(dinp, dout, out, outer, D, inner, is_log));
  if (outer == 0 || D == 0 || inner == 0) return DT_OK;
  softmax_dim_ctx_ c = {dinp, dout, out, D, inner, is_log};
  run_(&c, outer, bwd_rows_range_, bwd_cols_range_);
  return DT_OK;
}
