/* layernorm.cu — CUDA launches of layer norm, forward and backward, for rows
 * of f32, bf16 or f16 (statistics and sums in f32/double, outputs rounded
 * once). The forward may add a residual first and keep the sum (the residual
 * stream of a transformer block: one pass instead of an add and a norm). Rows
 * of up to 1024 columns in one dtype, 16-byte aligned (GPT-2's 768 among
 * them), go one warp each with 128-bit loads and stores and shuffle
 * reductions (no block barrier); other rows get a block each, a row of up to
 * ROW_CACHE * DT_BLOCK values staying in registers between its passes. The
 * backward takes the same rows a warp each (others a block each), writes (or
 * adds to) dinp and keeps each block's column sums of dout * xhat and dout
 * for the weight and bias gradients (the warp rows through shared memory, in
 * warp order: no atomics), folded in a fixed order by two more kernels (strips of 32
 * columns by chunks of the partial rows, then the chunks per column), so the
 * fold fills the GPU (C = 768: 48 strips x 11 chunks = 528 blocks, not the 3
 * a thread per column gives) and the result never depends on timing.
 * Arithmetic: kernels/common/layernorm.h. */
#include "convert.h"
#include "cuda_internal.cuh"
#include "layernorm.h"
#include "vec128.cuh"

/* Values per thread kept in registers (rows of up to 1024 columns). */
#define ROW_CACHE 4
/* Row kernels: at least this many blocks of DT_BLOCK threads resident per
 * multiprocessor (at most 64 registers a thread): half the SM's warps, what a
 * memory-bound row needs in flight (docs/GPU_KERNELS.md). */
#define LN_MIN_BLOCKS 4
/* Backward blocks per multiprocessor (each keeps a row of column sums). */
#define LN_BWD_BLOCKS_PER_SM 4
/* The fold's first pass: blocks of 32 columns x 8 row lanes, about this many per multiprocessor. */
#define LN_FOLD_LANES 8
#define LN_FOLD_BLOCKS_PER_SM 4

/* ---- kernels ------------------------------------------------------------------------
 * CACHED = true: the row fits in registers (C <= ROW_CACHE * blockDim.x). */

/* Element j of row r's input: inp (+ res, rounded to inp's dtype). */
__device__ __forceinline__ float dt_ln_x_(const void* inp, int32_t idt, const void* res, int32_t rdt, int64_t at) {
  float v = dt_load_float(inp, idt, at);
  if (res) v = dt_round_float(v + dt_load_float(res, rdt, at), idt);
  return v;
}

template <bool CACHED>
__global__ void __launch_bounds__(DT_BLOCK, LN_MIN_BLOCKS) dt_layernorm_fwd_k_(void* out, float* mean, float* rstd, const void* inp, const float* weight,
                                    const float* bias, int64_t rows, int64_t C, float eps, int32_t odt, int32_t idt,
                                    const void* res, int32_t rdt, void* sum_out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * C;
    float v[ROW_CACHE];
    double sum = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        v[k] = j < C ? dt_ln_x_(inp, idt, res, rdt, base + j) : 0.0f;
        if (j < C && sum_out) dt_store_float(sum_out, idt, base + j, v[k]);
        sum += v[k];
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        float x = dt_ln_x_(inp, idt, res, rdt, base + j);
        if (sum_out) dt_store_float(sum_out, idt, base + j, x);
        sum += x;
      }
    }
    double mu = dt_block_sum_(sum) / (double)C;
    double sq = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        double d = (double)v[k] - mu;
        if (j < C) sq += d * d;
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        double d = (double)dt_ln_x_(inp, idt, res, rdt, base + j) - mu;
        sq += d * d;
      }
    }
    float var = (float)(dt_block_sum_(sq) / (double)C);
    float mean_f = (float)mu;
    float rstd_f = dt_layernorm_rstd_f(var, eps); /* as dt_layernorm_moments */
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < C)
          dt_store_float(out, odt, base + j,
                         dt_layernorm_out_f(v[k], mean_f, rstd_f, weight ? weight[j] : 1.0f, bias ? bias[j] : 0.0f));
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
        dt_store_float(out, odt, base + j,
                       dt_layernorm_out_f(dt_ln_x_(inp, idt, res, rdt, base + j), mean_f, rstd_f,
                                          weight ? weight[j] : 1.0f, bias ? bias[j] : 0.0f));
    }
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mean_f;
      if (rstd) rstd[r] = rstd_f;
    }
  }
}

