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
