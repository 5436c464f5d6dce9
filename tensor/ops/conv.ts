/**
 * 2-D convolution with autograd (torch.nn.functional.conv2d) as im2col and
 * one GEMM per group: the input is laid out as columns (C·KH·KW, N·OH·OW),
 * the weight (Cout, C/g·KH·KW) multiplies them, and the (Cout, N, OH·OW)
 * product is permuted to NCHW. The backward reuses the saved columns for the
 * weight gradient and folds the column gradient back with col2im. Computes
 * in f32 (autocast does not apply).
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, pair, requireFloat } from "./_util.ts";
import { gemm } from "./linalg.ts";
import { pad } from "./layout.ts";
import { reshape } from "./shape.ts";

/** Options of conv2d (PyTorch's names and defaults). */
export interface Conv2dOptions {
  /** Step of the kernel: a number or [sh, sw]. Default 1. */
  stride?: number | readonly number[];
  /** Zero padding on each side: a number, [ph, pw], "valid" (0) or "same" (stride 1 only). Default 0. */
  padding?: number | readonly number[] | "valid" | "same";
  /** Spacing of the kernel taps: a number or [dh, dw]. Default 1. */
  dilation?: number | readonly number[];
  /** Blocked connections: input and output channels are split into this many groups. Default 1. */
  groups?: number;
}

const OP_ADD = 0;

/**
 * Convolution of x (N, C, H, W) — or (C, H, W) — with weight
 * (Cout, C/groups, KH, KW) and an optional bias (Cout).
 *
 * @example
 * ```ts
 * const y = conv2d(x, weight, bias, { stride: 2, padding: 1 }); // (N, Cout, H/2, W/2) for 3x3
 * ```
 */
