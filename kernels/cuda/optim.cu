/* optim.cu — CUDA launches of the fused optimizer steps (dt_adamw, dt_sgd:
 * torch 1.13 single-tensor semantics) and of the loss-scale unscale/inf
 * check. The per-step scalars are computed once on the host and each element
 * runs kernels/common/adamw.h, sgd.h or loss_scale.h, as on the CPU. */
#include "adamw.h"
#include "cuda_internal.cuh"
#include "loss_scale.h"
#include "sgd.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_adamw_k_(float* p, const float* g, float* m, float* v, int64_t n, dt_adamw_scalars s) {
  DT_GRID_STRIDE(i, n) dt_adamw_update(&p[i], g[i], &m[i], &v[i], &s);
}

__global__ void dt_sgd_k_(float* p, const float* g, float* buf, int64_t n, dt_sgd_scalars s) {
  DT_GRID_STRIDE(i, n) {
    float unused = 0.0f;
    dt_sgd_update(&p[i], g[i], s.use_momentum ? &buf[i] : &unused, &s);
  }
}

/* found_inf is only ever set to 1, so racing writers store the same value. */
__global__ void dt_unscale_k_(float* g, int64_t n, float inv_scale, float* found_inf) {
  int nonfinite = 0;
  DT_GRID_STRIDE(i, n) g[i] = dt_unscale_f(g[i], inv_scale, &nonfinite);
  if (__syncthreads_or(nonfinite) && threadIdx.x == 0) *found_inf = 1.0f;
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_adamw(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1,
                             double beta2, double eps, double weight_decay, int64_t step, void* stream) {
  DT_TRY_(dt_check_adamw(p, g, m, v, n, beta1, beta2, step));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_adamw_scalars sc = dt_adamw_make_scalars(lr, beta1, beta2, eps, weight_decay, step);
  DT_LAUNCH(dt_adamw_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, p, g, m, v, n, sc);
  DT_CHECK_LAUNCH(s, "dt_adamw");
  return DT_OK;
}

DT_EXPORT dt_status dt_sgd(float* p, const float* g, float* buf, int64_t n, double lr, double momentum,
                           double dampening, double weight_decay, int32_t nesterov, int32_t first, void* stream) {
  DT_TRY_(dt_check_sgd(p, g, buf, n, momentum, dampening, nesterov));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_sgd_scalars sc = dt_sgd_make_scalars(lr, momentum, dampening, weight_decay, nesterov, first);
  DT_LAUNCH(dt_sgd_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, p, g, buf, n, sc);
  DT_CHECK_LAUNCH(s, "dt_sgd");
  return DT_OK;
}

DT_EXPORT dt_status dt_unscale_check(float* g, int64_t n, float inv_scale, float* found_inf, void* stream) {
  DT_TRY_(dt_check_unscale(g, n, found_inf));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_unscale_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, g, n, inv_scale, found_inf);
  DT_CHECK_LAUNCH(s, "dt_unscale_check");
  return DT_OK;
}
