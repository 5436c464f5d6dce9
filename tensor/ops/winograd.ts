/**
 * 3x3, stride-1 convolution by Winograd F(2x2, 3x3) with autograd: each 2x2
 * output tile takes 16 products per input channel instead of 36, so the
 * channel sums become 16 GEMMs of (Cout, C) by (C, tiles), 2.25 times fewer
 * multiply-adds than im2col's GEMM. The kernels transform (dt_winograd_*,
 * kernels/common/winograd.h); the GEMMs are dt_gemm, batched over the 16
 * components. On the CPU the tiles go through in blocks whose transformed
 * values stay in cache between a transform, its GEMM and the next transform.
 * The gradients are the adjoints of the same transforms: the input gradient
 * 16 GEMMs of (C, Cout) by (Cout, tiles), the weight gradient 16 of
 * (Cout, tiles) by (tiles, C), summed over the blocks.
 *
 * Rounding differs from a direct sum of the 9·C products (transforms add and
 * subtract inputs and halve the kernel first); the error stays of the same
 * order, which the conv tests and the CNN parity check hold against PyTorch.
 */
import { backend } from "../backend.ts";
import { empty, type Tensor } from "../tensor.ts";
import { needsGrad, record } from "../autograd.ts";

/**
 * Floats of transformed values (inputs and outputs of the GEMMs together) a
 * block of tiles holds: on the CPU 2 MiB, so a block's transform, GEMMs and
 * back-transform work within the core's caches (the benchmark CNN's second
 * layer: 341 tiles of 3136 per block); on a GPU 64 MiB, few launches and
 * bounded scratch (as im2col's column chunks).
 */
const BLOCK_FLOATS_CPU = 1 << 19;
const BLOCK_FLOATS_GPU = 1 << 24;

/** @internal Tiles per block when > 0 (tests: blocks that split tile rows); 0: automatic. */
export const winogradBlock = { tiles: 0 };

/** The sizes a Winograd convolution needs (stride 1, dilation 1, 3x3, one group). */
export interface WinogradShape {
  N: number;
  C: number;
  H: number;
  W: number;
  Cout: number;
  PH: number;
  PW: number;
  OH: number;
  OW: number;
}

/**
 * The convolution of f32 x (N, C, H, W) with weight (Cout, C, 3, 3) and an
 * optional bias, stride 1, padding (PH, PW), as conv2d computes it.
 *
 * @example
 * ```ts
 * const y = winogradConv2d(x, w, b, { N, C, H, W, Cout, PH: 1, PW: 1, OH: H, OW: W });
 * ```
 */
export function winogradConv2d(
  x: Tensor,
  weight: Tensor,
  bias: Tensor | null,
  s: WinogradShape,
): Tensor {
  const k = backend();
  const { N, C, Cout, OH, OW } = s;
  const geom = BigInt64Array.from(
    [N, C, s.H, s.W, 3, 3, 1, 1, s.PH, s.PW, 1, 1, OH, OW],
    BigInt,
  );
  const T = N * Math.ceil(OH / 2) * Math.ceil(OW / 2);
  const budget = k.device === "cpu" ? BLOCK_FLOATS_CPU : BLOCK_FLOATS_GPU;
  const block = winogradBlock.tiles > 0
    ? winogradBlock.tiles
    : Math.max(8, Math.min(T, Math.floor(budget / (16 * (C + Cout)))));
  const blocks: [number, number][] = [];
  for (let t0 = 0; t0 < T; t0 += block) blocks.push([t0, Math.min(block, T - t0)]);
  const [c, co] = [BigInt(C), BigInt(Cout)];

  const u = empty([16, Cout, C], "f32");
  k.call.dt_winograd_weight(u.ptr, weight.ptr, co, c);
  // (the weight gradient transforms the input again, block by block: writing every tile's
  // transformed input to memory for it costs more than the transform)
  const v = empty([16, C, block], "f32");
  const m = empty([16, Cout, block], "f32");
  const out = empty([N, Cout, OH, OW], "f32");
  for (const [t0, nt] of blocks) {
    const ldv = nt, vb = v.ptr;
    k.call.dt_winograd_input(vb, x.ptr, geom, BigInt(t0), BigInt(nt), BigInt(ldv));
    // m_xi (Cout, nt) = u_xi (Cout, C) @ v_xi (C, nt), for the 16 components xi
    k.call.dt_gemm(
      0,
      0,
      0,
      co,
      BigInt(nt),
      c,
      1,
      u.ptr,
      c,
      vb,
      BigInt(ldv),
      0,
      m.ptr,
      BigInt(nt),
      16n,
      BigInt(Cout * C),
      BigInt(C * ldv),
      BigInt(Cout * nt),
    );
    k.call.dt_winograd_output(
      out.ptr,
      m.ptr,
      bias?.ptr ?? null,
      geom,
      co,
      BigInt(t0),
      BigInt(nt),
      BigInt(nt),
    );
  }
  m.dispose();
  v.dispose();

  const inputs = bias ? [x, weight, bias] : [x, weight];
  if (!needsGrad(...inputs)) {
    u.dispose();
    return out;
  }
  record(out, "conv2d", inputs, (g) => {
    const gx = x.requiresGrad ? empty(x.shape, "f32") : null;
    const gw = weight.requiresGrad ? empty(weight.shape, "f32") : null;
    const gb = bias?.requiresGrad ? empty([Cout], "f32") : null;
    const p = empty([16, Cout, block], "f32");
    const dv = gx ? empty([16, C, block], "f32") : null;
    const mw = gw ? empty([16, Cout, C], "f32") : null;
    const vw = gw ? empty([16, C, block], "f32") : null;
    gx?.fill(0); // the input gradient adds every block's tiles into it
    for (const [t0, nt] of blocks) {
      const [bt0, bnt] = [BigInt(t0), BigInt(nt)];
      k.call.dt_winograd_output_grad(p.ptr, g.ptr, geom, co, bt0, bnt, bnt);
      if (gx && dv) {
        // dv_xi (C, nt) = u_xi^T (C, Cout) @ p_xi (Cout, nt)
        k.call.dt_gemm(
          0,
          1,
          0,
          c,
          bnt,
          co,
          1,
          u.ptr,
          c,
          p.ptr,
          bnt,
          0,
          dv.ptr,
          bnt,
          16n,
          BigInt(Cout * C),
          BigInt(Cout * nt),
          BigInt(C * nt),
        );
        k.call.dt_winograd_input_grad(gx.ptr, dv.ptr, geom, bt0, bnt, bnt);
      }
      if (mw && vw) {
        // mw_xi (Cout, C) += p_xi (Cout, nt) @ v_xi^T (nt, C), over the blocks
        k.call.dt_winograd_input(vw.ptr, x.ptr, geom, bt0, bnt, bnt);
        k.call.dt_gemm(
          0,
          0,
          1,
          co,
          c,
          bnt,
          1,
          p.ptr,
          bnt,
          vw.ptr,
          bnt,
          t0 === 0 ? 0 : 1,
          mw.ptr,
          c,
          16n,
          BigInt(Cout * nt),
          BigInt(C * nt),
          BigInt(Cout * C),
        );
      }
    }
    if (gw && mw) k.call.dt_winograd_weight_grad(gw.ptr, mw.ptr, co, c);
    if (gb) {
      k.call.dt_reduce_bcast(gb.ptr, g.ptr, BigInt(g.numel), co, BigInt(OH * OW));
    }
    p.dispose();
    dv?.dispose();
    mw?.dispose();
    vw?.dispose();
    return bias ? [gx, gw, gb] : [gx, gw];
  });
  return out;
}
