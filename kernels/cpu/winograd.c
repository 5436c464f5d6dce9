/* winograd.c — CPU loops of the Winograd F(2x2, 3x3) transforms around the
 * 16 GEMMs of a 3x3 stride-1 convolution (dt_gemm does those): the kernel
 * transform and its adjoint, the input transform of a block of tiles and its
 * adjoint (added into the input gradient in tile order), the output
 * transform (plus bias) and its adjoint. The arithmetic is
 * kernels/common/winograd.h's 1-D forms, applied to runs of tiles along a
 * tile row so the loops over tiles vectorise; a work item is a channel. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <stdlib.h>
#include "cpu_internal.h"
#include "ops_checks.h"
#include "winograd.h"

/* Tiles transformed together: their values sit in arrays of this length, so
 * each step of a transform is a loop over tiles that vectorises. */
#define CHUNK 32
#define WINO_GRAIN_ELEMS (1 << 14)

/* ---- kernels ------------------------------------------------------------------ */

/* Where each tile of a block lies (the same for every channel): the element
 * offset of its window's top-left corner within channel 0 of its image (may
 * point before the plane: padding), and which window elements are inside. */
typedef struct {
  int64_t* base;
  uint16_t* inside; /* input side: bit 4a + b for window element (a, b); output side: bit 2i + j */
} wino_tiles_;

typedef struct {
  dt_wino_geom g;
  float* out;
  const float* in;
  const float* bias;
  int64_t channels; /* of the transformed side: C (input transforms), Cout (output ones) */
  int64_t t0, nt, ld;
  wino_tiles_ tiles;
} wino_ctx_;

/* Fills the tile table: `output` for the output side (2x2 windows of the OH x OW planes). */
static void tile_table_(const wino_ctx_* c, int output) {
  const dt_wino_geom* g = &c->g;
  int64_t n, ty, tx;
  dt_wino_tile_pos(g, c->t0, &n, &ty, &tx);
  for (int64_t q = 0; q < c->nt; q++) {
    uint16_t in = 0;
    if (output) {
      c->tiles.base[q] = n * c->channels * g->OH * g->OW + 2 * ty * g->OW + 2 * tx;
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
          if (2 * ty + i < g->OH && 2 * tx + j < g->OW) in |= (uint16_t)(1u << (2 * i + j));
    } else {
      int64_t y0 = 2 * ty - g->PH, x0 = 2 * tx - g->PW;
      c->tiles.base[q] = n * c->channels * g->H * g->W + y0 * g->W + x0;
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
          if (y0 + a >= 0 && y0 + a < g->H && x0 + b >= 0 && x0 + b < g->W) in |= (uint16_t)(1u << (4 * a + b));
    }
    c->tiles.inside[q] = in;
    if (++tx == g->TW) { /* the next tile */
      tx = 0;
      if (++ty == g->TH) ty = 0, n++;
    }
  }
}

/* Work item = input channel ch: V = B^T d B of each tile of the block. */
DT_VEC_CLONES static void input_range_(void* vctx, int64_t c0, int64_t c1) {
  const wino_ctx_* c = vctx;
  const dt_wino_geom* g = &c->g;
  int64_t stride = g->C * c->ld, W = g->W; /* stride: between components */
  for (int64_t ch = c0; ch < c1; ch++) {
    const float* plane = c->in + ch * g->H * g->W;
    for (int64_t q0 = 0; q0 < c->nt; q0 += CHUNK) {
      int64_t len = c->nt - q0 < CHUNK ? c->nt - q0 : CHUNK;
      const int64_t* base = c->tiles.base + q0;
      const uint16_t* inside = c->tiles.inside + q0;
      float d[16][CHUNK], t[16][CHUNK], v[16][CHUNK];
      for (int64_t j = 0; j < len; j++) { /* each tile's 4x4 window, 0 outside the input */
        const float* w = plane + base[j];
        if (inside[j] == 0xffff) {
          for (int e = 0; e < 16; e++) d[e][j] = w[(e >> 2) * W + (e & 3)];
        } else {
          for (int e = 0; e < 16; e++) d[e][j] = (inside[j] >> e) & 1 ? w[(e >> 2) * W + (e & 3)] : 0.0f;
        }
      }
      for (int b = 0; b < 4; b++) /* the column step */
        for (int64_t j = 0; j < len; j++) {
          float col[4] = {d[b][j], d[4 + b][j], d[8 + b][j], d[12 + b][j]}, c4[4];
          dt_wino_bt_(col, c4);
          for (int a = 0; a < 4; a++) t[4 * a + b][j] = c4[a];
        }
      for (int a = 0; a < 4; a++) /* the row step */
        for (int64_t j = 0; j < len; j++) {
          float row[4] = {t[4 * a][j], t[4 * a + 1][j], t[4 * a + 2][j], t[4 * a + 3][j]}, r4[4];
          dt_wino_bt_(row, r4);
          for (int b = 0; b < 4; b++) v[4 * a + b][j] = r4[b];
        }
      float* out = c->out + ch * c->ld + q0;
      for (int xi = 0; xi < 16; xi++)
        for (int64_t j = 0; j < len; j++) out[xi * stride + j] = v[xi][j];
    }
  }
}

