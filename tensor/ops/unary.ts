/**
 * Elementwise math with autograd, one native kernel (dt_unary_fwd/bwd) for
 * all: exp, log, sigmoid, tanh, sqrt, pow by a number, clamp. Results follow
 * torch 1.13's CPU rounding within an ulp or two (kernels/common/unary.h).
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, requireFloat } from "./_util.ts";

const UN = { exp: 0, log: 1, sigmoid: 2, tanh: 3, sqrt: 4, pow: 5, clamp: 6 } as const;

function unary(op: keyof typeof UN, x0: Tensor, a = 0, b = 0): Tensor {
  requireFloat(op, x0);
  const x = asF32(x0);
  const out = empty(x.shape, "f32");
  const k = backend();
  const n = BigInt(x.numel);
  k.call.dt_unary_fwd(UN[op], out.ptr, x.ptr, n, a, b);
  if (needsGrad(x)) {
    record(out, op, [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_unary_bwd(UN[op], gx.ptr, g.ptr, x.ptr, out.ptr, n, a, b);
      return [gx];
    });
  }
  return out;
}

/** e^x. (torch.exp.) */
export function exp(x: Tensor): Tensor {
  return unary("exp", x);
}
/** ln x (NaN below 0, -inf at 0). (torch.log.) */
export function log(x: Tensor): Tensor {
  return unary("log", x);
}
/** 1 / (1 + e^-x). (torch.sigmoid.) */
export function sigmoid(x: Tensor): Tensor {
  return unary("sigmoid", x);
}
/** tanh x. (torch.tanh.) */
export function tanh(x: Tensor): Tensor {
  return unary("tanh", x);
}
/** √x (IEEE, exactly rounded). (torch.sqrt.) */
export function sqrt(x: Tensor): Tensor {
  return unary("sqrt", x);
}

/**
 * x raised to a number (torch.pow(x, exponent)); 2, 3, 0.5, -0.5, -1 and -2
 * are computed exactly as torch does (products, sqrt, reciprocals).
 */
export function pow(x: Tensor, exponent: number): Tensor {
  if (!Number.isFinite(exponent)) {
    throw new RangeError(`pow: exponent must be finite, got ${exponent}`);
  }
  return unary("pow", x, exponent);
}

/** Bounds of clamp(); either may be left out. */
export interface ClampOptions {
  /** Lower bound (null or absent: none). */
  min?: number | null;
  /** Upper bound (null or absent: none). */
  max?: number | null;
}

/**
 * Each element limited to [min, max] (torch.clamp); NaN stays NaN. The
 * gradient flows where min <= x <= max.
 *
 * @example
 * ```ts
 * const y = clamp(x, { min: 0, max: 6 }); // ReLU6
 * ```
 */
export function clamp(x: Tensor, opts: ClampOptions): Tensor {
  const lo = opts.min ?? -Infinity, hi = opts.max ?? Infinity;
  if (opts.min == null && opts.max == null) {
    throw new RangeError("clamp: give at least one of min and max");
  }
  if (Number.isNaN(lo) || Number.isNaN(hi)) {
    throw new RangeError("clamp: min and max must not be NaN");
  }
  return unary("clamp", x, lo, hi);
}
