/* loss.cu — CUDA launches of the softmax cross-entropy loss. One block per
 * row computes its probabilities and loss, one block folds the mean over the
 * rows whose target is not ignore_index (counted on the device, so nothing is
 * read back). A target outside [0, V) poisons its row (loss and gradient NaN)
 * and the first is recorded for dt_deferred_error, in the CPU library's
 * words. The gradient of a logit is crossentropy.h's. */
#include "crossentropy.h"
#include "cuda_internal.cuh"

/* ---- kernels -------------------------------------------------------------------- */

/* Whether target t is bad: neither ignore_index nor in [0, V). */
__device__ __forceinline__ bool dt_bad_target_(int64_t t, int64_t V, int64_t ignore_index) {
  return t != ignore_index && (t < 0 || t >= V);
}

/* probs of each row and its loss (0 on ignored rows), as dt_crossentropy_row. */
__global__ void dt_ce_fwd_k_(float* row_loss, float* probs, const float* logits, const int32_t* targets, int64_t rows,
                             int64_t V, int64_t ignore_index, unsigned long long* first_bad) {
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
      if (dt_bad_target_(t, V, ignore_index)) {
        dt_mark_bad_(first_bad, r);
        row_loss[r] = NAN;
      } else {
        row_loss[r] = t == ignore_index ? 0.0f : dt_crossentropy_loss_f(x[t], dt_crossentropy_lse_f(m, sum));
      }
    }
  }
}

/* *valid = how many rows do not have target ignore_index (one block). */
__global__ void dt_ce_count_k_(float* valid, const int32_t* targets, int64_t rows, int64_t ignore_index) {
  double n = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) n += targets[r] != ignore_index;
  n = dt_block_sum_(n);
  if (threadIdx.x == 0) *valid = (float)n;
}

/* *loss = (sum of row_loss in double) / valid rows: NaN when no row is valid, as torch. */
__global__ void dt_ce_mean_k_(float* loss, const float* row_loss, const int32_t* targets, int64_t rows,
                              int64_t ignore_index) {
  double s = 0.0, n = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += row_loss[r];
    n += targets[r] != ignore_index;
  }
  double total = dt_block_sum_(s);
  double valid = dt_block_sum_(n);
  if (threadIdx.x == 0) *loss = (float)(total / valid);
}

__global__ void dt_ce_bwd_k_(float* dlogits, const float* probs, const int32_t* targets, const float* dloss,
                             const float* valid, int64_t rows, int64_t V, int64_t ignore_index,
                             unsigned long long* first_bad) {
  float w = *dloss / *valid;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t t = targets[r];
    float* d = dlogits + r * V;
    const float* p = probs + r * V;
    if (t == ignore_index) {
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = 0.0f;
    } else if (dt_bad_target_(t, V, ignore_index)) {
      if (threadIdx.x == 0) dt_mark_bad_(first_bad, r);
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = NAN;
    } else {
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = dt_crossentropy_grad_f(p[j], j == t, w);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_crossentropy_fwd(float* loss, float* probs, const float* logits, const int32_t* targets,
                                        int64_t rows, int64_t V, int64_t ignore_index, void* stream) {
  DT_TRY_(dt_check_crossentropy_fwd(loss, probs, logits, targets, rows, V));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  float* row_loss = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&row_loss, (size_t)rows * sizeof(float), s, "dt_crossentropy_fwd"));
  dt_status st = DT_OK;
  if (rows > 0) {
    unsigned long long* first_bad = NULL;
    st = dt_bad_begin_(&first_bad, s, "dt_crossentropy_fwd");
    if (st == DT_OK) {
      DT_LAUNCH(dt_ce_fwd_k_, dt_row_grid_(rows), DT_BLOCK * 2, 0, s, row_loss, probs, logits, targets, rows, V,
                ignore_index, first_bad);
      DT_CHECK_LAUNCH(s, "dt_crossentropy_fwd (rows)");
      st = dt_bad_end_(first_bad, DT_DATA_CROSSENTROPY_FWD, targets, DT_I32, V, ignore_index, s);
    }
  }
  if (st == DT_OK) {
    DT_LAUNCH(dt_ce_mean_k_, 1, 1024, 0, s, loss, row_loss, targets, rows, ignore_index);
    DT_CHECK_LAUNCH(s, "dt_crossentropy_fwd (mean)");
  }
  dt_status freed = dt_scratch_free_(row_loss, s);
  return st != DT_OK ? st : freed;
}

DT_EXPORT dt_status dt_crossentropy_bwd(float* dlogits, const float* probs, const int32_t* targets, const float* dloss,
                                        int64_t rows, int64_t V, int64_t ignore_index, void* stream) {
  DT_TRY_(dt_check_crossentropy_bwd(dlogits, probs, targets, dloss, rows, V));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  float* valid = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&valid, sizeof(float), s, "dt_crossentropy_bwd"));
  unsigned long long* first_bad = NULL;
  dt_status st = dt_bad_begin_(&first_bad, s, "dt_crossentropy_bwd");
  if (st == DT_OK) {
    DT_LAUNCH(dt_ce_count_k_, 1, 1024, 0, s, valid, targets, rows, ignore_index);
    DT_CHECK_LAUNCH(s, "dt_crossentropy_bwd (valid rows)");
    DT_LAUNCH(dt_ce_bwd_k_, dt_row_grid_(rows), DT_BLOCK * 2, 0, s, dlogits, probs, targets, dloss, valid, rows, V,
              ignore_index, first_bad);
    DT_CHECK_LAUNCH(s, "dt_crossentropy_bwd");
    st = dt_bad_end_(first_bad, DT_DATA_CROSSENTROPY_BWD, targets, DT_I32, V, ignore_index, s);
  }
  dt_status freed = dt_scratch_free_(valid, s);
  return st != DT_OK ? st : freed;
}
