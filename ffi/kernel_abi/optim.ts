/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Optimizer steps and loss scaling's unscale-and-check, per tensor and over many tensors
 * in one call (zero_grad too).
 *
 * @module
 */
import { F32, F64, I32, I64, P, STATUS } from "./c_types.ts";

export const OPTIM_SYMBOLS = {
  // ---- optimizers and loss scaling ----------------------------------------
  /** torch 1.13 AdamW (single-tensor path) for step >= 1; scalars are Python
   *  doubles there, so they are f64 here. */
  dt_adamw: {
    parameters: [
      P, // float* p [n]: parameters, updated
      P, // const float* g [n]: gradients
      P, // float* m [n]: first moment, updated
      P, // float* v [n]: second moment, updated
      I64, // int64_t n
      F64, // double lr
      F64, // double beta1
      F64, // double beta2
      F64, // double eps
      F64, // double weight_decay
      I64, // int64_t step: 1 for the first step
      P, // void* stream
    ],
    ...STATUS,
  },
  /** torch 1.13 SGD. */
  dt_sgd: {
    parameters: [
      P, // float* p [n]: parameters, updated
      P, // const float* g [n]: gradients
      P, // float* buf [n]: momentum buffer, updated
      I64, // int64_t n
      F64, // double lr
      F64, // double momentum
      F64, // double dampening
      F64, // double weight_decay
      I32, // int32_t nesterov (0 or 1)
      I32, // int32_t first: != 0 initialises buf = d (a copy)
      P, // void* stream
    ],
    ...STATUS,
  },
  /** (g, n, inv_scale, found_inf f32[1], stream): g *= inv_scale; found_inf = 1
   *  when any element of g is inf or NaN (never reset to 0 here). */
  dt_unscale_check: { parameters: [P, I64, F32, P, P], ...STATUS },

  // ---- one-launch optimizer steps (ABI 3) ---------------------------------
  /** dt_adamw over `num` tensors in one call (one launch on a GPU), each with
   *  its own step and hyperparameters: the same bits as one dt_adamw per
   *  tensor. Every table is a host array of `num` entries (hyper: 5 per
   *  tensor); the tensors are device (CPU: host) memory. */
  dt_adamw_many: {
    parameters: [
      P, // float* const* params [num]: updated
      P, // const float* const* grads [num]
      P, // float* const* exp_avgs [num]: updated
      P, // float* const* exp_avg_sqs [num]: updated
      P, // const int64_t* counts [num]: elements of each tensor
      P, // const int64_t* steps [num]: each tensor's step, >= 1
      P, // const double* hyper [5 num]: lr, beta1, beta2, eps, weight_decay of each tensor
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
  /** dt_sgd over `num` tensors in one call (one launch on a GPU): the same
   *  bits as one dt_sgd per tensor. Host tables as dt_adamw_many's. */
  dt_sgd_many: {
    parameters: [
      P, // float* const* params [num]: updated
      P, // const float* const* grads [num]
      P, // float* const* bufs [num]: momentum buffers, updated (NULL where momentum is 0)
      P, // const int64_t* counts [num]
      P, // const double* hyper [4 num]: lr, momentum, dampening, weight_decay of each tensor
      P, // const int32_t* flags [2 num]: nesterov, first of each tensor (as dt_sgd's)
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
  /** Every element of `num` f32 tensors = 0 in one call (one launch on a GPU):
   *  zero_grad. Host tables as dt_adamw_many's. */
  dt_zero_many: {
    parameters: [
      P, // float* const* ptrs [num]
      P, // const int64_t* counts [num]
      I64, // int64_t num
      P, // void* stream
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;
