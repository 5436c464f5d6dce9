/**
 * Layer norm with autograd, one native kernel each way (dt_layernorm_*):
 * rows of any float dtype are read as they are, statistics are f32/double,
 * and the output is f32 as PyTorch's (also under autocast) unless the caller
 * asks for another dtype — a transformer whose norms feed only products asks
 * for autocast's, saving a cast. addLayerNorm also adds a residual branch
 * first in the same pass, keeping the sum (the residual stream). The weight
 * and bias gradients are added by the kernel straight into the parameters'
 * .grad.
 */
import { backend } from "../backend.ts";
import { castTensor, empty, type Tensor } from "../tensor.ts";
import { ADDED_TO_LEAF, type InputGrad, leafGradSink, needsGrad, record } from "../autograd.ts";
import { type DType, DTYPE_CODE } from "../dtype.ts";
import { asF32, requireFloat } from "./_util.ts";

/** Options of layerNorm and addLayerNorm. */
export interface LayerNormOptions {
  /** the output's dtype (default f32, whatever the input's) */
  outDtype?: DType;
}

/**
 * Layer norm over the last dim (biased variance), with optional weight and bias.
 * (torch.nn.functional.layer_norm over the last dim.)
 */
export function layerNorm(
  x: Tensor,
  weight: Tensor | null,
  bias: Tensor | null,
  eps = 1e-5,
  opts: LayerNormOptions = {},
): Tensor {
  return normalize(x, null, weight, bias, eps, opts.outDtype ?? "f32").out;
}

/**
 * [x + y, layerNorm(x + y)] in one pass: the sum in x's dtype (y, of any
 * float dtype, is added in f32 and rounded there), as a transformer block
 * adds a branch to its residual stream and normalises it for the next.
 *
 * @example
 * ```ts
 * const [h, n] = addLayerNorm(x, attnOut, ln2.weight, ln2.bias); // h = x + attnOut, n = ln2(h)
 * ```
 */
export function addLayerNorm(
  x: Tensor,
  y: Tensor,
  weight: Tensor | null,
  bias: Tensor | null,
  eps = 1e-5,
  opts: LayerNormOptions = {},
): [Tensor, Tensor] {
  if (y.numel !== x.numel || y.shape.length !== x.shape.length) {
    throw new RangeError(
      `addLayerNorm: cannot add [${y.shape}] to [${x.shape}]: the shapes differ`,
    );
  }
  const { sum, out } = normalize(x, y, weight, bias, eps, opts.outDtype ?? "f32");
  return [sum!, out];
}

function normalize(
  x: Tensor,
  y: Tensor | null,
  weight0: Tensor | null,
  bias0: Tensor | null,
  eps: number,
  outDtype: DType,
): { sum: Tensor | null; out: Tensor } {
  requireFloat("layerNorm", x);
  if (y) requireFloat("layerNorm", y);
  const C = x.shape[x.shape.length - 1] ?? 0;
  if (C === 0) {
    throw new RangeError(`layerNorm: input [${x.shape}] has no last dim to normalise over`);
  }
  for (const [name, p] of [["weight", weight0], ["bias", bias0]] as const) {
    if (p && p.numel !== C) {
      throw new RangeError(
        `layerNorm: ${name} [${p.shape}] does not match the last dim of [${x.shape}]`,
      );
    }
  }
  const weight = weight0 && asF32(weight0), bias = bias0 && asF32(bias0);
  const rows = x.numel / C;
  if (outDtype !== "f32" && outDtype !== "bf16" && outDtype !== "f16") {
    throw new RangeError(`layerNorm: outDtype ${outDtype} is not a float dtype (f32, bf16, f16)`);
  }
  const out = empty(x.shape, outDtype);
  const sum = y ? empty(x.shape, x.dtype) : null;
  const mean = empty([rows], "f32"), rstd = empty([rows], "f32");
  const k = backend();
  const r = BigInt(rows), c = BigInt(C);
  k.call.dt_layernorm_fwd(
    out.ptr,
    mean.ptr,
    rstd.ptr,
    x.ptr,
    weight?.ptr ?? null,
    bias?.ptr ?? null,
    r,
    c,
    eps,
    DTYPE_CODE[outDtype],
    DTYPE_CODE[x.dtype],
    y?.ptr ?? null,
    DTYPE_CODE[y?.dtype ?? "f32"],
    sum?.ptr ?? null,
  );
  // the norm's input: x itself, or the sum just written
  const xin = sum ?? x;
  if (sum && needsGrad(x, y)) {
    // the sum's gradient passes to both terms (y's in y's dtype where that is lower)
    record(sum, "add", [x, y!], (g) => [g, g.dtype === y!.dtype ? g : castTensor(g, y!.dtype)], {
      lowPrecisionGrad: true,
    });
  }
  const inputs = [xin, weight, bias].filter((t): t is Tensor => t !== null);
  if (!needsGrad(...inputs)) {
    mean.dispose();
    rstd.dispose();
    return { sum, out };
  }
  record(out, "layerNorm", inputs, (g) => {
    const grads: InputGrad[] = [];
    const gx = xin.requiresGrad ? empty(xin.shape, xin.dtype) : null;
    // the weight and bias gradients go straight into their .grad when each wanted one is a
    // leaf's and both are in the same state (fresh: overwritten, else added to)
    const wantW = weight?.requiresGrad ?? false, wantB = bias?.requiresGrad ?? false;
    const leaf = (t: Tensor) => t.node === null;
    const direct = (!wantW || leaf(weight!)) && (!wantB || leaf(bias!)) &&
      (!wantW || !wantB || (weight!.grad === null) === (bias!.grad === null));
    const sw = direct && wantW ? leafGradSink(weight!) : null;
    const sb = direct && wantB ? leafGradSink(bias!) : null;
    const addParams = (sw !== null && !sw.fresh) || (sb !== null && !sb.fresh);
    const gw = wantW ? (sw ? sw.grad : empty(weight!.shape, "f32")) : null;
    const gb = wantB ? (sb ? sb.grad : empty(bias!.shape, "f32")) : null;
    k.call.dt_layernorm_bwd(
      (gx ?? empty(xin.shape, xin.dtype)).ptr,
      gw?.ptr ?? null,
      gb?.ptr ?? null,
      g.ptr,
      xin.ptr,
      weight?.ptr ?? null,
      mean.ptr,
      rstd.ptr,
      r,
      c,
      DTYPE_CODE[g.dtype],
      DTYPE_CODE[xin.dtype],
      DTYPE_CODE[xin.dtype],
      addParams ? 2 : 0,
    );
    grads.push(gx);
    if (weight) grads.push(sw ? ADDED_TO_LEAF : gw);
    if (bias) grads.push(sb ? ADDED_TO_LEAF : gb);
    return grads;
  }, { lowPrecisionGrad: true }); // the kernel reads g in any float dtype
  return { sum, out };
}