/* Work item = input channel ch: dx += B dv B^T of each tile, in tile order. */
DT_VEC_CLONES static void input_grad_range_(void* vctx, int64_t c0, int64_t c1) {
  const wino_ctx_* c = vctx;
  const dt_wino_geom* g = &c->g;
  int64_t stride = g->C * c->ld, W = g->W;
  for (int64_t ch = c0; ch < c1; ch++) {
    float* plane = c->out + ch * g->H * g->W;
    for (int64_t q0 = 0; q0 < c->nt; q0 += CHUNK) {
      int64_t len = c->nt - q0 < CHUNK ? c->nt - q0 : CHUNK;
      const float* dv = c->in + ch * c->ld + q0;
      float m[16][CHUNK], t[16][CHUNK], r[16][CHUNK];
      for (int xi = 0; xi < 16; xi++)
        for (int64_t j = 0; j < len; j++) m[xi][j] = dv[xi * stride + j];
      for (int k = 0; k < 4; k++) /* the column step: t[4a + k] = (B dv)[a][k] */
        for (int64_t j = 0; j < len; j++) {
          float col[4] = {m[k][j], m[4 + k][j], m[8 + k][j], m[12 + k][j]}, c4[4];
          dt_wino_b_(col, c4);
          for (int a = 0; a < 4; a++) t[4 * a + k][j] = c4[a];
        }
      for (int a = 0; a < 4; a++) /* the row step */
        for (int64_t j = 0; j < len; j++) {
          float row[4] = {t[4 * a][j], t[4 * a + 1][j], t[4 * a + 2][j], t[4 * a + 3][j]}, r4[4];
          dt_wino_b_(row, r4);
          for (int b = 0; b < 4; b++) r[4 * a + b][j] = r4[b];
        }
      const int64_t* base = c->tiles.base + q0;
      const uint16_t* inside = c->tiles.inside + q0;
      for (int64_t j = 0; j < len; j++) { /* added in tile order (windows overlap) */
        float* w = plane + base[j];
        if (inside[j] == 0xffff) {
          for (int e = 0; e < 16; e++) w[(e >> 2) * W + (e & 3)] += r[e][j];
        } else {
          for (int e = 0; e < 16; e++)
            if ((inside[j] >> e) & 1) w[(e >> 2) * W + (e & 3)] += r[e][j];
        }
      }
    }
  }
}

/* Work item = output channel co: the 2x2 outputs A^T m A (+ bias) of each tile. */
DT_VEC_CLONES static void output_range_(void* vctx, int64_t c0, int64_t c1) {
  const wino_ctx_* c = vctx;
  const dt_wino_geom* g = &c->g;
  int64_t stride = c->channels * c->ld, OW = g->OW;
  for (int64_t co = c0; co < c1; co++) {
    float bias = c->bias ? c->bias[co] : 0.0f;
    float* plane = c->out + co * g->OH * g->OW;
    for (int64_t q0 = 0; q0 < c->nt; q0 += CHUNK) {
      int64_t len = c->nt - q0 < CHUNK ? c->nt - q0 : CHUNK;
      const float* mm = c->in + co * c->ld + q0;
      float m[16][CHUNK], t[8][CHUNK], y[4][CHUNK];
      for (int xi = 0; xi < 16; xi++)
        for (int64_t j = 0; j < len; j++) m[xi][j] = mm[xi * stride + j];
      for (int b = 0; b < 4; b++) /* the column step: t[4i + b] = (A^T m)[i][b] */
        for (int64_t j = 0; j < len; j++) {
          float col[4] = {m[b][j], m[4 + b][j], m[8 + b][j], m[12 + b][j]}, c2[2];
          dt_wino_at_(col, c2);
          t[b][j] = c2[0];
          t[4 + b][j] = c2[1];
        }
      for (int i = 0; i < 2; i++) /* the row step, then the bias */
        for (int64_t j = 0; j < len; j++) {
          float row[4] = {t[4 * i][j], t[4 * i + 1][j], t[4 * i + 2][j], t[4 * i + 3][j]}, y2[2];
          dt_wino_at_(row, y2);
          y[2 * i][j] = y2[0] + bias;
          y[2 * i + 1][j] = y2[1] + bias;
        }
      const int64_t* base = c->tiles.base + q0;
      const uint16_t* inside = c->tiles.inside + q0;
      for (int64_t j = 0; j < len; j++) {
        float* o = plane + base[j];
        if (inside[j] == 0xf) {
          o[0] = y[0][j], o[1] = y[1][j], o[OW] = y[2][j], o[OW + 1] = y[3][j];
        } else {
          for (int e = 0; e < 4; e++)
            if ((inside[j] >> e) & 1) o[(e >> 1) * OW + (e & 1)] = y[e][j];
        }
      }
    }
  }
}

