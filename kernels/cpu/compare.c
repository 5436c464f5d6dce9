/* compare.c — CPU loop of dt_compare (elementwise comparisons of f32
 * tensors into a u8 mask). The element's arithmetic lives in
 * kernels/common/compare.h; each op gets its own loop so that each
 * vectorises. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "compare.h"

/* Elements per thread chunk: a comparison is one instruction per element. */
#define COMPARE_GRAIN (1 << 15)

typedef struct {
  int32_t op;
  uint8_t* out;
  const float *a, *b;
  float b_value;
} compare_ctx_;

#define COMPARE_LOOP_(OP)                                                                                          \
  do {                                                                                                             \
    if (c->b)                                                                                                      \
      for (int64_t i = begin; i < end; i++) c->out[i] = dt_compare_f(OP, c->a[i], c->b[i]);                        \
    else                                                                                                           \
      for (int64_t i = begin; i < end; i++) c->out[i] = dt_compare_f(OP, c->a[i], c->b_value);                     \
  } while (0)

DT_VEC_CLONES static void compare_range_(void* vctx, int64_t begin, int64_t end) {
  const compare_ctx_* c = vctx;
  switch (c->op) {
    case DT_CMP_EQ: COMPARE_LOOP_(DT_CMP_EQ); break;
    case DT_CMP_NE: COMPARE_LOOP_(DT_CMP_NE); break;
    case DT_CMP_LT: COMPARE_LOOP_(DT_CMP_LT); break;
    case DT_CMP_LE: COMPARE_LOOP_(DT_CMP_LE); break;
    case DT_CMP_GT: COMPARE_LOOP_(DT_CMP_GT); break;
    case DT_CMP_GE: COMPARE_LOOP_(DT_CMP_GE); break;
    case DT_CMP_PICK_MAX: COMPARE_LOOP_(DT_CMP_PICK_MAX); break;
    default: COMPARE_LOOP_(DT_CMP_PICK_MIN); break;
  }
}

DT_EXPORT dt_status dt_compare(int32_t op, uint8_t* out, const float* a, const float* b, int64_t n, float b_value,
                               void* stream) {
  (void)stream;
  DT_TRY_(dt_check_compare(op, out, a, n));
  if (n == 0) return DT_OK;
  compare_ctx_ c = {op, out, a, b, b_value};
  dt_parallel_for_(n, COMPARE_GRAIN, compare_range_, &c);
  return DT_OK;
}
