/* pool.h — 2-D pooling over image planes (H x W), one output element at a
 * time, with torch 1.13's CPU rules: the max window skips padding (which
 * counts as -inf) and a NaN always takes over; the average divides by the
 * window including padding unless told otherwise (or by a fixed divisor);
 * adaptive windows are [floor(o*H/OH), ceil((o+1)*H/OH)). Backwards add each
 * output's gradient to the inputs it came from. */
#pragma once
#include <math.h>
#include "dt_common.h"

/* The geometry of one pooling, as the i64[13] array the ABI passes: planes
 * P (= N * C), H, W, kernel KH, KW, stride SH, SW, padding PH, PW, dilation
 * DH, DW (max pooling only; 1 for average), output OH, OW. */
typedef struct {
  int64_t P, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW;
} dt_pool_geom;

/* Whether a window element v replaces the best so far: a larger value, or
 * any NaN (torch's `val > maxval || isnan(val)`: the last NaN wins). */
DT_HD int dt_maxpool_takes(float v, float best) { return (v > best) | (v != v); }

/* Max over the window of output (oh, ow) of one plane; *at gets the index
 * (ih * W + iw) of the element taken, -1 for a window wholly in the padding. */
DT_HD float dt_maxpool_window(const float* plane, const dt_pool_geom* g, int64_t oh, int64_t ow, int32_t* at) {
  int64_t ih0 = oh * g->SH - g->PH, iw0 = ow * g->SW - g->PW;
  int64_t ih1 = ih0 + (g->KH - 1) * g->DH + 1, iw1 = iw0 + (g->KW - 1) * g->DW + 1;
  ih1 = ih1 < g->H ? ih1 : g->H;
  iw1 = iw1 < g->W ? iw1 : g->W;
  while (ih0 < 0) ih0 += g->DH;
  while (iw0 < 0) iw0 += g->DW;
  float best = -INFINITY;
  int32_t idx = -1;
  for (int64_t ih = ih0; ih < ih1; ih += g->DH) {
    for (int64_t iw = iw0; iw < iw1; iw += g->DW) {
      float v = plane[ih * g->W + iw];
      int take = dt_maxpool_takes(v, best); /* selects, not branches: data-dependent */
      best = take ? v : best;
      idx = take ? (int32_t)(ih * g->W + iw) : idx;
    }
  }
  if (idx < 0 && ih0 < ih1 && iw0 < iw1) idx = (int32_t)(ih0 * g->W + iw0); /* all -inf: torch's first element */
  *at = idx;
  return best;
}

/* The window of output (oh, ow) of an average pool, clipped to the input
 * ([*h0, *h1) x [*w0, *w1)), and the divisor of its sum. */
DT_HD void dt_avgpool_window(const dt_pool_geom* g, int64_t oh, int64_t ow, int count_include_pad,
                             int64_t divisor_override, int64_t* h0, int64_t* h1, int64_t* w0, int64_t* w1,
                             int64_t* divisor) {
  int64_t ih0 = oh * g->SH - g->PH, iw0 = ow * g->SW - g->PW;
  int64_t ih1 = ih0 + g->KH < g->H + g->PH ? ih0 + g->KH : g->H + g->PH;
  int64_t iw1 = iw0 + g->KW < g->W + g->PW ? iw0 + g->KW : g->W + g->PW;
  int64_t pool_size = (ih1 - ih0) * (iw1 - iw0);
  ih0 = ih0 > 0 ? ih0 : 0;
  iw0 = iw0 > 0 ? iw0 : 0;
  ih1 = ih1 < g->H ? ih1 : g->H;
  iw1 = iw1 < g->W ? iw1 : g->W;
  *h0 = ih0;
  *h1 = ih1;
  *w0 = iw0;
  *w1 = iw1;
  *divisor = divisor_override > 0 ? divisor_override : count_include_pad ? pool_size : (ih1 - ih0) * (iw1 - iw0);
}

/* Average of the window of output (oh, ow): the sum in window order, then one
 * division; 0 for a window wholly in the padding. */
DT_HD float dt_avgpool_value(const float* plane, const dt_pool_geom* g, int64_t oh, int64_t ow,
                             int count_include_pad, int64_t divisor_override) {
  int64_t h0, h1, w0, w1, div;
  dt_avgpool_window(g, oh, ow, count_include_pad, divisor_override, &h0, &h1, &w0, &w1, &div);
  if (h0 >= h1 || w0 >= w1) return 0.0f;
  float sum = 0.0f;
  for (int64_t ih = h0; ih < h1; ih++)
    for (int64_t iw = w0; iw < w1; iw++) sum += plane[ih * g->W + iw];
  return sum / (float)div;
}

/* Adaptive window bounds along one axis: [start, end) of output o of n over
 * an input of size len, as torch's start_index/end_index. */
DT_HD int64_t dt_adaptive_start(int64_t o, int64_t n, int64_t len) { return (o / n) * len + ((o % n) * len) / n; }
DT_HD int64_t dt_adaptive_end(int64_t o, int64_t n, int64_t len) { return 1 + ((o + 1) * len - 1) / n; }

/* Adaptive average of output (oh, ow): sum / kh / kw as torch divides it. */
DT_HD float dt_adaptive_avgpool_value(const float* plane, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t oh,
                                      int64_t ow) {
  int64_t h0 = dt_adaptive_start(oh, OH, H), h1 = dt_adaptive_end(oh, OH, H);
  int64_t w0 = dt_adaptive_start(ow, OW, W), w1 = dt_adaptive_end(ow, OW, W);
  float sum = 0.0f;
  for (int64_t ih = h0; ih < h1; ih++)
    for (int64_t iw = w0; iw < w1; iw++) sum += plane[ih * W + iw];
  return sum / (float)(h1 - h0) / (float)(w1 - w0);
}
