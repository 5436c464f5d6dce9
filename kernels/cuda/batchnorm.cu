/* batchnorm.cu — CUDA launches of the batch-norm steps on tensors viewed as
 * (N, C, HW), between which a synchronised batch norm all-reduces:
 * dt_bn_sum -> dt_bn_sqdev -> dt_bn_finalize -> dt_bn_apply forward,
 * dt_bn_bwd_reduce -> dt_bn_bwd_apply backward. Arithmetic is
 * kernels/common/batchnorm.h's, with the CPU library's bits: a channel's
 * sums are taken per image run by one thread (the CPU's eight-lane body with
 * N = 1) and added in double in image order by another, which is the CPU's
 * order. The element count is data (all-reduced on the device): one below 1
 * poisons what depends on it (NaN) and is reported by dt_deferred_error;
 * nothing is read back. */
#include "batchnorm.h"
#include "cuda_internal.cuh"
#include "ops_checks.h"

/* ---- kernels -------------------------------------------------------------------- */

/* part[c * N + n] = the sum of run (n, c) (dt_bn_channel_sum with N = 1). */
__global__ void dt_bn_run_sums_k_(double* part, const float* x, int64_t N, int64_t C, int64_t HW) {
  DT_GRID_STRIDE(e, C * N) {
    int64_t c = e / N, n = e % N;
    part[e] = dt_bn_channel_sum(x + (n * C + c) * HW, 1, HW, 0);
  }
}

/* part[c * N + n] = the squared deviations of run (n, c) from mean_c =
 * acc[c] / acc[C]; NaN when the count is below 1. */
__global__ void dt_bn_run_sqdev_k_(double* part, const float* x, const double* acc, int64_t N, int64_t C,
                                   int64_t HW) {
  double count = acc[C];
  DT_GRID_STRIDE(e, C * N) {
    int64_t c = e / N, n = e % N;
    part[e] = count >= 1.0 ? dt_bn_channel_sqdev(x + (n * C + c) * HW, 1, HW, 0, acc[c] / count) : NAN;
  }
}

/* out[c] (and out[C + c] for a second sum, pairs) = part's N runs of channel
 * c added in order from 0; with count_to, out[C] = N * HW. */
__global__ void dt_bn_fold_k_(double* out, const double* part, int64_t N, int64_t C, double count, int count_to) {
  DT_GRID_STRIDE(c, C + count_to) {
    if (c == C) {
      out[C] = count;
      continue;
    }
    double s = 0.0;
    for (int64_t n = 0; n < N; n++) s += part[c * N + n];
    out[c] = s;
  }
}

/* One thread: num_batches += 1, unless the count is below 1 (nothing is
 * updated then, as the CPU's call that refuses). */
__global__ void dt_bn_count_batch_k_(int64_t* num_batches, const double* acc, int64_t C) {
  if (acc[C] >= 1.0) *num_batches += 1;
}

/* The statistics and running averages of each channel (num_batches already
 * incremented); a count below 1 gives NaN statistics and leaves the running
 * ones. */
__global__ void dt_bn_finalize_k_(float* mean, float* rstd, float* running_mean, float* running_var,
                                  const int64_t* num_batches, const double* acc, const double* sq, int64_t C,
                                  double eps, double momentum) {
  double count = acc[C];
  double factor = momentum;
  if (momentum == -1.0) factor = num_batches ? 1.0 / (double)*num_batches : 0.0;
  DT_GRID_STRIDE(c, C) {
    if (!(count >= 1.0)) {
      mean[c] = rstd[c] = NAN;
      continue;
    }
    dt_bn_stats_f(acc[c], sq[c], count, eps, &mean[c], &rstd[c]);
    if (running_mean) running_mean[c] = dt_bn_running_f(running_mean[c], acc[c] / count, factor);
    if (running_var) running_var[c] = dt_bn_running_f(running_var[c], sq[c] / (count - 1.0), factor);
  }
}

__global__ void dt_bn_eval_stats_k_(float* mean, float* rstd, const float* running_mean, const float* running_var,
                                    int64_t C, float eps) {
  DT_GRID_STRIDE(c, C) {
    mean[c] = running_mean[c];
    rstd[c] = dt_bn_eval_rstd_f(running_var[c], eps);
  }
}

__global__ void dt_bn_apply_k_(float* out, const float* x, const float* mean, const float* rstd, const float* weight,
                               const float* bias, int64_t C, int64_t HW, int64_t total) {
  DT_GRID_STRIDE(i, total) {
    int64_t c = (i / HW) % C;
    float alpha, beta;
    dt_bn_affine(mean[c], rstd[c], weight ? weight[c] : 1.0f, bias ? bias[c] : 0.0f, &alpha, &beta);
    out[i] = dt_bn_out_f(x[i], alpha, beta);
  }
}

