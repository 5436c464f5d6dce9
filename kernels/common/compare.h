/* compare.h — one element of dt_compare (torch.eq/ne/lt/le/gt/ge on float
 * tensors, giving a u8 mask) and of the pick that torch.maximum / minimum
 * make (NaN wins, as torch propagates it), and the call's argument check,
 * shared by the CPU loop and the CUDA kernel. IEEE comparisons: NaN is
 * unequal to everything (ne true, the others false), -0 equals +0. */
#pragma once
#include "dt_checks.h"
#include "dt_common.h"

typedef enum {
  DT_CMP_EQ = 0,
  DT_CMP_NE = 1,
  DT_CMP_LT = 2,
  DT_CMP_LE = 3,
  DT_CMP_GT = 4,
  DT_CMP_GE = 5,
  DT_CMP_PICK_MAX = 6, /* 1 where a is torch.maximum(a, b): a > b or a is NaN */
  DT_CMP_PICK_MIN = 7, /* 1 where a is torch.minimum(a, b): a < b or a is NaN */
} dt_compare_op;

DT_HD int dt_compare_op_valid(int32_t op) { return op >= DT_CMP_EQ && op <= DT_CMP_PICK_MIN; }

DT_HD uint8_t dt_compare_f(int32_t op, float a, float b) {
  switch (op) {
    case DT_CMP_EQ: return a == b;
    case DT_CMP_NE: return a != b;
    case DT_CMP_LT: return a < b;
    case DT_CMP_LE: return a <= b;
    case DT_CMP_GT: return a > b;
    case DT_CMP_GE: return a >= b;
    case DT_CMP_PICK_MAX: return a > b || a != a;
    default: return a < b || a != a;
  }
}

/* b NULL: every element is compared with b_value. */
static inline dt_status dt_check_compare(int32_t op, const uint8_t* out, const float* a, int64_t n) {
  DT_REQUIRE_(dt_compare_op_valid(op), "dt_compare: unknown op %d (expected DT_CMP_EQ..DT_CMP_PICK_MIN, 0..7)", op);
  DT_REQUIRE_(n >= 0, "dt_compare: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && a, "dt_compare: null pointer (out=%p a=%p)", (const void*)out, (const void*)a);
  return DT_OK;
}
