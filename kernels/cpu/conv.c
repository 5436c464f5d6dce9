/* conv.c — CPU loops of dt_im2col and dt_col2im, the data movement around
 * the GEMM of a convolution (the product itself is dt_gemm), and of the
 * direct convolution for layers with few taps per output (a first layer on
 * 1-3 channels), whose GEMM would be mostly data movement. im2col copies each
 * (row, image) segment with one memcpy per output row when the stride is 1;
 * col2im and the direct kernels add taps in the orders of conv.h's
 * per-element functions, so a GPU thread per element gets the same bits. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#pragma GCC diagnostic ignored "-Wpsabi" /* the 8-float vector helpers are always inlined: no call ABI involved */
#include <stdlib.h>
#include "cpu_internal.h"
#include "conv.h"
#include "ops_checks.h"
#include "reduce.h"

#define CONV_GRAIN_ELEMS (1 << 14)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  dt_conv_geom g;
  float* col;
  const float* inp;
  float* dinp;
  const float* dcol;
  int64_t ld; /* N * OH * OW: the length of a col row */
} conv_ctx_;

/* Work item = (col row r = (c, ki, kj), image n): OH * OW values. */
static void im2col_range_(void* vctx, int64_t i0, int64_t i1) {
  const conv_ctx_* c = vctx;
  const dt_conv_geom* g = &c->g;
  int64_t ohw = g->OH * g->OW;
  for (int64_t item = i0; item < i1; item++) {
    int64_t r = item / g->N, n = item % g->N;
    int64_t ch = r / (g->KH * g->KW), ki = (r / g->KW) % g->KH, kj = r % g->KW;
    const float* plane = c->inp + (n * g->C + ch) * g->H * g->W;
    float* dst = c->col + r * c->ld + n * ohw;
    int64_t lo, hi;
    dt_conv_valid_cols(g, kj, &lo, &hi);
    for (int64_t oh = 0; oh < g->OH; oh++) {
      float* d = dst + oh * g->OW;
      int64_t ih = dt_conv_in_row(g, oh, ki);
      if (ih < 0 || ih >= g->H || lo >= hi) {
        memset(d, 0, (size_t)g->OW * sizeof(float));
        continue;
      }
      for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0.0f;
      const float* src = plane + ih * g->W;
      if (g->SW == 1) {
        memcpy(d + lo, src + dt_conv_in_col(g, lo, kj), (size_t)(hi - lo) * sizeof(float));
      } else {
        for (int64_t ow = lo; ow < hi; ow++) d[ow] = src[dt_conv_in_col(g, ow, kj)];
      }
      for (int64_t ow = hi; ow < g->OW; ow++) d[ow] = 0.0f;
    }
  }
}

/* Work item = input plane (n, c): zero it, then add every tap's col row in
 * (ki, kj) order, each row's outputs in (oh, ow) order. */
DT_VEC_CLONES static void col2im_range_(void* vctx, int64_t p0, int64_t p1) {
  const conv_ctx_* c = vctx;
  const dt_conv_geom* g = &c->g;
  int64_t ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++) {
    int64_t n = p / g->C, ch = p % g->C;
    float* plane = c->dinp + p * g->H * g->W;
    memset(plane, 0, (size_t)(g->H * g->W) * sizeof(float));
    for (int64_t ki = 0; ki < g->KH; ki++) {
      for (int64_t kj = 0; kj < g->KW; kj++) {
        const float* src = c->dcol + ((ch * g->KH + ki) * g->KW + kj) * c->ld + n * ohw;
        int64_t lo, hi;
        dt_conv_valid_cols(g, kj, &lo, &hi);
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = dt_conv_in_row(g, oh, ki);
          if (ih < 0 || ih >= g->H) continue;
          float* d = plane + ih * g->W;
          const float* s = src + oh * g->OW;
          if (g->SW == 1) {
            int64_t off = dt_conv_in_col(g, 0, kj);
            for (int64_t ow = lo; ow < hi; ow++) d[ow + off] += s[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ow++) d[dt_conv_in_col(g, ow, kj)] += s[ow];
          }
        }
      }
    }
  }
}

