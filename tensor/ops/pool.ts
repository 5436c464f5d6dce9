/**
 * 2-D pooling with autograd, as torch.nn.functional's max_pool2d,
 * avg_pool2d and adaptive_avg_pool2d: inputs (N, C, H, W) or (C, H, W),
 * output sizes by PyTorch's formula (ceil mode included), one native kernel
 * per direction over the N·C planes (kernels/common/pool.h).
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, pair, requireFloat } from "./_util.ts";

/** Options of maxPool2d (PyTorch's names; stride defaults to the kernel size). */
export interface MaxPool2dOptions {
  /** Step of the window: one number or [h, w] (null or absent: the kernel size). */
  stride?: number | readonly number[] | null;
  /** Padding on each side (never taken as the maximum): one number or [h, w] (default 0). */
  padding?: number | readonly number[];
  /** Spacing between the window's elements: one number or [h, w] (default 1). */
  dilation?: number | readonly number[];
  /** Round the output size up instead of down (default false). */
  ceilMode?: boolean;
}

/** Options of avgPool2d. */
export interface AvgPool2dOptions {
  /** Step of the window: one number or [h, w] (null or absent: the kernel size). */
  stride?: number | readonly number[] | null;
  /** Implicit zero padding on each side: one number or [h, w] (default 0). */
  padding?: number | readonly number[];
  /** Round the output size up instead of down (default false). */
  ceilMode?: boolean;
  /** Count the zero padding in the divisor (default true, as PyTorch). */
  countIncludePad?: boolean;
  /** Divide every window's sum by this instead. */
  divisorOverride?: number | null;
}

/** PyTorch's pooling_output_shape: windows that start inside the input (or its left padding). */
function outSize(
  op: string,
  size: number,
  k: number,
  s: number,
  p: number,
  d: number,
  ceil: boolean,
): number {
  const span = size + 2 * p - d * (k - 1) - 1;
  let o = Math.floor((span + (ceil ? s - 1 : 0)) / s) + 1;
  if (ceil && (o - 1) * s >= size + p) o--;
  if (span < 0 || o < 1) {
    throw new RangeError(
      `${op}: input size ${size} with padding ${p} is smaller than the ${
        d > 1 ? "dilated " : ""
      }kernel ${d * (k - 1) + 1}`,
    );
  }
  return o;
}

/** The 4-D view of x and its geometry, shared by max and average pooling. */
function planes(
  op: string,
  x0: Tensor,
): { x: Tensor; lead: number[]; P: number; H: number; W: number } {
  requireFloat(op, x0);
  if (x0.shape.length !== 3 && x0.shape.length !== 4) {
    throw new RangeError(`${op}: expected an input (N, C, H, W) or (C, H, W), got [${x0.shape}]`);
  }
  const x = asF32(x0);
  const lead = x.shape.slice(0, -2);
  const [H, W] = x.shape.slice(-2) as [number, number];
  return { x, lead, P: lead.reduce((a, b) => a * b, 1), H, W };
}

/**
 * Max over each kernel window (padding counts as -inf; a NaN wins), as
 * torch.nn.functional.max_pool2d. The gradient goes to each window's maximum.
 *
 * @example
 * ```ts
 * const y = maxPool2d(x, 2); // halves H and W
 * ```
 */
export function maxPool2d(
  x0: Tensor,
  kernelSize: number | readonly number[],
  opts: MaxPool2dOptions = {},
): Tensor {
  const op = "maxPool2d";
  const { x, lead, P, H, W } = planes(op, x0);
  const [KH, KW] = pair(op, "kernelSize", kernelSize);
  const [SH, SW] = pair(op, "stride", opts.stride ?? kernelSize);
  const [PH, PW] = pair(op, "padding", opts.padding ?? 0, 0);
  const [DH, DW] = pair(op, "dilation", opts.dilation ?? 1);
  if (PH > KH / 2 || PW > KW / 2) {
    throw new RangeError(
      `${op}: padding (${PH}, ${PW}) must be at most half the kernel (${KH}, ${KW})`,
    );
  }
  const ceil = opts.ceilMode ?? false;
  const OH = outSize(op, H, KH, SH, PH, DH, ceil), OW = outSize(op, W, KW, SW, PW, DW, ceil);
  const geom = BigInt64Array.from([P, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW], BigInt);
  const out = empty([...lead, OH, OW], "f32"), idx = empty([...lead, OH, OW], "i32");
  const k = backend();
  k.call.dt_maxpool2d_fwd(out.ptr, idx.ptr, x.ptr, geom);
  if (needsGrad(x)) {
    record(out, op, [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_maxpool2d_bwd(gx.ptr, g.ptr, idx.ptr, geom);
      return [gx];
    });
  } else {
    idx.dispose();
  }
  return out;
}

