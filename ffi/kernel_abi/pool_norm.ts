/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Pooling and batch norm (in the steps a synchronised batch norm all-reduces between), and
 * batch norm, ReLU and 2x2 max pooling in one pass.
 *
 * @module
 */
import { B, F64, I32, I64, P, STATUS } from "./c_types.ts";

export const POOL_NORM_SYMBOLS = {
  /** 2-D max pooling of P planes; padding counts as -inf, a NaN always wins. */
  dt_maxpool2d_fwd: {
    parameters: [
      P, // float* out (P, OH, OW)
      P, // int32* idx (P, OH, OW): ih * W + iw of each maximum within its plane
      P, // const float* inp (P, H, W)
      B, // const int64* geom[13] (host): P, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW
      P, // stream
    ],
    ...STATUS,
  },
  /** dinp (overwritten) = dout added at the forward's indices, in output order. */
  dt_maxpool2d_bwd: {
    parameters: [
      P, // float* dinp (P, H, W)
      P, // const float* dout (P, OH, OW)
      P, // const int32* idx (P, OH, OW) from dt_maxpool2d_fwd
      B, // const int64* geom[13] (host), as dt_maxpool2d_fwd
      P, // stream
    ],
    ...STATUS,
  },
  /** 2-D average pooling (torch.nn.functional.avg_pool2d). */
  dt_avgpool2d_fwd: {
    parameters: [
      P, // float* out (P, OH, OW)
      P, // const float* inp (P, H, W)
      B, // const int64* geom[13] (host), dilation 1
      I32, // int32 count_include_pad: 1 divides by the padded window
      I64, // int64 divisor_override: > 0 divides by it; 0: none
      P, // stream
    ],
    ...STATUS,
  },
  /** dinp (overwritten) = each output's gradient / divisor spread over its window. */
  dt_avgpool2d_bwd: {
    parameters: [
      P, // float* dinp (P, H, W)
      P, // const float* dout (P, OH, OW)
      B, // const int64* geom[13] (host), as dt_avgpool2d_fwd
      I32, // int32 count_include_pad
      I64, // int64 divisor_override
      P, // stream
    ],
    ...STATUS,
  },
  /** Adaptive average pooling: window o spans [floor(o*H/OH), ceil((o+1)*H/OH)). */
  dt_adaptive_avgpool2d_fwd: {
    parameters: [
      P, // float* out (P, OH, OW)
      P, // const float* inp (P, H, W)
      I64, // int64 P: planes (N * C)
      I64, // int64 H
      I64, // int64 W
      I64, // int64 OH
      I64, // int64 OW
      P, // stream
    ],
    ...STATUS,
  },
  /** dinp (overwritten) = each output's gradient / window size over its window. */
  dt_adaptive_avgpool2d_bwd: {
    parameters: [
      P, // float* dinp (P, H, W)
      P, // const float* dout (P, OH, OW)
      I64, // int64 P
      I64, // int64 H
      I64, // int64 W
      I64, // int64 OH
      I64, // int64 OW
      P, // stream
    ],
    ...STATUS,
  },
  /** Batch norm, step 1: per-channel sums of (N, C, HW); acc[C] = N * HW. A
   *  synchronised batch norm all-reduces acc (sums and counts) after it. */
  dt_bn_sum: {
    parameters: [
      P, // double* acc (C + 1): sums, then the element count
      P, // const float* inp (N, C, HW)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Step 2: sq[c] = sum of (x - mean_c)^2 with mean_c = acc[c] / acc[C] (all-reduced next when synchronised). */
  dt_bn_sqdev: {
    parameters: [
      P, // double* sq (C)
      P, // const float* inp (N, C, HW)
      P, // const double* acc (C + 1) from dt_bn_sum (all-reduced)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Step 3: mean, rstd = 1/sqrt(var + eps) (biased var), and the running
   *  statistics r = f*v + (1-f)*r with the unbiased variance; num_batches += 1. */
  dt_bn_finalize: {
    parameters: [
      P, // float* mean (C)
      P, // float* rstd (C)
      P, // float* running_mean (C) or NULL
      P, // float* running_var (C) or NULL
      P, // int64* num_batches (1) or NULL: incremented
      P, // const double* acc (C + 1)
      P, // const double* sq (C)
      I64, // int64 C
      F64, // double eps
      F64, // double momentum f in [0, 1]; -1: cumulative average f = 1 / num_batches
      P, // stream
    ],
    ...STATUS,
  },
  /** Eval mode: mean = running_mean, rstd = 1 / sqrt(running_var + eps) in f32. */
  dt_bn_eval_stats: {
    parameters: [
      P, // float* mean (C)
      P, // float* rstd (C)
      P, // const float* running_mean (C)
      P, // const float* running_var (C)
      I64, // int64 C
      F64, // double eps
      P, // stream
    ],
    ...STATUS,
  },
  /** out = x * alpha + beta per channel, alpha = rstd * w, beta = b - mean * alpha. */
  dt_bn_apply: {
    parameters: [
      P, // float* out (N, C, HW)
      P, // const float* inp (N, C, HW)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      P, // const float* weight (C) or NULL (1)
      P, // const float* bias (C) or NULL (0)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Batch norm's output, ReLU and 2x2 max pooling at stride 2 in one pass (the
   *  bits of dt_bn_apply, dt_relu_fwd, dt_maxpool2d_fwd): out[n, c, oh, ow] = the
   *  max over the window of relu(x * alpha + beta), idx as dt_maxpool2d_fwd's. */
  dt_bn_relu_maxpool2x2_fwd: {
    parameters: [
      P, // float* out (N, C, H/2, W/2)
      P, // int32* idx (N, C, H/2, W/2): ih * W + iw of each maximum within its plane
      P, // const float* inp (N, C, H, W)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      P, // const float* weight (C) or NULL (1)
      P, // const float* bias (C) or NULL (0)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 H
      I64, // int64 W
      P, // stream
    ],
    ...STATUS,
  },
  /** Backward step 1: acc = [sum dy, sum (x - mean) dy] per channel (local;
   *  all-reduced next when synchronised); dweight = acc[C+c] * rstd, dbias = acc[c]. */
  dt_bn_bwd_reduce: {
    parameters: [
      P, // double* acc (2C)
      P, // float* dweight (C) or NULL
      P, // float* dbias (C) or NULL
      P, // const float* dout (N, C, HW)
      P, // const float* inp (N, C, HW)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
  /** Backward step 2: dinp = (dy - sum_dy/M - (x - mean) sum_dy_xmu rstd^2/M) rstd w,
   *  M = *count; with acc NULL (fixed statistics) dinp = dy rstd w. */
  dt_bn_bwd_apply: {
    parameters: [
      P, // float* dinp (N, C, HW)
      P, // const float* dout (N, C, HW)
      P, // const float* inp (N, C, HW)
      P, // const float* mean (C)
      P, // const float* rstd (C)
      P, // const float* weight (C) or NULL (1)
      P, // const double* acc (2C) from dt_bn_bwd_reduce (all-reduced), or NULL
      P, // const double* count (1): the forward's element count (acc[C] of dt_bn_sum)
      I64, // int64 N
      I64, // int64 C
      I64, // int64 HW
      P, // stream
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;