/* The sum of v over the warp (every lane gets it), in a fixed order. */
__device__ __forceinline__ double dt_warp_sum_f64_(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/* 16-byte vectors a lane keeps of a warp's row: rows of up to 1024 columns. */
template <int DT>
struct dt_ln_warp_ {
  static constexpr int N = dt_vec_<DT>::N, VECS = 1024 / (32 * N);
};

/* The N values of one 16-byte vector kept as its raw bits (half the registers of f32 for bf16/f16). */
template <int DT>
__device__ __forceinline__ void dt_ln_unpack_(float* out, uint4 raw) {
  if (DT == DT_F32) {
    memcpy(out, &raw, 16);
  } else {
    uint16_t h[8];
    memcpy(h, &raw, 16);
DT_UNROLL
    for (int i = 0; i < 8; i++) out[i] = DT == DT_BF16 ? dt_bf16_to_f32(h[i]) : dt_f16_to_f32(h[i]);
  }
}

/* Layer norm forward, a warp per row: inp, res, out and sum_out all of dtype
 * DT, C a multiple of the vector width, every row 16-byte aligned, C <= 1024.
 * The row stays in registers as loaded (raw 16-byte vectors); the same
 * per-element arithmetic and double sums as dt_layernorm_fwd_k_. */
template <int DT>
__global__ void __launch_bounds__(DT_BLOCK, LN_MIN_BLOCKS)
    dt_layernorm_fwd_warp_k_(void* out, float* mean, float* rstd, const void* inp, const float* weight,
                             const float* bias, int64_t rows, int64_t C, float eps, const void* res, void* sum_out) {
  constexpr int N = dt_ln_warp_<DT>::N, VECS = dt_ln_warp_<DT>::VECS;
  constexpr int64_t es = DT == DT_F32 ? 4 : 2;
  const int lane = threadIdx.x % 32;
  const int64_t nv = C / N, per_block = blockDim.x / 32;
  for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * per_block) {
    const int64_t base = r * C;
    uint4 raw[VECS];
    double sum = 0.0;
DT_UNROLL
    for (int k = 0; k < VECS; k++) {
      int64_t c = lane + 32 * k;
      if (c >= nv) break;
      raw[k] = *(const uint4*)((const char*)inp + (base + c * N) * es);
      float v[N];
      dt_ln_unpack_<DT>(v, raw[k]);
      if (res) {
        float rv[N];
        dt_vec_load_<DT>(rv, (const char*)res + (base + c * N) * es);
DT_UNROLL
        for (int i = 0; i < N; i++) v[i] = dt_round_float(v[i] + rv[i], DT);
        dt_vec_store_<DT>(&raw[k], v); /* exact: v is already of dtype DT */
        if (sum_out) *(uint4*)((char*)sum_out + (base + c * N) * es) = raw[k];
      }
DT_UNROLL
      for (int i = 0; i < N; i++) sum += v[i];
    }
    const double mu = dt_warp_sum_f64_(sum) / (double)C;
    double sq = 0.0;
DT_UNROLL
    for (int k = 0; k < VECS; k++) {
      if (lane + 32 * k >= nv) break;
      float v[N];
      dt_ln_unpack_<DT>(v, raw[k]);
DT_UNROLL
      for (int i = 0; i < N; i++) {
        double d = (double)v[i] - mu;
        sq += d * d;
      }
    }
    const float var = (float)(dt_warp_sum_f64_(sq) / (double)C);
    const float mean_f = (float)mu, rstd_f = dt_layernorm_rstd_f(var, eps);
DT_UNROLL
    for (int k = 0; k < VECS; k++) {
      int64_t c = lane + 32 * k;
      if (c >= nv) break;
      float v[N], o[N];
      dt_ln_unpack_<DT>(v, raw[k]);
DT_UNROLL
      for (int i = 0; i < N; i++) {
        int64_t j = c * N + i;
        o[i] = dt_layernorm_out_f(v[i], mean_f, rstd_f, weight ? weight[j] : 1.0f, bias ? bias[j] : 0.0f);
      }
      dt_vec_store_<DT>((char*)out + (base + c * N) * es, o);
    }
    if (lane == 0) {
      if (mean) mean[r] = mean_f;
      if (rstd) rstd[r] = rstd_f;
    }
  }
}