/* Work item = output channel co: P = A dy A^T of each tile (dy 0 past the output). */
DT_VEC_CLONES static void output_grad_range_(void* vctx, int64_t c0, int64_t c1) {
  const wino_ctx_* c = vctx;
  const dt_wino_geom* g = &c->g;
  int64_t stride = c->channels * c->ld, OW = g->OW;
  for (int64_t co = c0; co < c1; co++) {
    const float* plane = c->in + co * g->OH * g->OW;
    for (int64_t q0 = 0; q0 < c->nt; q0 += CHUNK) {
      int64_t len = c->nt - q0 < CHUNK ? c->nt - q0 : CHUNK;
      const int64_t* base = c->tiles.base + q0;
      const uint16_t* inside = c->tiles.inside + q0;
      float d[4][CHUNK], t[8][CHUNK], p[16][CHUNK];
      for (int64_t j = 0; j < len; j++) { /* each tile's 2x2 gradient, 0 past the output */
        const float* w = plane + base[j];
        if (inside[j] == 0xf) {
          d[0][j] = w[0], d[1][j] = w[1], d[2][j] = w[OW], d[3][j] = w[OW + 1];
        } else {
          for (int e = 0; e < 4; e++) d[e][j] = (inside[j] >> e) & 1 ? w[(e >> 1) * OW + (e & 1)] : 0.0f;
        }
      }
      for (int k = 0; k < 2; k++) /* the column step: t[2a + k] = (A dy)[a][k] */
        for (int64_t j = 0; j < len; j++) {
          float col[2] = {d[k][j], d[2 + k][j]}, c4[4];
          dt_wino_a_(col, c4);
          for (int a = 0; a < 4; a++) t[2 * a + k][j] = c4[a];
        }
      for (int a = 0; a < 4; a++) /* the row step */
        for (int64_t j = 0; j < len; j++) {
          float row[2] = {t[2 * a][j], t[2 * a + 1][j]}, r4[4];
          dt_wino_a_(row, r4);
          for (int b = 0; b < 4; b++) p[4 * a + b][j] = r4[b];
        }
      float* out = c->out + co * c->ld + q0;
      for (int xi = 0; xi < 16; xi++)
        for (int64_t j = 0; j < len; j++) out[xi * stride + j] = p[xi][j];
    }
  }
}

typedef struct {
  float* out;
  const float* in;
  int64_t Cout, C;
} wino_kernel_ctx_;

/* Work item = (co, c): U = G g G^T. */
static void weight_range_(void* vctx, int64_t k0, int64_t k1) {
  const wino_kernel_ctx_* c = vctx;
  int64_t pairs = c->Cout * c->C;
  for (int64_t k = k0; k < k1; k++) {
    float u[16];
    dt_wino_weight_tile(c->in + k * 9, u);
    for (int xi = 0; xi < 16; xi++) c->out[xi * pairs + k] = u[xi];
  }
}

/* Work item = (co, c): dg = G^T m G. */
static void weight_grad_range_(void* vctx, int64_t k0, int64_t k1) {
  const wino_kernel_ctx_* c = vctx;
  int64_t pairs = c->Cout * c->C;
  for (int64_t k = k0; k < k1; k++) {
    float m[16];
    for (int xi = 0; xi < 16; xi++) m[xi] = c->in[xi * pairs + k];
    dt_wino_weight_grad_tile(m, c->out + k * 9);
  }
}

