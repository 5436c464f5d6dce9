/**
 * 2-D convolution with autograd (torch.nn.functional.conv2d). Layers with
 * few taps per output (a first layer) use direct kernels; 3x3 stride-1
 * layers Winograd F(2x2, 3x3) (./winograd.ts); the others im2col
 * and one GEMM per group, a chunk of images at a time: the chunk is laid out as
 * columns (C·KH·KW, n·OH·OW), the weight (Cout, C/g·KH·KW) multiplies them,
 * and the (Cout, n, OH·OW) product is permuted into the NCHW output. The
 * backward rebuilds each chunk's columns for the weight gradient and folds
 * the column gradient back with col2im. Computes in f32 (autocast does not
 * apply).
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";
import { asF32, pair, requireFloat } from "./_util.ts";
import { gemm } from "./linalg.ts";
import { pad } from "./layout.ts";
import { elementPtr } from "./_strided.ts";
import { reshape } from "./shape.ts";
import { winogradBlock, winogradConv2d } from "./winograd.ts";

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

const OP_ADD = 0; // dt_binary's DT_OP_ADD

/**
 * Layers with at most this many taps per output (C/groups·KH·KW: a 3x3 first
 * layer on 1-3 channels) convolve directly: their GEMM would have a K of a
 * few dozen, all data movement (im2col, transposes, a bias pass). On the
 * benchmark CNN's first layer (1 -> 32 channels, 28x28) the direct kernels
 * take a fraction of the GEMM path's time.
 */
let directMaxTaps = 32;
const RED_SUM = 0; // dt_reduce_dim's DT_RED_SUM

/**
 * Most floats of column matrix at once (64 MiB): a larger batch goes through
 * in chunks of images, so memory stays bounded, and the backward rebuilds a
 * chunk's columns instead of keeping them. Below it the forward's columns are
 * kept for the weight gradient. (Smaller, cache-sized chunks measured no
 * faster on the benchmark CNN: the GEMMs dominate.)
 */
let colChunkFloats = 1 << 24;

/**
 * 3x3 convolutions at stride 1 and dilation 1 in one group (the benchmark
 * CNN's second layer) use Winograd F(2x2, 3x3): 2.25 times fewer
 * multiply-adds than im2col's GEMM, and no column matrix.
 */
let winograd = true;

/**
 * Floats of column gradient per step of the input gradient: 1 MiB stays in
 * cache between its GEMM and col2im (8% off the benchmark CNN's second
 * layer, forward and backward, against one column gradient for the batch).
 */
const DX_CHUNK_FLOATS = 1 << 18;

/**
 * @internal Runs fn with other path choices, so tests reach every path on
 * small inputs: `chunkFloats` bounds the column matrix, `directMaxTaps` the
 * taps per output of the direct kernels (0: never direct), `winograd` whether
 * 3x3 stride-1 layers take Winograd F(2x2, 3x3), `winogradBlock` its tiles per
 * block (0: automatic).
 */
export function withConvPaths<T>(
  paths: {
    chunkFloats?: number;
    directMaxTaps?: number;
    winograd?: boolean;
    winogradBlock?: number;
  },
  fn: () => T,
): T {
  const before = [colChunkFloats, directMaxTaps, winograd, winogradBlock.tiles] as const;
  colChunkFloats = paths.chunkFloats ?? colChunkFloats;
  directMaxTaps = paths.directMaxTaps ?? directMaxTaps;
  winograd = paths.winograd ?? winograd;
  winogradBlock.tiles = paths.winogradBlock ?? winogradBlock.tiles;
  try {
    return fn();
  } finally {
    [colChunkFloats, directMaxTaps, winograd, winogradBlock.tiles] = before;
  }
}

