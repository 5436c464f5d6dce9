/* elementwise.c — CPU loops of the elementwise kernels: dt_binary (with its
 * broadcast forms), dt_scale, dt_axpy, ReLU, GELU and dropout. The arithmetic
 * of each element lives in kernels/common (elementwise.h, gelu.h, dropout.h). */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "dropout.h"
#include "elementwise.h"
#include "gelu.h"

/* Elements per thread chunk: cheap ops need many elements to pay for a
 * thread hand-off (a few microseconds); tanh-bound GELU needs fewer. */
#define CHEAP_GRAIN (1 << 15)
#define GELU_GRAIN (1 << 12)

/* ---- kernels ------------------------------------------------------------------ */

/* out[0:len] = a[0:len] op b[0:len] */
DT_VEC_CLONES static void binary_vv_(int32_t op, float* out, const float* a, const float* b, int64_t len) {
  switch (op) {
    case DT_OP_ADD: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_ADD, a[i], b[i]); break;
    case DT_OP_SUB: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_SUB, a[i], b[i]); break;
    case DT_OP_MUL: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_MUL, a[i], b[i]); break;
    default: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_DIV, a[i], b[i]); break;
  }
}

/* out[0:len] = a[0:len] op s */
DT_VEC_CLONES static void binary_vs_(int32_t op, float* out, const float* a, float s, int64_t len) {
  switch (op) {
    case DT_OP_ADD: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_ADD, a[i], s); break;
    case DT_OP_SUB: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_SUB, a[i], s); break;
    case DT_OP_MUL: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_MUL, a[i], s); break;
    default: for (int64_t i = 0; i < len; i++) out[i] = dt_binary_f(DT_OP_DIV, a[i], s); break;
  }
}

typedef struct {
  int32_t op;
  float* out;
  const float* a;
  const float* b;
  int64_t bn, inner;
} binary_ctx_;

/* out[i] = a[i] op b[(i / inner) % bn] for i in [begin, end), walked in runs
 * that share a b segment so the inner loops stay contiguous. */
static void binary_range_(void* vctx, int64_t begin, int64_t end) {
  const binary_ctx_* c = vctx;
  int64_t i = begin;
  if (c->inner == 1) {
    while (i < end) {
      int64_t k = i % c->bn;
      int64_t len = c->bn - k < end - i ? c->bn - k : end - i;
      binary_vv_(c->op, c->out + i, c->a + i, c->b + k, len);
      i += len;
    }
  } else {
    while (i < end) {
      int64_t outer = i / c->inner, off = i % c->inner;
      int64_t len = c->inner - off < end - i ? c->inner - off : end - i;
      binary_vs_(c->op, c->out + i, c->a + i, c->b[outer % c->bn], len);
      i += len;
    }
  }
}

typedef struct {
  float* out;
  const float* x;
  const float* y; /* second input: dout of backward kernels, y of axpy */
  float alpha;
} unary_ctx_;

DT_VEC_CLONES static void scale_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  for (int64_t i = begin; i < end; i++) c->out[i] = c->alpha * c->x[i];
}

DT_VEC_CLONES static void axpy_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  for (int64_t i = begin; i < end; i++) c->out[i] = dt_axpy_f(c->out[i], c->alpha, c->x[i]);
}

DT_VEC_CLONES static void relu_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  for (int64_t i = begin; i < end; i++) c->out[i] = dt_relu_f(c->x[i]);
}

/* out = dinp, y = dout, x = inp */
DT_VEC_CLONES static void relu_bwd_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  for (int64_t i = begin; i < end; i++) c->out[i] = dt_relu_grad_f(c->y[i], c->x[i]);
}

static void gelu_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  dt_gelu_rows_(c->out + begin, c->x + begin, end - begin);
}

static void gelu_bwd_range_(void* vctx, int64_t begin, int64_t end) {
  const unary_ctx_* c = vctx;
  dt_gelu_grad_rows_(c->out + begin, c->y + begin, c->x + begin, end - begin);
}

