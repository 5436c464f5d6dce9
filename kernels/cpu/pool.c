/* pool.c — CPU loops of 2-D max, average and adaptive-average pooling,
 * forward and backward, split across threads by image plane. The window
 * arithmetic is kernels/common/pool.h's; backwards zero a plane and add each
 * output's gradient in output order, so results are deterministic. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "ops_checks.h"
#include "pool.h"

#define POOL_GRAIN_ELEMS (1 << 14)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  dt_pool_geom g;
  float* out;         /* forward: out; backward: dinp */
  const float* inp;   /* forward: inp; backward: dout */
  int32_t* idx;       /* max pooling's saved indices */
  const int32_t* cidx;
  int count_include_pad;
  int64_t divisor_override;
} pool_ctx_;

static void maxpool_fwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++)
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t k = p * ohw + oh * g->OW + ow;
        c->out[k] = dt_maxpool_window(c->inp + p * hw, g, oh, ow, &c->idx[k]);
      }
}

/* The common 2x2, stride 2 pooling with every window inside the plane:
 * straight-line selects per output, in window order (the same result as
 * dt_maxpool_window). */
DT_VEC_CLONES static void maxpool_2x2_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++) {
    for (int64_t oh = 0; oh < g->OH; oh++) {
      const float* r0 = c->inp + p * hw + 2 * oh * g->W;
      const float* r1 = r0 + g->W;
      float* out = c->out + p * ohw + oh * g->OW;
      int32_t* idx = c->idx + p * ohw + oh * g->OW;
      int32_t base = (int32_t)(2 * oh * g->W), w = (int32_t)g->W;
      for (int64_t ow = 0; ow < g->OW; ow++) {
        float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
        int32_t at[4] = {0, 1, w, w + 1};
        float best = -INFINITY;
        int32_t pick = 0; /* all -inf: the first element */
        for (int k = 0; k < 4; k++) {
          int take = dt_maxpool_takes(v[k], best);
          best = take ? v[k] : best;
          pick = take ? at[k] : pick;
        }
        out[ow] = best;
        idx[ow] = base + 2 * (int32_t)ow + pick;
      }
    }
  }
}

/* Every window wholly inside its plane (no padding reached, no clipping):
 * one output row at a time, each window element in window order across the
 * row's outputs, so the loop over outputs vectorises. Same result as
 * dt_maxpool_window (the first element when a window is all -inf). */
#define MAXPOOL_ROW_MAX 1024
DT_VEC_CLONES static void maxpool_inside_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  float best[MAXPOOL_ROW_MAX];
  int32_t at[MAXPOOL_ROW_MAX];
  for (int64_t p = p0; p < p1; p++) {
    const float* plane = c->inp + p * hw;
    for (int64_t oh = 0; oh < g->OH; oh++) {
      for (int64_t ow = 0; ow < g->OW; ow++) {
        best[ow] = -INFINITY;
        at[ow] = -1;
      }
      for (int64_t ki = 0; ki < g->KH; ki++) {
        int64_t ih = oh * g->SH + ki * g->DH;
        const float* row = plane + ih * g->W;
        for (int64_t kj = 0; kj < g->KW; kj++) {
          int32_t pos0 = (int32_t)(ih * g->W + kj * g->DW);
          for (int64_t ow = 0; ow < g->OW; ow++) {
            float v = row[ow * g->SW + kj * g->DW];
            int take = dt_maxpool_takes(v, best[ow]);
            best[ow] = take ? v : best[ow];
            at[ow] = take ? pos0 + (int32_t)(ow * g->SW) : at[ow];
          }
        }
      }
      float* out = c->out + p * ohw + oh * g->OW;
      int32_t* idx = c->idx + p * ohw + oh * g->OW;
      for (int64_t ow = 0; ow < g->OW; ow++) {
        out[ow] = best[ow];
        idx[ow] = at[ow] >= 0 ? at[ow] : (int32_t)((oh * g->SH) * g->W + ow * g->SW);
      }
    }
  }
}

static void maxpool_bwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++) {
    float* dplane = c->out + p * hw;
    memset(dplane, 0, (size_t)hw * sizeof(float));
    for (int64_t k = p * ohw; k < (p + 1) * ohw; k++)
      if (c->cidx[k] >= 0) dplane[c->cidx[k]] += c->inp[k];
  }
}

/* The 2x2, stride 2 backward with every window inside the plane: windows do
 * not overlap, so each input element is written once — 0 + dout where it was
 * its window's maximum (the bits of zeroing then adding), 0 elsewhere. */
