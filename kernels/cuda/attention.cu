/* attention.cu — CUDA launches of dt_attention_fwd/bwd: self-attention without
 * the T x T matrix. bf16/f16 inputs with head dims up to 128 (GPT-2's 64
 * among them) run on tensor cores (attention_tc.cu); this file's kernels take
 * f32 and head dims past 128, with scalar f32 arithmetic. A block owns a tile of query rows (forward, dQ) or of key
 * rows (dK, dV) of one (batch, head); the other side streams through shared
 * memory in tiles of KB rows, converted to f32 once. Each row belongs to G
 * lanes of a warp, lane t holding dims t, t + G, t + 2G, ... (16 per lane, so
 * the shared-memory reads of a warp hit distinct banks); dot products are
 * summed across the G lanes by shuffles. Fully masked tiles are never
 * visited, the heaviest query tiles of a causal pass start first, and every
 * sum is f32. Backward is two passes with no atomics (so results do not
 * depend on timing): dQ with delta = rowsum(dO * O), then dK and dV. The
 * per-element arithmetic is kernels/common/attention.h. */
#include "attention.h"
#include "attention_tc.cuh"
#include "convert.h"
#include "cuda_internal.cuh"

#define ATT_THREADS 128
#define ATT_PER_LANE 16

/* The geometry of a head-dimension class (head dims up to DMAX). */
template <int DMAX>
struct dt_att_geom_ {
  static constexpr int G = DMAX / ATT_PER_LANE;   /* lanes per row: 2, 4, 8 or 16 */
  static constexpr int ROWS = ATT_THREADS / G;     /* rows a block owns */
  static constexpr int KB = DMAX <= 128 ? 32 : 16; /* rows of the other side per shared tile */
};

