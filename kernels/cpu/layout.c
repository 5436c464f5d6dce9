/* layout.c — CPU loops of the layout kernels, which move bytes without
 * arithmetic: dt_slice_cols, dt_scatter_cols (column blocks of a row-major
 * matrix, e.g. splitting qkv) and dt_transpose_0213 ((A,B,C,D) -> (A,C,B,D),
 * the head split/merge of attention and, with A = D = 1, a 2-D transpose). */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"

/* Bytes per thread chunk: copying is memory-bound, so chunks are large. */
#define COPY_GRAIN_BYTES (1 << 18)
/* Edge of the square tiles of a narrow-row transpose (cache blocking). */
#define TILE 32

static int64_t grain_for_(int64_t bytes_per_item) {
  return bytes_per_item >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / (bytes_per_item > 0 ? bytes_per_item : 1);
}

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  char* dst;
  const char* src;
  int64_t dst_stride, src_stride, bytes; /* per row */
} rows_copy_ctx_;

static void rows_copy_range_(void* vctx, int64_t r0, int64_t r1) {
  const rows_copy_ctx_* c = vctx;
  for (int64_t r = r0; r < r1; r++) memcpy(c->dst + r * c->dst_stride, c->src + r * c->src_stride, (size_t)c->bytes);
}

typedef struct {
  char* out;
  const char* inp;
  int64_t B, C, row; /* row = D * elem_bytes */
} transpose_ctx_;

/* Copies one `row`-byte item; the fixed sizes let the compiler emit single moves. */
static inline void copy_item_(char* dst, const char* src, int64_t row) {
  switch (row) {
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, (size_t)row);
  }
}

/* Work item = one (a, c) pair: out[a, c, :, :] gathers inp[a, :, c, :]. Used
 * when rows are long enough that each memcpy is efficient. */
static void transpose_rows_range_(void* vctx, int64_t i0, int64_t i1) {
  const transpose_ctx_* t = vctx;
  for (int64_t i = i0; i < i1; i++) {
    int64_t a = i / t->C, c = i % t->C;
    char* dst = t->out + (a * t->C + c) * t->B * t->row;
    const char* src = t->inp + (a * t->B * t->C + c) * t->row;
    for (int64_t b = 0; b < t->B; b++) memcpy(dst + b * t->row, src + b * t->C * t->row, (size_t)t->row);
  }
}

/* Work item = one (a, tile of b) pair, walking TILE x TILE blocks of the
 * (B, C) plane so reads and writes both stay within a few cache lines. */
static void transpose_tiles_range_(void* vctx, int64_t i0, int64_t i1) {
  const transpose_ctx_* t = vctx;
  int64_t b_tiles = (t->B + TILE - 1) / TILE;
  for (int64_t i = i0; i < i1; i++) {
    int64_t a = i / b_tiles, b0 = (i % b_tiles) * TILE;
    int64_t b1 = b0 + TILE < t->B ? b0 + TILE : t->B;
    const char* in_a = t->inp + a * t->B * t->C * t->row;
    char* out_a = t->out + a * t->B * t->C * t->row;
    for (int64_t c0 = 0; c0 < t->C; c0 += TILE) {
      int64_t c1 = c0 + TILE < t->C ? c0 + TILE : t->C;
      for (int64_t c = c0; c < c1; c++)
        for (int64_t b = b0; b < b1; b++)
          copy_item_(out_a + (c * t->B + b) * t->row, in_a + (b * t->C + c) * t->row, t->row);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_slice_cols(void* out, const void* inp, int64_t rows, int64_t in_cols, int64_t start,
                                  int64_t len, int64_t elem_bytes, void* stream) {
  (void)stream;
  dt_status st = dt_check_cols("dt_slice_cols", out, inp, rows, in_cols, start, len, elem_bytes);
  if (st != DT_OK || rows == 0 || len == 0) return st;
  rows_copy_ctx_ c = {out, (const char*)inp + start * elem_bytes, len * elem_bytes, in_cols * elem_bytes,
                      len * elem_bytes};
  dt_parallel_for_(rows, grain_for_(c.bytes), rows_copy_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_scatter_cols(void* dst, const void* src, int64_t rows, int64_t dst_cols, int64_t start,
                                    int64_t len, int64_t elem_bytes, void* stream) {
  (void)stream;
  dt_status st = dt_check_cols("dt_scatter_cols", dst, src, rows, dst_cols, start, len, elem_bytes);
  if (st != DT_OK || rows == 0 || len == 0) return st;
  rows_copy_ctx_ c = {(char*)dst + start * elem_bytes, src, dst_cols * elem_bytes, len * elem_bytes,
                      len * elem_bytes};
  dt_parallel_for_(rows, grain_for_(c.bytes), rows_copy_range_, &c);
  return DT_OK;
}

DT_EXPORT dt_status dt_transpose_0213(void* out, const void* inp, int64_t A, int64_t B, int64_t C, int64_t D,
                                      int64_t elem_bytes, void* stream) {
  (void)stream;
  int64_t total = 0;
  DT_TRY_(dt_check_transpose_0213(out, inp, A, B, C, D, elem_bytes, &total));
  if (total == 0) return DT_OK;
  int64_t row = D * elem_bytes;
  transpose_ctx_ t = {out, inp, B, C, row};
  if (row >= 64 || B == 1 || C == 1) {
    dt_parallel_for_(A * C, grain_for_(B * row), transpose_rows_range_, &t);
  } else {
    int64_t b_tiles = (B + TILE - 1) / TILE;
    dt_parallel_for_(A * b_tiles, grain_for_(TILE * C * row), transpose_tiles_range_, &t);
  }
  return DT_OK;
}