DT_VEC_CLONES static void maxpool_bwd_2x2_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++) {
    float* dplane = c->out + p * hw;
    const float* d = c->inp + p * ohw;
    const int32_t* idx = c->cidx + p * ohw;
    for (int64_t oh = 0; oh < g->OH; oh++) {
      float* r0 = dplane + 2 * oh * g->W;
      float* r1 = r0 + g->W;
      int32_t base = (int32_t)(2 * oh * g->W), w = (int32_t)g->W;
      for (int64_t ow = 0; ow < g->OW; ow++) {
        int32_t at = idx[oh * g->OW + ow] - base - 2 * (int32_t)ow;
        float v = 0.0f + d[oh * g->OW + ow];
        r0[2 * ow] = at == 0 ? v : 0.0f;
        r0[2 * ow + 1] = at == 1 ? v : 0.0f;
        r1[2 * ow] = at == w ? v : 0.0f;
        r1[2 * ow + 1] = at == w + 1 ? v : 0.0f;
      }
      for (int64_t iw = 2 * g->OW; iw < g->W; iw++) r0[iw] = r1[iw] = 0.0f; /* an odd last column */
    }
    for (int64_t i = 2 * g->OH * g->W; i < hw; i++) dplane[i] = 0.0f; /* an odd last row */
  }
}

static void avgpool_fwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++)
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++)
        c->out[p * ohw + oh * g->OW + ow] =
            dt_avgpool_value(c->inp + p * hw, g, oh, ow, c->count_include_pad, c->divisor_override);
}

static void avgpool_bwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++) {
    float* dplane = c->out + p * hw;
    memset(dplane, 0, (size_t)hw * sizeof(float));
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t h0, h1, w0, w1, div;
        dt_avgpool_window(g, oh, ow, c->count_include_pad, c->divisor_override, &h0, &h1, &w0, &w1, &div);
        float delta = c->inp[p * ohw + oh * g->OW + ow] / (float)div;
        for (int64_t ih = h0; ih < h1; ih++)
          for (int64_t iw = w0; iw < w1; iw++) dplane[ih * g->W + iw] += delta;
      }
  }
}

static void adaptive_fwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++)
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++)
        c->out[p * ohw + oh * g->OW + ow] = dt_adaptive_avgpool_value(c->inp + p * hw, g->H, g->W, g->OH, g->OW, oh, ow);
}

