/* loss.c — CPU loops of the fused classifier's softmax cross-entropy: per-row
 * log-sum-exps and losses in parallel, each row read once in chunks of
 * CE_CHUNK logits (f32, bf16 or f16), the mean over non-ignored rows folded in
 * row order (double); the gradient recomputes probabilities from the saved
 * log-sum-exp, so no probabilities are stored. Row arithmetic: crossentropy.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <math.h>
#include <stdlib.h>
#include "cpu_internal.h"
#include "convert.h"
#include "crossentropy.h"

/* Elements (rows * V) per thread chunk: each costs an exp. */
#define CE_GRAIN_ELEMS (1 << 14)

static int64_t row_grain_(int64_t V) { return V >= CE_GRAIN_ELEMS ? 1 : CE_GRAIN_ELEMS / V; }

/* ---- kernels ------------------------------------------------------------------ */

/* Logits per chunk: a chunk is converted to f32 (and its exps kept) on the stack. */
#define CE_CHUNK 2048

typedef struct {
  void* dlogits;       /* backward; may be the logits themselves */
  float* row_loss;     /* forward: per-row loss, NaN-free 0 on ignored rows */
  float* lse;          /* forward writes, backward reads */
  const void* logits;  /* of dtype */
  const int32_t* targets;
  int32_t dtype;
  int64_t V, ignore_index;
  float w; /* backward: dloss / valid_rows */
} ce_ctx_;

/* n logits of dtype from x + at into f32 dst. */
DT_VEC_CLONES static void ce_load_(float* dst, const void* x, int32_t dtype, int64_t at, int64_t n) {
  if (dtype == DT_F32) {
    const float* s = (const float*)x + at;
    for (int64_t j = 0; j < n; j++) dst[j] = s[j];
  } else if (dtype == DT_BF16) { /* a loop of its own vectorises (dt_load_float's switch does not) */
    const uint16_t* s = (const uint16_t*)x + at;
    for (int64_t j = 0; j < n; j++) dst[j] = dt_bf16_to_f32(s[j]);
  } else {
    for (int64_t j = 0; j < n; j++) dst[j] = dt_load_float(x, dtype, at + j);
  }
}

/* The row's maximum and exp sum, one chunk at a time (each logit read once). */
DT_VEC_CLONES static void ce_row_stats_(const ce_ctx_* c, int64_t r, float* max_out, double* sum_out) {
  float buf[CE_CHUNK];
  float max = -INFINITY;
  double sum = 0.0;
  for (int64_t j0 = 0; j0 < c->V; j0 += CE_CHUNK) {
    int64_t n = c->V - j0 < CE_CHUNK ? c->V - j0 : CE_CHUNK;
    ce_load_(buf, c->logits, c->dtype, r * c->V + j0, n);
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = buf[j] > m ? buf[j] : m;
    for (int64_t j = 0; j < n; j++) buf[j] = buf[j] - m;
    dt_exp_rows_(buf, buf, n); /* dt_expf(x - m), 16 lanes wide where the CPU allows */
    dt_crossentropy_merge(&max, &sum, m, dt_sum_f64(buf, n));
  }
  *max_out = max;
  *sum_out = sum;
}

DT_VEC_CLONES static void ce_fwd_range_(void* vctx, int64_t r0, int64_t r1) {
  const ce_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = c->targets[r];
    float max;
    double sum;
    ce_row_stats_(c, r, &max, &sum);
    float lse = dt_crossentropy_lse_f(max, sum);
    c->lse[r] = lse; /* an ignored row still gets its log-sum-exp; its loss does not count */
    c->row_loss[r] = t == c->ignore_index
                         ? 0.0f
                         : dt_crossentropy_loss_f(dt_load_float(c->logits, c->dtype, r * c->V + t), lse);
  }
}

