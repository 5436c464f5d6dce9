/* pool.c — CPU loops of 2-D max, average and adaptive-average pooling,
 * forward and backward, split across threads by image plane. The window
 * arithmetic is kernels/common/pool.h's; backwards zero a plane and add each
 * output's gradient in output order, so results are deterministic. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "ops_checks.h"
#include "pool.h"
#include "bn_relu_pool.h"

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

/* The common 2x2, stride 2 pooling with every window inside the plane, a
 * vector of outputs at a time (W lanes of GCC's vector extension: 8, or 4 for
 * narrow rows; a row's last vector ends at its last output and recomputes
 * the overlap alike): each window's four elements are deinterleaved from its
 * two input rows and taken in window order by dt_maxpool_takes's rule, so
 * the result is dt_maxpool_window's. The vector helpers are always inlined:
 * no call ABI is involved (hence -Wpsabi off below). */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f_ __attribute__((vector_size(32)));
typedef int32_t v8i_ __attribute__((vector_size(32)));
typedef float v4f_ __attribute__((vector_size(16)));
typedef int32_t v4i_ __attribute__((vector_size(16)));

/* Takes (v, at) over (*best, *pick) where v > *best or v is NaN (dt_maxpool_takes), lane by lane. */
#define POOL_TAKE_(VI, best, pick, v, at)                  \
  do {                                                     \
    VI take_ = ((v) > *(best)) | ((v) != (v));             \
    VI b_, v_;                                             \
    memcpy(&b_, (best), sizeof b_);                        \
    memcpy(&v_, &(v), sizeof v_);                          \
    b_ = (take_ & v_) | (~take_ & b_);                     \
    memcpy((best), &b_, sizeof b_);                        \
    *(pick) = (take_ & (at)) | (~take_ & *(pick));         \
  } while (0)

/* With bn set, each value first becomes relu(x * alpha + beta), as
 * dt_relu_f(dt_bn_out_f(x, alpha, beta)) does (a negative to +0, a NaN kept). */
#define POOL_BN_RELU_(VF, VI, v)              \
  do {                                        \
    if (bn) {                                 \
      VF y_ = (v) * alpha + beta;             \
      VI neg_ = y_ < (VF){0}, b_;             \
      memcpy(&b_, &y_, sizeof b_);            \
      b_ &= ~neg_;                            \
      memcpy(&(v), &b_, sizeof b_);           \
    }                                         \
  } while (0)

#define POOL2X2_VEC_(N, VF, VI, EVEN, ODD, LANES)                                                          \
  static inline __attribute__((always_inline)) void pool2x2_fwd_##N##_(                                   \
      const float* r0, const float* r1, float* out, int32_t* idx, int32_t base, int32_t w, int64_t ow,    \
      int bn, float alpha, float beta) {                                                                   \
    VF a0, a1, b0, b1;                                                                                     \
    memcpy(&a0, r0 + 2 * ow, sizeof a0);                                                                   \
    memcpy(&a1, r0 + 2 * ow + N, sizeof a1);                                                               \
    memcpy(&b0, r1 + 2 * ow, sizeof b0);                                                                   \
    memcpy(&b1, r1 + 2 * ow + N, sizeof b1);                                                               \
    VF v1 = __builtin_shuffle(a0, a1, ODD), v2 = __builtin_shuffle(b0, b1, EVEN);                          \
    VF v3 = __builtin_shuffle(b0, b1, ODD), best = __builtin_shuffle(a0, a1, EVEN);                        \
    POOL_BN_RELU_(VF, VI, best);                                                                           \
    POOL_BN_RELU_(VF, VI, v1);                                                                             \
    POOL_BN_RELU_(VF, VI, v2);                                                                             \
    POOL_BN_RELU_(VF, VI, v3);                                                                             \
    VI zero = {0}, pick = zero; /* the window's first element, then the others in order */                \
    POOL_TAKE_(VI, &best, &pick, v1, zero + 1);                                                            \
    POOL_TAKE_(VI, &best, &pick, v2, zero + w);                                                            \
    POOL_TAKE_(VI, &best, &pick, v3, zero + (w + 1));                                                      \
    VI at = pick + LANES + (base + 2 * (int32_t)ow);                                                       \
    memcpy(out + ow, &best, sizeof best);                                                                  \
    memcpy(idx + ow, &at, sizeof at);                                                                      \
  }