/* part[2 * (c * N + n) + {0, 1}] = run (n, c)'s sum(dy) and sum((x - mean) dy). */
__global__ void dt_bn_run_bwd_sums_k_(double* part, const float* dy, const float* x, const float* mean, int64_t N,
                                      int64_t C, int64_t HW) {
  DT_GRID_STRIDE(e, C * N) {
    int64_t c = e / N, n = e % N, off = (n * C + c) * HW;
    dt_bn_channel_bwd_sums(dy + off, x + off, 1, HW, 0, mean[c], &part[2 * e], &part[2 * e + 1]);
  }
}

/* acc[c], acc[C + c] = the runs' sums in image order; the weight and bias gradients. */
__global__ void dt_bn_bwd_fold_k_(double* acc, float* dweight, float* dbias, const double* part, const float* rstd,
                                  int64_t N, int64_t C) {
  DT_GRID_STRIDE(c, C) {
    double s = 0.0, d = 0.0;
    for (int64_t n = 0; n < N; n++) {
      s += part[2 * (c * N + n)];
      d += part[2 * (c * N + n) + 1];
    }
    acc[c] = s;
    acc[C + c] = d;
    if (dweight) dweight[c] = (float)(d * (double)rstd[c]);
    if (dbias) dbias[c] = (float)s;
  }
}

/* dinp per element; with acc (training) the factors come from the sums and
 * the count (NaN for a count below 1), else the fixed statistics' form. */