export function conv2d(
  x0: Tensor,
  weight0: Tensor,
  bias0: Tensor | null = null,
  opts: Conv2dOptions = {},
): Tensor {
  requireFloat("conv2d", x0);
  requireFloat("conv2d", weight0);
  if (x0.shape.length === 3) { // one unbatched image
    const y = conv2d(reshape(x0, [1, ...x0.shape]), weight0, bias0, opts);
    return reshape(y, y.shape.slice(1));
  }
  if (x0.shape.length !== 4 || weight0.shape.length !== 4) {
    throw new RangeError(
      `conv2d: expected input (N, C, H, W) and weight (Cout, C/groups, KH, KW), got [${x0.shape}] and [${weight0.shape}]`,
    );
  }
  const [N, C, H, W] = x0.shape as [number, number, number, number];
  const [Cout, Cg, KH, KW] = weight0.shape as [number, number, number, number];
  const groups = opts.groups ?? 1;
  if (!Number.isSafeInteger(groups) || groups < 1 || C % groups !== 0 || Cout % groups !== 0) {
    throw new RangeError(
      `conv2d: groups=${groups} must be a positive integer dividing the input channels ${C} and the output channels ${Cout}`,
    );
  }
  if (Cg * groups !== C) {
    throw new RangeError(
      `conv2d: weight [${weight0.shape}] expects ${
        Cg * groups
      } input channels (${Cg} per group x ${groups}), the input [${x0.shape}] has ${C}`,
    );
  }
  if (bias0 && (bias0.shape.length !== 1 || bias0.shape[0] !== Cout)) {
    throw new RangeError(`conv2d: bias [${bias0.shape}] must have shape [${Cout}]`);
  }
  const [SH, SW] = pair("conv2d", "stride", opts.stride ?? 1);
  const [DH, DW] = pair("conv2d", "dilation", opts.dilation ?? 1);
  let padding = opts.padding ?? 0;
  if (padding === "valid") padding = 0;
  if (padding === "same") {
    if (SH !== 1 || SW !== 1) {
      throw new RangeError(`conv2d: padding "same" needs stride 1, got [${SH}, ${SW}]`);
    }
    const th = DH * (KH - 1), tw = DW * (KW - 1);
    if (th % 2 !== 0 || tw % 2 !== 0) {
      // torch pads the extra element on the bottom / right, explicitly
      const padded = pad(x0, [
        Math.floor(tw / 2),
        tw - Math.floor(tw / 2),
        Math.floor(th / 2),
        th - Math.floor(th / 2),
      ]);
      return conv2d(padded, weight0, bias0, { ...opts, padding: 0 });
    }
    padding = [th / 2, tw / 2];
  }
  const [PH, PW] = pair("conv2d", "padding", padding, 0);
  const OH = Math.floor((H + 2 * PH - DH * (KH - 1) - 1) / SH) + 1;
  const OW = Math.floor((W + 2 * PW - DW * (KW - 1) - 1) / SW) + 1;
  if (OH < 1 || OW < 1) {
    throw new RangeError(
      `conv2d: the input [${x0.shape}] padded by (${PH}, ${PW}) is smaller than the dilated kernel (${
        DH * (KH - 1) + 1
      }, ${DW * (KW - 1) + 1})`,
    );
  }
  const x = asF32(x0), weight = asF32(weight0), bias = bias0 ? asF32(bias0) : null;
  const geom = BigInt64Array.from([N, C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW], BigInt);
  const k = backend();
  const L = N * OH * OW; // columns
  const Kg = Cg * KH * KW; // rows of one group's columns
  const Mg = Cout / groups;
  const col = empty([C * KH * KW, L], "f32");
  k.call.dt_im2col(col.ptr, x.ptr, geom);
  // y2 (Cout, N * OH * OW) = W_g (Mg, Kg) @ col_g (Kg, L), one GEMM per group
  const y2 = empty([Cout, L], "f32");
  gemm("f32", false, false, Mg, L, Kg, weight, col, y2, {
    batch: groups,
    strideA: Mg * Kg,
    strideB: Kg * L,
    strideC: Mg * L,
  });
  let out: Tensor;
  if (N === 1) {
    out = y2.view([1, Cout, OH, OW]);
    y2.dispose();
  } else {
    out = empty([N, Cout, OH, OW], "f32");
    k.call.dt_transpose_0213(out.ptr, y2.ptr, 1n, BigInt(Cout), BigInt(N), BigInt(OH * OW), 4n);
    y2.dispose();
  }
  const n = BigInt(out.numel);
  if (bias) k.call.dt_binary(OP_ADD, out.ptr, out.ptr, bias.ptr, n, BigInt(Cout), BigInt(OH * OW));
  const inputs = bias ? [x, weight, bias] : [x, weight];
  if (needsGrad(...inputs)) {
    record(out, "conv2d", inputs, (g) => {
      // g (N, Cout, OH*OW) -> g2 (Cout, N * OH*OW), the GEMM layout
      let g2 = g;
      if (N !== 1) {
        g2 = empty([Cout, L], "f32");
        k.call.dt_transpose_0213(g2.ptr, g.ptr, 1n, BigInt(N), BigInt(Cout), BigInt(OH * OW), 4n);
      }
      let gx: Tensor | null = null, gw: Tensor | null = null, gb: Tensor | null = null;
      if (weight.requiresGrad) {
        // dW_g (Mg, Kg) = g2_g (Mg, L) @ col_g^T (L, Kg)
        gw = empty(weight.shape, "f32");
        gemm("f32", false, true, Mg, Kg, L, g2, col, gw, {
          batch: groups,
          strideA: Mg * L,
          strideB: Kg * L,
          strideC: Mg * Kg,
        });
      }
      if (x.requiresGrad) {
        // dcol_g (Kg, L) = W_g^T (Kg, Mg) @ g2_g (Mg, L), then folded back
        const dcol = empty([C * KH * KW, L], "f32");
        gemm("f32", true, false, Kg, L, Mg, weight, g2, dcol, {
          batch: groups,
          strideA: Mg * Kg,
          strideB: Mg * L,
          strideC: Kg * L,
        });
        gx = empty(x.shape, "f32");
        k.call.dt_col2im(gx.ptr, dcol.ptr, geom);
        dcol.dispose();
      }
      if (bias?.requiresGrad) {
        gb = empty([Cout], "f32");
        k.call.dt_reduce_bcast(gb.ptr, g.ptr, n, BigInt(Cout), BigInt(OH * OW));
      }
      if (g2 !== g) g2.dispose();
      return bias ? [gx, gw, gb] : [gx, gw];
    });
  } else {
    col.dispose();
  }
  return out;
}