#define EVEN8_ ((v8i_){0, 2, 4, 6, 8, 10, 12, 14})
#define ODD8_ ((v8i_){1, 3, 5, 7, 9, 11, 13, 15})
#define EVEN4_ ((v4i_){0, 2, 4, 6})
#define ODD4_ ((v4i_){1, 3, 5, 7})
#define LANES8_ ((v8i_){0, 2, 4, 6, 8, 10, 12, 14})
#define LANES4_ ((v4i_){0, 2, 4, 6})
POOL2X2_VEC_(8, v8f_, v8i_, EVEN8_, ODD8_, LANES8_)
POOL2X2_VEC_(4, v4f_, v4i_, EVEN4_, ODD4_, LANES4_)

/* One plane's 2x2 pooling, a vector of windows at a time; with bn, of
 * relu(x * alpha + beta) (always inlined: bn is a constant at each call). */
static inline __attribute__((always_inline)) void pool2x2_plane_(const float* plane, float* out, int32_t* idx,
                                                                 int64_t OH, int64_t OW, int64_t W, int bn,
                                                                 float alpha, float beta) {
  int32_t w = (int32_t)W;
  for (int64_t oh = 0; oh < OH; oh++) {
    const float* r0 = plane + 2 * oh * W;
    const float* r1 = r0 + W;
    float* o = out + oh * OW;
    int32_t* at = idx + oh * OW;
    int32_t base = (int32_t)(2 * oh * W);
    if (OW >= 8) {
      for (int64_t ow = 0;; ow += 8) {
        if (ow > OW - 8) ow = OW - 8; /* the last vector ends at the row's end */
        pool2x2_fwd_8_(r0, r1, o, at, base, w, ow, bn, alpha, beta);
        if (ow == OW - 8) break;
      }
    } else if (OW >= 4) {
      pool2x2_fwd_4_(r0, r1, o, at, base, w, 0, bn, alpha, beta);
      pool2x2_fwd_4_(r0, r1, o, at, base, w, OW - 4, bn, alpha, beta);
    } else {
      for (int64_t ow = 0; ow < OW; ow++) {
        if (bn) {
          o[ow] = dt_bn_relu_maxpool2x2(plane, W, oh, ow, alpha, beta, &at[ow]);
          continue;
        }
        float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
        int32_t off[4] = {0, 1, w, w + 1};
        float best = v[0];
        int32_t pick = 0;
        for (int k = 1; k < 4; k++) {
          int take = dt_maxpool_takes(v[k], best);
          best = take ? v[k] : best;
          pick = take ? off[k] : pick;
        }
        o[ow] = best;
        at[ow] = base + 2 * (int32_t)ow + pick;
      }
    }
  }
}

DT_VEC_CLONES static void maxpool_2x2_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t p = p0; p < p1; p++)
    pool2x2_plane_(c->inp + p * hw, c->out + p * ohw, c->idx + p * ohw, g->OH, g->OW, g->W, 0, 0.0f, 0.0f);
}

typedef struct {
  int64_t C, H, W;
  float* out;
  int32_t* idx;
  const float *inp, *mean, *rstd, *weight, *bias;
} bn_pool_ctx_;

