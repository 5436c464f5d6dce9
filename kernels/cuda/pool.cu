/* pool.cu — CUDA launches of 2-D max, average and adaptive-average pooling,
 * forward and backward, with the CPU library's bits. A thread per output
 * runs pool.h's window body; a backward gives each input element a thread
 * that adds, in output order (the CPU's), the gradients of the outputs whose
 * windows hold it — for max pooling, those whose saved index names it. The
 * saved indices are checked on the device (each in [-1, H*W)); the first bad
 * one is recorded for dt_deferred_error in the CPU's words, and an index
 * outside its window is never followed (a forward's never is). */
#include "cuda_internal.cuh"
#include "ops_checks.h"
#include "pool.h"
#include "bn_relu_pool.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_maxpool_fwd_k_(float* out, int32_t* idx, const float* inp, dt_pool_geom g, int64_t total) {
  int64_t ohw = g.OH * g.OW;
  DT_GRID_STRIDE(k, total) {
    int64_t p = k / ohw, j = k % ohw;
    out[k] = dt_maxpool_window(inp + p * g.H * g.W, &g, j / g.OW, j % g.OW, &idx[k]);
  }
}

/* Each output of batch norm, ReLU and 2x2 max pooling (bn_relu_pool.h). */
__global__ void dt_bn_relu_pool_k_(float* out, int32_t* idx, const float* inp, const float* mean, const float* rstd,
                                   const float* weight, const float* bias, int64_t C, int64_t H, int64_t W,
                                   int64_t total) {
  int64_t OH = H / 2, OW = W / 2, ohw = OH * OW;
  DT_GRID_STRIDE(k, total) {
    int64_t p = k / ohw, j = k % ohw, ch = p % C;
    float alpha, beta;
    dt_bn_affine(mean[ch], rstd[ch], weight ? weight[ch] : 1.0f, bias ? bias[ch] : 0.0f, &alpha, &beta);
    out[k] = dt_bn_relu_maxpool2x2(inp + p * H * W, W, j / OW, j % OW, alpha, beta, &idx[k]);
  }
}

/* Marks every saved index outside [-1, H*W). */
__global__ void dt_maxpool_check_k_(const int32_t* idx, int64_t n, int64_t hw, unsigned long long* first_bad) {
  DT_GRID_STRIDE(k, n) {
    if (idx[k] < -1 || idx[k] >= hw) dt_mark_bad_(first_bad, k);
  }
}

/* The outputs whose window may hold input row ih, in increasing order: tap ki
 * of output oh reads row oh * SH - PH + ki * DH, so ki from KH - 1 down to 0
 * gives each candidate oh once, increasing; *oh is -1 for a tap that lands
 * between outputs or outside them. */
__device__ __forceinline__ int64_t dt_pool_out_of_tap_(int64_t i, int64_t P, int64_t k, int64_t D, int64_t S,
                                                       int64_t O) {
  int64_t t = i + P - k * D;
  return (t < 0 || t % S != 0 || t / S >= O) ? -1 : t / S;
}

/* Each input element (p, ih, iw): 0, then every output's gradient whose saved
 * index is this element, in output order. */
__global__ void dt_maxpool_bwd_k_(float* dinp, const float* dout, const int32_t* idx, dt_pool_geom g, int64_t total) {
  int64_t hw = g.H * g.W, ohw = g.OH * g.OW;
  DT_GRID_STRIDE(e, total) {
    int64_t p = e / hw, ih = (e % hw) / g.W, iw = e % g.W;
    int32_t self = (int32_t)(e % hw);
    float acc = 0.0f;
    for (int64_t ki = g.KH - 1; ki >= 0; ki--) {
      int64_t oh = dt_pool_out_of_tap_(ih, g.PH, ki, g.DH, g.SH, g.OH);
      if (oh < 0) continue;
      for (int64_t kj = g.KW - 1; kj >= 0; kj--) {
        int64_t ow = dt_pool_out_of_tap_(iw, g.PW, kj, g.DW, g.SW, g.OW);
        if (ow < 0) continue;
        int64_t k = p * ohw + oh * g.OW + ow;
        if (idx[k] == self) acc += dout[k];
      }
    }
    dinp[e] = acc;
  }
}