/* dinp (= or +=) rstd * ((g - mean(g)) - xhat * mean(g * xhat)), g = dout * w,
 * for the block's rows; partial (when not NULL): this block's sums over its
 * rows of dout * xhat (first C) and dout (next C), at partial[blockIdx.x * 2C]. */
template <bool CACHED>
__global__ void __launch_bounds__(DT_BLOCK, LN_MIN_BLOCKS) dt_layernorm_bwd_k_(void* dinp, double* partial, const void* dout, const void* inp,
                                    const float* weight, const float* mean, const float* rstd, int64_t rows,
                                    int64_t C, int32_t ddt, int32_t idt, int32_t xdt, int32_t add) {
  double pw[ROW_CACHE], pb[ROW_CACHE];
  double* mine = partial ? partial + (int64_t)blockIdx.x * 2 * C : NULL;
  for (int k = 0; k < ROW_CACHE; k++) pw[k] = pb[k] = 0.0;
  if (!CACHED && mine) /* zeroed by the threads that add to them, so no barrier is needed */
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) mine[j] = mine[C + j] = 0.0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * C;
    float rs = rstd[r], mu = mean[r];
    float cdy[ROW_CACHE], cxhat[ROW_CACHE];
    double sum_g = 0.0, sum_g_xhat = 0.0;
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        cdy[k] = j < C ? dt_load_float(dout, ddt, base + j) : 0.0f;
        cxhat[k] = j < C ? dt_layernorm_xhat_f(dt_load_float(inp, idt, base + j), mu, rs) : 0.0f;
        float g = j < C && weight ? cdy[k] * weight[j] : cdy[k];
        sum_g += g;
        sum_g_xhat += (double)g * (double)cxhat[k];
        pw[k] += (double)(cdy[k] * cxhat[k]);
        pb[k] += (double)cdy[k];
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        float dy = dt_load_float(dout, ddt, base + j);
        float xhat = dt_layernorm_xhat_f(dt_load_float(inp, idt, base + j), mu, rs);
        float g = weight ? dy * weight[j] : dy;
        sum_g += g;
        sum_g_xhat += (double)g * (double)xhat;
        if (mine) {
          mine[j] += (double)(dy * xhat);
          mine[C + j] += (double)dy;
        }
      }
    }
    float mean_g = (float)(dt_block_sum_(sum_g) / (double)C);
    float mean_g_xhat = (float)(dt_block_sum_(sum_g_xhat) / (double)C);
    if (CACHED) {
      for (int k = 0; k < ROW_CACHE; k++) {
        int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j >= C) continue;
        float g = weight ? cdy[k] * weight[j] : cdy[k];
        float v = rs * ((g - mean_g) - cxhat[k] * mean_g_xhat);
        if (add) v += dt_load_float(dinp, xdt, base + j);
        dt_store_float(dinp, xdt, base + j, v);
      }
    } else {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        float dy = dt_load_float(dout, ddt, base + j);
        float g = weight ? dy * weight[j] : dy;
        float xhat = dt_layernorm_xhat_f(dt_load_float(inp, idt, base + j), mu, rs);
        float v = rs * ((g - mean_g) - xhat * mean_g_xhat);
        if (add) v += dt_load_float(dinp, xdt, base + j);
        dt_store_float(dinp, xdt, base + j, v);
      }
    }
  }
  if (CACHED && mine) {
    for (int k = 0; k < ROW_CACHE; k++) {
      int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
      if (j < C) {
        mine[j] = pw[k];
        mine[C + j] = pb[k];
      }
    }
  }
}

/* Element i (a constant once unrolled) of a 16-byte vector of dtype DT kept
 * as its raw bits, and the same element set to v rounded to DT: the backward
 * converts one element at a time, never a whole vector of floats at once. */
template <int DT>
__device__ __forceinline__ float dt_ln_get_(const uint4& raw, int i) {
  uint32_t w[4];
  memcpy(w, &raw, 16);
  if (DT == DT_F32) {
    float f;
    memcpy(&f, &w[i], 4);
    return f;
  }
  const uint16_t h = (uint16_t)(w[i / 2] >> (16 * (i % 2)));
  return DT == DT_BF16 ? dt_bf16_to_f32(h) : dt_f16_to_f32(h);
}
template <int DT>
__device__ __forceinline__ void dt_ln_set_(uint4& raw, int i, float v) {
  uint32_t w[4];
  memcpy(w, &raw, 16);
  if (DT == DT_F32) {
    memcpy(&w[i], &v, 4);
  } else {
    const uint32_t h = DT == DT_BF16 ? dt_f32_to_bf16(v) : dt_f32_to_f16(v), sh = 16 * (i % 2);
    w[i / 2] = (w[i / 2] & ~(0xffffu << sh)) | (h << sh);
  }
  memcpy(&raw, w, 16);
}

