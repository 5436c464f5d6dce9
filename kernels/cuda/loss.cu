/* loss.cu — CUDA launches of the fused classifier's softmax cross-entropy.
 * One block per row (rows of up to 4 KiB, a small vocabulary: one warp per
 * row) reads the row's logits (f32, bf16 or f16) once, in 128-bit vectors,
 * folding each thread's maximum and exp sum online, and keeps only the
 * row's log-sum-exp; one block folds the mean over the rows
 * whose target is not ignore_index and counts them (so nothing is read back,
 * and the backward needs no count of its own). The backward recomputes each
 * probability from the log-sum-exp and writes the gradient in the logits'
 * dtype, in place if asked: no f32 probabilities are ever stored. A target
 * outside [0, V) poisons its row (loss and gradient NaN) and the first is
 * recorded for dt_deferred_error, in the CPU library's words. */
#include "crossentropy.h"
#include "cuda_internal.cuh"
#include "vec128.cuh"

#define CE_THREADS 512
/* Rows of at most this many bytes (1024 f32 or 2048 bf16/f16 logits: 8
 * 16-byte vectors a lane) go one warp each, CE_THREADS / 32 rows a block: a
 * block of 512 threads on such a row leaves most of its threads idle and
 * pays two block barriers per row. Longer rows (GPT-2's 50257) keep a block. */
#define CE_WARP_MAX_BYTES 4096

/* ---- kernels -------------------------------------------------------------------- */

/* Whether target t is bad: neither ignore_index nor in [0, V). */
__device__ __forceinline__ bool dt_bad_target_(int64_t t, int64_t V, int64_t ignore_index) {
  return t != ignore_index && (t < 0 || t >= V);
}

/* One value into a thread's running (max, sum). */
__device__ __forceinline__ void dt_ce_fold_(float x, float* m, float* s) {
  if (x > *m) {
    *s = *m == -INFINITY ? 0.0f : *s * dt_expf(*m - x);
    *m = x;
  }
  *s += dt_expf(x - *m);
}

/* How a kernel's threads share rows. WARP: a warp per row (lane t of 32),
 * rows blockIdx.x * warps + warp, stepping by all the grid's warps; else a
 * block per row (thread t of blockDim.x), rows blockIdx.x, stepping by the grid. */
template <bool WARP>
struct dt_ce_rows_ {
  int64_t first, step;
  int t, nt;
  __device__ __forceinline__ dt_ce_rows_() {
    if (WARP) {
      const int64_t warps = blockDim.x / 32;
      first = (int64_t)blockIdx.x * warps + threadIdx.x / 32;
      step = (int64_t)gridDim.x * warps;
      t = threadIdx.x % 32;
      nt = 32;
    } else {
      first = blockIdx.x;
      step = gridDim.x;
      t = threadIdx.x;
      nt = blockDim.x;
    }
  }
};

/* The maximum and the double sum over a row's threads (every thread gets
 * them): shuffles in a fixed order for a warp, the block reductions else. */
template <bool WARP>
__device__ __forceinline__ float dt_ce_row_max_(float v) {
  if constexpr (WARP) {
    for (int off = 16; off > 0; off >>= 1) v = dt_maxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
  } else {
    return dt_block_max_(v);
  }
}
template <bool WARP>
__device__ __forceinline__ double dt_ce_row_sum_(double v) {
  if constexpr (WARP) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
  } else {
    return dt_block_sum_(v);
  }
}

/* Each row's log-sum-exp and loss (0 on ignored rows). A row is read in
 * 16-byte vectors only when every row of the tensor starts 16-byte aligned
 * (an aligned base and V a multiple of the vector width), never by the row's
 * own address: which elements a thread folds, and so the log-sum-exp's bits,
 * then do not depend on the row's place in the batch (exact mode computes the
 * loss over batches whose rows sit at other places at other world sizes). */
