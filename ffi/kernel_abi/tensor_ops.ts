/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Everyday tensor ops: unary maps, comparisons, strided copies, reductions and softmax along
 * one dimension, gathers and scatters.
 *
 * @module
 */
import { B, F32, F64, I32, I64, P, STATUS } from "./c_types.ts";

export const TENSOR_OP_SYMBOLS = {
  // ---- ops of convolutional networks and everyday tensor ops ------------------
  // Tensors are viewed as (outer, D, inner) around the dimension an op works
  // along. Host arrays (shapes, strides, geometries) are "buffer" parameters:
  // an i64 typed array read before the call returns. Index tensors are i32
  // and checked before anything is written.
  /** Unary elementwise forward: out[i] = op(inp[i]). */
  dt_unary_fwd: {
    parameters: [
      I32, // int32 op: DT_UN_EXP 0, LOG 1, SIGMOID 2, TANH 3, SQRT 4, POW 5, CLAMP 6 (common/unary.h)
      P, // float* out (n)
      P, // const float* inp (n); may alias out
      I64, // int64 n
      F64, // double a: POW's exponent, CLAMP's min (-inf: none); rounded to f32
      F64, // double b: CLAMP's max (+inf: none); rounded to f32
      P, // stream
    ],
    ...STATUS,
  },
  /** Unary elementwise backward: dinp = dout * op'(inp) (common/unary.h's rules). */
  dt_unary_bwd: {
    parameters: [
      I32, // int32 op (as dt_unary_fwd)
      P, // float* dinp (n)
      P, // const float* dout (n)
      P, // const float* inp (n): the forward's input
      P, // const float* out (n): the forward's output
      I64, // int64 n
      F64, // double a (as dt_unary_fwd)
      F64, // double b (as dt_unary_fwd)
      P, // stream
    ],
    ...STATUS,
  },
  /**
   * out[i] = a[i] <op> b[i] as 0/1 (kernels/common/compare.h: 0 eq, 1 ne, 2 lt,
   * 3 le, 4 gt, 5 ge; 6 and 7 pick torch.maximum's / minimum's operand); a NULL
   * b compares with b_value.
   */
  dt_compare: {
    parameters: [
      I32, // int32 op
      P, // uint8* out (n)
      P, // const float* a (n)
      P, // const float* b (n) or NULL
      I64, // int64 n
      F32, // float b_value: used where b is NULL
      P, // stream
    ],
    ...STATUS,
  },
  /** out[i] = cond[i] ? a[i] : b[i]; a NULL a or b reads a_value or b_value instead. */
  dt_where: {
    parameters: [
      P, // float* out (n)
      P, // const uint8* cond (n): nonzero picks a
      P, // const float* a (n) or NULL
      P, // const float* b (n) or NULL
      I64, // int64 n
      F32, // float a_value: used where a is NULL
      F32, // float b_value: used where b is NULL
      P, // stream
    ],
    ...STATUS,
  },
  /** Copies a box of elements between two strided layouts (permute, expand,
   *  pad, slice, cat): for every index tuple t < sizes,
   *  out[sum t*out_strides] = inp[sum t*inp_strides]. Output positions must be distinct. */
  dt_strided_copy: {
    parameters: [
      P, // void* out (at the box's first element)
      P, // const void* inp (at the box's first element)
      I32, // int32 ndim, 0..16
      B, // const int64* sizes (ndim, host)
      B, // const int64* out_strides (ndim, host; elements, >= 0)
      B, // const int64* inp_strides (ndim, host; elements, >= 0; 0 broadcasts)
      I64, // int64 elem_bytes, 1..64
      P, // stream
    ],
    ...STATUS,
  },
  /** Reduces (outer, D, inner) along D: sum and mean in double; max/min with
   *  the first index of the extreme (a NaN wins). D = 0: sum 0, mean NaN, max/min refused. */
  dt_reduce_dim: {
    parameters: [
      I32, // int32 op: DT_RED_SUM 0, MEAN 1, MAX 2, MIN 3 (common/reduce_dim.h)
      P, // float* out (outer * inner), or NULL for max/min with idx (argmax)
      P, // int32* idx (outer * inner) or NULL; max/min only
      P, // const float* inp (outer * D * inner)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 inner
      P, // stream
    ],
    ...STATUS,
  },
  /** Softmax or log-softmax of (outer, D, inner) along D. */
  dt_softmax_dim_fwd: {
    parameters: [
      P, // float* out (outer * D * inner)
      P, // const float* inp
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 inner
      I32, // int32 is_log: 1 for log-softmax
      P, // stream
    ],
    ...STATUS,
  },
  /** Its backward: softmax dinp = (dout - sum(dout*out)) * out; log-softmax
   *  dinp = dout - exp(out) * sum(dout), sums along D. */
  dt_softmax_dim_bwd: {
    parameters: [
      P, // float* dinp (outer * D * inner)
      P, // const float* dout
      P, // const float* out: the forward's output
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 inner
      I32, // int32 is_log
      P, // stream
    ],
    ...STATUS,
  },
  /** torch.gather: out[o, j, i] = inp[o, idx[o, j, i], i]. */
  dt_gather_dim: {
    parameters: [
      P, // void* out (outer * J * inner)
      P, // const void* inp (outer * D * inner)
      P, // const int32* idx (outer * J * inner), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      I64, // int64 elem_bytes, 1..64
      P, // stream
    ],
    ...STATUS,
  },
  /** gather's backward: dinp = 0, then dinp[o, idx[o, j, i], i] += dout[o, j, i], j in order. */
  dt_scatter_add_dim: {
    parameters: [
      P, // float* dinp (outer * D * inner), overwritten
      P, // const float* dout (outer * J * inner)
      P, // const int32* idx (outer * J * inner), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      P, // stream
    ],
    ...STATUS,
  },
  /** torch.index_select: out[o, j, i] = inp[o, idx[j], i]. */
  dt_index_select: {
    parameters: [
      P, // void* out (outer * J * inner)
      P, // const void* inp (outer * D * inner)
      P, // const int32* idx (J), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      I64, // int64 elem_bytes, 1..64
      P, // stream
    ],
    ...STATUS,
  },
  /** index_select's backward: dinp = 0, then dinp[o, idx[j], i] += dout[o, j, i], j in order. */
  dt_index_add: {
    parameters: [
      P, // float* dinp (outer * D * inner), overwritten
      P, // const float* dout (outer * J * inner)
      P, // const int32* idx (J), each in [0, D)
      I64, // int64 outer
      I64, // int64 D
      I64, // int64 J
      I64, // int64 inner
      P, // stream
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;
