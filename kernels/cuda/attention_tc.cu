/* attention_tc.cu — flash attention (FlashAttention-2's scheme) on tensor
 * cores for bf16/f16 inputs, f32 accumulation, head dims up to 128.
 *
 * A block of 4 warps owns 64 rows of one (batch, head): query rows (forward,
 * dQ) or key rows (dK, dV), 16 per warp; the other side streams through
 * shared memory in tiles of BN rows (64 for head dims up to 64, 32 up to
 * 128), loaded by cp.async into two buffers so the next tile arrives while
 * this one is multiplied. Every product is mma.m16n8k16 (mma.cuh): a warp's
 * 16 x BN scores are 16 x 8 accumulators in registers, and the softmax's
 * probabilities go from the accumulator layout straight into the A operand
 * of the next product (the two layouts agree on which lane holds what).
 * Shared rows are DMAX + 8 elements long: the 8 lanes that read one column
 * of 8 rows hit 8 distinct bank groups (row stride 36 or 68 words), so
 * fragment loads are free of bank conflicts without ldmatrix.
 *
 * Causal: key tiles past a block's last query are never loaded, a warp skips
 * the tiles wholly above its own diagonal, and the heaviest blocks start
 * first. Softmax: the online form of kernels/common/attention.h (running
 * maximum and sum, rescaled) with exp as 2^x on the special-function unit,
 * as FlashAttention does; the saved log-sum-exp is the natural one of the
 * scaled scores, as the f32 kernels save it. Backward is two passes with no
 * atomics (deterministic): dQ with delta = rowsum(dO * O), then dK and dV.
 * Probabilities and dS are rounded to the input dtype before their products
 * (FlashAttention-2 does the same), which the tests' tolerances allow for. */
#include "attention.h"
#include "attention_tc.cuh"
#include "mma.cuh"

#define TC_THREADS 128
#define TC_BM 64
#define TC_LOG2E 1.4426950408889634f

template <int DMAX>
struct dt_tc_geom_ {
  static constexpr int DP = DMAX + 8;              /* padded shared row, in elements */
  static constexpr int BN = DMAX <= 64 ? 64 : 32;  /* rows of a streamed tile */
  static constexpr int KT = DMAX / 16;             /* k steps over the head dimension */
  static constexpr int NT = BN / 8;                /* 8-wide column blocks of a tile */
  static constexpr int DN = DMAX / 8;              /* 8-wide column blocks of the head dimension */
};

/* Two adjacent elements of shared memory as one register (4-byte aligned). */
__device__ __forceinline__ uint32_t dt_tc_ld32_(const uint16_t* p) {
#ifdef DT_CUDA_EMU
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
#else
  return *(const uint32_t*)p;
#endif
}

/* Elements p[0] and p[DP] (two rows, one column) as one register: a B operand
 * whose k runs down a row-major tile. */
template <int DP>
__device__ __forceinline__ uint32_t dt_tc_col2_(const uint16_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[DP] << 16;
}

/* The A fragment of rows [r0, r0 + 16) and columns [c0, c0 + 16) of a shared tile. */
template <int DP>
__device__ __forceinline__ void dt_tc_a_frag_(uint32_t (&a)[4], const uint16_t* tile, int r0, int c0, int g, int t) {
  const uint16_t* p = tile + (r0 + g) * DP + c0 + 2 * t;
  a[0] = dt_tc_ld32_(p);
  a[1] = dt_tc_ld32_(p + 8 * DP);
  a[2] = dt_tc_ld32_(p + 8);
  a[3] = dt_tc_ld32_(p + 8 * DP + 8);
}

/* The B fragment (k = 16 columns from c0, n = rows [r0, r0 + 8)) of a tile
 * whose rows are B's columns: Q·Kᵀ-like products. */
template <int DP>
__device__ __forceinline__ void dt_tc_bt_frag_(uint32_t (&b)[2], const uint16_t* tile, int r0, int c0, int g, int t) {
  const uint16_t* p = tile + (r0 + g) * DP + c0 + 2 * t;
  b[0] = dt_tc_ld32_(p);
  b[1] = dt_tc_ld32_(p + 8);
}