/* Per thread of a backward warp-row block: column sums it keeps of the 2C-wide
 * partial row (2 * 1024 columns over DT_BLOCK threads). */
#define LN_BWD_ACC (2 * 1024 / DT_BLOCK)

/* Layer norm backward, a warp per row (dout, inp and dinp all of dtype DT, C
 * a multiple of the vector width, at most 1024, rows 16-byte aligned): the
 * same per-element arithmetic and double row sums as dt_layernorm_bwd_k_,
 * the sums by shuffles in a fixed order. The row is read twice (the second
 * time from cache): kept in registers beside the column sums below, a bf16
 * row spilled at the 64 registers that 50 % occupancy allows; for the same
 * reason elements are converted one at a time from the raw vectors.
 * Parameter gradients (partial not NULL): a lane cannot keep its 2 x C / 32
 * column sums in registers (48 doubles at C = 768), so each round the block's
 * warps take consecutive rows, stage their rows' dout * xhat and dout in
 * shared memory (stage[warp][2C], f32: exactly the values the block kernel
 * adds), and after a barrier thread t adds columns t, t + 256, ... of the
 * staged rows in warp order into its own double sums. No atomics; the order
 * is fixed by the grid, so the bits never depend on timing. The block's sums
 * go to partial[blockIdx.x * 2C], the layout dt_layernorm_fold_rows_k_ takes. */
template <int DT>
__global__ void __launch_bounds__(DT_BLOCK, LN_MIN_BLOCKS)
    dt_layernorm_bwd_warp_k_(void* dinp, double* partial, const void* dout, const void* inp, const float* weight,
                             const float* mean, const float* rstd, int64_t rows, int64_t C, int32_t add) {
  DT_DYNAMIC_SHARED(float, stage);
  constexpr int N = dt_ln_warp_<DT>::N, VECS = dt_ln_warp_<DT>::VECS;
  constexpr int64_t es = DT == DT_F32 ? 4 : 2;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int64_t nv = C / N, C2 = 2 * C;
  float* mine = stage + (int64_t)warp * C2;
  double acc[LN_BWD_ACC];
DT_UNROLL
  for (int k = 0; k < LN_BWD_ACC; k++) acc[k] = 0.0;
  for (int64_t r0 = (int64_t)blockIdx.x * warps; r0 < rows; r0 += (int64_t)gridDim.x * warps) {
    const int64_t r = r0 + warp;
    if (r < rows) {
      const int64_t base = r * C;
      const float rs = rstd[r], mu = mean[r];
      double sum_g = 0.0, sum_g_xhat = 0.0;
DT_UNROLL
      for (int k = 0; k < VECS; k++) {
        const int64_t c = lane + 32 * k;
        if (c >= nv) break;
        const uint4 rdy = *(const uint4*)((const char*)dout + (base + c * N) * es);
        const uint4 rx = *(const uint4*)((const char*)inp + (base + c * N) * es);
DT_UNROLL
        for (int q = 0; q < N / 4; q++) { /* four columns at a time: one 16-byte store of each staged half */
          float dy[4], wdy[4];
DT_UNROLL
          for (int i = 0; i < 4; i++) {
            dy[i] = dt_ln_get_<DT>(rdy, 4 * q + i);
            const float xhat = dt_layernorm_xhat_f(dt_ln_get_<DT>(rx, 4 * q + i), mu, rs);
            const float g = weight ? dy[i] * weight[c * N + 4 * q + i] : dy[i];
            sum_g += g;
            sum_g_xhat += (double)g * (double)xhat;
            wdy[i] = dy[i] * xhat;
          }
          if (partial) {
            dt_vec_store_<DT_F32>(mine + c * N + 4 * q, wdy); /* exact: f32 into f32 */
            dt_vec_store_<DT_F32>(mine + C + c * N + 4 * q, dy);
          }
        }
      }
      const float mean_g = (float)(dt_warp_sum_f64_(sum_g) / (double)C);
      const float mean_g_xhat = (float)(dt_warp_sum_f64_(sum_g_xhat) / (double)C);
DT_UNROLL
      for (int k = 0; k < VECS; k++) {
        const int64_t c = lane + 32 * k;
        if (c >= nv) break;
        const int64_t at = (base + c * N) * es;
        const uint4 rdy = *(const uint4*)((const char*)dout + at), rx = *(const uint4*)((const char*)inp + at);
        uint4 out{};
        if (add) out = *(const uint4*)((const char*)dinp + at);
DT_UNROLL
        for (int i = 0; i < N; i++) {
          const float dy = dt_ln_get_<DT>(rdy, i), xhat = dt_layernorm_xhat_f(dt_ln_get_<DT>(rx, i), mu, rs);
          const float g = weight ? dy * weight[c * N + i] : dy;
          float v = rs * ((g - mean_g) - xhat * mean_g_xhat);
          if (add) v += dt_ln_get_<DT>(out, i);
          dt_ln_set_<DT>(out, i, v);
        }
        *(uint4*)((char*)dinp + at) = out;
      }
    }
    if (partial) { /* the whole block takes this branch: the barriers are uniform */
      __syncthreads();
      const int64_t left = rows - r0;
      const int valid = left < warps ? (int)left : warps;
DT_UNROLL
      for (int k = 0; k < LN_BWD_ACC; k++) {
        const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < C2)
          for (int w = 0; w < valid; w++) acc[k] += (double)stage[(int64_t)w * C2 + j];
      }
      __syncthreads(); /* the stage is refilled next round */
    }
  }
  if (partial) {
DT_UNROLL
    for (int k = 0; k < LN_BWD_ACC; k++) {
      const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
      if (j < C2) partial[(int64_t)blockIdx.x * C2 + j] = acc[k];
    }
  }
}