__global__ void dt_bn_bwd_apply_k_(float* dinp, const float* dout, const float* x, const float* mean,
                                   const float* rstd, const float* weight, const double* acc, const double* count,
                                   int64_t C, int64_t HW, int64_t total) {
  double m = acc ? *count : 0.0;
  DT_GRID_STRIDE(i, total) {
    int64_t c = (i / HW) % C;
    float w = weight ? weight[c] : 1.0f;
    if (!acc) {
      dinp[i] = dt_bn_dx_eval_f(dout[i], rstd[c], w);
    } else if (!(m >= 1.0)) {
      dinp[i] = NAN;
    } else {
      float k, grad_mean;
      dt_bn_bwd_factors(acc[c], acc[C + c], m, rstd[c], &k, &grad_mean);
      dinp[i] = dt_bn_dx_train_f(dout[i], x[i], mean[c], k, grad_mean, rstd[c], w);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

/* Runs' partial sums, then their fold: the two launches of dt_bn_sum and dt_bn_sqdev. */
static dt_status dt_bn_reduce_(double* out, const float* x, const double* acc, int64_t N, int64_t C, int64_t HW,
                               int count_to, double* part, cudaStream_t s, const char* name) {
  if (C * N > 0) {
    if (acc) {
      DT_LAUNCH(dt_bn_run_sqdev_k_, dt_grid_for_(C * N, DT_BLOCK), DT_BLOCK, 0, s, part, x, acc, N, C, HW);
      DT_CHECK_LAUNCH(s, name);
    } else {
      DT_LAUNCH(dt_bn_run_sums_k_, dt_grid_for_(C * N, DT_BLOCK), DT_BLOCK, 0, s, part, x, N, C, HW);
      DT_CHECK_LAUNCH(s, name);
    }
  }
  DT_LAUNCH(dt_bn_fold_k_, dt_grid_for_(C + count_to, DT_BLOCK), DT_BLOCK, 0, s, out, part, N, C, (double)(N * HW),
            count_to);
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_sum(double* acc, const float* inp, int64_t N, int64_t C, int64_t HW, void* stream) {
  DT_TRY_(dt_check_bn_sum(acc, inp, N, C, HW));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  double* part = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&part, (size_t)(C * N) * sizeof(double), s, "dt_bn_sum"));
  dt_status st = dt_bn_reduce_(acc, inp, NULL, N, C, HW, 1, part, s, "dt_bn_sum");
  dt_status freed = dt_scratch_free_(part, s);
  return st != DT_OK ? st : freed;
}

DT_EXPORT dt_status dt_bn_sqdev(double* sq, const float* inp, const double* acc, int64_t N, int64_t C, int64_t HW,
                                void* stream) {
  DT_TRY_(dt_check_bn_sqdev(sq, inp, acc, N, C, HW));
  if (C == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_TRY_(dt_bad_count_(acc + C, DT_DATA_BN_SQDEV, s));
  double* part = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&part, (size_t)(C * N) * sizeof(double), s, "dt_bn_sqdev"));
  dt_status st = dt_bn_reduce_(sq, inp, acc, N, C, HW, 0, part, s, "dt_bn_sqdev");
  dt_status freed = dt_scratch_free_(part, s);
  return st != DT_OK ? st : freed;
}

DT_EXPORT dt_status dt_bn_finalize(float* mean, float* rstd, float* running_mean, float* running_var,
                                   int64_t* num_batches, const double* acc, const double* sq, int64_t C, double eps,
                                   double momentum, void* stream) {
  DT_TRY_(dt_check_bn_finalize(mean, rstd, acc, sq, C, eps, momentum));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_TRY_(dt_bad_count_(acc + C, DT_DATA_BN_FINALIZE, s));
  if (num_batches) {
    DT_LAUNCH(dt_bn_count_batch_k_, 1, 1, 0, s, num_batches, acc, C);
    DT_CHECK_LAUNCH(s, "dt_bn_finalize (batch count)");
  }
  if (C == 0) return DT_OK;
  DT_LAUNCH(dt_bn_finalize_k_, dt_grid_for_(C, DT_BLOCK), DT_BLOCK, 0, s, mean, rstd, running_mean, running_var,
            num_batches, acc, sq, C, eps, momentum);
  DT_CHECK_LAUNCH(s, "dt_bn_finalize");
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_eval_stats(float* mean, float* rstd, const float* running_mean, const float* running_var,
                                     int64_t C, double eps, void* stream) {
  DT_TRY_(dt_check_bn_eval_stats(mean, rstd, running_mean, running_var, C, eps));
  if (C == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_bn_eval_stats_k_, dt_grid_for_(C, DT_BLOCK), DT_BLOCK, 0, s, mean, rstd, running_mean, running_var, C,
            (float)eps);
  DT_CHECK_LAUNCH(s, "dt_bn_eval_stats");
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_apply(float* out, const float* inp, const float* mean, const float* rstd,
                                const float* weight, const float* bias, int64_t N, int64_t C, int64_t HW,
                                void* stream) {
  DT_TRY_(dt_check_bn_apply(out, inp, mean, rstd, N, C, HW));
  int64_t total = N * C * HW;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_bn_apply_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, out, inp, mean, rstd, weight, bias, C, HW,
            total);
  DT_CHECK_LAUNCH(s, "dt_bn_apply");
  return DT_OK;
}

static dt_status dt_bn_bwd_reduce_run_(double* acc, float* dweight, float* dbias, const float* dout, const float* inp,
                                       const float* mean, const float* rstd, int64_t N, int64_t C, int64_t HW,
                                       double* part, cudaStream_t s) {
  if (N > 0) {
    DT_LAUNCH(dt_bn_run_bwd_sums_k_, dt_grid_for_(C * N, DT_BLOCK), DT_BLOCK, 0, s, part, dout, inp, mean, N, C, HW);
    DT_CHECK_LAUNCH(s, "dt_bn_bwd_reduce");
  }
  DT_LAUNCH(dt_bn_bwd_fold_k_, dt_grid_for_(C, DT_BLOCK), DT_BLOCK, 0, s, acc, dweight, dbias, part, rstd, N, C);
  DT_CHECK_LAUNCH(s, "dt_bn_bwd_reduce");
  return DT_OK;
}

DT_EXPORT dt_status dt_bn_bwd_reduce(double* acc, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* mean, const float* rstd, int64_t N, int64_t C, int64_t HW,
                                     void* stream) {
  DT_TRY_(dt_check_bn_bwd_reduce(acc, dout, inp, mean, rstd, N, C, HW));
  if (C == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  double* part = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&part, (size_t)(2 * C * N) * sizeof(double), s, "dt_bn_bwd_reduce"));
  dt_status st = dt_bn_bwd_reduce_run_(acc, dweight, dbias, dout, inp, mean, rstd, N, C, HW, part, s);
  dt_status freed = dt_scratch_free_(part, s);
  return st != DT_OK ? st : freed;
}

DT_EXPORT dt_status dt_bn_bwd_apply(float* dinp, const float* dout, const float* inp, const float* mean,
                                    const float* rstd, const float* weight, const double* acc, const double* count,
                                    int64_t N, int64_t C, int64_t HW, void* stream) {
  DT_TRY_(dt_check_bn_bwd_apply(dinp, dout, inp, mean, rstd, acc, count, N, C, HW));
  int64_t total = N * C * HW;
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (acc) DT_TRY_(dt_bad_count_(count, DT_DATA_BN_BWD_APPLY, s));
  DT_LAUNCH(dt_bn_bwd_apply_k_, dt_grid_for_(total, DT_BLOCK), DT_BLOCK, 0, s, dinp, dout, inp, mean, rstd, weight,
            acc, count, C, HW, total);
  DT_CHECK_LAUNCH(s, "dt_bn_bwd_apply");
  return DT_OK;
}