static void adaptive_bwd_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++) {
    float* dplane = c->out + p * hw;
    memset(dplane, 0, (size_t)hw * sizeof(float));
    for (int64_t oh = 0; oh < g->OH; oh++) {
      int64_t h0 = dt_adaptive_start(oh, g->OH, g->H), h1 = dt_adaptive_end(oh, g->OH, g->H);
      for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t w0 = dt_adaptive_start(ow, g->OW, g->W), w1 = dt_adaptive_end(ow, g->OW, g->W);
        float delta = c->inp[p * ohw + oh * g->OW + ow] / (float)(h1 - h0) / (float)(w1 - w0);
        for (int64_t ih = h0; ih < h1; ih++)
          for (int64_t iw = w0; iw < w1; iw++) dplane[ih * g->W + iw] += delta;
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

/* Every window wholly inside its plane (no padding reached, no clipping). */
static int maxpool_inside_(const dt_pool_geom* g) {
  return g->PH == 0 && g->PW == 0 && g->OW <= MAXPOOL_ROW_MAX && g->OH >= 1 && g->OW >= 1 &&
         (g->OH - 1) * g->SH + (g->KH - 1) * g->DH < g->H && (g->OW - 1) * g->SW + (g->KW - 1) * g->DW < g->W;
}

/* ... and 2x2 windows, stride 2, no dilation: the common pooling. */
static int maxpool_2x2_inside_(const dt_pool_geom* g) {
  return maxpool_inside_(g) && g->KH == 2 && g->KW == 2 && g->SH == 2 && g->SW == 2 && g->DH == 1 && g->DW == 1;
}

static int64_t plane_grain_(const dt_pool_geom* g, int64_t per_output) {
  int64_t per = g->OH * g->OW * per_output + g->H * g->W;
  return per >= POOL_GRAIN_ELEMS ? 1 : POOL_GRAIN_ELEMS / (per > 0 ? per : 1);
}

DT_EXPORT dt_status dt_maxpool2d_fwd(float* out, int32_t* idx, const float* inp, const int64_t* geom, void* stream) {
  (void)stream;
  pool_ctx_ c = {0};
  DT_TRY_(dt_check_maxpool2d_fwd(out, idx, inp, geom, &c.g));
  if (c.g.P * c.g.OH * c.g.OW == 0) return DT_OK;
  c.out = out;
  c.idx = idx;
  c.inp = inp;
  const dt_pool_geom* g = &c.g;
  dt_range_fn_ fn = maxpool_2x2_inside_(g) ? maxpool_2x2_range_ : maxpool_inside_(g) ? maxpool_inside_range_
                                                                                      : maxpool_fwd_range_;
  dt_parallel_for_(g->P, plane_grain_(g, g->KH * g->KW), fn, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_maxpool2d_bwd(float* dinp, const float* dout, const int32_t* idx, const int64_t* geom,
                                     void* stream) {
  (void)stream;
  pool_ctx_ c = {0};
  DT_TRY_(dt_check_maxpool2d_bwd(dinp, dout, idx, geom, &c.g));
  const dt_pool_geom* g = &c.g;
  if (g->P * g->H * g->W == 0) return DT_OK;
  int64_t n = g->P * g->OH * g->OW, hw = g->H * g->W;
  for (int64_t k = 0; k < n; k++) /* a stale index must not write astray (a data error) */
    if (idx[k] < -1 || idx[k] >= hw) return dt_fail_index_("dt_maxpool2d_bwd", idx[k], k, hw);
  c.out = dinp;
  c.inp = dout;
  c.cidx = idx;
  dt_parallel_for_(g->P, plane_grain_(g, 1), maxpool_2x2_inside_(g) ? maxpool_bwd_2x2_range_ : maxpool_bwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_avgpool2d_fwd(float* out, const float* inp, const int64_t* geom, int32_t count_include_pad,
                                     int64_t divisor_override, void* stream) {
  (void)stream;
  pool_ctx_ c = {0};
  DT_TRY_(dt_check_avgpool2d_fwd(out, inp, geom, divisor_override, &c.g));
  if (c.g.P * c.g.OH * c.g.OW == 0) return DT_OK;
  c.out = out;
  c.inp = inp;
  c.count_include_pad = count_include_pad != 0;
  c.divisor_override = divisor_override;
  dt_parallel_for_(c.g.P, plane_grain_(&c.g, c.g.KH * c.g.KW), avgpool_fwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_avgpool2d_bwd(float* dinp, const float* dout, const int64_t* geom, int32_t count_include_pad,
                                     int64_t divisor_override, void* stream) {
  (void)stream;
  pool_ctx_ c = {0};
  DT_TRY_(dt_check_avgpool2d_bwd(dinp, dout, geom, divisor_override, &c.g));
  if (c.g.P * c.g.H * c.g.W == 0) return DT_OK;
  c.out = dinp;
  c.inp = dout;
  c.count_include_pad = count_include_pad != 0;
  c.divisor_override = divisor_override;
  dt_parallel_for_(c.g.P, plane_grain_(&c.g, c.g.KH * c.g.KW), avgpool_bwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_adaptive_avgpool2d_fwd(float* out, const float* inp, int64_t P, int64_t H, int64_t W,
                                              int64_t OH, int64_t OW, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_adaptive_avgpool2d_fwd(out, inp, P, H, W, OH, OW));
  if (P == 0) return DT_OK;
  pool_ctx_ c = {.g = {P, H, W, 1, 1, 1, 1, 0, 0, 1, 1, OH, OW}};
  c.out = out;
  c.inp = inp;
  int64_t win = (H / OH + 2) * (W / OW + 2);
  dt_parallel_for_(P, plane_grain_(&c.g, win), adaptive_fwd_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_adaptive_avgpool2d_bwd(float* dinp, const float* dout, int64_t P, int64_t H, int64_t W,
                                              int64_t OH, int64_t OW, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_adaptive_avgpool2d_bwd(dinp, dout, P, H, W, OH, OW));
  if (P == 0) return DT_OK;
  pool_ctx_ c = {.g = {P, H, W, 1, 1, 1, 1, 0, 0, 1, 1, OH, OW}};
  c.out = dinp;
  c.inp = dout;
  int64_t win = (H / OH + 2) * (W / OW + 2);
  dt_parallel_for_(P, plane_grain_(&c.g, win), adaptive_bwd_range_, &c);
  return DT_OK;
}