/* The B fragment (k = rows [r0, r0 + 16), n = columns [c0, c0 + 8)) of a
 * row-major tile: P·V-like products. */
template <int DP>
__device__ __forceinline__ void dt_tc_b_frag_(uint32_t (&b)[2], const uint16_t* tile, int r0, int c0, int g, int t) {
  const uint16_t* p = tile + (r0 + 2 * t) * DP + c0 + g;
  b[0] = dt_tc_col2_<DP>(p);
  b[1] = dt_tc_col2_<DP>(p + 8 * DP);
}

/* The A operand of k block kb (16 columns) from 16 x 8 accumulators: the
 * accumulator layout of n blocks 2kb and 2kb + 1 is the A layout. */
template <int DT, int NT>
__device__ __forceinline__ void dt_tc_acc_to_a_(uint32_t (&a)[4], const float (&acc)[NT][4], int kb) {
  a[0] = dt_mma_pack_<DT>(acc[2 * kb][0], acc[2 * kb][1]);
  a[1] = dt_mma_pack_<DT>(acc[2 * kb][2], acc[2 * kb][3]);
  a[2] = dt_mma_pack_<DT>(acc[2 * kb + 1][0], acc[2 * kb + 1][1]);
  a[3] = dt_mma_pack_<DT>(acc[2 * kb + 1][2], acc[2 * kb + 1][3]);
}

/* Rows [r0, r0 + rows) of a head (element d of row r at src[r * stride + d])
 * into a shared tile, zero past row `rend` and past column D: 16-byte
 * cp.async copies when `vec` (D % 8 == 0, 16-byte aligned rows), else plain
 * element stores. The caller commits the group. */
template <int DMAX>
__device__ __forceinline__ void dt_tc_load_rows_(uint16_t* dst, const uint16_t* src, int64_t r0, int rows,
                                                 int64_t rend, int64_t stride, int D, int vec) {
  constexpr int DP = dt_tc_geom_<DMAX>::DP, CPR = DMAX / 8;
  if (vec) {
    for (int i = threadIdx.x; i < rows * CPR; i += TC_THREADS) {
      int j = i / CPR, c = i % CPR;
      int64_t r = r0 + j;
      int ok = r < rend && c * 8 < D;
      dt_cp_async16_(dst + j * DP + c * 8, ok ? src + r * stride + c * 8 : src, ok ? 16 : 0);
    }
  } else {
    for (int i = threadIdx.x; i < rows * DMAX; i += TC_THREADS) {
      int j = i / DMAX, d = i % DMAX;
      int64_t r = r0 + j;
      dst[j * DP + d] = r < rend && d < D ? src[r * stride + d] : (uint16_t)0;
    }
  }
}

template <int DT>
__device__ __forceinline__ uint16_t dt_tc_round_(float v) {
  return DT == DT_BF16 ? dt_f32_to_bf16(v) : dt_f32_to_f16(v);
}

/* Row `row` of a warp's 16 x DMAX accumulators times `mul` into dst[0, D):
 * lane t holds columns 8nd + 2t and 8nd + 2t + 1, in accumulator half `r`. */
template <int DT, int DN>
__device__ __forceinline__ void dt_tc_store_row_(uint16_t* dst, const float (&acc)[DN][4], int r, float mul, int D,
                                                 int t, int vec) {
DT_UNROLL
  for (int nd = 0; nd < DN; nd++) {
    int d = nd * 8 + 2 * t;
    if (d >= D) break;
    float v0 = acc[nd][2 * r] * mul, v1 = acc[nd][2 * r + 1] * mul;
    if (vec) {
      uint32_t w = dt_mma_pack_<DT>(v0, v1);
#ifdef DT_CUDA_EMU
      memcpy(dst + d, &w, sizeof w);
#else
      *(uint32_t*)(dst + d) = w;
#endif
    } else {
      dst[d] = dt_tc_round_<DT>(v0);
      if (d + 1 < D) dst[d + 1] = dt_tc_round_<DT>(v1);
    }
  }
}

/* ---- forward ----------------------------------------------------------------------------
 * grid (B * H, query tiles); qkv rows have stride 3C, C = H * D. */