__global__ void dt_avgpool_fwd_k_(float* out, const float* inp, dt_pool_geom g, int count_include_pad,
                                  int64_t divisor_override, int64_t total) {
  int64_t ohw = g.OH * g.OW;
  DT_GRID_STRIDE(k, total) {
    int64_t p = k / ohw, j = k % ohw;
    out[k] = dt_avgpool_value(inp + p * g.H * g.W, &g, j / g.OW, j % g.OW, count_include_pad, divisor_override);
  }
}

/* Each input element: 0, then dout / divisor of every output whose clipped
 * window holds it, in output order (windows start at oh * SH - PH and span
 * at most KH rows, so oh runs from (ih + PH - KH + 1) / SH up to (ih + PH) / SH). */
__global__ void dt_avgpool_bwd_k_(float* dinp, const float* dout, dt_pool_geom g, int count_include_pad,
                                  int64_t divisor_override, int64_t total) {
  int64_t hw = g.H * g.W, ohw = g.OH * g.OW;
  DT_GRID_STRIDE(e, total) {
    int64_t p = e / hw, ih = (e % hw) / g.W, iw = e % g.W;
    int64_t oh1 = (ih + g.PH) / g.SH, ow1 = (iw + g.PW) / g.SW;
    int64_t oh0 = ih + g.PH - g.KH + 1 > 0 ? (ih + g.PH - g.KH + 1) / g.SH : 0;
    int64_t ow0 = iw + g.PW - g.KW + 1 > 0 ? (iw + g.PW - g.KW + 1) / g.SW : 0;
    oh1 = oh1 < g.OH - 1 ? oh1 : g.OH - 1;
    ow1 = ow1 < g.OW - 1 ? ow1 : g.OW - 1;
    float acc = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; oh++) {
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        int64_t h0, h1, w0, w1, div;
        dt_avgpool_window(&g, oh, ow, count_include_pad, divisor_override, &h0, &h1, &w0, &w1, &div);
        if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
        acc += dout[p * ohw + oh * g.OW + ow] / (float)div;
      }
    }
    dinp[e] = acc;
  }
}

__global__ void dt_adaptive_fwd_k_(float* out, const float* inp, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                   int64_t total) {
  DT_GRID_STRIDE(k, total) {
    int64_t p = k / (OH * OW), j = k % (OH * OW);
    out[k] = dt_adaptive_avgpool_value(inp + p * H * W, H, W, OH, OW, j / OW, j % OW);
  }
}

/* The adaptive windows along one axis that hold i: from o = floor(i * O / L)
 * (the first whose end passes i) while they start at or before i. */
__device__ __forceinline__ int64_t dt_adaptive_first_(int64_t i, int64_t O, int64_t L) { return i * O / L; }

/* Each input element: 0, then dout / kh / kw of every output whose window
 * holds it, in output order. */
