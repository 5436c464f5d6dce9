/* conv.c — CPU loops of dt_im2col and dt_col2im, the data movement around
 * the GEMM of a convolution (the product itself is dt_gemm). im2col copies
 * each (row, image) segment with one memcpy per output row when the stride
 * is 1; col2im adds an image plane's taps in (ki, kj) order — the order of
 * conv.h's dt_col2im_value, so a GPU thread per element gets the same bits. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "conv.h"

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

/* ---- launchers ---------------------------------------------------------------- */

/* Reads and checks the geometry array: positive kernel, stride and dilation,
 * non-negative sizes and padding, and sizes whose products fit int64. */
static dt_status read_geom_(const char* name, const int64_t* a, dt_conv_geom* g) {
  DT_REQUIRE_(a, "%s: null geometry", name);
  *g = (dt_conv_geom){a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]};
  DT_REQUIRE_(g->N >= 0 && g->C >= 0 && g->H >= 0 && g->W >= 0 && g->OH >= 0 && g->OW >= 0,
              "%s: negative size (N=%lld C=%lld H=%lld W=%lld OH=%lld OW=%lld)", name, (long long)g->N,
              (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->OH, (long long)g->OW);
  DT_REQUIRE_(g->KH >= 1 && g->KW >= 1 && g->SH >= 1 && g->SW >= 1 && g->DH >= 1 && g->DW >= 1,
              "%s: kernel (%lld, %lld), stride (%lld, %lld) and dilation (%lld, %lld) must be >= 1", name,
              (long long)g->KH, (long long)g->KW, (long long)g->SH, (long long)g->SW, (long long)g->DH,
              (long long)g->DW);
  DT_REQUIRE_(g->PH >= 0 && g->PW >= 0, "%s: negative padding (%lld, %lld)", name, (long long)g->PH,
              (long long)g->PW);
  int64_t t, rows, cols;
  DT_REQUIRE_(dt_mul_ok_(g->C, g->KH, &rows) && dt_mul_ok_(rows, g->KW, &rows) && dt_mul_ok_(g->N, g->OH, &cols) &&
                  dt_mul_ok_(cols, g->OW, &cols) && dt_mul_ok_(rows, cols, &t) && dt_mul_ok_(t, 4, &t) &&
                  dt_mul_ok_(g->N, g->C, &t) && dt_mul_ok_(t, g->H, &t) && dt_mul_ok_(t, g->W, &t) &&
                  dt_mul_ok_(t, 4, &t),
              "%s: sizes overflow (N=%lld C=%lld H=%lld W=%lld, kernel %lldx%lld, output %lldx%lld)", name,
              (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->KH, (long long)g->KW,
              (long long)g->OH, (long long)g->OW);
  /* taps and output positions index with these products; keep them far from overflow */
  DT_REQUIRE_(g->OH <= (INT64_MAX / 4) / g->SH && g->OW <= (INT64_MAX / 4) / g->SW &&
                  g->KH <= (INT64_MAX / 4) / g->DH && g->KW <= (INT64_MAX / 4) / g->DW,
              "%s: stride or dilation too large", name);
  return DT_OK;
}

DT_EXPORT dt_status dt_im2col(float* col, const float* inp, const int64_t* geom, void* stream) {
  (void)stream;
  conv_ctx_ c = {0};
  dt_status st = read_geom_("dt_im2col", geom, &c.g);
  const dt_conv_geom* g = &c.g;
  int64_t items = g->C * g->KH * g->KW * g->N;
  if (st != DT_OK || items == 0 || g->OH * g->OW == 0) return st;
  DT_REQUIRE_(col && (inp || g->H * g->W == 0), "dt_im2col: null pointer (col=%p inp=%p)", (void*)col,
              (const void*)inp);
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
  dt_status st = read_geom_("dt_col2im", geom, &c.g);
  const dt_conv_geom* g = &c.g;
  int64_t planes = g->N * g->C;
  if (st != DT_OK || planes == 0 || g->H * g->W == 0) return st;
  DT_REQUIRE_(dinp && (col || g->OH * g->OW == 0), "dt_col2im: null pointer (dinp=%p col=%p)", (void*)dinp,
              (const void*)col);
  c.dinp = dinp;
  c.dcol = col;
  c.ld = g->N * g->OH * g->OW;
  int64_t per = g->KH * g->KW * g->OH * g->OW + g->H * g->W;
  dt_parallel_for_(planes, per >= CONV_GRAIN_ELEMS ? 1 : CONV_GRAIN_ELEMS / per, col2im_range_, &c);
  return DT_OK;
}