template <int DT, bool WARP>
__global__ void __launch_bounds__(CE_THREADS)
    dt_ce_fwd_k_(float* row_loss, float* lse, const void* logits, const int32_t* targets, int64_t rows, int64_t V,
                 int64_t ignore_index, unsigned long long* first_bad) {
  constexpr int N = dt_vec_<DT>::N;
  constexpr int64_t es = DT == DT_F32 ? 4 : 2;
  const dt_ce_rows_<WARP> R;
  const bool vectors = (uintptr_t)logits % 16 == 0 && V % N == 0;
  for (int64_t r = R.first; r < rows; r += R.step) {
    const char* x = (const char*)logits + r * V * es;
    float m = -INFINITY, s = 0.0f;
    if (vectors) {
      for (int64_t v = R.t; v < V / N; v += R.nt) {
        float val[N];
        dt_vec_load_<DT>(val, x + v * N * es);
        DT_UNROLL
        for (int i = 0; i < N; i++) dt_ce_fold_(val[i], &m, &s);
      }
    } else {
      for (int64_t j = R.t; j < V; j += R.nt) dt_ce_fold_(dt_load_float(x, DT, j), &m, &s);
    }
    float M = dt_ce_row_max_<WARP>(m);
    double S = dt_ce_row_sum_<WARP>(m == -INFINITY ? 0.0 : (double)s * (double)dt_expf(m - M));
    if (R.t == 0) {
      float l = dt_crossentropy_lse_f(M, S);
      lse[r] = l;
      int64_t t = targets[r];
      if (dt_bad_target_(t, V, ignore_index)) {
        dt_mark_bad_(first_bad, r);
        row_loss[r] = NAN;
      } else {
        row_loss[r] = t == ignore_index ? 0.0f : dt_crossentropy_loss_f(dt_load_float(x, DT, t), l);
      }
    }
  }
}

/* *loss = (sum of row_loss in double) / valid rows (NaN when none, as torch); *valid = their count. */
__global__ void dt_ce_mean_k_(float* loss, float* valid, const float* row_loss, const int32_t* targets, int64_t rows,
                              int64_t ignore_index) {
  double s = 0.0, n = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += row_loss[r];
    n += targets[r] != ignore_index;
  }
  double total = dt_block_sum_(s);
  double count = dt_block_sum_(n);
  if (threadIdx.x == 0) {
    *loss = (float)(total / count);
    *valid = (float)count;
  }
}

