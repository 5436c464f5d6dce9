/* loss.c — CPU loops of the softmax cross-entropy loss: per-row losses and
 * saved probabilities in parallel, the mean over non-ignored rows folded in
 * row order (double), and the gradient. Row arithmetic: crossentropy.h. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <math.h>
#include <stdlib.h>
#include "cpu_internal.h"
#include "crossentropy.h"

/* Elements (rows * V) per thread chunk: each costs an exp. */
#define CE_GRAIN_ELEMS (1 << 14)

static int64_t row_grain_(int64_t V) { return V >= CE_GRAIN_ELEMS ? 1 : CE_GRAIN_ELEMS / V; }

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  float* probs; /* backward reads it */
  float* dlogits;
  float* row_loss; /* forward: per-row loss, NaN-free 0 on ignored rows */
  const float* logits;
  const int32_t* targets;
  int64_t V, ignore_index;
  float w; /* backward: dloss / valid_rows */
} ce_ctx_;

DT_VEC_CLONES static void ce_fwd_range_(void* vctx, int64_t r0, int64_t r1) {
  const ce_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = c->targets[r];
    float* p = c->probs + r * c->V;
    const float* x = c->logits + r * c->V;
    /* an ignored row still gets its probabilities; its loss does not count */
    float loss = dt_crossentropy_row(p, x, c->V, t == c->ignore_index ? 0 : t);
    c->row_loss[r] = t == c->ignore_index ? 0.0f : loss;
  }
}

DT_VEC_CLONES static void ce_bwd_range_(void* vctx, int64_t r0, int64_t r1) {
  const ce_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = c->targets[r];
    float* d = c->dlogits + r * c->V;
    const float* p = c->probs + r * c->V;
    if (t == c->ignore_index) {
      for (int64_t j = 0; j < c->V; j++) d[j] = 0.0f;
      continue;
    }
    for (int64_t j = 0; j < c->V; j++) d[j] = dt_crossentropy_grad_f(p[j], j == t, c->w);
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

DT_EXPORT dt_status dt_crossentropy_fwd(float* loss, float* probs, const float* logits, const int32_t* targets,
                                        int64_t rows, int64_t V, int64_t ignore_index, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_crossentropy_fwd(loss, probs, logits, targets, rows, V));
  int64_t valid = 0;
  DT_TRY_(check_targets_("dt_crossentropy_fwd", targets, rows, V, ignore_index, &valid));
  float stack_loss[256];
  float* row_loss = rows <= 256 ? stack_loss : malloc((size_t)rows * sizeof(float));
  if (!row_loss) return dt_fail_(DT_ERR_ALLOC, "dt_crossentropy_fwd: cannot allocate %lld row losses", (long long)rows);
  ce_ctx_ c = {.probs = probs, .row_loss = row_loss, .logits = logits, .targets = targets, .V = V,
               .ignore_index = ignore_index};
  dt_parallel_for_(rows, row_grain_(V), ce_fwd_range_, &c);
  double sum = 0.0;
  for (int64_t r = 0; r < rows; r++) sum += row_loss[r];
  if (row_loss != stack_loss) free(row_loss);
  *loss = (float)(sum / (double)valid); /* 0 / 0 = NaN when no row is valid, as torch */
  return DT_OK;
}

DT_EXPORT dt_status dt_crossentropy_bwd(float* dlogits, const float* probs, const int32_t* targets, const float* dloss,
                                        int64_t rows, int64_t V, int64_t ignore_index, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_crossentropy_bwd(dlogits, probs, targets, dloss, rows, V));
  if (rows == 0) return DT_OK;
  int64_t valid = 0;
  DT_TRY_(check_targets_("dt_crossentropy_bwd", targets, rows, V, ignore_index, &valid));
  ce_ctx_ c = {.probs = (float*)probs, .dlogits = dlogits, .targets = targets, .V = V, .ignore_index = ignore_index,
               .w = *dloss / (float)valid};
  dt_parallel_for_(rows, row_grain_(V), ce_bwd_range_, &c);
  return DT_OK;
}