/**
 * Convolution of x (N, C, H, W) — or (C, H, W) — with weight
 * (Cout, C/groups, KH, KW) and an optional bias (Cout).
 * As torch.nn.functional.conv2d.
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
  if (Cg * KH * KW <= directMaxTaps) {
    const geom = BigInt64Array.from([N, C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW], BigInt);
    return directConv(x, weight, bias, geom, [N, Cout, OH, OW], groups);
  }
  if (
    winograd && KH === 3 && KW === 3 && SH === 1 && SW === 1 && DH === 1 && DW === 1 &&
    groups === 1
  ) {
    return winogradConv2d(x, weight, bias, { N, C, H, W, Cout, PH, PW, OH, OW });
  }
  const k = backend();
  const ohw = OH * OW, Kg = Cg * KH * KW, Mg = Cout / groups;
  const imgIn = C * H * W, imgOut = Cout * ohw;
  // Images go through in chunks of bounded column matrix (see colChunkFloats).
  const nb = Math.max(1, Math.min(N, Math.floor(colChunkFloats / (C * KH * KW * ohw))));
  const chunks: [number, number][] = [];
  for (let n0 = 0; n0 < N; n0 += nb) chunks.push([n0, Math.min(nb, N - n0)]);
  const geomOf = (cnt: number) =>
    BigInt64Array.from([cnt, C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW], BigInt);
  /** The column matrix (C·KH·KW, cnt·OH·OW) of images [n0, n0 + cnt). */
  const columns = (n0: number, cnt: number) => {
    const col = empty([C * KH * KW, cnt * ohw], "f32");
    const xs = x.subview(n0 * imgIn, [cnt, C, H, W]);
    k.call.dt_im2col(col.ptr, xs.ptr, geomOf(cnt));
    xs.dispose();
    return col;
  };
  /** C (Cout, L) = op(A) @ op(B) per group, the groups' blocks `sa`, `sb`, `sc` apart. */
  const grouped = (
    ta: boolean,
    tb: boolean,
    m: number,
    nn: number,
    kk: number,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    strides: [number, number, number],
    beta = 0,
  ) =>
    gemm("f32", ta, tb, m, nn, kk, a, b, c, {
      batch: groups,
      strideA: strides[0],
      strideB: strides[1],
      strideC: strides[2],
      beta,
    });
  const out = empty([N, Cout, OH, OW], "f32");
  let kept: Tensor | null = null; // one chunk: its columns serve the backward too
  for (const [n0, cnt] of chunks) {
    const L = cnt * ohw;
    const col = columns(n0, cnt);
    const dst = out.subview(n0 * imgOut, [cnt, Cout, ohw]);
    if (cnt === 1 || groups > 1) {
      // y (Cout, L) = W_g (Mg, Kg) @ col_g (Kg, L), then (Cout, cnt, OH·OW) -> (cnt, Cout, OH·OW)
      const y = cnt === 1 ? dst : empty([Cout, L], "f32");
      grouped(false, false, Mg, L, Kg, weight, col, y, [Mg * Kg, Kg * L, Mg * L]);
      if (y !== dst) {
        k.call.dt_transpose_0213(dst.ptr, y.ptr, 1n, BigInt(Cout), BigInt(cnt), BigInt(ohw), 4n);
        y.dispose();
      }
    } else {
      // yt (L, Cout) = col^T (L, Kg) @ W^T (Kg, Cout) — 20% faster than W @ col on the benchmark
      // CNN's 64x12544x288 — then (cnt, OH·OW, Cout) -> (cnt, Cout, OH·OW)
      const yt = empty([L, Cout], "f32");
      k.call.dt_gemm(
        0,
        1,
        1,
        BigInt(L),
        BigInt(Mg),
        BigInt(Kg),
        1,
        col.ptr,
        BigInt(L),
        weight.ptr,
        BigInt(Kg),
        0,
        yt.ptr,
        BigInt(Cout),
        1n,
        0n,
        0n,
        0n,
      );
      k.call.dt_transpose_0213(dst.ptr, yt.ptr, BigInt(cnt), BigInt(ohw), BigInt(Cout), 1n, 4n);
      yt.dispose();
    }
    dst.dispose();
    if (chunks.length === 1) kept = col;
    else col.dispose();
  }
  if (bias) {
    k.call.dt_binary(
      OP_ADD,
      out.ptr,
      out.ptr,
      bias.ptr,
      BigInt(out.numel),
      BigInt(Cout),
      BigInt(ohw),
    );
  }
  const inputs = bias ? [x, weight, bias] : [x, weight];
  if (needsGrad(...inputs)) {
    record(out, "conv2d", inputs, (g) => {
      const gw = weight.requiresGrad ? empty(weight.shape, "f32") : null;
      const gx = x.requiresGrad ? empty(x.shape, "f32") : null;
      const gb = bias?.requiresGrad ? empty([Cout], "f32") : null;
      const rowSums = gb && chunks.length > 1 ? empty([Cout], "f32") : null;
      chunks.forEach(([n0, cnt], ci) => {
        const L = cnt * ohw;
        // g of these images (cnt, Cout, OH·OW) as the GEMM's (Cout, cnt·OH·OW)
        const gs = g.subview(n0 * imgOut, [cnt, Cout, ohw]);
        let g2 = gs;
        if (cnt !== 1) {
          g2 = empty([Cout, L], "f32");
          k.call.dt_transpose_0213(g2.ptr, gs.ptr, 1n, BigInt(cnt), BigInt(Cout), BigInt(ohw), 4n);
        }
        if (gw) {
          // dW_g (Mg, Kg) += g2_g (Mg, L) @ col_g^T (L, Kg); a chunk's columns are rebuilt (cheaper than kept)
          const col = kept ?? columns(n0, cnt);
          grouped(false, true, Mg, Kg, L, g2, col, gw, [Mg * L, Kg * L, Mg * Kg], ci === 0 ? 0 : 1);
          if (col !== kept) col.dispose();
        }
        if (gx) {
          // dcol_g (Kg, l) = W_g^T (Kg, Mg) @ g2_g (Mg, l) for a few images at a time (columns l of
          // g2), folded back into them at once: the column gradient stays in cache for col2im
          const sub = Math.max(1, Math.min(cnt, Math.floor(DX_CHUNK_FLOATS / (C * KH * KW * ohw))));
          const dcol = empty([C * KH * KW, sub * ohw], "f32");
          for (let s0 = 0; s0 < cnt; s0 += sub) {
            const m = Math.min(sub, cnt - s0), l = m * ohw;
            k.call.dt_gemm(
              0,
              1,
              0,
              BigInt(Kg),
              BigInt(l),
              BigInt(Mg),
              1,
              weight.ptr,
              BigInt(Kg),
              elementPtr(g2, s0 * ohw),
              BigInt(L),
              0,
              dcol.ptr,
              BigInt(l),
              BigInt(groups),
              BigInt(Mg * Kg),
              BigInt(Mg * L),
              BigInt(Kg * l),
            );
            const dx = gx.subview((n0 + s0) * imgIn, [m, C, H, W]);
            k.call.dt_col2im(dx.ptr, dcol.ptr, geomOf(m));
            dx.dispose();
          }
          dcol.dispose();
        }
        if (gb) {
          const into = ci === 0 ? gb : rowSums!;
          k.call.dt_reduce_dim(RED_SUM, into.ptr, null, g2.ptr, BigInt(Cout), BigInt(L), 1n);
          if (ci > 0) k.call.dt_axpy(gb.ptr, rowSums!.ptr, BigInt(Cout), 1);
        }
        if (g2 !== gs) g2.dispose();
        gs.dispose();
      });
      rowSums?.dispose();
      return bias ? [gx, gw, gb] : [gx, gw];
    });
  } else {
    kept?.dispose();
  }
  return out;
}

