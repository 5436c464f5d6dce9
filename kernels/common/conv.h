/* conv.h — the index arithmetic of convolution by im2col: the geometry of a
 * 2-D convolution, the column matrix col (C*KH*KW, N*OH*OW) — row
 * (c, ki, kj), column (n, oh, ow) — read from the input (dt_im2col), and the
 * input gradient gathered back from it (dt_col2im), each element summing its
 * contributions in (ki, kj) order so every loop shape gives the same bits. */
#pragma once
#include "dt_common.h"

/* The geometry of one convolution, as the i64[14] array the ABI passes:
 * N, C, H, W, KH, KW, stride SH, SW, padding PH, PW, dilation DH, DW, and the
 * output size OH, OW (the caller's; reads outside the input are padding). */
typedef struct {
  int64_t N, C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW;
} dt_conv_geom;

/* The input row read by output row oh at kernel row ki (may be outside [0, H)). */
DT_HD int64_t dt_conv_in_row(const dt_conv_geom* g, int64_t oh, int64_t ki) { return oh * g->SH - g->PH + ki * g->DH; }
DT_HD int64_t dt_conv_in_col(const dt_conv_geom* g, int64_t ow, int64_t kj) { return ow * g->SW - g->PW + kj * g->DW; }

/* col[(c, ki, kj), (n, oh, ow)]: the input value under that kernel tap, 0 in
 * the padding. plane is input channel c of image n (H x W). */
DT_HD float dt_im2col_value(const float* plane, const dt_conv_geom* g, int64_t ki, int64_t kj, int64_t oh,
                            int64_t ow) {
  int64_t ih = dt_conv_in_row(g, oh, ki), iw = dt_conv_in_col(g, ow, kj);
  return (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W) ? plane[ih * g->W + iw] : 0.0f;
}

/* The output columns [*lo, *hi) whose tap kj lands inside the input (empty
 * when lo >= hi): iw = ow * SW - PW + kj * DW in [0, W). */
DT_HD void dt_conv_valid_cols(const dt_conv_geom* g, int64_t kj, int64_t* lo, int64_t* hi) {
  int64_t off = kj * g->DW - g->PW; /* iw = ow * SW + off */
  int64_t l = off >= 0 ? 0 : (-off + g->SW - 1) / g->SW;
  int64_t h = g->W - off <= 0 ? 0 : (g->W - off + g->SW - 1) / g->SW;
  *lo = l < g->OW ? l : g->OW;
  *hi = h < g->OW ? h : g->OW;
}

/* The input gradient at (n, c, ih, iw): the sum, in (ki, kj) order, of the
 * col entries whose tap read that element. colrow0 is col row (c, 0, 0) at
 * image n's first column; rows are ld apart. */
DT_HD float dt_col2im_value(const float* colrow0, int64_t ld, const dt_conv_geom* g, int64_t ih, int64_t iw) {
  float acc = 0.0f;
  for (int64_t ki = 0; ki < g->KH; ki++) {
    int64_t t = ih + g->PH - ki * g->DH;
    if (t < 0 || t % g->SH != 0 || t / g->SH >= g->OH) continue;
    int64_t oh = t / g->SH;
    for (int64_t kj = 0; kj < g->KW; kj++) {
      int64_t u = iw + g->PW - kj * g->DW;
      if (u < 0 || u % g->SW != 0 || u / g->SW >= g->OW) continue;
      acc += colrow0[(ki * g->KW + kj) * ld + oh * g->OW + u / g->SW];
    }
  }
  return acc;
}

/* ---- direct convolution, for few taps per output (C/groups · KH · KW small) ---- */

/* Most taps per output (C/groups x KH x KW) the direct kernels take. */
#define DT_CONV_DIRECT_MAX_TAPS 64

/* The weight and input taps of output channel co: input channel ci of its
 * group is channel (co / (Cout / groups)) * Cg + ci. */
DT_HD int64_t dt_conv_in_channel(int64_t co, int64_t ci, int64_t Cout, int64_t Cg, int64_t groups) {
  return (co / (Cout / groups)) * Cg + ci;
}

/* Rows and columns of the zero-padded copy of an input plane the direct
 * kernels read: the input sits at (PH, PW), zeros around it. */
DT_HD int64_t dt_conv_padded_h(const dt_conv_geom* g) { return g->H + 2 * g->PH; }
DT_HD int64_t dt_conv_padded_w(const dt_conv_geom* g) { return g->W + 2 * g->PW; }

/* One output of a direct convolution, reading zero-padded input planes (so
 * every tap reads a value, a padding tap a 0): the bias (0 without), then
 * every tap (ci, ki, kj) in order, each a rounded product added. x_n holds
 * image n's padded planes; w_co is weight row co (Cg x KH x KW). */
DT_HD float dt_conv_direct_value(const float* x_n, const float* w_co, float bias, const dt_conv_geom* g, int64_t co,
                                 int64_t Cout, int64_t groups, int64_t oh, int64_t ow) {
  int64_t Cg = g->C / groups, Hp = dt_conv_padded_h(g), Wp = dt_conv_padded_w(g);
  float acc = bias;
  for (int64_t ci = 0; ci < Cg; ci++) {
    const float* plane = x_n + dt_conv_in_channel(co, ci, Cout, Cg, groups) * Hp * Wp;
    for (int64_t ki = 0; ki < g->KH; ki++)
      for (int64_t kj = 0; kj < g->KW; kj++)
        acc += w_co[(ci * g->KH + ki) * g->KW + kj] * plane[(oh * g->SH + ki * g->DH) * Wp + ow * g->SW + kj * g->DW];
  }
  return acc;
}

/* One weight tap's gradient share from one output plane: the sum over the
 * plane's positions j (row-major, OH x OW) of dout[j] times the input under
 * the tap at j (col: that tap's row of the column matrix, at this image),
 * kept in eight float lanes — j goes to lane j mod 8, the last partial group
 * adds 0 to the lanes it does not reach — then folded in a fixed tree. */
DT_HD float dt_conv_tap_plane(const float* dout_plane, const float* col, int64_t ohw) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j0 = 0; j0 < ohw; j0 += 8)
    for (int k = 0; k < 8; k++) lane[k] += j0 + k < ohw ? dout_plane[j0 + k] * col[j0 + k] : 0.0f * 0.0f;
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* The input gradient at (n, cin, ih, iw) of a direct convolution: every
 * output channel co of cin's group and tap (ki, kj) whose window read it, in
 * (co, ki, kj) order. dout_n is image n of dout (Cout x OH x OW). */
DT_HD float dt_conv_direct_dx_value(const float* dout_n, const float* weight, const dt_conv_geom* g, int64_t Cout,
                                    int64_t groups, int64_t cin, int64_t ih, int64_t iw) {
  int64_t Cg = g->C / groups, Mg = Cout / groups, gi = cin / Cg, ci = cin % Cg;
  float acc = 0.0f;
  for (int64_t co = gi * Mg; co < (gi + 1) * Mg; co++) {
    for (int64_t ki = 0; ki < g->KH; ki++) {
      int64_t t = ih + g->PH - ki * g->DH;
      if (t < 0 || t % g->SH != 0 || t / g->SH >= g->OH) continue;
      for (int64_t kj = 0; kj < g->KW; kj++) {
        int64_t u = iw + g->PW - kj * g->DW;
        if (u < 0 || u % g->SW != 0 || u / g->SW >= g->OW) continue;
        acc += weight[((co * Cg + ci) * g->KH + ki) * g->KW + kj] *
               dout_n[(co * g->OH + t / g->SH) * g->OW + u / g->SW];
      }
    }
  }
  return acc;
}