DT_VEC_CLONES static void ce_bwd_range_(void* vctx, int64_t r0, int64_t r1) {
  const ce_ctx_* c = vctx;
  float buf[CE_CHUNK];
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = c->targets[r];
    float lse = c->lse[r];
    for (int64_t j0 = 0; j0 < c->V; j0 += CE_CHUNK) {
      int64_t n = c->V - j0 < CE_CHUNK ? c->V - j0 : CE_CHUNK;
      if (t == c->ignore_index) {
        for (int64_t j = 0; j < n; j++) buf[j] = 0.0f;
      } else {
        ce_load_(buf, c->logits, c->dtype, r * c->V + j0, n);
        /* dt_crossentropy_p_f (exp(logit - lse)) with the exponentials of dt_exp_rows_ */
        for (int64_t j = 0; j < n; j++) buf[j] = buf[j] - lse;
        dt_exp_rows_(buf, buf, n);
        for (int64_t j = 0; j < n; j++) buf[j] = dt_crossentropy_grad_f(buf[j], j0 + j == t, c->w);
      }
      if (c->dtype == DT_F32) {
        float* d = (float*)c->dlogits + r * c->V + j0;
        for (int64_t j = 0; j < n; j++) d[j] = buf[j];
      } else if (c->dtype == DT_BF16) {
        uint16_t* d = (uint16_t*)c->dlogits + r * c->V + j0;
        for (int64_t j = 0; j < n; j++) d[j] = dt_f32_to_bf16(buf[j]);
      } else {
        for (int64_t j = 0; j < n; j++) dt_store_float(c->dlogits, c->dtype, r * c->V + j0 + j, buf[j]);
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

/* Checks that every target is in [0, V) or ignore_index; counts valid rows. */
static dt_status check_targets_(const char* name, const int32_t* targets, int64_t rows, int64_t V,
                                int64_t ignore_index, int64_t* valid) {
  *valid = 0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = targets[r];
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) return dt_fail_target_(name, t, r, V, ignore_index);
    (*valid)++;
  }
  return DT_OK;
}

DT_EXPORT dt_status dt_crossentropy_fwd(float* loss, float* lse, float* valid_rows, const void* logits,
                                        int32_t dtype, const int32_t* targets, int64_t rows, int64_t V,
                                        int64_t ignore_index, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_crossentropy_fwd(loss, lse, valid_rows, logits, dtype, targets, rows, V));
  int64_t valid = 0;
  DT_TRY_(check_targets_("dt_crossentropy_fwd", targets, rows, V, ignore_index, &valid));
  float stack_loss[256];
  float* row_loss = rows <= 256 ? stack_loss : malloc((size_t)rows * sizeof(float));
  if (!row_loss) return dt_fail_(DT_ERR_ALLOC, "dt_crossentropy_fwd: cannot allocate %lld row losses", (long long)rows);
  ce_ctx_ c = {.row_loss = row_loss, .lse = lse, .logits = logits, .targets = targets, .dtype = dtype, .V = V,
               .ignore_index = ignore_index};
  dt_parallel_for_(rows, row_grain_(V), ce_fwd_range_, &c);
  double sum = 0.0;
  for (int64_t r = 0; r < rows; r++) sum += row_loss[r];
  if (row_loss != stack_loss) free(row_loss);
  *loss = (float)(sum / (double)valid); /* 0 / 0 = NaN when no row is valid, as torch */
  *valid_rows = (float)valid;
  return DT_OK;
}

DT_EXPORT dt_status dt_crossentropy_bwd(void* dlogits, const void* logits, const float* lse, const float* valid_rows,
                                        const int32_t* targets, const float* dloss, int32_t dtype, int64_t rows,
                                        int64_t V, int64_t ignore_index, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_crossentropy_bwd(dlogits, logits, lse, valid_rows, targets, dloss, dtype, rows, V));
  if (rows == 0) return DT_OK;
  int64_t valid = 0;
  DT_TRY_(check_targets_("dt_crossentropy_bwd", targets, rows, V, ignore_index, &valid));
  ce_ctx_ c = {.dlogits = dlogits, .lse = (float*)lse, .logits = logits, .targets = targets, .dtype = dtype, .V = V,
               .ignore_index = ignore_index, .w = *dloss / *valid_rows};
  dt_parallel_for_(rows, row_grain_(V), ce_bwd_range_, &c);
  return DT_OK;
}
