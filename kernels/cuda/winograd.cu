/* winograd.cu — CUDA launches of the Winograd F(2x2, 3x3) transforms around
 * the 16 GEMMs of a 3x3 stride-1 convolution (dt_gemm does those): a thread
 * per (channel, tile) runs kernels/common/winograd.h's tile bodies, as the
 * CPU loops apply them, so the transforms return the CPU's bits. The input
 * gradient gives each input element a thread that adds the contributions of
 * the block's tiles over it in tile order, which is the order the CPU adds
 * them in. */
#include "cuda_internal.cuh"
#include "ops_checks.h"
#include "winograd.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_wino_weight_k_(float* u, const float* w, int64_t pairs) {
  DT_GRID_STRIDE(k, pairs) {
    float t[16];
    dt_wino_weight_tile(w + k * 9, t);
    for (int xi = 0; xi < 16; xi++) u[xi * pairs + k] = t[xi];
  }
}

__global__ void dt_wino_weight_grad_k_(float* dw, const float* m, int64_t pairs) {
  DT_GRID_STRIDE(k, pairs) {
    float t[16];
    for (int xi = 0; xi < 16; xi++) t[xi] = m[xi * pairs + k];
    dt_wino_weight_grad_tile(t, dw + k * 9);
  }
}

/* Item (ch, q): tile t0 + q of input channel ch. */
__global__ void dt_wino_input_k_(float* v, const float* x, dt_wino_geom g, int64_t t0, int64_t nt, int64_t ld) {
  DT_GRID_STRIDE(e, g.C * nt) {
    int64_t ch = e / nt, q = e % nt, n, ty, tx;
    dt_wino_tile_pos(&g, t0 + q, &n, &ty, &tx);
    const float* plane = x + (n * g.C + ch) * g.H * g.W;
    float d[16], t[16];
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 4; b++) {
        int64_t y = 2 * ty - g.PH + a, xx = 2 * tx - g.PW + b;
        d[4 * a + b] = (y >= 0 && y < g.H && xx >= 0 && xx < g.W) ? plane[y * g.W + xx] : 0.0f;
      }
    dt_wino_input_tile(d, t);
    for (int xi = 0; xi < 16; xi++) v[(xi * g.C + ch) * ld + q] = t[xi];
  }
}

/* Item = an element of the images the block's tiles lie in: its value plus
 * each covering tile's share, tiles in increasing order. */
__global__ void dt_wino_input_grad_k_(float* dx, const float* dv, dt_wino_geom g, int64_t t0, int64_t nt, int64_t ld,
                                      int64_t n0, int64_t images) {
  int64_t hw = g.H * g.W;
  DT_GRID_STRIDE(e, images * g.C * hw) {
    int64_t n = n0 + e / (g.C * hw), ch = (e / hw) % g.C, y = (e % hw) / g.W, x = e % g.W;
    float* at = dx + n * g.C * hw + e % (g.C * hw);
    float acc = *at;
    /* tile rows ty whose window rows 2ty - PH .. 2ty - PH + 3 hold y, increasing */
    int64_t ty1 = (y + g.PH) / 2, tx1 = (x + g.PW) / 2;
    for (int64_t ty = ty1 - 1; ty <= ty1; ty++) {
      if (ty < 0 || ty >= g.TH || y - (2 * ty - g.PH) > 3) continue;
      for (int64_t tx = tx1 - 1; tx <= tx1; tx++) {
        if (tx < 0 || tx >= g.TW || x - (2 * tx - g.PW) > 3) continue;
        int64_t q = (n * g.TH + ty) * g.TW + tx - t0;
        if (q < 0 || q >= nt) continue;
        float m[16];
        for (int xi = 0; xi < 16; xi++) m[xi] = dv[(xi * g.C + ch) * ld + q];
        acc += dt_wino_input_grad_at(m, (int)(y - (2 * ty - g.PH)), (int)(x - (2 * tx - g.PW)));
      }
    }
    *at = acc;
  }
}

/* Item (co, q): the 2x2 outputs of tile t0 + q, plus the bias. */
__global__ void dt_wino_output_k_(float* y, const float* m, const float* bias, dt_wino_geom g, int64_t Cout,
                                  int64_t t0, int64_t nt, int64_t ld) {
  DT_GRID_STRIDE(e, Cout * nt) {
    int64_t co = e / nt, q = e % nt, n, ty, tx;
    dt_wino_tile_pos(&g, t0 + q, &n, &ty, &tx);
    float t[16], o[4], b = bias ? bias[co] : 0.0f;
    for (int xi = 0; xi < 16; xi++) t[xi] = m[(xi * Cout + co) * ld + q];
    dt_wino_output_tile(t, o);
    float* out = y + (n * Cout + co) * g.OH * g.OW;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        int64_t r = 2 * ty + i, c = 2 * tx + j;
        if (r < g.OH && c < g.OW) out[r * g.OW + c] = o[2 * i + j] + b;
      }
  }
}

