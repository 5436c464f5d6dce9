/* conv.cu — CUDA launches of dt_im2col and dt_col2im (the data movement
 * around a convolution's GEMM, which is dt_gemm) and of the direct
 * convolution for few taps per output, forward and both gradients. A thread
 * per element runs conv.h's per-element body, which adds in the order the
 * CPU loops do, so results are the CPU's bits: col2im and the input
 * gradients sum taps in (co,) ki, kj order; the forward reads a zero-padded
 * copy of the input (every tap a product, as on the CPU); the weight gradient
 * keeps each tap's per-image share (dt_conv_tap_plane, the bias's
 * dt_sum_f64) and adds them in double in image order. */
#include "conv.h"
#include "cuda_internal.cuh"
#include "ops_checks.h"

/* Most column-matrix floats the weight gradient materialises at once. */
#define DIRECT_COL_FLOATS ((int64_t)1 << 24)

/* ---- kernels -------------------------------------------------------------------- */

/* col (C*KH*KW, ld = N*OH*OW) from the input (N, C, H, W); `total` = its size. */
__global__ void dt_im2col_k_(float* col, const float* inp, dt_conv_geom g, int64_t total) {
  int64_t ohw = g.OH * g.OW, ld = g.N * ohw;
  DT_GRID_STRIDE(e, total) {
    int64_t r = e / ld, q = e % ld;
    int64_t n = q / ohw, j = q % ohw;
    int64_t ch = r / (g.KH * g.KW), ki = (r / g.KW) % g.KH, kj = r % g.KW;
    col[e] = dt_im2col_value(inp + (n * g.C + ch) * g.H * g.W, &g, ki, kj, j / g.OW, j % g.OW);
  }
}

/* Each input-gradient element (n, c, ih, iw) from the column matrix. */
__global__ void dt_col2im_k_(float* dinp, const float* col, dt_conv_geom g, int64_t total) {
  int64_t ohw = g.OH * g.OW, ld = g.N * ohw, hw = g.H * g.W;
  DT_GRID_STRIDE(e, total) {
    int64_t n = e / (g.C * hw), ch = (e / hw) % g.C, ih = (e % hw) / g.W, iw = e % g.W;
    dinp[e] = dt_col2im_value(col + ch * g.KH * g.KW * ld + n * ohw, ld, &g, ih, iw);
  }
}

/* The zero-padded copy (N, C, Hp, Wp) of the input that the direct kernels read. */
__global__ void dt_conv_pad_k_(float* pad, const float* inp, dt_conv_geom g, int64_t total) {
  int64_t Hp = dt_conv_padded_h(&g), Wp = dt_conv_padded_w(&g);
  DT_GRID_STRIDE(e, total) {
    int64_t p = e / (Hp * Wp), y = (e / Wp) % Hp - g.PH, x = e % Wp - g.PW;
    pad[e] = (y >= 0 && y < g.H && x >= 0 && x < g.W) ? inp[(p * g.H + y) * g.W + x] : 0.0f;
  }
}

/* Each output (n, co, oh, ow) of a direct convolution. */
__global__ void dt_conv_direct_fwd_k_(float* out, const float* pad, const float* weight, const float* bias,
                                      dt_conv_geom g, int64_t Cout, int64_t groups, int64_t total) {
  int64_t ohw = g.OH * g.OW, taps = g.C / groups * g.KH * g.KW;
  int64_t image = g.C * dt_conv_padded_h(&g) * dt_conv_padded_w(&g);
  DT_GRID_STRIDE(e, total) {
    int64_t n = e / (Cout * ohw), co = (e / ohw) % Cout, j = e % ohw;
    out[e] = dt_conv_direct_value(pad + n * image, weight + co * taps, bias ? bias[co] : 0.0f, &g, co, Cout, groups,
                                  j / g.OW, j % g.OW);
  }
}

/* Weight gradient, step 1, over images [n0, n0 + cnt) whose column matrix
 * is col (ld = cnt * OH * OW): item (co, t, n) with t < taps is tap t's share
 * of image n0 + n (dt_conv_tap_plane), t = taps the bias's (dt_sum_f64 of
 * the dout plane); kept at part[(co * (taps + 1) + t) * N + n0 + n]. */