/* The sum of v over the G lanes of this row (every lane gets it). */
template <int G>
__device__ __forceinline__ float dt_att_group_sum_(float v) {
DT_UNROLL
  for (int off = G / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/* Rows [r0, r0 + KB) of one block of qkv-like data into smem[KB][DMAX] as f32
 * (zero past T and past D): element d of row r at src[r * stride + d]. */
template <int DT, int DMAX, int KB>
__device__ __forceinline__ void dt_att_load_tile_(float (*dst)[DMAX], const void* src, int64_t r0, int64_t T,
                                                  int64_t stride, int D) {
  for (int i = threadIdx.x; i < KB * DMAX; i += ATT_THREADS) {
    int j = i / DMAX, d = i % DMAX;
    int64_t r = r0 + j;
    dst[j][d] = r < T && d < D ? dt_load_float(src, DT, r * stride + d) : 0.0f;
  }
}

/* ---- kernels ---------------------------------------------------------------------------
 * grid: (B * H, row tiles); qkv rows have stride 3C, C = H * D; q, k and v of
 * head h start at h * D, C + h * D and 2C + h * D. */

template <int DT, int DMAX>
__global__ void __launch_bounds__(ATT_THREADS)
    dt_attention_fwd_k_(void* out, float* lse, const void* qkv, int T, int H, int D, int causal, float scale) {
  using Geom = dt_att_geom_<DMAX>;
  constexpr int G = Geom::G, ROWS = Geom::ROWS, KB = Geom::KB;
  __shared__ float ks[KB][DMAX];
  __shared__ float vs[KB][DMAX];
  const int bh = blockIdx.x, b = bh / H, h = bh % H;
  const int tile = gridDim.y - 1 - blockIdx.y; /* causal: the tiles with the most keys first */
  const int t = threadIdx.x % G;
  const int row = tile * ROWS + threadIdx.x / G;
  const int64_t C = (int64_t)H * D, stride = 3 * C;
  const char* base = (const char*)qkv + (int64_t)b * T * stride * (int64_t)dt_dtype_size(DT);
  float q[ATT_PER_LANE], o[ATT_PER_LANE];
DT_UNROLL
  for (int e = 0; e < ATT_PER_LANE; e++) {
    int d = e * G + t;
    q[e] = row < T && d < D ? dt_load_float(base, DT, (int64_t)row * stride + h * D + d) : 0.0f;
    o[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  int64_t rows_end = (int64_t)(tile + 1) * ROWS < T ? (int64_t)(tile + 1) * ROWS : T;
  int64_t kend = dt_attention_key_end(rows_end, T, causal);
  const char* kbase = base + (C + h * D) * (int64_t)dt_dtype_size(DT);
  const char* vbase = base + (2 * C + h * D) * (int64_t)dt_dtype_size(DT);
  for (int64_t k0 = 0; k0 < kend; k0 += KB) {
    __syncthreads(); /* the previous tile is no longer read */
    dt_att_load_tile_<DT, DMAX, KB>(ks, kbase, k0, kend, stride, D);
    dt_att_load_tile_<DT, DMAX, KB>(vs, vbase, k0, kend, stride, D);
    __syncthreads();
    float s[KB];
    float mt = -INFINITY;
DT_UNROLL
    for (int j = 0; j < KB; j++) {
      float acc = 0.0f;
DT_UNROLL
      for (int e = 0; e < ATT_PER_LANE; e++) acc += q[e] * ks[j][e * G + t];
      acc = dt_att_group_sum_<G>(acc);
      int64_t key = k0 + j;
      int visible = key < kend && row < T && dt_attention_visible(row, key, causal);
      s[j] = visible ? acc * scale : -INFINITY;
      mt = dt_maxf(mt, s[j]);
    }
    if (mt != -INFINITY) {
      float m_new = dt_maxf(m, mt);
      float corr = dt_attention_rescale_f(m, m_new);
      l *= corr;
DT_UNROLL
      for (int e = 0; e < ATT_PER_LANE; e++) o[e] *= corr;
DT_UNROLL
      for (int j = 0; j < KB; j++) {
        float p = dt_attention_p_f(s[j], m_new);
        l += p;
DT_UNROLL
        for (int e = 0; e < ATT_PER_LANE; e++) o[e] += p * vs[j][e * G + t];
      }
      m = m_new;
    }
  }
  if (row < T) {
    float inv = 1.0f / l;
    int64_t at = ((int64_t)b * T + row) * C + h * D;
DT_UNROLL
    for (int e = 0; e < ATT_PER_LANE; e++) {
      int d = e * G + t;
      if (d < D) dt_store_float(out, DT, at + d, o[e] * inv);
    }
    if (t == 0) lse[(int64_t)bh * T + row] = dt_attention_lse_f(m, l);
  }
}

/* Backward pass 1: dQ of the block's query rows, and delta = rowsum(dO * O). */
template <int DT, int DMAX>
__global__ void __launch_bounds__(ATT_THREADS)
    dt_attention_bwd_dq_k_(void* dqkv, float* delta_out, const void* dout, const void* qkv, const void* out,
                           const float* lse, int T, int H, int D, int causal, float scale) {
  using Geom = dt_att_geom_<DMAX>;
  constexpr int G = Geom::G, ROWS = Geom::ROWS, KB = Geom::KB;
  __shared__ float ks[KB][DMAX];
  __shared__ float vs[KB][DMAX];
  const int bh = blockIdx.x, b = bh / H, h = bh % H;
  const int tile = gridDim.y - 1 - blockIdx.y;
  const int t = threadIdx.x % G;
  const int row = tile * ROWS + threadIdx.x / G;
  const int64_t C = (int64_t)H * D, stride = 3 * C, es = (int64_t)dt_dtype_size(DT);
  const char* base = (const char*)qkv + (int64_t)b * T * stride * es;
  const int64_t orow = ((int64_t)b * T + row) * C + h * D;
  float q[ATT_PER_LANE], g[ATT_PER_LANE], dq[ATT_PER_LANE];
  float delta = 0.0f;
DT_UNROLL
  for (int e = 0; e < ATT_PER_LANE; e++) {
    int d = e * G + t;
    int in = row < T && d < D;
    q[e] = in ? dt_load_float(base, DT, (int64_t)row * stride + h * D + d) : 0.0f;
    g[e] = in ? dt_load_float(dout, DT, orow + d) : 0.0f;
    delta += in ? g[e] * dt_load_float(out, DT, orow + d) : 0.0f;
    dq[e] = 0.0f;
  }
  delta = dt_att_group_sum_<G>(delta);
  float lse_r = row < T ? lse[(int64_t)bh * T + row] : 0.0f;
  int64_t rows_end = (int64_t)(tile + 1) * ROWS < T ? (int64_t)(tile + 1) * ROWS : T;
  int64_t kend = dt_attention_key_end(rows_end, T, causal);
  const char* kbase = base + (C + h * D) * es;
  const char* vbase = base + (2 * C + h * D) * es;
  for (int64_t k0 = 0; k0 < kend; k0 += KB) {
    __syncthreads();
    dt_att_load_tile_<DT, DMAX, KB>(ks, kbase, k0, kend, stride, D);
    dt_att_load_tile_<DT, DMAX, KB>(vs, vbase, k0, kend, stride, D);
    __syncthreads();
DT_UNROLL
    for (int j = 0; j < KB; j++) {
      float sacc = 0.0f, pacc = 0.0f;
DT_UNROLL
      for (int e = 0; e < ATT_PER_LANE; e++) {
        sacc += q[e] * ks[j][e * G + t];
        pacc += g[e] * vs[j][e * G + t];
      }
      sacc = dt_att_group_sum_<G>(sacc);
      pacc = dt_att_group_sum_<G>(pacc);
      int64_t key = k0 + j;
      int visible = key < kend && row < T && dt_attention_visible(row, key, causal);
      float p = visible ? dt_attention_p_lse_f(sacc * scale, lse_r) : 0.0f;
      float ds = dt_attention_ds_f(p, pacc, delta) * scale;
DT_UNROLL
      for (int e = 0; e < ATT_PER_LANE; e++) dq[e] += ds * ks[j][e * G + t];
    }
  }
  if (row < T) {
    int64_t at = ((int64_t)b * T + row) * stride + h * D;
DT_UNROLL
    for (int e = 0; e < ATT_PER_LANE; e++) {
      int d = e * G + t;
      if (d < D) dt_store_float(dqkv, DT, at + d, dq[e]);
    }
    if (t == 0) delta_out[(int64_t)bh * T + row] = delta;
  }
}

/* Backward pass 2: dK and dV of the block's key rows, over the query rows that see them. */
template <int DT, int DMAX>
__global__ void __launch_bounds__(ATT_THREADS)
    dt_attention_bwd_dkv_k_(void* dqkv, const float* delta, const void* dout, const void* qkv, const float* lse,
                            int T, int H, int D, int causal, float scale) {
  using Geom = dt_att_geom_<DMAX>;
  constexpr int G = Geom::G, ROWS = Geom::ROWS, KB = Geom::KB;
  __shared__ float qs[KB][DMAX];
  __shared__ float gs[KB][DMAX];
  __shared__ float lses[KB], deltas[KB];
  const int bh = blockIdx.x, b = bh / H, h = bh % H;
  const int tile = blockIdx.y; /* causal: the first key tiles see the most queries, so they start first */
  const int t = threadIdx.x % G;
  const int key = tile * ROWS + threadIdx.x / G;
  const int64_t C = (int64_t)H * D, stride = 3 * C, es = (int64_t)dt_dtype_size(DT);
  const char* base = (const char*)qkv + (int64_t)b * T * stride * es;
  float k[ATT_PER_LANE], v[ATT_PER_LANE], dk[ATT_PER_LANE], dv[ATT_PER_LANE];
DT_UNROLL
  for (int e = 0; e < ATT_PER_LANE; e++) {
    int d = e * G + t;
    int in = key < T && d < D;
    k[e] = in ? dt_load_float(base, DT, (int64_t)key * stride + C + h * D + d) : 0.0f;
    v[e] = in ? dt_load_float(base, DT, (int64_t)key * stride + 2 * C + h * D + d) : 0.0f;
    dk[e] = dv[e] = 0.0f;
  }
  const char* qbase = base + h * D * es;
  const char* gbase = (const char*)dout + ((int64_t)b * T * C + h * D) * es;
  int64_t q_first = causal ? (int64_t)tile * ROWS : 0; /* earlier queries see none of these keys */
  for (int64_t q0 = q_first; q0 < T; q0 += KB) {
    __syncthreads();
    dt_att_load_tile_<DT, DMAX, KB>(qs, qbase, q0, T, stride, D);
    dt_att_load_tile_<DT, DMAX, KB>(gs, gbase, q0, T, C, D);
    if (threadIdx.x < KB) {
      int64_t r = q0 + threadIdx.x;
      lses[threadIdx.x] = r < T ? lse[(int64_t)bh * T + r] : 0.0f;
      deltas[threadIdx.x] = r < T ? delta[(int64_t)bh * T + r] : 0.0f;
    }
    __syncthreads();
DT_UNROLL
    for (int i = 0; i < KB; i++) {
      float sacc = 0.0f, pacc = 0.0f;
DT_UNROLL
      for (int e = 0; e < ATT_PER_LANE; e++) {
        sacc += k[e] * qs[i][e * G + t];
        pacc += v[e] * gs[i][e * G + t];
      }
      sacc = dt_att_group_sum_<G>(sacc);
      pacc = dt_att_group_sum_<G>(pacc);
      int64_t qi = q0 + i;
      int visible = qi < T && key < T && dt_attention_visible(qi, key, causal);
      float p = visible ? dt_attention_p_lse_f(sacc * scale, lses[i]) : 0.0f;
      float ds = dt_attention_ds_f(p, pacc, deltas[i]) * scale;
DT_UNROLL
      for (int e = 0; e < ATT_PER_LANE; e++) {
        dv[e] += p * gs[i][e * G + t];
        dk[e] += ds * qs[i][e * G + t];
      }
    }
  }
  if (key < T) {
    int64_t at = ((int64_t)b * T + key) * stride + h * D;
DT_UNROLL
    for (int e = 0; e < ATT_PER_LANE; e++) {
      int d = e * G + t;
      if (d < D) {
        dt_store_float(dqkv, DT, at + C + d, dk[e]);
        dt_store_float(dqkv, DT, at + 2 * C + d, dv[e]);
      }
    }
  }
}

/* ---- launchers ------------------------------------------------------------------------ */

template <int DT, int DMAX>
static dt_status dt_attention_fwd_run_(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                                       int64_t D, int32_t causal, float scale, cudaStream_t s) {
  constexpr int ROWS = dt_att_geom_<DMAX>::ROWS;
  dim3 grid((unsigned)(B * H), (unsigned)((T + ROWS - 1) / ROWS));
  auto kernel = dt_attention_fwd_k_<DT, DMAX>;
  DT_LAUNCH(kernel, grid, ATT_THREADS, 0, s, out, lse, qkv, (int)T, (int)H, (int)D,
            (int)causal, scale);
  DT_CHECK_LAUNCH(s, "dt_attention_fwd");
  return DT_OK;
}

template <int DT, int DMAX>
static dt_status dt_attention_bwd_run_(void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                                       const float* lse, int64_t B, int64_t T, int64_t H, int64_t D, int32_t causal,
                                       float scale, cudaStream_t s) {
  constexpr int ROWS = dt_att_geom_<DMAX>::ROWS;
  dim3 grid((unsigned)(B * H), (unsigned)((T + ROWS - 1) / ROWS));
  auto dq_kernel = dt_attention_bwd_dq_k_<DT, DMAX>;
  auto dkv_kernel = dt_attention_bwd_dkv_k_<DT, DMAX>;
  DT_LAUNCH(dq_kernel, grid, ATT_THREADS, 0, s, dqkv, delta, dout, qkv, out, lse, (int)T,
            (int)H, (int)D, (int)causal, scale);
  DT_CHECK_LAUNCH(s, "dt_attention_bwd (dq)");
  DT_LAUNCH(dkv_kernel, grid, ATT_THREADS, 0, s, dqkv, (const float*)delta, dout, qkv, lse,
            (int)T, (int)H, (int)D, (int)causal, scale);
  DT_CHECK_LAUNCH(s, "dt_attention_bwd (dk, dv)");
  return DT_OK;
}

/* The kernel instance for a dtype and a head dimension. */
#define DT_ATT_DISPATCH_(RUN, DT, ...)                                 \
  (D <= 32    ? RUN<DT, 32>(__VA_ARGS__)                              \
   : D <= 64  ? RUN<DT, 64>(__VA_ARGS__)                              \
   : D <= 128 ? RUN<DT, 128>(__VA_ARGS__)                             \
              : RUN<DT, 256>(__VA_ARGS__))

DT_EXPORT dt_status dt_attention_fwd(void* out, float* lse, const void* qkv, int32_t dtype, int64_t B, int64_t T,
                                     int64_t H, int64_t D, int32_t causal, float scale, void* stream) {
  int empty = 1;
  DT_TRY_(dt_check_attention_fwd(out, lse, qkv, dtype, B, T, H, D, causal, scale, &empty));
  if (empty) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (dt_attention_tc_takes_(dtype, D)) return dt_attention_tc_fwd_(out, lse, qkv, dtype, B, T, H, D, causal, scale, s);
  if (dtype == DT_BF16) return dt_attention_fwd_run_<DT_BF16, 256>(out, lse, qkv, B, T, H, D, causal, scale, s);
  if (dtype == DT_F16) return dt_attention_fwd_run_<DT_F16, 256>(out, lse, qkv, B, T, H, D, causal, scale, s);
  return DT_ATT_DISPATCH_(dt_attention_fwd_run_, DT_F32, out, lse, qkv, B, T, H, D, causal, scale, s);
}

DT_EXPORT dt_status dt_attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                     int32_t dtype, int64_t B, int64_t T, int64_t H, int64_t D, int32_t causal,
                                     float scale, void* stream) {
  int empty = 1;
  DT_TRY_(dt_check_attention_bwd(dqkv, dout, qkv, out, lse, dtype, B, T, H, D, causal, scale, &empty));
  if (empty) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  float* delta = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&delta, (size_t)(B * H * T) * sizeof(float), s, "dt_attention_bwd"));
  dt_status st;
  if (dt_attention_tc_takes_(dtype, D))
    st = dt_attention_tc_bwd_(dqkv, delta, dout, qkv, out, lse, dtype, B, T, H, D, causal, scale, s);
  else if (dtype == DT_BF16)
    st = dt_attention_bwd_run_<DT_BF16, 256>(dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal, scale, s);
  else if (dtype == DT_F16)
    st = dt_attention_bwd_run_<DT_F16, 256>(dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal, scale, s);
  else
    st = DT_ATT_DISPATCH_(dt_attention_bwd_run_, DT_F32, dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal,
                          scale, s);
  dt_status freed = dt_scratch_free_(delta, s);
  return st != DT_OK ? st : freed;
}