typedef struct {
  dt_conv_geom g;
  float* out;
  const float *inp, *weight, *bias, *dout;
  const float* pad; /* forward: zero-padded planes of images [n0, n0 + count); backward: their column matrix */
  double* tot;      /* bwd weight: per output channel, its taps' sums and the bias's */
  int64_t Cout, groups, n0;
} direct_ctx_;

/* Work item = one plane (n, c) of the chunk: its zero-padded copy (Hp x Wp). */
static void pad_range_(void* vctx, int64_t p0, int64_t p1) {
  const direct_ctx_* c = vctx;
  const dt_conv_geom* g = &c->g;
  int64_t Hp = dt_conv_padded_h(g), Wp = dt_conv_padded_w(g);
  for (int64_t p = p0; p < p1; p++) {
    float* dst = (float*)c->pad + p * Hp * Wp;
    const float* src = c->inp + (c->n0 * g->C + p) * g->H * g->W;
    memset(dst, 0, (size_t)(g->PH * Wp) * sizeof(float));
    for (int64_t ih = 0; ih < g->H; ih++) {
      float* row = dst + (g->PH + ih) * Wp;
      memset(row, 0, (size_t)g->PW * sizeof(float));
      memcpy(row + g->PW, src + ih * g->W, (size_t)g->W * sizeof(float));
      memset(row + g->PW + g->W, 0, (size_t)g->PW * sizeof(float));
    }
    memset(dst + (g->PH + g->H) * Wp, 0, (size_t)(g->PH * Wp) * sizeof(float));
  }
}

/* Outputs computed together per output row: their sums stay in registers
 * while every tap adds to them. */
#define DIRECT_BLOCK 8

/* DIRECT_BLOCK outputs of one row (stride 1): acc = bias, then each tap's
 * weight times the padded input at its offset, in tap order. The sums stay
 * in registers across the taps (the tap tables hold no branches). */
DT_VEC_CLONES static void direct_block_(float* out, const float* src, const int64_t* off, const float* wts,
                                        int64_t taps, float bias) {
  float acc[DIRECT_BLOCK];
  for (int k = 0; k < DIRECT_BLOCK; k++) acc[k] = bias;
  for (int64_t t = 0; t < taps; t++) {
    const float* x = src + off[t];
    float w = wts[t];
    for (int k = 0; k < DIRECT_BLOCK; k++) acc[k] += w * x[k];
  }
  for (int k = 0; k < DIRECT_BLOCK; k++) out[k] = acc[k];
}

/* Work item = output plane (n, co) of the chunk: every output the bias, then
 * each tap (ci, ki, kj) added — dt_conv_direct_value's order. */
static void direct_fwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const direct_ctx_* c = vctx;
  const dt_conv_geom* g = &c->g;
  int64_t Cg = g->C / c->groups, taps = Cg * g->KH * g->KW, ohw = g->OH * g->OW;
  int64_t Hp = dt_conv_padded_h(g), Wp = dt_conv_padded_w(g);
  int64_t off[DT_CONV_DIRECT_MAX_TAPS];
  for (int64_t p = p0; p < p1; p++) {
    int64_t n = p / c->Cout, co = p % c->Cout;
    const float* img = c->pad + n * g->C * Hp * Wp;
    const float* wts = c->weight + co * taps;
    for (int64_t ci = 0; ci < Cg; ci++) /* where each tap reads, from an output's top-left corner */
      for (int64_t ki = 0; ki < g->KH; ki++)
        for (int64_t kj = 0; kj < g->KW; kj++)
          off[(ci * g->KH + ki) * g->KW + kj] =
              dt_conv_in_channel(co, ci, c->Cout, Cg, c->groups) * Hp * Wp + ki * g->DH * Wp + kj * g->DW;
    float* o = c->out + ((c->n0 + n) * c->Cout + co) * ohw;
    float b = c->bias ? c->bias[co] : 0.0f;
    for (int64_t oh = 0; oh < g->OH; oh++) {
      const float* src_row = img + oh * g->SH * Wp;
      float* orow = o + oh * g->OW;
      int64_t ow = 0;
      if (g->SW == 1 && g->OW >= DIRECT_BLOCK) {
        for (; ow + DIRECT_BLOCK <= g->OW; ow += DIRECT_BLOCK) direct_block_(orow + ow, src_row + ow, off, wts, taps, b);
        if (ow < g->OW) { /* the tail as one more block ending at the row's end (the overlap is recomputed alike) */
          ow = g->OW - DIRECT_BLOCK;
          direct_block_(orow + ow, src_row + ow, off, wts, taps, b);
          ow = g->OW;
        }
      }
      for (; ow < g->OW; ow++) { /* strided rows, or rows narrower than a block */
        float acc = b;
        for (int64_t t = 0; t < taps; t++) acc += wts[t] * src_row[ow * g->SW + off[t]];
        orow[ow] = acc;
      }
    }
  }
}

