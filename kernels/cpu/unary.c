/* unary.c — CPU loops of the scalar-parameter unary kernels (dt_unary_fwd /
 * dt_unary_bwd: exp, log, sigmoid, tanh, sqrt, pow, clamp) and dt_where. The
 * arithmetic of each element lives in kernels/common/unary.h; each op gets
 * its own loop (the switch sits outside) so that every loop vectorises. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "ops_checks.h"
#include "unary.h"

/* Elements per thread chunk: transcendental ops cost tens of cycles each. */
#define UNARY_GRAIN (1 << 13)
#define WHERE_GRAIN (1 << 15)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  int32_t op;
  float* out;
  const float *x, *y, *dout; /* y: the forward output (backward only) */
  float a, b;
} unary_ctx_;

/* One loop per op: a constant op lets the compiler drop the switch. */
#define UNARY_FWD_LOOP_(OP) \
  for (int64_t i = begin; i < end; i++) c->out[i] = dt_unary_f(OP, c->x[i], c->a, c->b)
#define UNARY_BWD_LOOP_(OP) \
  for (int64_t i = begin; i < end; i++) c->out[i] = dt_unary_grad_f(OP, c->dout[i], c->x[i], c->y[i], c->a, c->b)

DT_VEC_CLONES static void unary_fwd_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  switch (c->op) {
    case DT_UN_EXP: dt_exp_rows_(c->out + begin, c->x + begin, end - begin); break;
    case DT_UN_LOG: UNARY_FWD_LOOP_(DT_UN_LOG); break;
    case DT_UN_SIGMOID: UNARY_FWD_LOOP_(DT_UN_SIGMOID); break;
    case DT_UN_TANH: dt_tanh_rows_(c->out + begin, c->x + begin, end - begin); break;
    case DT_UN_SQRT: UNARY_FWD_LOOP_(DT_UN_SQRT); break;
    case DT_UN_POW: UNARY_FWD_LOOP_(DT_UN_POW); break;
    default: UNARY_FWD_LOOP_(DT_UN_CLAMP); break;
  }
}

DT_VEC_CLONES static void unary_bwd_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  switch (c->op) {
    case DT_UN_EXP: UNARY_BWD_LOOP_(DT_UN_EXP); break;
    case DT_UN_LOG: UNARY_BWD_LOOP_(DT_UN_LOG); break;
    case DT_UN_SIGMOID: UNARY_BWD_LOOP_(DT_UN_SIGMOID); break;
    case DT_UN_TANH: UNARY_BWD_LOOP_(DT_UN_TANH); break;
    case DT_UN_SQRT: UNARY_BWD_LOOP_(DT_UN_SQRT); break;
    case DT_UN_POW: UNARY_BWD_LOOP_(DT_UN_POW); break;
    default: UNARY_BWD_LOOP_(DT_UN_CLAMP); break;
  }
}

typedef struct {
  float* out;
  const uint8_t* cond;
  const float *a, *b;
  float a_value, b_value;
} where_ctx_;

DT_VEC_CLONES static void where_range_(void* vctx, int64_t begin, int64_t end) {
  const where_ctx_* c = vctx;
  if (c->a && c->b) {
    for (int64_t i = begin; i < end; i++) c->out[i] = dt_where_f(c->cond[i], c->a[i], c->b[i]);
  } else if (c->a) {
    for (int64_t i = begin; i < end; i++) c->out[i] = dt_where_f(c->cond[i], c->a[i], c->b_value);
  } else if (c->b) {
    for (int64_t i = begin; i < end; i++) c->out[i] = dt_where_f(c->cond[i], c->a_value, c->b[i]);
  } else {
    for (int64_t i = begin; i < end; i++) c->out[i] = dt_where_f(c->cond[i], c->a_value, c->b_value);
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_unary_fwd(int32_t op, float* out, const float* inp, int64_t n, double a, double b,
                                 void* stream) {
  (void)stream;
  DT_TRY_(dt_check_unary_fwd(op, out, inp, n));
  if (n == 0) return DT_OK;
  unary_ctx_ c = {op, out, inp, NULL, NULL, (float)a, (float)b};
  dt_parallel_for_(n, UNARY_GRAIN, unary_fwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_unary_bwd(int32_t op, float* dinp, const float* dout, const float* inp, const float* out,
                                 int64_t n, double a, double b, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_unary_bwd(op, dinp, dout, inp, out, n));
  if (n == 0) return DT_OK;
  unary_ctx_ c = {op, dinp, inp, out, dout, (float)a, (float)b};
  dt_parallel_for_(n, UNARY_GRAIN, unary_bwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_where(float* out, const uint8_t* cond, const float* a, const float* b, int64_t n,
                             float a_value, float b_value, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_where(out, cond, n));
  if (n == 0) return DT_OK;
  where_ctx_ c = {out, cond, a, b, a_value, b_value};
  dt_parallel_for_(n, WHERE_GRAIN, where_range_, &c);
  return DT_OK;
}
