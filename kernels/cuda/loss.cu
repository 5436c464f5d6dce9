/* loss.cu — CUDA launches of the softmax cross-entropy loss. The targets
 * are read back and checked on the host first (the same rules and text as
 * kernels/cpu/loss.c, and the count of valid rows); then one block per row
 * computes its probabilities and loss, and one block folds the mean. The
 * gradient of a logit is crossentropy.h's. */
#include <stdlib.h>
#include "crossentropy.h"
#include "cuda_internal.cuh"

/* ---- kernels -------------------------------------------------------------------- */

/* probs of each row and its loss (0 on ignored rows), as dt_crossentropy_row. */
__global__ void dt_ce_fwd_k_(float* row_loss, float* probs, const float* logits, const int32_t* targets, int64_t rows,
                             int64_t V, int64_t ignore_index) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * V;
    float* p = probs + r * V;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = x[j] > m ? x[j] : m;
    m = dt_block_max_(m);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      float e = dt_expf(x[j] - m);
      p[j] = e;
      sum += e;
    }
    sum = dt_block_sum_(sum);
    float inv_sum = 1.0f / (float)sum;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) p[j] *= inv_sum;
    if (threadIdx.x == 0) {
      int64_t t = targets[r];
      row_loss[r] = t == ignore_index ? 0.0f : dt_crossentropy_loss_f(x[t], dt_crossentropy_lse_f(m, sum));
    }
  }
}

/* *loss = (sum of row_loss in double) / valid: NaN when no row is valid, as torch. */
__global__ void dt_ce_mean_k_(float* loss, const float* row_loss, int64_t rows, double valid) {
  double s = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r];
  double total = dt_block_sum_(s);
  if (threadIdx.x == 0) *loss = (float)(total / valid);
}

__global__ void dt_ce_bwd_k_(float* dlogits, const float* probs, const int32_t* targets, const float* dloss,
                             int64_t rows, int64_t V, int64_t ignore_index, float valid) {
  float w = *dloss / valid;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t t = targets[r];
    float* d = dlogits + r * V;
    const float* p = probs + r * V;
    if (t == ignore_index) {
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = 0.0f;
    } else {
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = dt_crossentropy_grad_f(p[j], j == t, w);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

/* Reads the targets back and checks each is in [0, V) or ignore_index; counts valid rows. */
static dt_status dt_check_targets_(const char* name, const int32_t* targets, int64_t rows, int64_t V,
                                   int64_t ignore_index, cudaStream_t s, int64_t* valid) {
  *valid = 0;
  if (rows == 0) return DT_OK;
  int32_t* host = (int32_t*)malloc((size_t)rows * sizeof(int32_t));
  if (!host) return dt_fail_(DT_ERR_ALLOC, "%s: cannot allocate %lld host targets", name, (long long)rows);
  dt_status st = dt_read_back_(host, targets, (size_t)rows * sizeof(int32_t), s);
  for (int64_t r = 0; st == DT_OK && r < rows; r++) {
    int64_t t = host[r];
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) {
      st = dt_fail_target_(name, t, r, V, ignore_index);
      break;
    }
    (*valid)++;
  }
  free(host);
  return st;
}

DT_EXPORT dt_status dt_crossentropy_fwd(float* loss, float* probs, const float* logits, const int32_t* targets,
                                        int64_t rows, int64_t V, int64_t ignore_index, void* stream) {
  DT_TRY_(dt_check_crossentropy_fwd(loss, probs, logits, targets, rows, V));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int64_t valid = 0;
  DT_TRY_(dt_check_targets_("dt_crossentropy_fwd", targets, rows, V, ignore_index, s, &valid));
  float* row_loss = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&row_loss, (size_t)rows * sizeof(float), s, "dt_crossentropy_fwd"));
  if (rows > 0) {
    DT_LAUNCH(dt_ce_fwd_k_, dt_row_grid_(rows), DT_BLOCK * 2, 0, s,
              row_loss, probs, logits, targets, rows, V, ignore_index);
    DT_CHECK_LAUNCH(s, "dt_crossentropy_fwd (rows)");
  }
  DT_LAUNCH(dt_ce_mean_k_, 1, 1024, 0, s, loss, row_loss, rows, (double)valid);
  DT_CHECK_LAUNCH(s, "dt_crossentropy_fwd (mean)");
  return dt_scratch_free_(row_loss, s);
}

DT_EXPORT dt_status dt_crossentropy_bwd(float* dlogits, const float* probs, const int32_t* targets, const float* dloss,
                                        int64_t rows, int64_t V, int64_t ignore_index, void* stream) {
  DT_TRY_(dt_check_crossentropy_bwd(dlogits, probs, targets, dloss, rows, V));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int64_t valid = 0;
  DT_TRY_(dt_check_targets_("dt_crossentropy_bwd", targets, rows, V, ignore_index, s, &valid));
  DT_LAUNCH(dt_ce_bwd_k_, dt_row_grid_(rows), DT_BLOCK * 2, 0, s,
            dlogits, probs, targets, dloss, rows, V, ignore_index, (float)valid);
  DT_CHECK_LAUNCH(s, "dt_crossentropy_bwd");
  return DT_OK;
}
