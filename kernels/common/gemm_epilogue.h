/* gemm_epilogue.h — what dt_gemm_ex applies to a product on its way into C
 * (cuBLASLt's epilogues): a bias broadcast along the rows, the bias then the
 * tanh GELU with the pre-activation kept (the backward's input), or the
 * bias gradient, a sum over K of op(A)'s rows. The f32 value of an element
 * is formed once and rounded once into C's dtype. */
#pragma once
#include "dt_common.h"
#include "gelu.h"

/* Epilogue codes of dt_gemm_ex (row-major C is M x N). */
enum {
  DT_EPI_NONE = 0,
  DT_EPI_BIAS = 1,      /* C[i, j] = product + bias[j] (bias has N elements) */
  DT_EPI_GELU_BIAS = 2, /* aux[i, j] = product + bias[j]; C[i, j] = gelu(that) */
  DT_EPI_BGRAD = 3      /* C = product; bias[i] = sum over k of op(A)[i, k] (M elements) */
};

DT_HD int dt_epilogue_valid(int32_t e) { return e >= DT_EPI_NONE && e <= DT_EPI_BGRAD; }

/* An element's pre-activation: the product (alpha AB + beta C, f32) plus its bias. */
DT_HD float dt_epilogue_pre_f(float product, float bias) { return product + bias; }