__global__ void dt_conv_direct_shares_k_(double* part, const float* dout, const float* col, dt_conv_geom g,
                                         int64_t Cout, int64_t groups, int64_t n0, int64_t cnt, int64_t N) {
  int64_t ohw = g.OH * g.OW, ld = cnt * ohw, Cg = g.C / groups, taps = Cg * g.KH * g.KW;
  DT_GRID_STRIDE(e, Cout * (taps + 1) * cnt) {
    int64_t n = e % cnt, t = (e / cnt) % (taps + 1), co = e / (cnt * (taps + 1));
    const float* d = dout + ((n0 + n) * Cout + co) * ohw;
    double share;
    if (t == taps) {
      share = dt_sum_f64(d, ohw);
    } else {
      int64_t row = dt_conv_in_channel(co, 0, Cout, Cg, groups) * g.KH * g.KW + t;
      share = (double)dt_conv_tap_plane(d, col + row * ld + n * ohw, ohw);
    }
    part[(co * (taps + 1) + t) * N + n0 + n] = share;
  }
}

/* Step 2: each tap's (and the bias's) shares added in image order, from 0. */
__global__ void dt_conv_direct_fold_k_(float* dweight, float* dbias, const double* part, int64_t Cout, int64_t taps,
                                       int64_t N) {
  DT_GRID_STRIDE(e, Cout * (taps + 1)) {
    double tot = 0.0;
    for (int64_t n = 0; n < N; n++) tot += part[e * N + n];
    int64_t co = e / (taps + 1), t = e % (taps + 1);
    if (t < taps) dweight[co * taps + t] = (float)tot;
    else if (dbias) dbias[co] = (float)tot;
  }
}

/* Each input-gradient element (n, cin, ih, iw) of a direct convolution. */
__global__ void dt_conv_direct_dx_k_(float* dinp, const float* dout, const float* weight, dt_conv_geom g, int64_t Cout,
                                     int64_t groups, int64_t total) {
  int64_t hw = g.H * g.W, ohw = g.OH * g.OW;
  DT_GRID_STRIDE(e, total) {
    int64_t n = e / (g.C * hw), cin = (e / hw) % g.C, ih = (e % hw) / g.W, iw = e % g.W;
    dinp[e] = dt_conv_direct_dx_value(dout + n * Cout * ohw, weight, &g, Cout, groups, cin, ih, iw);
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_im2col(float* col, const float* inp, const int64_t* geom, void* stream) {
  dt_conv_geom g;
  DT_TRY_(dt_check_im2col(col, inp, geom, &g));
  int64_t total = g.C * g.KH * g.KW * g.N * g.OH * g.OW;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_im2col_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, col, inp, g, total);
  DT_CHECK_LAUNCH(s, "dt_im2col");
  return DT_OK;
}

DT_EXPORT dt_status dt_col2im(float* dinp, const float* col, const int64_t* geom, void* stream) {
  dt_conv_geom g;
  DT_TRY_(dt_check_col2im(dinp, col, geom, &g));
  int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_col2im_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dinp, col, g, total);
  DT_CHECK_LAUNCH(s, "dt_col2im");
  return DT_OK;
}