template <int DT, int DMAX>
__global__ void __launch_bounds__(TC_THREADS)
    dt_attention_tc_fwd_k_(uint16_t* out, float* lse, const uint16_t* qkv, int T, int H, int D, int causal,
                           float scale, int vec) {
  using Geom = dt_tc_geom_<DMAX>;
  constexpr int DP = Geom::DP, BN = Geom::BN, KT = Geom::KT, NT = Geom::NT, DN = Geom::DN;
  DT_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* qs = smem;              /* [TC_BM][DP] */
  uint16_t* ks = qs + TC_BM * DP;   /* [2][BN][DP] */
  uint16_t* vs = ks + 2 * BN * DP;  /* [2][BN][DP] */
  const int bh = blockIdx.x, b = bh / H, h = bh % H;
  const int tile = gridDim.y - 1 - blockIdx.y; /* causal: the tiles with the most keys first */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t C = (int64_t)H * D, stride = 3 * C;
  const uint16_t* base = qkv + (int64_t)b * T * stride + (int64_t)h * D;
  const int q0 = tile * TC_BM, wrow = q0 + warp * 16;
  const int64_t rows_end = q0 + TC_BM < T ? q0 + TC_BM : T;
  const int64_t kend = dt_attention_key_end(rows_end, T, causal);
  const int ntiles = (int)((kend + BN - 1) / BN);

  dt_tc_load_rows_<DMAX>(qs, base, q0, TC_BM, T, stride, D, vec);
  dt_tc_load_rows_<DMAX>(ks, base + C, 0, BN, kend, stride, D, vec);
  dt_tc_load_rows_<DMAX>(vs, base + 2 * C, 0, BN, kend, stride, D, vec);
  dt_cp_async_commit_();

  uint32_t qf[KT][4];
  float o[DN][4];
DT_UNROLL
  for (int nd = 0; nd < DN; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BN, buf = it & 1;
    if (it + 1 < ntiles) {
      dt_tc_load_rows_<DMAX>(ks + (buf ^ 1) * BN * DP, base + C, k0 + BN, BN, kend, stride, D, vec);
      dt_tc_load_rows_<DMAX>(vs + (buf ^ 1) * BN * DP, base + 2 * C, k0 + BN, BN, kend, stride, D, vec);
    }
    dt_cp_async_commit_();
    dt_cp_async_wait_<1>(); /* this tile is in; the next one may still be on its way */
    __syncthreads();
    if (it == 0) {
DT_UNROLL
      for (int kk = 0; kk < KT; kk++) dt_tc_a_frag_<DP>(qf[kk], qs, warp * 16, kk * 16, g, t);
    }
    const uint16_t* kt = ks + buf * BN * DP;
    const uint16_t* vt = vs + buf * BN * DP;
    if (wrow < T && (!causal || k0 <= wrow + 15)) { /* warp-uniform: some key of the tile is visible */
      float s[NT][4];
DT_UNROLL
      for (int nb = 0; nb < NT; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
DT_UNROLL
      for (int kk = 0; kk < KT; kk++) {
        if (kk * 16 >= D) break;
DT_UNROLL
        for (int nb = 0; nb < NT; nb++) {
          uint32_t bf[2];
          dt_tc_bt_frag_<DP>(bf, kt, nb * 8, kk * 16, g, t);
          dt_mma_16816_<DT>(s[nb], qf[kk], bf);
        }
      }
      float mt[2] = {-INFINITY, -INFINITY};
DT_UNROLL
      for (int nb = 0; nb < NT; nb++) {
DT_UNROLL
        for (int i = 0; i < 4; i++) {
          int key = k0 + nb * 8 + 2 * t + (i & 1), row = wrow + g + 8 * (i >> 1);
          int visible = key < kend && dt_attention_visible(row, key, causal);
          s[nb][i] = visible ? s[nb][i] * scale : -INFINITY;
          mt[i >> 1] = dt_maxf(mt[i >> 1], s[nb][i]);
        }
      }
      float ms[2]; /* the new maximum, times log2(e) (0 while the row has seen nothing) */
DT_UNROLL
      for (int r = 0; r < 2; r++) {
        mt[r] = dt_maxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 1));
        mt[r] = dt_maxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 2));
        float m_new = dt_maxf(m[r], mt[r]);
        ms[r] = m_new == -INFINITY ? 0.0f : m_new * TC_LOG2E;
        float corr = m[r] == -INFINITY ? 0.0f : dt_ex2_(m[r] * TC_LOG2E - ms[r]);
        m[r] = m_new;
        l[r] *= corr;
DT_UNROLL
        for (int nd = 0; nd < DN; nd++) {
          o[nd][2 * r] *= corr;
          o[nd][2 * r + 1] *= corr;
        }
      }
