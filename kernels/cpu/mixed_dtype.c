/* mixed_dtype.c — CPU loops of the elementwise kernels whose operands each
 * have their own float dtype (dt_binary_ex, dt_gelu_fwd_ex, dt_gelu_bwd_ex):
 * bf16/f16 activations under autocast computed without a cast before and
 * after. Blocks of elements are widened to f32, run through the same bodies as
 * dt_binary and dt_gelu_* (elementwise.h, gelu.h) and rounded once. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "convert.h"
#include "cpu_internal.h"
#include "elementwise.h"
#include "gelu.h"

#define CHEAP_GRAIN (1 << 15)
#define GELU_GRAIN (1 << 12)
/* Elements widened at a time (on the stack). */
#define BLK 256

/* dst[0:len] = src[start:start+len] as f32. */
DT_VEC_CLONES static void load_block_(float* dst, const void* src, int32_t dtype, int64_t start, int64_t len) {
  if (dtype == DT_BF16) {
    const uint16_t* s = (const uint16_t*)src + start;
    for (int64_t i = 0; i < len; i++) dst[i] = dt_bf16_to_f32(s[i]);
  } else if (dtype == DT_F16) {
    const uint16_t* s = (const uint16_t*)src + start;
    for (int64_t i = 0; i < len; i++) dst[i] = dt_f16_to_f32(s[i]);
  } else {
    const float* s = (const float*)src + start;
    for (int64_t i = 0; i < len; i++) dst[i] = s[i];
  }
}

/* dst[start:start+len] = src[0:len], rounded to nearest even for bf16/f16. */
DT_VEC_CLONES static void store_block_(void* dst, int32_t dtype, int64_t start, const float* src, int64_t len) {
  if (dtype == DT_BF16) {
    uint16_t* d = (uint16_t*)dst + start;
    for (int64_t i = 0; i < len; i++) d[i] = dt_f32_to_bf16(src[i]);
  } else if (dtype == DT_F16) {
    uint16_t* d = (uint16_t*)dst + start;
    for (int64_t i = 0; i < len; i++) d[i] = dt_f32_to_f16(src[i]);
  } else {
    float* d = (float*)dst + start;
    for (int64_t i = 0; i < len; i++) d[i] = src[i];
  }
}

/* x[0:len] = x[0:len] op y[0:len] */
DT_VEC_CLONES static void binary_block_(int32_t op, float* x, const float* y, int64_t len) {
  switch (op) {
    case DT_OP_ADD: for (int64_t i = 0; i < len; i++) x[i] = dt_binary_f(DT_OP_ADD, x[i], y[i]); break;
    case DT_OP_SUB: for (int64_t i = 0; i < len; i++) x[i] = dt_binary_f(DT_OP_SUB, x[i], y[i]); break;
    case DT_OP_MUL: for (int64_t i = 0; i < len; i++) x[i] = dt_binary_f(DT_OP_MUL, x[i], y[i]); break;
    default: for (int64_t i = 0; i < len; i++) x[i] = dt_binary_f(DT_OP_DIV, x[i], y[i]); break;
  }
}

typedef struct {
  int32_t op, out_dtype, a_dtype, b_dtype;
  void* out;
  const void *a, *b;
  int64_t n, bn, inner;
} binary_ex_ctx_;

/* Element i takes b[(i / inner) % bn]: the index is stepped along a block, not divided per element. */
static void binary_ex_range_(void* vctx, int64_t begin, int64_t end) {
  const binary_ex_ctx_* c = vctx;
  float x[BLK], y[BLK];
  for (int64_t i = begin; i < end; i += BLK) {
    int64_t len = end - i < BLK ? end - i : BLK;
    load_block_(x, c->a, c->a_dtype, i, len);
    if (c->inner == 1 && c->bn == c->n) {
      load_block_(y, c->b, c->b_dtype, i, len);
    } else {
      int64_t k = (i / c->inner) % c->bn, off = i % c->inner;
      for (int64_t j = 0; j < len; j++) {
        y[j] = dt_load_float(c->b, c->b_dtype, k);
        if (++off == c->inner) {
          off = 0;
          if (++k == c->bn) k = 0;
        }
      }
    }
    binary_block_(c->op, x, y, len);
    store_block_(c->out, c->out_dtype, i, x, len);
  }
}

/* x[0:len] = gelu(x[0:len]); x = dinp from x = inp and g = dout. */
static void gelu_block_(float* x, int64_t len) { dt_gelu_rows_(x, x, len); }

static void gelu_grad_block_(float* x, const float* g, int64_t len) { dt_gelu_grad_rows_(x, g, x, len); }

typedef struct {
  int32_t dtype;
  void* out;
  const void *x, *dout;
} gelu_ex_ctx_;

static void gelu_ex_range_(void* vctx, int64_t begin, int64_t end) {
  const gelu_ex_ctx_* c = vctx;
  float x[BLK];
  for (int64_t i = begin; i < end; i += BLK) {
    int64_t len = end - i < BLK ? end - i : BLK;
    load_block_(x, c->x, c->dtype, i, len);
    gelu_block_(x, len);
    store_block_(c->out, c->dtype, i, x, len);
  }
}

static void gelu_bwd_ex_range_(void* vctx, int64_t begin, int64_t end) {
  const gelu_ex_ctx_* c = vctx;
  float x[BLK], g[BLK];
  for (int64_t i = begin; i < end; i += BLK) {
    int64_t len = end - i < BLK ? end - i : BLK;
    load_block_(x, c->x, c->dtype, i, len);
    load_block_(g, c->dout, c->dtype, i, len);
    gelu_grad_block_(x, g, len);
    store_block_(c->out, c->dtype, i, x, len);
  }
}

DT_EXPORT dt_status dt_binary_ex(int32_t op, void* out, int32_t out_dtype, const void* a, int32_t a_dtype,
                                 const void* b, int32_t b_dtype, int64_t n, int64_t bn, int64_t inner, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_binary_ex(op, out, out_dtype, a, a_dtype, b, b_dtype, n, bn, inner));
  if (n == 0) return DT_OK;
  binary_ex_ctx_ c = {op, out_dtype, a_dtype, b_dtype, out, a, b, n, bn, inner};
  dt_parallel_for_(n, CHEAP_GRAIN, binary_ex_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_gelu_fwd_ex(void* out, const void* inp, int64_t n, int32_t dtype, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_gelu_ex("dt_gelu_fwd_ex", out, inp, NULL, 0, n, dtype));
  if (n == 0) return DT_OK;
  gelu_ex_ctx_ c = {dtype, out, inp, NULL};
  dt_parallel_for_(n, GELU_GRAIN, gelu_ex_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_gelu_bwd_ex(void* dinp, const void* dout, const void* inp, int64_t n, int32_t dtype,
                                   void* stream) {
  (void)stream;
  DT_TRY_(dt_check_gelu_ex("dt_gelu_bwd_ex", dinp, inp, dout, 1, n, dtype));
  if (n == 0) return DT_OK;
  gelu_ex_ctx_ c = {dtype, dinp, inp, dout};
  dt_parallel_for_(n, GELU_GRAIN, gelu_bwd_ex_range_, &c);
  return DT_OK;
}