/* Eight float lanes as one vector (GCC/Clang vector extension): the loop
 * below must keep its lanes in registers, which auto-vectorisation of a lane
 * array did not. Element k is lane k; the arithmetic is per lane. */
typedef float v8f_ __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) v8f_ load8_(const float* p) {
  v8f_ v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* dt_conv_tap_plane for four taps at once (rows x0..x3 of the column
 * matrix, the same image): each tap's lanes one vector, the four chains
 * independent, every tap's products in its lanes in that function's order,
 * so the same bits. Missing taps (count < 4) read tap 0 and are dropped. */
DT_VEC_CLONES static void tap_planes4_(const float* restrict d, const float* const* x, int count, int64_t ohw,
                                       float* share) {
  const float *x0 = x[0], *x1 = count > 1 ? x[1] : x0, *x2 = count > 2 ? x[2] : x0, *x3 = count > 3 ? x[3] : x0;
  v8f_ l0 = {0, 0, 0, 0, 0, 0, 0, 0}, l1 = l0, l2 = l0, l3 = l0;
  int64_t j = 0;
  for (; j + 8 <= ohw; j += 8) {
    v8f_ dv = load8_(d + j);
    l0 += dv * load8_(x0 + j);
    l1 += dv * load8_(x1 + j);
    l2 += dv * load8_(x2 + j);
    l3 += dv * load8_(x3 + j);
  }
  if (j < ohw) {
    float td[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t[4][8] = {{0}};
    for (int64_t k = 0; j + k < ohw; k++) {
      td[k] = d[j + k];
      t[0][k] = x0[j + k];
      t[1][k] = x1[j + k];
      t[2][k] = x2[j + k];
      t[3][k] = x3[j + k];
    }
    v8f_ dv = load8_(td);
    l0 += dv * load8_(t[0]);
    l1 += dv * load8_(t[1]);
    l2 += dv * load8_(t[2]);
    l3 += dv * load8_(t[3]);
  }
  v8f_ l[4] = {l0, l1, l2, l3};
  for (int i = 0; i < count; i++)
    share[i] = ((l[i][0] + l[i][1]) + (l[i][2] + l[i][3])) + ((l[i][4] + l[i][5]) + (l[i][6] + l[i][7]));
}

/* Work item = output channel co: each tap's share of every plane of the
 * chunk (dt_conv_tap_plane over the chunk's column matrix) and the bias's,
 * added in double to the totals. Images are the outer loop, so an image's
 * column rows stay in cache for every channel of the range; each total still
 * takes its shares in image order. */
static void direct_bwd_weight_range_(void* vctx, int64_t c0, int64_t c1) {
  const direct_ctx_* c = vctx;
  const dt_conv_geom* g = &c->g;
  int64_t Cg = g->C / c->groups, taps = Cg * g->KH * g->KW, ohw = g->OH * g->OW, L = g->N * ohw;
  for (int64_t n = 0; n < g->N; n++) {
    for (int64_t co = c0; co < c1; co++) {
      double* tot = c->tot + co * (taps + 1);
      /* the group's taps are rows [cin0 * KH * KW, ...) of the column matrix */
      const float* rows = c->pad + dt_conv_in_channel(co, 0, c->Cout, Cg, c->groups) * g->KH * g->KW * L;
      const float* d = c->dout + ((c->n0 + n) * c->Cout + co) * ohw;
      tot[taps] += dt_sum_f64(d, ohw);
      for (int64_t t = 0; t < taps; t += 4) {
        int count = taps - t < 4 ? (int)(taps - t) : 4;
        const float* x[4];
        float share[4];
        for (int i = 0; i < count; i++) x[i] = rows + (t + i) * L + n * ohw;
        tap_planes4_(d, x, count, ohw, share);
        for (int i = 0; i < count; i++) tot[t + i] += (double)share[i];
      }
    }
  }
}

/* Work item = input plane (n, cin): zero it, then add each (co, ki, kj)
 * tap's share, row by row. */
DT_VEC_CLONES static void direct_bwd_input_range_(void* vctx, int64_t p0, int64_t p1) {
  const direct_ctx_* c = vctx;
  const dt_conv_geom* g = &c->g;
  int64_t Cg = g->C / c->groups, Mg = c->Cout / c->groups;
  for (int64_t p = p0; p < p1; p++) {
    int64_t n = p / g->C, cin = p % g->C, gi = cin / Cg, ci = cin % Cg;
    float* plane = c->out + p * g->H * g->W;
    memset(plane, 0, (size_t)(g->H * g->W) * sizeof(float));
    for (int64_t co = gi * Mg; co < (gi + 1) * Mg; co++) {
      for (int64_t ki = 0; ki < g->KH; ki++) {
        for (int64_t kj = 0; kj < g->KW; kj++) {
          float w = c->weight[((co * Cg + ci) * g->KH + ki) * g->KW + kj];
          int64_t lo, hi, off = dt_conv_in_col(g, 0, kj);
          dt_conv_valid_cols(g, kj, &lo, &hi);
          for (int64_t oh = 0; oh < g->OH; oh++) {
            int64_t ih = dt_conv_in_row(g, oh, ki);
            if (ih < 0 || ih >= g->H) continue;
            const float* grow = c->dout + ((n * c->Cout + co) * g->OH + oh) * g->OW;
            float* drow = plane + ih * g->W;
            for (int64_t ow = lo; ow < hi; ow++) drow[ow * g->SW + off] += w * grow[ow];
          }
        }
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_im2col(float* col, const float* inp, const int64_t* geom, void* stream) {
  (void)stream;
  conv_ctx_ c = {0};
  DT_TRY_(dt_check_im2col(col, inp, geom, &c.g));
  const dt_conv_geom* g = &c.g;
  int64_t items = g->C * g->KH * g->KW * g->N;
  if (items == 0 || g->OH * g->OW == 0) return DT_OK;
  c.col = col;
  c.inp = inp;
  c.ld = g->N * g->OH * g->OW;
  int64_t per = g->OH * g->OW;
  dt_parallel_for_(items, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, im2col_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_col2im(float* dinp, const float* col, const int64_t* geom, void* stream) {
  (void)stream;
  conv_ctx_ c = {0};
  DT_TRY_(dt_check_col2im(dinp, col, geom, &c.g));
  const dt_conv_geom* g = &c.g;
  int64_t planes = g->N * g->C;
  if (planes == 0 || g->H * g->W == 0) return DT_OK;
  c.dinp = dinp;
  c.dcol = col;
  c.ld = g->N * g->OH * g->OW;
  int64_t per = g->KH * g->KW * g->OH * g->OW + g->H * g->W;
  dt_parallel_for_(planes, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, col2im_range_, &c);
  return DT_OK;
}

/* Images per chunk so the padded copies hold at most ~4M floats (16 MiB). */
static int64_t pad_chunk_(const dt_conv_geom* g) {
  int64_t per = g->C * dt_conv_padded_h(g) * dt_conv_padded_w(g);
  int64_t n = per > 0 ? ((int64_t)1 << 22) / per : g->N;
  return n < 1 ? 1 : (n > g->N ? g->N : n);
}

/* Pads images [n0, n0 + cnt) into c->pad (a buffer of pad_chunk_ images). */
static void pad_images_(direct_ctx_* c, int64_t n0, int64_t cnt) {
  c->n0 = n0;
  int64_t per = dt_conv_padded_h(&c->g) * dt_conv_padded_w(&c->g);
  dt_parallel_for_(cnt * c->g.C, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, pad_range_, c);
}

DT_EXPORT dt_status dt_conv2d_direct_fwd(float* out, const float* inp, const float* weight, const float* bias,
                                         const int64_t* geom, int64_t Cout, int64_t groups, void* stream) {
  (void)stream;
  direct_ctx_ c = {.Cout = Cout, .groups = groups};
  DT_TRY_(dt_check_conv2d_direct_fwd(out, inp, weight, geom, Cout, groups, &c.g));
  int64_t ohw = c.g.OH * c.g.OW;
  if (c.g.N * Cout * ohw == 0) return DT_OK;
  int64_t chunk = pad_chunk_(&c.g);
  float* pad = malloc((size_t)(chunk * c.g.C * dt_conv_padded_h(&c.g) * dt_conv_padded_w(&c.g) + 1) * sizeof(float));
  if (!pad) return dt_fail_(DT_ERR_ALLOC, "dt_conv2d_direct_fwd: cannot allocate the padded input");
  c.out = out;
  c.inp = inp;
  c.weight = weight;
  c.bias = bias;
  c.pad = pad;
  int64_t N = c.g.N, per = (c.g.C / groups * c.g.KH * c.g.KW + 1) * ohw;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    int64_t cnt = N - n0 < chunk ? N - n0 : chunk;
    pad_images_(&c, n0, cnt);
    dt_parallel_for_(cnt * Cout, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, direct_fwd_range_, &c);
  }
  free(pad);
  return DT_OK;
}

DT_EXPORT dt_status dt_conv2d_direct_bwd_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                                                const int64_t* geom, int64_t Cout, int64_t groups, void* stream) {
  (void)stream;
  direct_ctx_ c = {.Cout = Cout, .groups = groups};
  DT_TRY_(dt_check_conv2d_direct_bwd_weight(dweight, dout, inp, geom, Cout, groups, &c.g));
  int64_t taps = c.g.C / groups * c.g.KH * c.g.KW, N = c.g.N, ohw = c.g.OH * c.g.OW;
  int64_t rows = c.g.C * c.g.KH * c.g.KW;
  /* images per chunk so the chunk's column matrix holds at most ~4M floats */
  int64_t chunk = rows * ohw > 0 ? ((int64_t)1 << 22) / (rows * ohw) : N;
  chunk = chunk < 1 ? 1 : (chunk > N ? N : chunk);
  float* col = malloc((size_t)(chunk * rows * ohw + 1) * sizeof(float));
  double* tot = calloc((size_t)(Cout * (taps + 1)), sizeof(double));
  if (!col || !tot) {
    free(col);
    free(tot);
    return dt_fail_(DT_ERR_ALLOC, "dt_conv2d_direct_bwd_weight: cannot allocate %lld floats of columns",
                    (long long)(chunk * rows * ohw));
  }
  c.dout = dout;
  c.pad = col;
  c.tot = tot;
  dt_conv_geom whole = c.g;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    int64_t cnt = N - n0 < chunk ? N - n0 : chunk;
    conv_ctx_ cc = {0};
    cc.g = whole;
    cc.g.N = cnt;
    cc.col = col;
    cc.inp = inp + n0 * whole.C * whole.H * whole.W;
    cc.ld = cnt * ohw;
    dt_parallel_for_(rows * cnt, ohw >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / (ohw > 0 ? ohw : 1), im2col_range_,
                     &cc);
    c.g.N = cnt; /* the work items walk the chunk's images */
    c.n0 = n0;
    int64_t per = (taps + 1) * cnt * ohw;
    dt_parallel_for_(Cout, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, direct_bwd_weight_range_, &c);
    c.g = whole;
  }
  for (int64_t co = 0; co < Cout; co++) {
    for (int64_t t = 0; t < taps; t++) dweight[co * taps + t] = (float)tot[co * (taps + 1) + t];
    if (dbias) dbias[co] = (float)tot[co * (taps + 1) + taps];
  }
  free(col);
  free(tot);
  return DT_OK;
}

DT_EXPORT dt_status dt_conv2d_direct_bwd_input(float* dinp, const float* dout, const float* weight, const int64_t* geom,
                                               int64_t Cout, int64_t groups, void* stream) {
  (void)stream;
  direct_ctx_ c = {.Cout = Cout, .groups = groups};
  DT_TRY_(dt_check_conv2d_direct_bwd_input(dinp, dout, weight, geom, Cout, groups, &c.g));
  int64_t planes = c.g.N * c.g.C;
  if (planes * c.g.H * c.g.W == 0) return DT_OK;
  c.out = dinp;
  c.dout = dout;
  c.weight = weight;
  int64_t per = (Cout / groups * c.g.KH * c.g.KW) * c.g.OH * c.g.OW + c.g.H * c.g.W;
  dt_parallel_for_(planes, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, direct_bwd_input_range_, &c);
  return DT_OK;
}