static dt_status dt_direct_fwd_run_(float* out, const float* inp, const float* weight, const float* bias,
                                    const dt_conv_geom* g, int64_t Cout, int64_t groups, float* pad, cudaStream_t s) {
  int64_t padded = g->N * g->C * dt_conv_padded_h(g) * dt_conv_padded_w(g);
  if (padded > 0) {
    DT_LAUNCH(dt_conv_pad_k_, dt_grid_for_(padded, DT_BLOCK), DT_BLOCK, 0, s, pad, inp, *g, padded);
    DT_CHECK_LAUNCH(s, "dt_conv2d_direct_fwd (padding)");
  }
  int64_t total = g->N * Cout * g->OH * g->OW;
  DT_LAUNCH(dt_conv_direct_fwd_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, out, pad, weight, bias, *g, Cout,
            groups, total);
  DT_CHECK_LAUNCH(s, "dt_conv2d_direct_fwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_conv2d_direct_fwd(float* out, const float* inp, const float* weight, const float* bias,
                                         const int64_t* geom, int64_t Cout, int64_t groups, void* stream) {
  dt_conv_geom g;
  DT_TRY_(dt_check_conv2d_direct_fwd(out, inp, weight, geom, Cout, groups, &g));
  if (g.N * Cout * g.OH * g.OW == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  float* pad = NULL;
  size_t bytes = (size_t)(g.N * g.C * dt_conv_padded_h(&g) * dt_conv_padded_w(&g)) * sizeof(float);
  DT_TRY_(dt_scratch_alloc_((void**)&pad, bytes, s, "dt_conv2d_direct_fwd"));
  dt_status st = dt_direct_fwd_run_(out, inp, weight, bias, &g, Cout, groups, pad, s);
  dt_status freed = dt_scratch_free_(pad, s);
  return st != DT_OK ? st : freed;
}

/* The weight gradient's steps over image chunks whose column matrix fits col. */
static dt_status dt_direct_bwd_weight_run_(float* dweight, float* dbias, const float* dout, const float* inp,
                                           const dt_conv_geom* whole, int64_t Cout, int64_t groups, int64_t chunk,
                                           float* col, double* part, cudaStream_t s) {
  int64_t taps = whole->C / groups * whole->KH * whole->KW, N = whole->N;
  int64_t rows = whole->C * whole->KH * whole->KW, ohw = whole->OH * whole->OW;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    dt_conv_geom g = *whole;
    g.N = N - n0 < chunk ? N - n0 : chunk;
    int64_t cols = rows * g.N * ohw;
    if (cols > 0) {
      DT_LAUNCH(dt_im2col_k_, dt_grid_for_(cols, DT_BLOCK), DT_BLOCK, 0, s, col, inp + n0 * g.C * g.H * g.W, g, cols);
      DT_CHECK_LAUNCH(s, "dt_conv2d_direct_bwd_weight (columns)");
    }
    int64_t items = Cout * (taps + 1) * g.N;
    DT_LAUNCH(dt_conv_direct_shares_k_, dt_grid_for_(items, DT_BLOCK), DT_BLOCK, 0, s, part, dout, col, g, Cout,
              groups, n0, g.N, N);
    DT_CHECK_LAUNCH(s, "dt_conv2d_direct_bwd_weight (shares)");
  }
  int64_t sums = Cout * (taps + 1);
  DT_LAUNCH(dt_conv_direct_fold_k_, dt_grid_for_(sums, DT_BLOCK), DT_BLOCK, 0, s, dweight, dbias, part, Cout, taps, N);
  DT_CHECK_LAUNCH(s, "dt_conv2d_direct_bwd_weight (sums)");
  return DT_OK;
}

DT_EXPORT dt_status dt_conv2d_direct_bwd_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                                                const int64_t* geom, int64_t Cout, int64_t groups, void* stream) {
  dt_conv_geom g;
  DT_TRY_(dt_check_conv2d_direct_bwd_weight(dweight, dout, inp, geom, Cout, groups, &g));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int64_t taps = g.C / groups * g.KH * g.KW, rows = g.C * g.KH * g.KW, per_image = rows * g.OH * g.OW;
  int64_t chunk = per_image > 0 ? DIRECT_COL_FLOATS / per_image : g.N;
  chunk = chunk < 1 ? 1 : (chunk > g.N ? g.N : chunk);
  float* col = NULL;
  double* part = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&col, (size_t)(chunk * per_image) * sizeof(float), s,
                            "dt_conv2d_direct_bwd_weight"));
  dt_status st = dt_scratch_alloc_((void**)&part, (size_t)(Cout * (taps + 1) * g.N) * sizeof(double), s,
                                   "dt_conv2d_direct_bwd_weight");
  if (st == DT_OK) st = dt_direct_bwd_weight_run_(dweight, dbias, dout, inp, &g, Cout, groups, chunk, col, part, s);
  dt_status freed = dt_scratch_free_(part, s), freed_col = dt_scratch_free_(col, s);
  return st != DT_OK ? st : freed != DT_OK ? freed : freed_col;
}

DT_EXPORT dt_status dt_conv2d_direct_bwd_input(float* dinp, const float* dout, const float* weight, const int64_t* geom,
                                               int64_t Cout, int64_t groups, void* stream) {
  dt_conv_geom g;
  DT_TRY_(dt_check_conv2d_direct_bwd_input(dinp, dout, weight, geom, Cout, groups, &g));
  int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_conv_direct_dx_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, weight, g, Cout, groups,
            total);
  DT_CHECK_LAUNCH(s, "dt_conv2d_direct_bwd_input");
  return DT_OK;
}