__global__ void dt_adaptive_bwd_k_(float* dinp, const float* dout, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                   int64_t total) {
  DT_GRID_STRIDE(e, total) {
    int64_t p = e / (H * W), ih = (e % (H * W)) / W, iw = e % W;
    float acc = 0.0f;
    for (int64_t oh = dt_adaptive_first_(ih, OH, H); oh < OH && dt_adaptive_start(oh, OH, H) <= ih; oh++) {
      int64_t h0 = dt_adaptive_start(oh, OH, H), h1 = dt_adaptive_end(oh, OH, H);
      if (ih >= h1) continue;
      for (int64_t ow = dt_adaptive_first_(iw, OW, W); ow < OW && dt_adaptive_start(ow, OW, W) <= iw; ow++) {
        int64_t w0 = dt_adaptive_start(ow, OW, W), w1 = dt_adaptive_end(ow, OW, W);
        if (iw >= w1) continue;
        acc += dout[(p * OH + oh) * OW + ow] / (float)(h1 - h0) / (float)(w1 - w0);
      }
    }
    dinp[e] = acc;
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_maxpool2d_fwd(float* out, int32_t* idx, const float* inp, const int64_t* geom, void* stream) {
  dt_pool_geom g;
  DT_TRY_(dt_check_maxpool2d_fwd(out, idx, inp, geom, &g));
  int64_t total = g.P * g.OH * g.OW;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_maxpool_fwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, out, idx, inp, g, total);
  DT_CHECK_LAUNCH(s, "dt_maxpool2d_fwd");
  return DT_OK;
}

static dt_status dt_maxpool_bwd_run_(float* dinp, const float* dout, const int32_t* idx, const dt_pool_geom* g,
                                     unsigned long long* first_bad, cudaStream_t s) {
  int64_t n = g->P * g->OH * g->OW, total = g->P * g->H * g->W;
  if (n > 0) {
    DT_LAUNCH(dt_maxpool_check_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, idx, n, g->H * g->W, first_bad);
    DT_CHECK_LAUNCH(s, "dt_maxpool2d_bwd (indices)");
  }
  DT_LAUNCH(dt_maxpool_bwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, idx, *g, total);
  DT_CHECK_LAUNCH(s, "dt_maxpool2d_bwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_maxpool2d_bwd(float* dinp, const float* dout, const int32_t* idx, const int64_t* geom,
                                     void* stream) {
  dt_pool_geom g;
  DT_TRY_(dt_check_maxpool2d_bwd(dinp, dout, idx, geom, &g));
  if (g.P * g.H * g.W == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  unsigned long long* first_bad = NULL;
  DT_TRY_(dt_bad_begin_(&first_bad, s, "dt_maxpool2d_bwd"));
  dt_status st = dt_maxpool_bwd_run_(dinp, dout, idx, &g, first_bad, s);
  if (st != DT_OK) {
    dt_scratch_free_(first_bad, s);
    return st;
  }
  return dt_bad_end_(first_bad, DT_DATA_MAXPOOL2D_BWD, idx, DT_I32, g.H * g.W, 0, s);
}

DT_EXPORT dt_status dt_bn_relu_maxpool2x2_fwd(float* out, int32_t* idx, const float* inp, const float* mean,
                                              const float* rstd, const float* weight, const float* bias, int64_t N,
                                              int64_t C, int64_t H, int64_t W, void* stream) {
  DT_TRY_(dt_check_bn_relu_maxpool2x2_fwd(out, idx, inp, mean, rstd, N, C, H, W));
  int64_t total = N * C * (H / 2) * (W / 2);
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_bn_relu_pool_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, out, idx, inp, mean, rstd, weight, bias,
            C, H, W, total);
  DT_CHECK_LAUNCH(s, "dt_bn_relu_maxpool2x2_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_avgpool2d_fwd(float* out, const float* inp, const int64_t* geom, int32_t count_include_pad,
                                     int64_t divisor_override, void* stream) {
  dt_pool_geom g;
  DT_TRY_(dt_check_avgpool2d_fwd(out, inp, geom, divisor_override, &g));
  int64_t total = g.P * g.OH * g.OW;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_avgpool_fwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, out, inp, g, count_include_pad != 0,
            divisor_override, total);
  DT_CHECK_LAUNCH(s, "dt_avgpool2d_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_avgpool2d_bwd(float* dinp, const float* dout, const int64_t* geom, int32_t count_include_pad,
                                     int64_t divisor_override, void* stream) {
  dt_pool_geom g;
  DT_TRY_(dt_check_avgpool2d_bwd(dinp, dout, geom, divisor_override, &g));
  int64_t total = g.P * g.H * g.W;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_avgpool_bwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, g, count_include_pad != 0,
            divisor_override, total);
  DT_CHECK_LAUNCH(s, "dt_avgpool2d_bwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_adaptive_avgpool2d_fwd(float* out, const float* inp, int64_t P, int64_t H, int64_t W,
                                              int64_t OH, int64_t OW, void* stream) {
  DT_TRY_(dt_check_adaptive_avgpool2d_fwd(out, inp, P, H, W, OH, OW));
  if (P == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int64_t total = P * OH * OW;
  DT_LAUNCH(dt_adaptive_fwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, out, inp, H, W, OH, OW, total);
  DT_CHECK_LAUNCH(s, "dt_adaptive_avgpool2d_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_adaptive_avgpool2d_bwd(float* dinp, const float* dout, int64_t P, int64_t H, int64_t W,
                                              int64_t OH, int64_t OW, void* stream) {
  DT_TRY_(dt_check_adaptive_avgpool2d_bwd(dinp, dout, P, H, W, OH, OW));
  if (P == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int64_t total = P * H * W;
  DT_LAUNCH(dt_adaptive_bwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, H, W, OH, OW, total);
  DT_CHECK_LAUNCH(s, "dt_adaptive_avgpool2d_bwd");
  return DT_OK;
}