/** The direct convolution (few taps per output) with its backward. */
function directConv(
  x: Tensor,
  weight: Tensor,
  bias: Tensor | null,
  geom: BigInt64Array<ArrayBuffer>,
  outShape: [number, number, number, number],
  groups: number,
): Tensor {
  const k = backend();
  const Cout = BigInt(outShape[1]), g = BigInt(groups);
  const out = empty(outShape, "f32");
  k.call.dt_conv2d_direct_fwd(out.ptr, x.ptr, weight.ptr, bias?.ptr ?? null, geom, Cout, g);
  const inputs = bias ? [x, weight, bias] : [x, weight];
  if (needsGrad(...inputs)) {
    record(out, "conv2d", inputs, (dout) => {
      let gx: Tensor | null = null, gw: Tensor | null = null, gb: Tensor | null = null;
      if (weight.requiresGrad || bias?.requiresGrad) {
        gw = empty(weight.shape, "f32");
        gb = bias?.requiresGrad ? empty([outShape[1]], "f32") : null;
        k.call.dt_conv2d_direct_bwd_weight(gw.ptr, gb?.ptr ?? null, dout.ptr, x.ptr, geom, Cout, g);
        if (!weight.requiresGrad) {
          gw.dispose();
          gw = null;
        }
      }
      if (x.requiresGrad) {
        gx = empty(x.shape, "f32");
        k.call.dt_conv2d_direct_bwd_input(gx.ptr, dout.ptr, weight.ptr, geom, Cout, g);
      }
      return bias ? [gx, gw, gb] : [gx, gw];
    });
  }
  return out;
}