/* Work item = plane (n, c): batch norm's affine form of channel c, then the pooling. */
DT_VEC_CLONES static void bn_relu_pool_range_(void* vctx, int64_t p0, int64_t p1) {
  const bn_pool_ctx_* c = vctx;
  int64_t OH = c->H / 2, OW = c->W / 2, hw = c->H * c->W, ohw = OH * OW;
  for (int64_t p = p0; p < p1; p++) {
    int64_t ch = p % c->C;
    float alpha, beta;
    dt_bn_affine(c->mean[ch], c->rstd[ch], c->weight ? c->weight[ch] : 1.0f, c->bias ? c->bias[ch] : 0.0f, &alpha,
                 &beta);
    pool2x2_plane_(c->inp + p * hw, c->out + p * ohw, c->idx + p * ohw, OH, OW, c->W, 1, alpha, beta);
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
 * its window's maximum (the bits of zeroing then adding), 0 elsewhere. A
 * vector of windows at a time, their two rows interleaved back. */
#define POOL2X2_BWD_VEC_(N, VF, VI, LO, HI, LANES)                                                         \
  static inline __attribute__((always_inline)) void pool2x2_bwd_##N##_(                                    \
      float* r0, float* r1, const float* d, const int32_t* idx, int32_t base, int32_t w, int64_t ow) {     \
    VF dv, zero = {0};                                                                                      \
    VI at;                                                                                                  \
    memcpy(&dv, d + ow, sizeof dv);                                                                         \
    memcpy(&at, idx + ow, sizeof at);                                                                       \
    at = at - LANES - (base + 2 * (int32_t)ow); /* 0, 1, w or w + 1 within the window */                   \
    VF v = zero + dv;                                                                                       \
    VI vi, q[4];                                                                                            \
    memcpy(&vi, &v, sizeof vi);                                                                             \
    q[0] = (at == 0) & vi;                                                                                  \
    q[1] = (at == 1) & vi;                                                                                  \
    q[2] = (at == w) & vi;                                                                                  \
    q[3] = (at == w + 1) & vi;                                                                              \
    VI row0a = __builtin_shuffle(q[0], q[1], LO), row0b = __builtin_shuffle(q[0], q[1], HI);              \
    VI row1a = __builtin_shuffle(q[2], q[3], LO), row1b = __builtin_shuffle(q[2], q[3], HI);              \
    memcpy(r0 + 2 * ow, &row0a, sizeof row0a);                                                              \
    memcpy(r0 + 2 * ow + N, &row0b, sizeof row0b);                                                          \
    memcpy(r1 + 2 * ow, &row1a, sizeof row1a);                                                              \
    memcpy(r1 + 2 * ow + N, &row1b, sizeof row1b);                                                          \
  }

#define LO8_ ((v8i_){0, 8, 1, 9, 2, 10, 3, 11})
#define HI8_ ((v8i_){4, 12, 5, 13, 6, 14, 7, 15})
#define LO4_ ((v4i_){0, 4, 1, 5})
#define HI4_ ((v4i_){2, 6, 3, 7})
POOL2X2_BWD_VEC_(8, v8f_, v8i_, LO8_, HI8_, LANES8_)
POOL2X2_BWD_VEC_(4, v4f_, v4i_, LO4_, HI4_, LANES4_)

DT_VEC_CLONES static void maxpool_bwd_2x2_range_(void* vctx, int64_t p0, int64_t p1) {
  const pool_ctx_* c = vctx;
  const dt_pool_geom* g = &c->g;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW, OW = g->OW;
  int32_t w = (int32_t)g->W;
  for (int64_t p = p0; p < p1; p++) {
    float* dplane = c->out + p * hw;
    const float* d = c->inp + p * ohw;
    const int32_t* idx = c->cidx + p * ohw;
    for (int64_t oh = 0; oh < g->OH; oh++) {
      float* r0 = dplane + 2 * oh * g->W;
      float* r1 = r0 + g->W;
      int32_t base = (int32_t)(2 * oh * g->W);
      const float* drow = d + oh * OW;
      const int32_t* irow = idx + oh * OW;
      if (OW >= 8) {
        for (int64_t ow = 0;; ow += 8) {
          if (ow > OW - 8) ow = OW - 8; /* the last vector ends at the row's end (rewrites the same values) */
          pool2x2_bwd_8_(r0, r1, drow, irow, base, w, ow);
          if (ow == OW - 8) break;
        }
      } else if (OW >= 4) {
        pool2x2_bwd_4_(r0, r1, drow, irow, base, w, 0);
        pool2x2_bwd_4_(r0, r1, drow, irow, base, w, OW - 4);
      } else {
        for (int64_t ow = 0; ow < OW; ow++) {
          int32_t at = irow[ow] - base - 2 * (int32_t)ow;
          float v = 0.0f + drow[ow];
          r0[2 * ow] = at == 0 ? v : 0.0f;
          r0[2 * ow + 1] = at == 1 ? v : 0.0f;
          r1[2 * ow] = at == w ? v : 0.0f;
          r1[2 * ow + 1] = at == w + 1 ? v : 0.0f;
        }
      }
      for (int64_t iw = 2 * OW; iw < g->W; iw++) r0[iw] = r1[iw] = 0.0f; /* an odd last column */
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

DT_EXPORT dt_status dt_bn_relu_maxpool2x2_fwd(float* out, int32_t* idx, const float* inp, const float* mean,
                                              const float* rstd, const float* weight, const float* bias, int64_t N,
                                              int64_t C, int64_t H, int64_t W, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_bn_relu_maxpool2x2_fwd(out, idx, inp, mean, rstd, N, C, H, W));
  if (N * C * (H / 2) * (W / 2) == 0) return DT_OK;
  bn_pool_ctx_ c = {C, H, W, out, idx, inp, mean, rstd, weight, bias};
  int64_t per = H * W + (H / 2) * (W / 2);
  dt_parallel_for_(N * C, per >= POOL_GRAIN_ELEMS ? 1 : POOL_GRAIN_ELEMS / per, bn_relu_pool_range_, &c);
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