DT_UNROLL
      for (int nb = 0; nb < NT; nb++) {
DT_UNROLL
        for (int i = 0; i < 4; i++) {
          float p = s[nb][i] == -INFINITY ? 0.0f : dt_ex2_(s[nb][i] * TC_LOG2E - ms[i >> 1]);
          s[nb][i] = p;
          l[i >> 1] += p;
        }
      }
DT_UNROLL
      for (int kb = 0; kb < BN / 16; kb++) {
        uint32_t pa[4];
        dt_tc_acc_to_a_<DT, NT>(pa, s, kb);
DT_UNROLL
        for (int nd = 0; nd < DN; nd++) {
          if (nd * 8 >= D) break;
          uint32_t bf[2];
          dt_tc_b_frag_<DP>(bf, vt, kb * 16, nd * 8, g, t);
          dt_mma_16816_<DT>(o[nd], pa, bf);
        }
      }
    }
    __syncthreads(); /* every warp is done with this buffer before it is refilled */
  }
  dt_cp_async_wait_<0>();

DT_UNROLL
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    int row = wrow + g + 8 * r;
    if (row < T) {
      dt_tc_store_row_<DT, DN>(out + ((int64_t)b * T + row) * C + (int64_t)h * D, o, r, 1.0f / l[r], D, t, vec);
      if (t == 0) lse[(int64_t)bh * T + row] = dt_attention_lse_f(m[r], l[r]);
    }
  }
}

