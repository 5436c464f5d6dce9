/* layout.cu — CUDA launches of the layout kernels, which move bytes without
 * arithmetic: dt_slice_cols and dt_scatter_cols (strided 2-D copies) and
 * dt_transpose_0213 ((A,B,C,D) -> (A,C,B,D): the head split/merge of
 * attention and, with A = D = 1, a 2-D transpose through shared-memory tiles). */
#include "cuda_internal.cuh"

#define TILE 32

/* ---- kernels -------------------------------------------------------------------- */

/* out (A, C, B, Dw words) from inp (A, B, C, Dw): one thread per output word. */
template <typename W>
__global__ void dt_transpose_words_k_(W* out, const W* inp, int64_t A, int64_t B, int64_t C, int64_t Dw) {
  int64_t total = A * C * B * Dw;
  DT_GRID_STRIDE(o, total) {
    int64_t dw = o % Dw, t = o / Dw;
    int64_t b = t % B;
    t /= B;
    int64_t c = t % C, a = t / C;
    out[o] = inp[((a * B + b) * C + c) * Dw + dw];
  }
}

/* One TILE x TILE block of the (B, C) plane of entry a, through shared memory,
 * so that both the reads and the writes are contiguous. */
template <typename W>
__global__ void dt_transpose_tiles_k_(W* out, const W* inp, int64_t A, int64_t B, int64_t C) {
  __shared__ W tile[TILE][TILE + 1];
  int64_t c0 = (int64_t)blockIdx.x * TILE, b0 = (int64_t)blockIdx.y * TILE;
  for (int64_t a = blockIdx.z; a < A; a += gridDim.z) {
    const W* in_a = inp + a * B * C;
    W* out_a = out + a * B * C;
    for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
      int64_t b = b0 + k, c = c0 + threadIdx.x;
      if (b < B && c < C) tile[k][threadIdx.x] = in_a[b * C + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
      int64_t c = c0 + k, b = b0 + threadIdx.x;
      if (b < B && c < C) out_a[c * B + b] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

/* rows copies of `width` bytes between two pitched (strided) buffers. */
static dt_status dt_copy_2d_(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                             int64_t rows, cudaStream_t s) {
  DT_CHECK_CUDA(cudaMemcpy2DAsync(dst, (size_t)dst_pitch, src, (size_t)src_pitch, (size_t)width, (size_t)rows,
                                  cudaMemcpyDeviceToDevice, s));
  return DT_OK;
}

DT_EXPORT dt_status dt_slice_cols(void* out, const void* inp, int64_t rows, int64_t in_cols, int64_t start,
                                  int64_t len, int64_t elem_bytes, void* stream) {
  DT_TRY_(dt_check_cols("dt_slice_cols", out, inp, rows, in_cols, start, len, elem_bytes));
  if (rows == 0 || len == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  return dt_copy_2d_(out, len * elem_bytes, (const char*)inp + start * elem_bytes, in_cols * elem_bytes,
                     len * elem_bytes, rows, s);
}

DT_EXPORT dt_status dt_scatter_cols(void* dst, const void* src, int64_t rows, int64_t dst_cols, int64_t start,
                                    int64_t len, int64_t elem_bytes, void* stream) {
  DT_TRY_(dt_check_cols("dt_scatter_cols", dst, src, rows, dst_cols, start, len, elem_bytes));
  if (rows == 0 || len == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  return dt_copy_2d_((char*)dst + start * elem_bytes, dst_cols * elem_bytes, src, len * elem_bytes, len * elem_bytes,
                     rows, s);
}

template <typename W>
static dt_status dt_transpose_tiles_(void* out, const void* inp, int64_t A, int64_t B, int64_t C, cudaStream_t s) {
  dim3 grid((unsigned)((C + TILE - 1) / TILE), (unsigned)((B + TILE - 1) / TILE), (unsigned)(A < 65535 ? A : 65535));
  DT_REQUIRE_(grid.x <= 2147483647u && grid.y <= 65535u,
              "dt_transpose_0213: B=%lld is too large for the tiled transpose (at most %d)", (long long)B,
              65535 * TILE);
  DT_LAUNCH(dt_transpose_tiles_k_<W>, grid, dim3(TILE, 8), 0, s, (W*)out, (const W*)inp, A, B, C);
  DT_CHECK_LAUNCH(s, "dt_transpose_0213 (tiles)");
  return DT_OK;
}

template <typename W>
static dt_status dt_transpose_words_(void* out, const void* inp, int64_t A, int64_t B, int64_t C, int64_t row,
                                     cudaStream_t s) {
  int64_t Dw = row / (int64_t)sizeof(W);
  DT_LAUNCH(dt_transpose_words_k_<W>, dt_grid_for_(A * B * C * Dw, DT_BLOCK), DT_BLOCK, 0, s,
            (W*)out, (const W*)inp, A, B, C, Dw);
  DT_CHECK_LAUNCH(s, "dt_transpose_0213");
  return DT_OK;
}

DT_EXPORT dt_status dt_transpose_0213(void* out, const void* inp, int64_t A, int64_t B, int64_t C, int64_t D,
                                      int64_t elem_bytes, void* stream) {
  int64_t total = 0;
  DT_TRY_(dt_check_transpose_0213(out, inp, A, B, C, D, elem_bytes, &total));
  if (total == 0) return DT_OK;
  int64_t row = D * elem_bytes;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (B == 1 || C == 1) { /* nothing moves relative to anything else: a plain copy */
    DT_CHECK_CUDA(cudaMemcpyAsync(out, inp, (size_t)total, cudaMemcpyDeviceToDevice, s));
    return DT_OK;
  }
  uintptr_t bits = (uintptr_t)out | (uintptr_t)inp | (uintptr_t)row;
  if (row == 2 && !(bits & 1)) return dt_transpose_tiles_<uint16_t>(out, inp, A, B, C, s);
  if (row == 4 && !(bits & 3)) return dt_transpose_tiles_<uint32_t>(out, inp, A, B, C, s);
  if (row == 8 && !(bits & 7)) return dt_transpose_tiles_<uint2>(out, inp, A, B, C, s);
  if (!(bits & 15)) return dt_transpose_words_<uint4>(out, inp, A, B, C, row, s);
  if (!(bits & 7)) return dt_transpose_words_<uint2>(out, inp, A, B, C, row, s);
  if (!(bits & 3)) return dt_transpose_words_<uint32_t>(out, inp, A, B, C, row, s);
  if (!(bits & 1)) return dt_transpose_words_<uint16_t>(out, inp, A, B, C, row, s);
  return dt_transpose_words_<uint8_t>(out, inp, A, B, C, row, s);
}
