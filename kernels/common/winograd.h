/* winograd.h — the arithmetic of Winograd F(2x2, 3x3) convolution (Lavin &
 * Gray, 2015) for 3x3 kernels at stride 1: an output tile of 2x2 is
 * A^T [(G g G^T) ⊙ (B^T d B)] A for the 4x4 input tile d under it and the
 * 3x3 kernel g, so the product of a tile's 16 transformed values replaces
 * 36 multiply-adds, and the sum over input channels becomes 16 GEMMs. The
 * gradients are the adjoints of the same three transforms. Each transform is
 * a column step then a row step of one 1-D form (written once here, used by
 * the CPU loops and a GPU thread per tile), so both libraries round alike.
 *
 * Tiles: tile t = (n, ty, tx), ty < TH = ceil(OH/2), tx < TW = ceil(OW/2),
 * covers outputs (2ty + i, 2tx + j), i, j < 2, and reads the input at
 * (2ty - PH + a, 2tx - PW + b), a, b < 4 (0 outside the input). Transformed
 * values are stored [16][channels][ld]: component xi = 4a + b of channel ch
 * of the call's q-th tile at (xi * channels + ch) * ld + q. */
#pragma once
#include "dt_common.h"

/* The geometry of a Winograd convolution: the conv geometry's sizes and
 * padding (3x3 kernel, stride and dilation 1) and the tile grid. */
typedef struct {
  int64_t N, C, H, W, PH, PW, OH, OW, TH, TW;
} dt_wino_geom;

/* d (4) -> B^T d: the 1-D input transform. */
DT_HD void dt_wino_bt_(const float* d, float* v) {
  v[0] = d[0] - d[2];
  v[1] = d[1] + d[2];
  v[2] = d[2] - d[1];
  v[3] = d[1] - d[3];
}

/* dv (4) -> B dv: its adjoint. */
DT_HD void dt_wino_b_(const float* dv, float* d) {
  d[0] = dv[0];
  d[1] = (dv[1] - dv[2]) + dv[3];
  d[2] = (dv[1] + dv[2]) - dv[0];
  d[3] = -dv[3];
}

/* g (3) -> G g: the 1-D kernel transform (halves are exact). */
DT_HD void dt_wino_g_(const float* g, float* u) {
  u[0] = g[0];
  u[1] = 0.5f * ((g[0] + g[1]) + g[2]);
  u[2] = 0.5f * ((g[0] - g[1]) + g[2]);
  u[3] = g[2];
}

/* m (4) -> G^T m: its adjoint. */
DT_HD void dt_wino_gt_(const float* m, float* g) {
  float h = 0.5f * (m[1] + m[2]);
  g[0] = m[0] + h;
  g[1] = 0.5f * (m[1] - m[2]);
  g[2] = h + m[3];
}

/* m (4) -> A^T m: the 1-D output transform. */
DT_HD void dt_wino_at_(const float* m, float* y) {
  y[0] = (m[0] + m[1]) + m[2];
  y[1] = (m[1] - m[2]) - m[3];
}

/* dy (2) -> A dy: its adjoint. */
DT_HD void dt_wino_a_(const float* dy, float* p) {
  p[0] = dy[0];
  p[1] = dy[0] + dy[1];
  p[2] = dy[0] - dy[1];
  p[3] = -dy[1];
}

/* U = G g G^T of a 3x3 kernel g (row-major) into u[16] (component 4a + b). */
DT_HD void dt_wino_weight_tile(const float* g, float* u) {
  float col[3], t[4][3];
  for (int k = 0; k < 3; k++) { /* the column step: t = G g */
    float c4[4];
    for (int a = 0; a < 3; a++) col[a] = g[a * 3 + k];
    dt_wino_g_(col, c4);
    for (int a = 0; a < 4; a++) t[a][k] = c4[a];
  }
  for (int a = 0; a < 4; a++) dt_wino_g_(t[a], u + 4 * a); /* then each row: t G^T */
}

/* dg = G^T m G (3x3, row-major) of m[16]: the weight gradient of one (co, c). */
DT_HD void dt_wino_weight_grad_tile(const float* m, float* dg) {
  float col[4], t[3][4];
  for (int b = 0; b < 4; b++) {
    float c3[3];
    for (int a = 0; a < 4; a++) col[a] = m[4 * a + b];
    dt_wino_gt_(col, c3);
    for (int a = 0; a < 3; a++) t[a][b] = c3[a];
  }
  for (int a = 0; a < 3; a++) dt_wino_gt_(t[a], dg + 3 * a);
}

/* V = B^T d B of a 4x4 input tile d (row-major) into v[16]. */
DT_HD void dt_wino_input_tile(const float* d, float* v) {
  float col[4], t[4][4];
  for (int b = 0; b < 4; b++) {
    float c4[4];
    for (int a = 0; a < 4; a++) col[a] = d[4 * a + b];
    dt_wino_bt_(col, c4);
    for (int a = 0; a < 4; a++) t[a][b] = c4[a];
  }
  for (int a = 0; a < 4; a++) dt_wino_bt_(t[a], v + 4 * a);
}

/* v[i] by selects, not an index: a GPU keeps v in registers. */
DT_HD float dt_wino_pick4_(const float* v, int i) { return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3]; }

/* Element (a, b) of B dv B^T (the input gradient of one tile) from dv[16]:
 * the same steps as the whole tile's (columns, then row a). */
DT_HD float dt_wino_input_grad_at(const float* dv, int a, int b) {
  float row[4];
  for (int k = 0; k < 4; k++) { /* row a of the column step B dv, at column k */
    float col[4], c4[4];
    for (int i = 0; i < 4; i++) col[i] = dv[4 * i + k];
    dt_wino_b_(col, c4);
    row[k] = dt_wino_pick4_(c4, a);
  }
  float r4[4];
  dt_wino_b_(row, r4);
  return dt_wino_pick4_(r4, b);
}

/* Y = A^T m A (2x2, row-major) of m[16]. */
DT_HD void dt_wino_output_tile(const float* m, float* y) {
  float col[4], t[2][4];
  for (int b = 0; b < 4; b++) {
    float c2[2];
    for (int a = 0; a < 4; a++) col[a] = m[4 * a + b];
    dt_wino_at_(col, c2);
    t[0][b] = c2[0];
    t[1][b] = c2[1];
  }
  dt_wino_at_(t[0], y);
  dt_wino_at_(t[1], y + 2);
}

/* P = A dy A^T (16) of a 2x2 output-gradient tile dy (row-major). */
DT_HD void dt_wino_output_grad_tile(const float* dy, float* p) {
  float t[4][2];
  for (int b = 0; b < 2; b++) {
    float col[2] = {dy[b], dy[2 + b]}, c4[4];
    dt_wino_a_(col, c4);
    for (int a = 0; a < 4; a++) t[a][b] = c4[a];
  }
  for (int a = 0; a < 4; a++) dt_wino_a_(t[a], p + 4 * a);
}

/* The tile grid of a geometry: t -> (n, ty, tx). */
DT_HD void dt_wino_tile_pos(const dt_wino_geom* g, int64_t t, int64_t* n, int64_t* ty, int64_t* tx) {
  *tx = t % g->TW;
  *ty = (t / g->TW) % g->TH;
  *n = t / (g->TW * g->TH);
}