/* ---- backward pass 1: dQ of the block's query rows, and delta = rowsum(dO * O) ------------ */
template <int DT, int DMAX>
__global__ void __launch_bounds__(TC_THREADS)
    dt_attention_tc_dq_k_(uint16_t* dqkv, float* delta_out, const uint16_t* dout, const uint16_t* qkv,
                          const uint16_t* out, const float* lse, int T, int H, int D, int causal, float scale,
                          int vec) {
  using Geom = dt_tc_geom_<DMAX>;
  constexpr int DP = Geom::DP, BN = Geom::BN, KT = Geom::KT, NT = Geom::NT, DN = Geom::DN;
  DT_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* qs = smem;              /* [TC_BM][DP] */
  uint16_t* gs = qs + TC_BM * DP;   /* [TC_BM][DP]: dO */
  uint16_t* ks = gs + TC_BM * DP;   /* [2][BN][DP] */
  uint16_t* vs = ks + 2 * BN * DP;  /* [2][BN][DP] */
  const int bh = blockIdx.x, b = bh / H, h = bh % H;
  const int tile = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t C = (int64_t)H * D, stride = 3 * C;
  const uint16_t* base = qkv + (int64_t)b * T * stride + (int64_t)h * D;
  const uint16_t* gbase = dout + (int64_t)b * T * C + (int64_t)h * D;
  const uint16_t* obase = out + (int64_t)b * T * C + (int64_t)h * D;
  const int q0 = tile * TC_BM, wrow = q0 + warp * 16;
  const int64_t rows_end = q0 + TC_BM < T ? q0 + TC_BM : T;
  const int64_t kend = dt_attention_key_end(rows_end, T, causal);
  const int ntiles = (int)((kend + BN - 1) / BN);
  const float sl2 = scale * TC_LOG2E;

  dt_tc_load_rows_<DMAX>(qs, base, q0, TC_BM, T, stride, D, vec);
  dt_tc_load_rows_<DMAX>(gs, gbase, q0, TC_BM, T, C, D, vec);
  dt_tc_load_rows_<DMAX>(ks, base + C, 0, BN, kend, stride, D, vec);
  dt_tc_load_rows_<DMAX>(vs, base + 2 * C, 0, BN, kend, stride, D, vec);
  dt_cp_async_commit_();

  /* delta and log-sum-exp of this lane's two rows (lanes t share a row: columns t, t + 4, ...) */
  float delta[2], lse2[2];
DT_UNROLL
  for (int r = 0; r < 2; r++) {
    int row = wrow + g + 8 * r;
    float acc = 0.0f;
    if (row < T)
      for (int d = t; d < D; d += 4)
        acc += dt_load_float(gbase, DT, (int64_t)row * C + d) * dt_load_float(obase, DT, (int64_t)row * C + d);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    delta[r] = acc;
    lse2[r] = row < T ? lse[(int64_t)bh * T + row] * TC_LOG2E : 0.0f;
    if (row < T && t == 0) delta_out[(int64_t)bh * T + row] = acc;
  }

  float dq[DN][4];
DT_UNROLL
  for (int nd = 0; nd < DN; nd++) dq[nd][0] = dq[nd][1] = dq[nd][2] = dq[nd][3] = 0.0f;

  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BN, buf = it & 1;
    if (it + 1 < ntiles) {
      dt_tc_load_rows_<DMAX>(ks + (buf ^ 1) * BN * DP, base + C, k0 + BN, BN, kend, stride, D, vec);
      dt_tc_load_rows_<DMAX>(vs + (buf ^ 1) * BN * DP, base + 2 * C, k0 + BN, BN, kend, stride, D, vec);
    }
    dt_cp_async_commit_();
    dt_cp_async_wait_<1>();
    __syncthreads();
    const uint16_t* kt = ks + buf * BN * DP;
    const uint16_t* vt = vs + buf * BN * DP;
    if (wrow < T && (!causal || k0 <= wrow + 15)) {
      float s[NT][4], dp[NT][4];
DT_UNROLL
      for (int nb = 0; nb < NT; nb++)
DT_UNROLL
        for (int i = 0; i < 4; i++) s[nb][i] = dp[nb][i] = 0.0f;
DT_UNROLL
      for (int kk = 0; kk < KT; kk++) {
        if (kk * 16 >= D) break;
        uint32_t qa[4], ga[4];
        dt_tc_a_frag_<DP>(qa, qs, warp * 16, kk * 16, g, t);
        dt_tc_a_frag_<DP>(ga, gs, warp * 16, kk * 16, g, t);
DT_UNROLL
        for (int nb = 0; nb < NT; nb++) {
          uint32_t kb2[2], vb2[2];
          dt_tc_bt_frag_<DP>(kb2, kt, nb * 8, kk * 16, g, t);
          dt_tc_bt_frag_<DP>(vb2, vt, nb * 8, kk * 16, g, t);
          dt_mma_16816_<DT>(s[nb], qa, kb2);
          dt_mma_16816_<DT>(dp[nb], ga, vb2);
        }
      }
DT_UNROLL
      for (int nb = 0; nb < NT; nb++) {
DT_UNROLL
        for (int i = 0; i < 4; i++) {
          int key = k0 + nb * 8 + 2 * t + (i & 1), row = wrow + g + 8 * (i >> 1);
          int visible = key < kend && dt_attention_visible(row, key, causal);
          float p = visible ? dt_ex2_(s[nb][i] * sl2 - lse2[i >> 1]) : 0.0f;
          s[nb][i] = dt_attention_ds_f(p, dp[nb][i], delta[i >> 1]) * scale;
        }
      }
DT_UNROLL
      for (int kb = 0; kb < BN / 16; kb++) {
        uint32_t da[4];
        dt_tc_acc_to_a_<DT, NT>(da, s, kb);
DT_UNROLL
        for (int nd = 0; nd < DN; nd++) {
          if (nd * 8 >= D) break;
          uint32_t bf[2];
          dt_tc_b_frag_<DP>(bf, kt, kb * 16, nd * 8, g, t);
          dt_mma_16816_<DT>(dq[nd], da, bf);
        }
      }
    }
    __syncthreads();
  }
  dt_cp_async_wait_<0>();

DT_UNROLL
  for (int r = 0; r < 2; r++) {
    int row = wrow + g + 8 * r;
    if (row < T) dt_tc_store_row_<DT, DN>(dqkv + ((int64_t)b * T + row) * stride + (int64_t)h * D, dq, r, 1.0f, D, t,
                                          vec);
  }
}