/* Fold pass 1: chunk[y][j] = sum of partial[b][j] over the rows b of chunk y
 * ([y * per, (y + 1) * per)), for the 32 columns j of block x of the 2C-wide
 * partial rows: lane (x, ly) adds rows ly, ly + 8, ... (coalesced across the
 * warp's 32 columns), then the 8 lane sums are added in lane order. */
__global__ void __launch_bounds__(32 * LN_FOLD_LANES)
    dt_layernorm_fold_rows_k_(double* chunk, const double* partial, int64_t blocks, int64_t C2, int64_t per) {
  __shared__ double lanes[LN_FOLD_LANES][32];
  const int tx = threadIdx.x % 32, ly = threadIdx.x / 32;
  const int64_t j = (int64_t)blockIdx.x * 32 + tx;
  const int64_t b0 = (int64_t)blockIdx.y * per, b1 = b0 + per < blocks ? b0 + per : blocks;
  double s = 0.0;
  if (j < C2)
    for (int64_t b = b0 + ly; b < b1; b += LN_FOLD_LANES) s += partial[b * C2 + j];
  lanes[ly][tx] = s;
  __syncthreads();
  if (ly == 0 && j < C2) {
    double t = 0.0;
    for (int k = 0; k < LN_FOLD_LANES; k++) t += lanes[k][tx];
    chunk[(int64_t)blockIdx.y * C2 + j] = t;
  }
}

