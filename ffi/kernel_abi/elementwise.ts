/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Elementwise f32 ops: arithmetic with broadcasting, scaling, squared norms and gradient
 * clipping, ReLU, GELU and dropout.
 *
 * @module
 */
import { F32, F64, I32, I64, P, STATUS } from "./c_types.ts";

export const ELEMENTWISE_SYMBOLS = {
  // ---- elementwise ---------------------------------------------------------
  /** out[i] = a[i] op b[(i / inner) % bn]. bn = n, inner = 1 is same-shape;
   *  trailing-suffix broadcast is inner = 1; a column vector (R,1) against
   *  (R,C) is bn = R, inner = C. out may alias a. */
  dt_binary: {
    parameters: [
      I32, // int32_t op: DT_OP_ADD 0, SUB 1, MUL 2, DIV 3
      P, // float* out [n]
      P, // const float* a [n]
      P, // const float* b [bn]
      I64, // int64_t n
      I64, // int64_t bn: elements of b
      I64, // int64_t inner: consecutive elements of a that share one element of b
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (out, inp, n, bn, inner, stream): out[j] = sum of inp[i] over all i with
   *  (i / inner) % bn == j (the gradient of a broadcast operand); f64 accumulate. */
  dt_reduce_bcast: { parameters: [P, P, I64, I64, I64, P], ...STATUS },
  /** (out, inp, n, alpha, stream): out = alpha * inp. out may alias inp. */
  dt_scale: { parameters: [P, P, I64, F32, P], ...STATUS },
  /** (y, x, n, alpha, stream): y += alpha * x. */
  dt_axpy: { parameters: [P, P, I64, F32, P], ...STATUS },
  /** (out f64[1], inp, n, stream): sum of inp[i]^2 accumulated in double. */
  dt_sumsq: { parameters: [P, P, I64, P], ...STATUS },
  /** out[i] = dt_sumsq of tensor i, for every tensor in one reduction (no read-back). */
  dt_sumsq_many: {
    parameters: [
      P, // double* out [num]: device (CPU: host) memory
      P, // const float* const* ptrs [num]: a host array of the tensors' addresses
      P, // const int64_t* counts [num]: a host array of their element counts
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
  /** torch 1.13's clip_grad_norm_ with one reduction and no read-back: sumsq[i]
   *  = dt_sumsq of tensor i, *total = the f32 global norm (per-tensor f32 norms
   *  folded in order), then every tensor *= min(max_norm / (total + 1e-6), 1).
   *  max_norm = +inf computes the norm only. */
  dt_clip_grad_norm: {
    parameters: [
      P, // float* total [1]: device (CPU: host) memory
      P, // double* sumsq [num]: device (CPU: host) memory, written
      P, // float* const* ptrs [num]: a host array of the gradients' addresses (scaled in place)
      P, // const int64_t* counts [num]: a host array of their element counts
      I64, // int64_t num
      F64, // double max_norm (>= 0)
      P, // void* stream
    ],
    ...STATUS,
  },
  dt_relu_fwd: { parameters: [P, P, I64, P], ...STATUS },
  /** (dinp, dout, inp, n, stream): dinp = inp > 0 ? dout : 0 */
  dt_relu_bwd: { parameters: [P, P, P, I64, P], ...STATUS },
  /** tanh-approximate GELU, as torch.nn.functional.gelu(approximate="tanh"). */
  dt_gelu_fwd: { parameters: [P, P, I64, P], ...STATUS },
  dt_gelu_bwd: { parameters: [P, P, P, I64, P], ...STATUS },
  /** Element i is kept when dt_hash_u32(seed, offset + i) >= p * 2^32, then
   *  scaled by 1 / (1 - p). */
  dt_dropout_fwd: {
    parameters: [
      P, // float* out [n]
      P, // const float* inp [n]
      I64, // int64_t n
      F32, // float p: drop probability in [0, 1)
      I64, // int64_t seed
      I64, // int64_t offset: counter of element 0 (distinct per call)
      P, // void* stream
    ],
    ...STATUS,
  },
  /** The same mask as dt_dropout_fwd, recomputed from (seed, offset). */
  dt_dropout_bwd: {
    parameters: [
      P, // float* dinp [n]
      P, // const float* dout [n]
      I64, // int64_t n
      F32, // float p
      I64, // int64_t seed
      I64, // int64_t offset
      P, // void* stream
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;