/* Item (co, q): P = A dy A^T of tile t0 + q (dy 0 past the output). */
__global__ void dt_wino_output_grad_k_(float* p, const float* dy, dt_wino_geom g, int64_t Cout, int64_t t0,
                                       int64_t nt, int64_t ld) {
  DT_GRID_STRIDE(e, Cout * nt) {
    int64_t co = e / nt, q = e % nt, n, ty, tx;
    dt_wino_tile_pos(&g, t0 + q, &n, &ty, &tx);
    const float* plane = dy + (n * Cout + co) * g.OH * g.OW;
    float d[4], t[16];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        int64_t r = 2 * ty + i, c = 2 * tx + j;
        d[2 * i + j] = (r < g.OH && c < g.OW) ? plane[r * g.OW + c] : 0.0f;
      }
    dt_wino_output_grad_tile(d, t);
    for (int xi = 0; xi < 16; xi++) p[(xi * Cout + co) * ld + q] = t[xi];
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_winograd_weight(float* u, const float* w, int64_t Cout, int64_t C, void* stream) {
  DT_TRY_(dt_check_winograd_weight(u, w, Cout, C));
  int64_t pairs = Cout * C;
  if (pairs == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_wino_weight_k_, dt_grid_for_(pairs, DT_BLOCK), DT_BLOCK, 0, s, u, w, pairs);
  DT_CHECK_LAUNCH(s, "dt_winograd_weight");
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_weight_grad(float* dw, const float* m, int64_t Cout, int64_t C, void* stream) {
  DT_TRY_(dt_check_winograd_weight_grad(dw, m, Cout, C));
  int64_t pairs = Cout * C;
  if (pairs == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_wino_weight_grad_k_, dt_grid_for_(pairs, DT_BLOCK), DT_BLOCK, 0, s, dw, m, pairs);
  DT_CHECK_LAUNCH(s, "dt_winograd_weight_grad");
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_input(float* v, const float* x, const int64_t* geom, int64_t t0, int64_t nt,
                                      int64_t ld, void* stream) {
  dt_wino_geom g;
  DT_TRY_(dt_check_winograd_input(v, x, geom, t0, nt, ld, &g));
  if (nt * g.C == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_wino_input_k_, dt_grid_for_(g.C * nt, DT_BLOCK), DT_BLOCK, 0, s, v, x, g, t0, nt, ld);
  DT_CHECK_LAUNCH(s, "dt_winograd_input");
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_input_grad(float* dx, const float* dv, const int64_t* geom, int64_t t0, int64_t nt,
                                           int64_t ld, void* stream) {
  dt_wino_geom g;
  DT_TRY_(dt_check_winograd_input_grad(dx, dv, geom, t0, nt, ld, &g));
  if (nt * g.C * g.H * g.W == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int64_t per_image = g.TH * g.TW, n0 = t0 / per_image, images = (t0 + nt - 1) / per_image - n0 + 1;
  int64_t total = images * g.C * g.H * g.W;
  DT_LAUNCH(dt_wino_input_grad_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dx, dv, g, t0, nt, ld, n0, images);
  DT_CHECK_LAUNCH(s, "dt_winograd_input_grad");
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_output(float* y, const float* m, const float* bias, const int64_t* geom,
                                       int64_t Cout, int64_t t0, int64_t nt, int64_t ld, void* stream) {
  dt_wino_geom g;
  DT_TRY_(dt_check_winograd_output(y, m, geom, Cout, t0, nt, ld, &g));
  if (nt * Cout == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_wino_output_k_, dt_grid_for_(Cout * nt, DT_BLOCK), DT_BLOCK, 0, s, y, m, bias, g, Cout, t0, nt, ld);
  DT_CHECK_LAUNCH(s, "dt_winograd_output");
  return DT_OK;
}

DT_EXPORT dt_status dt_winograd_output_grad(float* p, const float* dy, const int64_t* geom, int64_t Cout, int64_t t0,
                                            int64_t nt, int64_t ld, void* stream) {
  dt_wino_geom g;
  DT_TRY_(dt_check_winograd_output_grad(p, dy, geom, Cout, t0, nt, ld, &g));
  if (nt * Cout == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_wino_output_grad_k_, dt_grid_for_(Cout * nt, DT_BLOCK), DT_BLOCK, 0, s, p, dy, g, Cout, t0, nt, ld);
  DT_CHECK_LAUNCH(s, "dt_winograd_output_grad");
  return DT_OK;
}