/* ---- backward pass 2: dK and dV of the block's key rows, over the queries that see them ---- */
template <int DT, int DMAX>
__global__ void __launch_bounds__(TC_THREADS)
    dt_attention_tc_dkv_k_(uint16_t* dqkv, const float* delta, const uint16_t* dout, const uint16_t* qkv,
                           const float* lse, int T, int H, int D, int causal, float scale, int vec) {
  using Geom = dt_tc_geom_<DMAX>;
  constexpr int DP = Geom::DP, BN = Geom::BN, KT = Geom::KT, NT = Geom::NT, DN = Geom::DN;
  DT_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* ks = smem;               /* [TC_BM][DP] */
  uint16_t* vs = ks + TC_BM * DP;    /* [TC_BM][DP] */
  uint16_t* qs = vs + TC_BM * DP;    /* [2][BN][DP] */
  uint16_t* gs = qs + 2 * BN * DP;   /* [2][BN][DP]: dO */
  float* lses = (float*)(gs + 2 * BN * DP); /* [2][BN]: log-sum-exp times log2(e) */
  float* deltas = lses + 2 * BN;            /* [2][BN] */
  const int bh = blockIdx.x, b = bh / H, h = bh % H;
  const int tile = blockIdx.y; /* causal: the first key tiles see the most queries, so they start first */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t C = (int64_t)H * D, stride = 3 * C;
  const uint16_t* base = qkv + (int64_t)b * T * stride + (int64_t)h * D;
  const uint16_t* gbase = dout + (int64_t)b * T * C + (int64_t)h * D;
  const float* lse_bh = lse + (int64_t)bh * T;
  const float* delta_bh = delta + (int64_t)bh * T;
  const int kt0 = tile * TC_BM, wkey = kt0 + warp * 16;
  const int q_first = causal ? kt0 : 0; /* earlier queries see none of these keys */
  const int ntiles = (T - q_first + BN - 1) / BN;
  const float sl2 = scale * TC_LOG2E;

  dt_tc_load_rows_<DMAX>(ks, base + C, kt0, TC_BM, T, stride, D, vec);
  dt_tc_load_rows_<DMAX>(vs, base + 2 * C, kt0, TC_BM, T, stride, D, vec);
  dt_tc_load_rows_<DMAX>(qs, base, q_first, BN, T, stride, D, vec);
  dt_tc_load_rows_<DMAX>(gs, gbase, q_first, BN, T, C, D, vec);
  if (threadIdx.x < BN) {
    int q = q_first + threadIdx.x;
    lses[threadIdx.x] = q < T ? lse_bh[q] * TC_LOG2E : 0.0f;
    deltas[threadIdx.x] = q < T ? delta_bh[q] : 0.0f;
  }
  dt_cp_async_commit_();

  float dk[DN][4], dv[DN][4];
DT_UNROLL
  for (int nd = 0; nd < DN; nd++)
DT_UNROLL
    for (int i = 0; i < 4; i++) dk[nd][i] = dv[nd][i] = 0.0f;

  for (int it = 0; it < ntiles; it++) {
    const int q0 = q_first + it * BN, buf = it & 1;
    if (it + 1 < ntiles) {
      int nb0 = q0 + BN;
      dt_tc_load_rows_<DMAX>(qs + (buf ^ 1) * BN * DP, base, nb0, BN, T, stride, D, vec);
      dt_tc_load_rows_<DMAX>(gs + (buf ^ 1) * BN * DP, gbase, nb0, BN, T, C, D, vec);
      if (threadIdx.x < BN) {
        int q = nb0 + threadIdx.x;
        lses[(buf ^ 1) * BN + threadIdx.x] = q < T ? lse_bh[q] * TC_LOG2E : 0.0f;
        deltas[(buf ^ 1) * BN + threadIdx.x] = q < T ? delta_bh[q] : 0.0f;
      }
    }
    dt_cp_async_commit_();
    dt_cp_async_wait_<1>();
    __syncthreads();
    const uint16_t* qt = qs + buf * BN * DP;
    const uint16_t* gt = gs + buf * BN * DP;
    const float* lt = lses + buf * BN;
    const float* dlt = deltas + buf * BN;
    if (wkey < T && (!causal || q0 + BN - 1 >= wkey)) { /* some query of the tile sees a key of the warp */
      float s[NT][4], dp[NT][4]; /* transposed: key rows, query columns */
DT_UNROLL
      for (int nb = 0; nb < NT; nb++)
DT_UNROLL
        for (int i = 0; i < 4; i++) s[nb][i] = dp[nb][i] = 0.0f;
DT_UNROLL
      for (int kk = 0; kk < KT; kk++) {
        if (kk * 16 >= D) break;
        uint32_t ka[4], va[4];
        dt_tc_a_frag_<DP>(ka, ks, warp * 16, kk * 16, g, t);
        dt_tc_a_frag_<DP>(va, vs, warp * 16, kk * 16, g, t);
DT_UNROLL
        for (int nb = 0; nb < NT; nb++) {
          uint32_t qb[2], gb[2];
          dt_tc_bt_frag_<DP>(qb, qt, nb * 8, kk * 16, g, t);
          dt_tc_bt_frag_<DP>(gb, gt, nb * 8, kk * 16, g, t);
          dt_mma_16816_<DT>(s[nb], ka, qb);
          dt_mma_16816_<DT>(dp[nb], va, gb);
        }
      }
DT_UNROLL
      for (int nb = 0; nb < NT; nb++) {
DT_UNROLL
        for (int i = 0; i < 4; i++) {
          int qi = nb * 8 + 2 * t + (i & 1), q = q0 + qi, key = wkey + g + 8 * (i >> 1);
          int visible = q < T && key < T && dt_attention_visible(q, key, causal);
          float p = visible ? dt_ex2_(s[nb][i] * sl2 - lt[qi]) : 0.0f;
          s[nb][i] = p;
          dp[nb][i] = dt_attention_ds_f(p, dp[nb][i], dlt[qi]) * scale;
        }
      }
DT_UNROLL
      for (int kb = 0; kb < BN / 16; kb++) {
        uint32_t pa[4], da[4];
        dt_tc_acc_to_a_<DT, NT>(pa, s, kb);
        dt_tc_acc_to_a_<DT, NT>(da, dp, kb);
DT_UNROLL
        for (int nd = 0; nd < DN; nd++) {
          if (nd * 8 >= D) break;
          uint32_t gb[2], qb[2];
          dt_tc_b_frag_<DP>(gb, gt, kb * 16, nd * 8, g, t);
          dt_tc_b_frag_<DP>(qb, qt, kb * 16, nd * 8, g, t);
          dt_mma_16816_<DT>(dv[nd], pa, gb);
          dt_mma_16816_<DT>(dk[nd], da, qb);
        }
      }
    }
    __syncthreads();
  }
  dt_cp_async_wait_<0>();

DT_UNROLL
  for (int r = 0; r < 2; r++) {
    int key = wkey + g + 8 * r;
    if (key < T) {
      uint16_t* at = dqkv + ((int64_t)b * T + key) * stride + (int64_t)h * D;
      dt_tc_store_row_<DT, DN>(at + C, dk, r, 1.0f, D, t, vec);
      dt_tc_store_row_<DT, DN>(at + 2 * C, dv, r, 1.0f, D, t, vec);
    }
  }
}

