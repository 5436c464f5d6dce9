/* optim.c — CPU loops of the optimizer steps (dt_adamw, dt_sgd, torch 1.13
 * single-tensor semantics; dt_adamw_many, dt_sgd_many: every tensor in one
 * call; dt_zero_many: zero_grad in one call) and of the loss-scale
 * unscale/inf check. The per-element updates
 * live in kernels/common/adamw.h, sgd.h, loss_scale.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "adamw.h"
#include "loss_scale.h"
#include "optim_many.h"
#include "sgd.h"

/* Elements per thread chunk (an update is a dozen flops and 16-20 bytes of traffic). */
#define OPTIM_GRAIN (1 << 14)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  float *p, *m, *v;
  const float* g;
  dt_adamw_scalars s;
} adamw_ctx_;

DT_VEC_CLONES static void adamw_range_(void* vctx, int64_t begin, int64_t end) {
  const adamw_ctx_* c = vctx;
  dt_adamw_scalars s = c->s;
  float *p = c->p, *m = c->m, *v = c->v;
  const float* g = c->g;
  for (int64_t i = begin; i < end; i++) dt_adamw_update(&p[i], g[i], &m[i], &v[i], &s);
}

typedef struct {
  float *p, *buf;
  const float* g;
  dt_sgd_scalars s;
} sgd_ctx_;

DT_VEC_CLONES static void sgd_range_(void* vctx, int64_t begin, int64_t end) {
  const sgd_ctx_* c = vctx;
  dt_sgd_scalars s = c->s;
  float *p = c->p, *buf = c->buf;
  const float* g = c->g;
  if (s.use_momentum) {
    for (int64_t i = begin; i < end; i++) dt_sgd_update(&p[i], g[i], &buf[i], &s);
  } else {
    float unused = 0.0f;
    for (int64_t i = begin; i < end; i++) dt_sgd_update(&p[i], g[i], &unused, &s);
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_adamw(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1,
                             double beta2, double eps, double weight_decay, int64_t step, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_adamw(p, g, m, v, n, beta1, beta2, step));
  if (n == 0) return DT_OK;
  adamw_ctx_ c = {p, m, v, g, dt_adamw_make_scalars(lr, beta1, beta2, eps, weight_decay, step)};
  dt_parallel_for_(n, OPTIM_GRAIN, adamw_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_sgd(float* p, const float* g, float* buf, int64_t n, double lr, double momentum,
                           double dampening, double weight_decay, int32_t nesterov, int32_t first, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_sgd(p, g, buf, n, momentum, dampening, nesterov));
  if (n == 0) return DT_OK;
  sgd_ctx_ c = {p, buf, g, dt_sgd_make_scalars(lr, momentum, dampening, weight_decay, nesterov, first)};
  dt_parallel_for_(n, OPTIM_GRAIN, sgd_range_, &c);
  return DT_OK;
}

/* One call for many tensors, each with its own scalars (same bits as one
 * dt_adamw per tensor: the same body and scalars; tensors run one after the
 * other, each split across the thread pool when large enough). */
DT_EXPORT dt_status dt_adamw_many(float* const* p, const float* const* g, float* const* m, float* const* v,
                                  const int64_t* counts, const int64_t* steps, const double* hyper, int64_t num,
                                  void* stream) {
  (void)stream;
  DT_TRY_(dt_check_adamw_many(p, g, m, v, counts, steps, hyper, num));
  for (int64_t t = 0; t < num; t++) {
    if (counts[t] == 0) continue;
    const double* h = hyper + 5 * t;
    adamw_ctx_ c = {p[t], m[t], v[t], g[t], dt_adamw_make_scalars(h[0], h[1], h[2], h[3], h[4], steps[t])};
    dt_parallel_for_(counts[t], OPTIM_GRAIN, adamw_range_, &c);
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_sgd_many(float* const* p, const float* const* g, float* const* buf, const int64_t* counts,
                                const double* hyper, const int32_t* flags, int64_t num, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_sgd_many(p, g, buf, counts, hyper, flags, num));
  for (int64_t t = 0; t < num; t++) {
    if (counts[t] == 0) continue;
    const double* h = hyper + 4 * t;
    sgd_ctx_ c = {p[t], buf[t], g[t], dt_sgd_make_scalars(h[0], h[1], h[2], h[3], flags[2 * t], flags[2 * t + 1])};
    dt_parallel_for_(counts[t], OPTIM_GRAIN, sgd_range_, &c);
  }
  return DT_OK;
}

/* zero_grad of every gradient in one call. */
DT_EXPORT dt_status dt_zero_many(float* const* p, const int64_t* counts, int64_t num, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_zero_many(p, counts, num));
  for (int64_t t = 0; t < num; t++)
    if (counts[t] > 0) memset(p[t], 0, (size_t)counts[t] * sizeof(float));
  return DT_OK;
}

typedef struct {
  float* g;
  float inv_scale;
  int nonfinite; /* set to 1 (atomically) by any chunk that saw inf/NaN */
} unscale_ctx_;

/* Each chunk tracks its own flag; the shared one is only ever set to 1, so a
 * racing second write stores the same value. */
DT_VEC_CLONES static void unscale_range_(void* vctx, int64_t begin, int64_t end) {
  unscale_ctx_* c = vctx;
  int nonfinite = 0;
  float inv = c->inv_scale;
  for (int64_t i = begin; i < end; i++) c->g[i] = dt_unscale_f(c->g[i], inv, &nonfinite);
  if (nonfinite) __atomic_store_n(&c->nonfinite, 1, __ATOMIC_RELAXED);
}

DT_EXPORT dt_status dt_unscale_check(float* g, int64_t n, float inv_scale, float* found_inf, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_unscale(g, n, found_inf));
  if (n == 0) return DT_OK;
  unscale_ctx_ c = {g, inv_scale, 0};
  dt_parallel_for_(n, OPTIM_GRAIN * 2, unscale_range_, &c);
  if (c.nonfinite) *found_inf = 1.0f;
  return DT_OK;
}