/* dweight[j] (+)= sum over blocks of partial[b][j], dbias[j] of partial[b][C + j], in block order. */
__global__ void dt_layernorm_fold_k_(float* dweight, float* dbias, const double* partial, int64_t blocks, int64_t C,
                                     int32_t add) {
  DT_GRID_STRIDE(j, C) {
    double tw = 0.0, tb = 0.0;
    for (int64_t b = 0; b < blocks; b++) {
      tw += partial[b * 2 * C + j];
      tb += partial[b * 2 * C + C + j];
    }
    if (dweight) dweight[j] = (float)tw + (add ? dweight[j] : 0.0f);
    if (dbias) dbias[j] = (float)tb + (add ? dbias[j] : 0.0f);
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

static bool dt_ln_cached_(int64_t C) { return C <= (int64_t)ROW_CACHE * DT_BLOCK; }

/* Whether a forward's rows go a warp each: one dtype throughout, C a multiple
 * of the 16-byte vector and at most 1024, every pointer 16-byte aligned. */
static bool dt_ln_warp_rows_(const void* out, const void* inp, const void* res, const void* sum_out, int64_t C,
                             int32_t odt, int32_t idt, int32_t rdt) {
  if (odt != idt || (res && rdt != idt) || (!res && sum_out)) return false;
  const int64_t n = idt == DT_F32 ? 4 : 8;
  uintptr_t any = (uintptr_t)out | (uintptr_t)inp | (uintptr_t)res | (uintptr_t)sum_out;
  return (idt == DT_F32 || idt == DT_BF16 || idt == DT_F16) && C % n == 0 && C <= 1024 && any % 16 == 0;
}

DT_EXPORT dt_status dt_layernorm_fwd(void* out, float* mean, float* rstd, const void* inp, const float* weight,
                                     const float* bias, int64_t rows, int64_t C, float eps, int32_t out_dtype,
                                     int32_t inp_dtype, const void* res, int32_t res_dtype, void* sum_out,
                                     void* stream) {
  DT_TRY_(dt_check_layernorm_fwd(out, inp, rows, C, eps, out_dtype, inp_dtype, res, res_dtype, sum_out));
  if (rows == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (dt_ln_warp_rows_(out, inp, res, sum_out, C, out_dtype, inp_dtype, res_dtype)) {
    auto warp_kernel = inp_dtype == DT_BF16  ? dt_layernorm_fwd_warp_k_<DT_BF16>
                       : inp_dtype == DT_F16 ? dt_layernorm_fwd_warp_k_<DT_F16>
                                             : dt_layernorm_fwd_warp_k_<DT_F32>;
    DT_LAUNCH(warp_kernel, dt_row_grid_((rows + DT_BLOCK / 32 - 1) / (DT_BLOCK / 32)), DT_BLOCK, 0, s, out, mean, rstd,
              inp, weight, bias, rows, C, eps, res, sum_out);
    DT_CHECK_LAUNCH(s, "dt_layernorm_fwd");
    return DT_OK;
  }
  auto kernel = dt_ln_cached_(C) ? dt_layernorm_fwd_k_<true> : dt_layernorm_fwd_k_<false>;
  DT_LAUNCH(kernel, dt_row_grid_(rows), DT_BLOCK, 0, s, out, mean, rstd, inp, weight, bias, rows, C, eps, out_dtype,
            inp_dtype, res, res_dtype, sum_out);
  DT_CHECK_LAUNCH(s, "dt_layernorm_fwd");
  return DT_OK;
}

/* Whether a backward's rows go a warp each: dout, inp and dinp of one dtype,
 * C a multiple of the 16-byte vector and at most 1024, the three 16-byte aligned. */
static bool dt_ln_bwd_warp_rows_(const void* dinp, const void* dout, const void* inp, int64_t C, int32_t ddt,
                                 int32_t idt, int32_t xdt) {
  if (ddt != idt || xdt != idt) return false;
  const int64_t n = idt == DT_F32 ? 4 : 8;
  uintptr_t any = (uintptr_t)dinp | (uintptr_t)dout | (uintptr_t)inp;
  return (idt == DT_F32 || idt == DT_BF16 || idt == DT_F16) && C % n == 0 && C <= 1024 && any % 16 == 0;
}

/* dt_layernorm_bwd_warp_k_ on `blocks` blocks; its stage (DT_BLOCK / 32 rows
 * of 2C floats: 48 KiB at C = 768, 64 KiB at 1024) only when partial is kept. */
static dt_status dt_ln_bwd_warp_launch_(void* dinp, double* partial, const void* dout, const void* inp,
                                        const float* weight, const float* mean, const float* rstd, int64_t rows,
                                        int64_t C, int32_t dtype, int32_t add, unsigned blocks, cudaStream_t s) {
  auto kernel = dtype == DT_BF16  ? dt_layernorm_bwd_warp_k_<DT_BF16>
                : dtype == DT_F16 ? dt_layernorm_bwd_warp_k_<DT_F16>
                                  : dt_layernorm_bwd_warp_k_<DT_F32>;
  const size_t smem = partial ? (size_t)(DT_BLOCK / 32) * 2 * (size_t)C * sizeof(float) : 0;
  if (smem > 48 * 1024)
    DT_CHECK_CUDA(cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  DT_LAUNCH(kernel, blocks, DT_BLOCK, smem, s, dinp, partial, dout, inp, weight, mean, rstd, rows, C, add);
  DT_CHECK_LAUNCH(s, "dt_layernorm_bwd (warp rows)");
  return DT_OK;
}

DT_EXPORT dt_status dt_layernorm_bwd(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                                     const float* weight, const float* mean, const float* rstd, int64_t rows,
                                     int64_t C, int32_t dout_dtype, int32_t inp_dtype, int32_t dinp_dtype,
                                     int32_t flags, void* stream) {
  DT_TRY_(dt_check_layernorm_bwd(dinp, dout, inp, mean, rstd, rows, C, dout_dtype, inp_dtype, dinp_dtype, flags));
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int params = dweight || dbias, add_params = (flags & 2) != 0;
  if (rows == 0) { /* the parameter gradients of an empty batch are zero */
    if (!add_params && dweight && C > 0)
      DT_CHECK_CUDA_WORK(cudaMemsetAsync(dweight, 0, (size_t)C * sizeof(float), s));
    if (!add_params && dbias && C > 0) DT_CHECK_CUDA_WORK(cudaMemsetAsync(dbias, 0, (size_t)C * sizeof(float), s));
    return DT_OK;
  }
  const bool warp_rows = dt_ln_bwd_warp_rows_(dinp, dout, inp, C, dout_dtype, inp_dtype, dinp_dtype);
  /* a warp per row: DT_BLOCK / 32 rows per block; a block per row otherwise */
  const int64_t units = warp_rows ? (rows + DT_BLOCK / 32 - 1) / (DT_BLOCK / 32) : rows;
  int64_t cap = (int64_t)dt_cuda_sm_count_() * LN_BWD_BLOCKS_PER_SM;
  if (!params) cap = dt_row_grid_(units); /* no partial rows to keep: as many blocks as the forward */
  int64_t blocks = units < cap ? units : cap;
  double* partial = NULL;
  if (params)
    DT_TRY_(dt_scratch_alloc_((void**)&partial, (size_t)(blocks * 2 * C) * sizeof(double), s, "dt_layernorm_bwd"));
  dt_status launched = warp_rows ? dt_ln_bwd_warp_launch_(dinp, partial, dout, inp, weight, mean, rstd, rows, C,
                                                          inp_dtype, flags & 1, (unsigned)blocks, s)
                                 : DT_OK;
  if (launched != DT_OK) {
    if (partial) dt_scratch_free_(partial, s);
    return launched;
  }
  if (!warp_rows) {
    auto kernel = dt_ln_cached_(C) ? dt_layernorm_bwd_k_<true> : dt_layernorm_bwd_k_<false>;
    DT_LAUNCH(kernel, (unsigned)blocks, DT_BLOCK, 0, s, dinp, partial, dout, inp, weight, mean, rstd, rows, C,
              dout_dtype, inp_dtype, dinp_dtype, flags & 1);
    DT_CHECK_LAUNCH(s, "dt_layernorm_bwd");
  }
  if (!params) return DT_OK;
  /* pass 1: strips of 32 of the 2C columns x chunks of `per` partial rows, about
   * LN_FOLD_BLOCKS_PER_SM blocks per multiprocessor; pass 2: the chunks of each column */
  const int64_t strips = (2 * C + 31) / 32;
  int64_t chunks = ((int64_t)dt_cuda_sm_count_() * LN_FOLD_BLOCKS_PER_SM + strips - 1) / strips;
  if (chunks > blocks) chunks = blocks;
  const int64_t per = (blocks + chunks - 1) / chunks;
  chunks = (blocks + per - 1) / per;
  double* chunk = NULL;
  dt_status st = dt_scratch_alloc_((void**)&chunk, (size_t)(chunks * 2 * C) * sizeof(double), s, "dt_layernorm_bwd");
  if (st != DT_OK) {
    dt_scratch_free_(partial, s);
    return st;
  }
  DT_LAUNCH(dt_layernorm_fold_rows_k_, dim3((unsigned)strips, (unsigned)chunks), 32 * LN_FOLD_LANES, 0, s, chunk,
            (const double*)partial, blocks, 2 * C, per);
  DT_CHECK_LAUNCH(s, "dt_layernorm_bwd (parameter gradients, pass 1)");
  DT_LAUNCH(dt_layernorm_fold_k_, dt_grid_for_(C, DT_BLOCK), DT_BLOCK, 0, s, dweight, dbias, (const double*)chunk,
            chunks, C, add_params);
  DT_CHECK_LAUNCH(s, "dt_layernorm_bwd (parameter gradients)");
  dt_status freed = dt_scratch_free_(chunk, s);
  dt_status freed2 = dt_scratch_free_(partial, s);
  return freed != DT_OK ? freed : freed2;
}