/* ---- launchers ---------------------------------------------------------------- */

static int64_t wino_grain_(int64_t per_item) {
  return per_item >= WINO_GRAIN_ELEMS ? 1 : WINO_GRAIN_ELEMS / (per_item > 0 ? per_item : 1);
}

DT_EXPORT dt_status dt_winograd_weight(float* u, const float* w, int64_t Cout, int64_t C, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_winograd_weight(u, w, Cout, C));
  if (Cout * C == 0) return DT_OK;
  wino_kernel_ctx_ c = {u, w, Cout, C};
  dt_parallel_for_(Cout * C, wino_grain_(16), weight_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_weight_grad(float* dw, const float* m, int64_t Cout, int64_t C, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_winograd_weight_grad(dw, m, Cout, C));
  if (Cout * C == 0) return DT_OK;
  wino_kernel_ctx_ c = {dw, m, Cout, C};
  dt_parallel_for_(Cout * C, wino_grain_(16), weight_grad_range_, &c);
  return DT_OK;
}

/* Runs a transform over the block's channels with its tile table. */
static dt_status wino_run_(wino_ctx_* c, int output, int64_t work_channels, dt_range_fn_ fn, const char* name) {
  c->tiles.base = malloc((size_t)c->nt * sizeof(int64_t));
  c->tiles.inside = malloc((size_t)c->nt * sizeof(uint16_t));
  if (!c->tiles.base || !c->tiles.inside) {
    free(c->tiles.base);
    free(c->tiles.inside);
    return dt_fail_(DT_ERR_ALLOC, "%s: cannot allocate the table of %lld tiles", name, (long long)c->nt);
  }
  tile_table_(c, output);
  dt_parallel_for_(work_channels, wino_grain_(16 * c->nt), fn, c);
  free(c->tiles.base);
  free(c->tiles.inside);
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_input(float* v, const float* x, const int64_t* geom, int64_t t0, int64_t nt,
                                      int64_t ld, void* stream) {
  (void)stream;
  wino_ctx_ c = {.out = v, .in = x, .t0 = t0, .nt = nt, .ld = ld};
  DT_TRY_(dt_check_winograd_input(v, x, geom, t0, nt, ld, &c.g));
  if (nt * c.g.C == 0) return DT_OK;
  c.channels = c.g.C;
  return wino_run_(&c, 0, c.g.C, input_range_, "dt_winograd_input");
}

DT_EXPORT dt_status dt_winograd_input_grad(float* dx, const float* dv, const int64_t* geom, int64_t t0, int64_t nt,
                                           int64_t ld, void* stream) {
  (void)stream;
  wino_ctx_ c = {.out = dx, .in = dv, .t0 = t0, .nt = nt, .ld = ld};
  DT_TRY_(dt_check_winograd_input_grad(dx, dv, geom, t0, nt, ld, &c.g));
  if (nt * c.g.C * c.g.H * c.g.W == 0) return DT_OK;
  c.channels = c.g.C;
  return wino_run_(&c, 0, c.g.C, input_grad_range_, "dt_winograd_input_grad");
}

DT_EXPORT dt_status dt_winograd_output(float* y, const float* m, const float* bias, const int64_t* geom,
                                       int64_t Cout, int64_t t0, int64_t nt, int64_t ld, void* stream) {
  (void)stream;
  wino_ctx_ c = {.out = y, .in = m, .bias = bias, .channels = Cout, .t0 = t0, .nt = nt, .ld = ld};
  DT_TRY_(dt_check_winograd_output(y, m, geom, Cout, t0, nt, ld, &c.g));
  if (nt * Cout == 0) return DT_OK;
  return wino_run_(&c, 1, Cout, output_range_, "dt_winograd_output");
}

DT_EXPORT dt_status dt_winograd_output_grad(float* p, const float* dy, const int64_t* geom, int64_t Cout, int64_t t0,
                                            int64_t nt, int64_t ld, void* stream) {
  (void)stream;
  wino_ctx_ c = {.out = p, .in = dy, .channels = Cout, .t0 = t0, .nt = nt, .ld = ld};
  DT_TRY_(dt_check_winograd_output_grad(p, dy, geom, Cout, t0, nt, ld, &c.g));
  if (nt * Cout == 0) return DT_OK;
  return wino_run_(&c, 1, Cout, output_grad_range_, "dt_winograd_output_grad");
}