/* ---- launchers ------------------------------------------------------------------------ */

/* Shared bytes of each kernel. */
template <int DMAX>
struct dt_tc_smem_ {
  using G = dt_tc_geom_<DMAX>;
  static constexpr size_t fwd = (size_t)(TC_BM + 4 * G::BN) * G::DP * 2;
  static constexpr size_t dq = (size_t)(2 * TC_BM + 4 * G::BN) * G::DP * 2;
  static constexpr size_t dkv = dq + 4 * G::BN * sizeof(float);
};

/* 16-byte copies need 16-byte aligned rows: every pointer aligned and D (so C and 3C) a multiple of 8. */
static int dt_tc_vec_(int64_t D, const void* a, const void* b, const void* c, const void* d) {
  uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
  return D % 8 == 0 && any % 16 == 0;
}

template <int DT, int DMAX>
static dt_status dt_tc_fwd_run_(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H, int64_t D,
                                int32_t causal, float scale, cudaStream_t s) {
  auto kernel = dt_attention_tc_fwd_k_<DT, DMAX>;
  const size_t smem = dt_tc_smem_<DMAX>::fwd;
  DT_CHECK_CUDA(cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid((unsigned)(B * H), (unsigned)((T + TC_BM - 1) / TC_BM));
  int vec = dt_tc_vec_(D, out, qkv, qkv, qkv);
  DT_LAUNCH(kernel, grid, TC_THREADS, smem, s, (uint16_t*)out, lse, (const uint16_t*)qkv, (int)T, (int)H, (int)D,
            (int)causal, scale, vec);
  DT_CHECK_LAUNCH(s, "dt_attention_fwd");
  return DT_OK;
}

template <int DT, int DMAX>
static dt_status dt_tc_bwd_run_(void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                                const float* lse, int64_t B, int64_t T, int64_t H, int64_t D, int32_t causal,
                                float scale, cudaStream_t s) {
  auto dq_kernel = dt_attention_tc_dq_k_<DT, DMAX>;
  auto dkv_kernel = dt_attention_tc_dkv_k_<DT, DMAX>;
  const size_t dq_smem = dt_tc_smem_<DMAX>::dq, dkv_smem = dt_tc_smem_<DMAX>::dkv;
  DT_CHECK_CUDA(
      cudaFuncSetAttribute((const void*)dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem));
  DT_CHECK_CUDA(
      cudaFuncSetAttribute((const void*)dkv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkv_smem));
  dim3 grid((unsigned)(B * H), (unsigned)((T + TC_BM - 1) / TC_BM));
  int vec = dt_tc_vec_(D, dqkv, dout, qkv, out);
  DT_LAUNCH(dq_kernel, grid, TC_THREADS, dq_smem, s, (uint16_t*)dqkv, delta, (const uint16_t*)dout,
            (const uint16_t*)qkv, (const uint16_t*)out, lse, (int)T, (int)H, (int)D, (int)causal, scale, vec);
  DT_CHECK_LAUNCH(s, "dt_attention_bwd (dq)");
  DT_LAUNCH(dkv_kernel, grid, TC_THREADS, dkv_smem, s, (uint16_t*)dqkv, (const float*)delta, (const uint16_t*)dout,
            (const uint16_t*)qkv, lse, (int)T, (int)H, (int)D, (int)causal, scale, vec);
  DT_CHECK_LAUNCH(s, "dt_attention_bwd (dk, dv)");
  return DT_OK;
}

dt_status dt_attention_tc_fwd_(void* out, float* lse, const void* qkv, int32_t dtype, int64_t B, int64_t T, int64_t H,
                               int64_t D, int32_t causal, float scale, cudaStream_t s) {
  if (dtype == DT_BF16)
    return D <= 64 ? dt_tc_fwd_run_<DT_BF16, 64>(out, lse, qkv, B, T, H, D, causal, scale, s)
                   : dt_tc_fwd_run_<DT_BF16, 128>(out, lse, qkv, B, T, H, D, causal, scale, s);
  return D <= 64 ? dt_tc_fwd_run_<DT_F16, 64>(out, lse, qkv, B, T, H, D, causal, scale, s)
                 : dt_tc_fwd_run_<DT_F16, 128>(out, lse, qkv, B, T, H, D, causal, scale, s);
}

dt_status dt_attention_tc_bwd_(void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                               const float* lse, int32_t dtype, int64_t B, int64_t T, int64_t H, int64_t D,
                               int32_t causal, float scale, cudaStream_t s) {
  if (dtype == DT_BF16)
    return D <= 64 ? dt_tc_bwd_run_<DT_BF16, 64>(dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal, scale, s)
                   : dt_tc_bwd_run_<DT_BF16, 128>(dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal, scale, s);
  return D <= 64 ? dt_tc_bwd_run_<DT_F16, 64>(dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal, scale, s)
                 : dt_tc_bwd_run_<DT_F16, 128>(dqkv, delta, dout, qkv, out, lse, B, T, H, D, causal, scale, s);
}
