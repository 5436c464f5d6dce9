/**
 * Part of the kernel ABI (ffi/symbols.ts, whose conventions every entry follows):
 * Convolution: im2col/col2im, direct kernels for few taps, Winograd F(2x2, 3x3) transforms.
 *
 * @module
 */
import { B, I64, P, STATUS } from "./c_types.ts";

export const CONV_SYMBOLS = {
  /** Convolution's column matrix: col[(c, ki, kj), (n, oh, ow)] = the input
   *  under that tap, 0 in the padding (common/conv.h). */
  dt_im2col: {
    parameters: [
      P, // float* col (C*KH*KW, N*OH*OW)
      P, // const float* inp (N, C, H, W)
      B, // const int64* geom[14] (host): N, C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW
      P, // stream
    ],
    ...STATUS,
  },
  /** im2col's adjoint: dinp (overwritten) = each input's taps summed in (ki, kj) order. */
  dt_col2im: {
    parameters: [
      P, // float* dinp (N, C, H, W), overwritten
      P, // const float* col (C*KH*KW, N*OH*OW)
      B, // const int64* geom[14] (host), as dt_im2col
      P, // stream
    ],
    ...STATUS,
  },
  /** Direct convolution for few taps per output (C/groups·KH·KW <= 64): out[n, co] =
   *  bias[co] + the taps (ci, ki, kj) in order (common/conv.h). */
  dt_conv2d_direct_fwd: {
    parameters: [
      P, // float* out (N, Cout, OH, OW)
      P, // const float* inp (N, C, H, W)
      P, // const float* weight (Cout, C/groups, KH, KW)
      P, // const float* bias (Cout) or NULL
      B, // const int64* geom[14] (host), as dt_im2col
      I64, // int64 Cout
      I64, // int64 groups, dividing C and Cout
      P, // stream
    ],
    ...STATUS,
  },
  /** Its weight and bias gradients: per tap, the sum over images and output
   *  positions (rows in eight float lanes, rows added in double). */
  dt_conv2d_direct_bwd_weight: {
    parameters: [
      P, // float* dweight (Cout, C/groups, KH, KW), overwritten
      P, // float* dbias (Cout), overwritten, or NULL
      P, // const float* dout (N, Cout, OH, OW)
      P, // const float* inp (N, C, H, W)
      B, // const int64* geom[14] (host)
      I64, // int64 Cout
      I64, // int64 groups
      P, // stream
    ],
    ...STATUS,
  },
  /** Its input gradient: each input's taps summed in (co, ki, kj) order. */
  dt_conv2d_direct_bwd_input: {
    parameters: [
      P, // float* dinp (N, C, H, W), overwritten
      P, // const float* dout (N, Cout, OH, OW)
      P, // const float* weight (Cout, C/groups, KH, KW)
      B, // const int64* geom[14] (host)
      I64, // int64 Cout
      I64, // int64 groups
      P, // stream
    ],
    ...STATUS,
  },
  /** Winograd F(2x2, 3x3) kernel transform U = G g G^T of each (co, c) (common/winograd.h). */
  dt_winograd_weight: {
    parameters: [
      P, // float* u [16][Cout][C]
      P, // const float* weight (Cout, C, 3, 3)
      I64, // int64 Cout
      I64, // int64 C
      P, // stream
    ],
    ...STATUS,
  },
  /** Its adjoint: dweight (Cout, C, 3, 3) (overwritten) = G^T m G of each (co, c). */
  dt_winograd_weight_grad: {
    parameters: [
      P, // float* dweight (Cout, C, 3, 3)
      P, // const float* m [16][Cout][C]
      I64, // int64 Cout
      I64, // int64 C
      P, // stream
    ],
    ...STATUS,
  },
  /** Input transform V = B^T d B of tiles [t0, t0 + nt) of a 3x3, stride-1 conv
   *  (tile t = (n, ty, tx) over TH x TW = ceil(OH/2) x ceil(OW/2) per image). */
  dt_winograd_input: {
    parameters: [
      P, // float* v [16][C][ld]: component xi of channel c of tile t0 + q at (xi * C + c) * ld + q
      P, // const float* inp (N, C, H, W)
      B, // const int64* geom[14] (host), as dt_im2col: kernel 3x3, stride 1, dilation 1
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld >= nt
      P, // stream
    ],
    ...STATUS,
  },
  /** Its adjoint: dinp += B dv B^T of each tile, tiles in increasing order. */
  dt_winograd_input_grad: {
    parameters: [
      P, // float* dinp (N, C, H, W): added to
      P, // const float* dv [16][C][ld]
      B, // const int64* geom[14] (host), as dt_winograd_input
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld
      P, // stream
    ],
    ...STATUS,
  },
  /** Output transform: the 2x2 outputs A^T m A (+ bias) of tiles [t0, t0 + nt). */
  dt_winograd_output: {
    parameters: [
      P, // float* out (N, Cout, OH, OW): those tiles' outputs written
      P, // const float* m [16][Cout][ld]
      P, // const float* bias (Cout) or NULL
      B, // const int64* geom[14] (host), as dt_winograd_input
      I64, // int64 Cout
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld
      P, // stream
    ],
    ...STATUS,
  },
  /** Its adjoint: p = A dy A^T of tiles [t0, t0 + nt) (dy 0 past the output). */
  dt_winograd_output_grad: {
    parameters: [
      P, // float* p [16][Cout][ld]
      P, // const float* dout (N, Cout, OH, OW)
      B, // const int64* geom[14] (host), as dt_winograd_input
      I64, // int64 Cout
      I64, // int64 t0
      I64, // int64 nt
      I64, // int64 ld
      P, // stream
    ],
    ...STATUS,
  },
} as const satisfies Deno.ForeignLibraryInterface;