/**
 * Mean over each kernel window, as torch.nn.functional.avg_pool2d: the
 * divisor counts the padding unless countIncludePad is false, or is
 * divisorOverride.
 */
export function avgPool2d(
  x0: Tensor,
  kernelSize: number | readonly number[],
  opts: AvgPool2dOptions = {},
): Tensor {
  const op = "avgPool2d";
  const { x, lead, P, H, W } = planes(op, x0);
  const [KH, KW] = pair(op, "kernelSize", kernelSize);
  const [SH, SW] = pair(op, "stride", opts.stride ?? kernelSize);
  const [PH, PW] = pair(op, "padding", opts.padding ?? 0, 0);
  if (PH > KH / 2 || PW > KW / 2) {
    throw new RangeError(
      `${op}: padding (${PH}, ${PW}) must be at most half the kernel (${KH}, ${KW})`,
    );
  }
  const div = opts.divisorOverride ?? 0;
  if (!Number.isSafeInteger(div) || div < 0 || (opts.divisorOverride != null && div === 0)) {
    throw new RangeError(
      `${op}: divisorOverride must be a positive integer, got ${opts.divisorOverride}`,
    );
  }
  const ceil = opts.ceilMode ?? false;
  const OH = outSize(op, H, KH, SH, PH, 1, ceil), OW = outSize(op, W, KW, SW, PW, 1, ceil);
  const geom = BigInt64Array.from([P, H, W, KH, KW, SH, SW, PH, PW, 1, 1, OH, OW], BigInt);
  const includePad = (opts.countIncludePad ?? true) ? 1 : 0;
  const out = empty([...lead, OH, OW], "f32");
  const k = backend();
  k.call.dt_avgpool2d_fwd(out.ptr, x.ptr, geom, includePad, BigInt(div));
  if (needsGrad(x)) {
    record(out, op, [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_avgpool2d_bwd(gx.ptr, g.ptr, geom, includePad, BigInt(div));
      return [gx];
    });
  }
  return out;
}

/**
 * Mean over adaptive windows giving an output of `outputSize` (a number,
 * [oh, ow], with null keeping that input size), as
 * torch.nn.functional.adaptive_avg_pool2d: window i spans
 * [floor(i·H/OH), ceil((i+1)·H/OH)).
 *
 * @example
 * ```ts
 * const pooled = adaptiveAvgPool2d(features, 1); // (N, C, 1, 1): global average pooling
 * ```
 */
export function adaptiveAvgPool2d(
  x0: Tensor,
  outputSize: number | readonly (number | null)[],
): Tensor {
  const op = "adaptiveAvgPool2d";
  const { x, lead, P, H, W } = planes(op, x0);
  const req = typeof outputSize === "number" ? [outputSize, outputSize] : [...outputSize];
  const [OH, OW] = pair(op, "outputSize", [req[0] ?? H, req[1] ?? W]);
  if (req.length !== 2) {
    throw new RangeError(`${op}: outputSize must be a number or a pair, got [${req}]`);
  }
  if (H < 1 || W < 1) throw new RangeError(`${op}: the input [${x.shape}] has an empty plane`);
  const out = empty([...lead, OH, OW], "f32");
  const k = backend();
  const [p, h, w, oh, ow] = [P, H, W, OH, OW].map(BigInt) as [
    bigint,
    bigint,
    bigint,
    bigint,
    bigint,
  ];
  k.call.dt_adaptive_avgpool2d_fwd(out.ptr, x.ptr, p, h, w, oh, ow);
  if (needsGrad(x)) {
    record(out, op, [x], (g) => {
      const gx = empty(x.shape, "f32");
      k.call.dt_adaptive_avgpool2d_bwd(gx.ptr, g.ptr, p, h, w, oh, ow);
      return [gx];
    });
  }
  return out;
}