template <int DT, bool WARP>
__global__ void __launch_bounds__(CE_THREADS)
    dt_ce_bwd_k_(void* dlogits, const void* logits, const float* lse, const float* valid, const int32_t* targets,
                 const float* dloss, int64_t rows, int64_t V, int64_t ignore_index, unsigned long long* first_bad) {
  constexpr int N = dt_vec_<DT>::N;
  constexpr int64_t es = DT == DT_F32 ? 4 : 2;
  float w = *dloss / *valid;
  const dt_ce_rows_<WARP> R;
  for (int64_t r = R.first; r < rows; r += R.step) {
    int64_t t = targets[r];
    const char* x = (const char*)logits + r * V * es;
    char* d = (char*)dlogits + r * V * es;
    float l = lse[r];
    bool ignored = t == ignore_index, bad = dt_bad_target_(t, V, ignore_index);
    if (bad && R.t == 0) dt_mark_bad_(first_bad, r);
    /* the value of logit j: 0 on ignored rows, NaN on bad ones */
    auto grad = [&](float xj, int64_t j) -> float {
      return ignored ? 0.0f : bad ? NAN : dt_crossentropy_grad_f(dt_crossentropy_p_f(xj, l), j == t, w);
    };
    dt_vec_split_<DT> split(x, V);
    /* vectors only where the gradient's rows are aligned as the logits' */
    int64_t vecs = ((uintptr_t)d - (uintptr_t)x) % 16 == 0 ? split.vecs : 0;
    for (int64_t j = R.t; j < split.head; j += R.nt) dt_store_float(d, DT, j, grad(dt_load_float(x, DT, j), j));
    for (int64_t v = R.t; v < vecs; v += R.nt) {
      int64_t j0 = split.head + v * N;
      float val[N];
      dt_vec_load_<DT>(val, x + j0 * es);
      DT_UNROLL
      for (int i = 0; i < N; i++) val[i] = grad(val[i], j0 + i);
      dt_vec_store_<DT>(d + j0 * es, val);
    }
    for (int64_t j = split.head + vecs * N + R.t; j < V; j += R.nt)
      dt_store_float(d, DT, j, grad(dt_load_float(x, DT, j), j));
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

/* Whether rows of V logits of dtype DT go a warp each, and the blocks for them. */
template <int DT>
static bool dt_ce_warp_rows_(int64_t V) {
  return V * (DT == DT_F32 ? 4 : 2) <= CE_WARP_MAX_BYTES;
}
static unsigned dt_ce_grid_(int64_t rows, bool warp) {
  return dt_row_grid_(warp ? (rows + CE_THREADS / 32 - 1) / (CE_THREADS / 32) : rows);
}

template <int DT>
static dt_status dt_ce_fwd_rows_(float* row_loss, float* lse, const void* logits, const int32_t* targets, int64_t rows,
                                 int64_t V, int64_t ignore_index, unsigned long long* first_bad, cudaStream_t s) {
  const bool warp = dt_ce_warp_rows_<DT>(V);
  auto kernel = warp ? dt_ce_fwd_k_<DT, true> : dt_ce_fwd_k_<DT, false>;
  DT_LAUNCH(kernel, dt_ce_grid_(rows, warp), CE_THREADS, 0, s, row_loss, lse, logits, targets, rows, V, ignore_index,
            first_bad);
  DT_CHECK_LAUNCH(s, "dt_crossentropy_fwd (rows)");
  return DT_OK;
}

template <int DT>
static dt_status dt_ce_bwd_rows_(void* dlogits, const void* logits, const float* lse, const float* valid,
                                 const int32_t* targets, const float* dloss, int64_t rows, int64_t V,
                                 int64_t ignore_index, unsigned long long* first_bad, cudaStream_t s) {
  const bool warp = dt_ce_warp_rows_<DT>(V);
  auto kernel = warp ? dt_ce_bwd_k_<DT, true> : dt_ce_bwd_k_<DT, false>;
  DT_LAUNCH(kernel, dt_ce_grid_(rows, warp), CE_THREADS, 0, s, dlogits, logits, lse, valid, targets, dloss, rows, V,
            ignore_index, first_bad);
  DT_CHECK_LAUNCH(s, "dt_crossentropy_bwd");
  return DT_OK;
}

DT_EXPORT dt_status dt_crossentropy_fwd(float* loss, float* lse, float* valid_rows, const void* logits,
                                        int32_t dtype, const int32_t* targets, int64_t rows, int64_t V,
                                        int64_t ignore_index, void* stream) {
  DT_TRY_(dt_check_crossentropy_fwd(loss, lse, valid_rows, logits, dtype, targets, rows, V));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  float* row_loss = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&row_loss, (size_t)rows * sizeof(float), s, "dt_crossentropy_fwd"));
  dt_status st = DT_OK;
  if (rows > 0) {
    unsigned long long* first_bad = NULL;
    st = dt_bad_begin_(&first_bad, s, "dt_crossentropy_fwd");
    if (st == DT_OK) {
      if (dtype == DT_BF16) st = dt_ce_fwd_rows_<DT_BF16>(row_loss, lse, logits, targets, rows, V, ignore_index, first_bad, s);
      else if (dtype == DT_F16) st = dt_ce_fwd_rows_<DT_F16>(row_loss, lse, logits, targets, rows, V, ignore_index, first_bad, s);
      else st = dt_ce_fwd_rows_<DT_F32>(row_loss, lse, logits, targets, rows, V, ignore_index, first_bad, s);
      dt_status ended = dt_bad_end_(first_bad, DT_DATA_CROSSENTROPY_FWD, targets, DT_I32, V, ignore_index, s);
      if (st == DT_OK) st = ended;
    }
  }
  if (st == DT_OK) {
    DT_LAUNCH(dt_ce_mean_k_, 1, 1024, 0, s, loss, valid_rows, row_loss, targets, rows, ignore_index);
    DT_CHECK_LAUNCH(s, "dt_crossentropy_fwd (mean)");
  }
  dt_status freed = dt_scratch_free_(row_loss, s);
  return st != DT_OK ? st : freed;
}

DT_EXPORT dt_status dt_crossentropy_bwd(void* dlogits, const void* logits, const float* lse, const float* valid_rows,
                                        const int32_t* targets, const float* dloss, int32_t dtype, int64_t rows,
                                        int64_t V, int64_t ignore_index, void* stream) {
  DT_TRY_(dt_check_crossentropy_bwd(dlogits, logits, lse, valid_rows, targets, dloss, dtype, rows, V));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  unsigned long long* first_bad = NULL;
  DT_TRY_(dt_bad_begin_(&first_bad, s, "dt_crossentropy_bwd"));
  dt_status st;
  if (dtype == DT_BF16)
    st = dt_ce_bwd_rows_<DT_BF16>(dlogits, logits, lse, valid_rows, targets, dloss, rows, V, ignore_index, first_bad, s);
  else if (dtype == DT_F16)
    st = dt_ce_bwd_rows_<DT_F16>(dlogits, logits, lse, valid_rows, targets, dloss, rows, V, ignore_index, first_bad, s);
  else
    st = dt_ce_bwd_rows_<DT_F32>(dlogits, logits, lse, valid_rows, targets, dloss, rows, V, ignore_index, first_bad, s);
  dt_status ended = dt_bad_end_(first_bad, DT_DATA_CROSSENTROPY_BWD, targets, DT_I32, V, ignore_index, s);
  return st != DT_OK ? st : ended;
}