typedef struct {
  float* out;
  const float* inp;
  uint64_t seed, offset, threshold;
  float scale;
} dropout_ctx_;

static void dropout_range_(void* vctx, int64_t begin, int64_t end) {
  const dropout_ctx_* c = vctx;
  for (int64_t i = begin; i < end; i++)
    c->out[i] = dt_dropout_apply(c->inp[i], c->seed, c->offset + (uint64_t)i, c->threshold, c->scale);
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_binary(int32_t op, float* out, const float* a, const float* b, int64_t n, int64_t bn,
                              int64_t inner, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_binary(op, out, a, b, n, bn, inner));
  if (n == 0) return DT_OK;
  binary_ctx_ c = {op, out, a, b, bn, inner};
  dt_parallel_for_(n, CHEAP_GRAIN, binary_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_scale(float* out, const float* inp, int64_t n, float alpha, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_scale(out, inp, n));
  if (n == 0) return DT_OK;
  unary_ctx_ c = {out, inp, NULL, alpha};
  dt_parallel_for_(n, CHEAP_GRAIN, scale_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_axpy(float* y, const float* x, int64_t n, float alpha, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_axpy(y, x, n));
  if (n == 0) return DT_OK;
  unary_ctx_ c = {y, x, NULL, alpha};
  dt_parallel_for_(n, CHEAP_GRAIN, axpy_range_, &c);
  return DT_OK;
}

/* The unary forward/backward launchers: checks, then the loop. */
static dt_status unary_run_(const char* name, float* out, const float* x, const float* y, int needs_y, int64_t n,
                            int64_t grain, dt_range_fn_ fn) {
  DT_TRY_(dt_check_unary(name, out, x, y, needs_y, n));
  if (n == 0) return DT_OK;
  unary_ctx_ c = {out, x, y, 0.0f};
  dt_parallel_for_(n, grain, fn, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_relu_fwd(float* out, const float* inp, int64_t n, void* stream) {
  (void)stream;
  return unary_run_("dt_relu_fwd", out, inp, NULL, 0, n, CHEAP_GRAIN, relu_range_);
}

DT_EXPORT dt_status dt_relu_bwd(float* dinp, const float* dout, const float* inp, int64_t n, void* stream) {
  (void)stream;
  return unary_run_("dt_relu_bwd", dinp, inp, dout, 1, n, CHEAP_GRAIN, relu_bwd_range_);
}

DT_EXPORT dt_status dt_gelu_fwd(float* out, const float* inp, int64_t n, void* stream) {
  (void)stream;
  return unary_run_("dt_gelu_fwd", out, inp, NULL, 0, n, GELU_GRAIN, gelu_range_);
}

DT_EXPORT dt_status dt_gelu_bwd(float* dinp, const float* dout, const float* inp, int64_t n, void* stream) {
  (void)stream;
  return unary_run_("dt_gelu_bwd", dinp, inp, dout, 1, n, GELU_GRAIN, gelu_bwd_range_);
}

static dt_status dropout_run_(const char* name, float* out, const float* inp, int64_t n, float p, int64_t seed,
                              int64_t offset) {
  DT_TRY_(dt_check_dropout(name, out, inp, n, p, offset));
  if (n == 0) return DT_OK;
  dropout_ctx_ c = {out, inp, (uint64_t)seed, (uint64_t)offset, dt_dropout_threshold(p), dt_dropout_scale(p)};
  dt_parallel_for_(n, CHEAP_GRAIN / 4, dropout_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_dropout_fwd(float* out, const float* inp, int64_t n, float p, int64_t seed, int64_t offset,
                                   void* stream) {
  (void)stream;
  return dropout_run_("dt_dropout_fwd", out, inp, n, p, seed, offset);
}

DT_EXPORT dt_status dt_dropout_bwd(float* dinp, const float* dout, int64_t n, float p, int64_t seed, int64_t offset,
                                   void* stream) {
  (void)stream;
  return dropout_run_("dt_dropout_bwd", dinp, dout, n, p, seed, offset);
}
