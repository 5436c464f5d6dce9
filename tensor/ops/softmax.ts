/**
 * softmax and logSoftmax with autograd along any dim. Along the last dim,
 * softmax also takes attention's options (a causal mask and a scale of the
 * logits) and runs the row kernel; other dims run the (outer, D, inner)
 * kernel, whose rows give the same bits.
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, dimView, normDim } from "./_util.ts";

/** Options of softmax() along the last dim. */
export interface SoftmaxOptions {
  /** Mask column j of row r when j > r mod T (square trailing dims T x T): attention's causal mask. */
  causal?: boolean;
  /** Multiply the input by this first (default 1). */
  scale?: number;
}

/** softmax(scale * x) along `dim` (default the last), as torch.softmax. */
export function softmax(x0: Tensor, dim = -1, opts: SoftmaxOptions = {}): Tensor {
  const x = asF32(x0);
  const nd = Math.max(x.shape.length, 1);
  const d = normDim("softmax", dim, nd, x.shape);
  if (d !== nd - 1 || x.shape.length === 0) {
    if (opts.causal || (opts.scale ?? 1) !== 1) {
      throw new RangeError(
        `softmax: causal and scale apply along the last dim only, not dim ${dim} of [${x.shape}]`,
      );
    }
    return softmaxDim(x, d, false);
  }
  const cols = x.shape[x.shape.length - 1]!;
  const rows = cols === 0 ? 0 : x.numel / cols;
  const causalT = opts.causal ? x.shape[x.shape.length - 2]! : 0;
  if (opts.causal && causalT !== cols) {
    throw new RangeError(`softmax: a causal mask needs square trailing dims, got [${x.shape}]`);
  }
  const scale = opts.scale ?? 1;
  const out = empty(x.shape, "f32");
  const k = backend();
  k.call.dt_softmax_fwd(out.ptr, x.ptr, BigInt(rows), BigInt(cols), BigInt(causalT), scale);
  if (needsGrad(x)) {
    record(out, "softmax", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_softmax_bwd(gx.ptr, g.ptr, out.ptr, BigInt(rows), BigInt(cols), scale);
      return [gx];
    });
  }
  return out;
}

/** log(softmax(x)) along `dim` (default the last), computed stably as torch.log_softmax. */
export function logSoftmax(x0: Tensor, dim = -1): Tensor {
  const x = asF32(x0);
  return softmaxDim(x, normDim("logSoftmax", dim, Math.max(x.shape.length, 1), x.shape), true);
}

function softmaxDim(x: Tensor, d: number, isLog: boolean): Tensor {
  const { outer, D, inner } = x.shape.length === 0
    ? { outer: 1, D: 1, inner: 1 }
    : dimView(x.shape, d);
  const out = empty(x.shape, "f32");
  const k = backend();
  const flag = isLog ? 1 : 0;
  k.call.dt_softmax_dim_fwd(out.ptr, x.ptr, BigInt(outer), BigInt(D), BigInt(inner), flag);
  if (needsGrad(x)) {
    record(out, isLog ? "logSoftmax" : "softmax", [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_softmax_dim_bwd(
        gx.ptr,
        g.ptr,
        out.ptr,
        BigInt(outer),
        BigInt(D),
        BigInt(inner),
        flag,
      );
      return [gx];
    });
  }
  return out;
}
