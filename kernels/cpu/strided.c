/* strided.c — CPU walk of dt_strided_copy, the one layout kernel behind
 * permute/transpose of any dims, expand (input stride 0), constant pad and
 * its backward, and slices along any dim. Dimensions are merged first
 * (strided.h); then rows are copied with memcpy when both sides are
 * contiguous, a transposed plane is walked in cache tiles, and anything else
 * element by element. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include "cpu_internal.h"
#include "ops_checks.h"
#include "strided.h"

/* Bytes per thread chunk: copying is memory-bound, so chunks are large. */
#define COPY_GRAIN_BYTES (1 << 18)
/* Edge of the square tiles of a transposed plane. */
#define TILE 32

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  dt_strided_box box; /* coalesced; the walk covers dims [0, outer_dims) */
  int32_t outer_dims;
  char* out;
  const char* inp;
  int64_t elem;
  int64_t tiles_r, tiles_c; /* tiled walk: tiles of the last two dims */
} strided_ctx_;

/* A position over dims [0, nd) of a box that steps like an odometer, so a
 * chunk of rows divides only once, at its start. */
typedef struct {
  int64_t idx[DT_MAX_DIMS];
  int64_t o, p; /* element offsets of the current position */
} walker_;

static void walker_start_(walker_* w, const dt_strided_box* b, int32_t nd, int64_t i) {
  dt_strided_offsets(b, nd, i, &w->o, &w->p);
  for (int32_t d = nd - 1; d >= 0; d--) {
    w->idx[d] = i % b->sizes[d];
    i /= b->sizes[d];
  }
}

static void walker_next_(walker_* w, const dt_strided_box* b, int32_t nd) {
  for (int32_t d = nd - 1; d >= 0; d--) {
    w->o += b->out_strides[d];
    w->p += b->inp_strides[d];
    if (++w->idx[d] < b->sizes[d]) return;
    w->o -= b->sizes[d] * b->out_strides[d];
    w->p -= b->sizes[d] * b->inp_strides[d];
    w->idx[d] = 0;
  }
}

/* Copies one element of `elem` bytes; fixed sizes compile to single moves. */
static inline void copy_elem_(char* dst, const char* src, int64_t elem) {
  switch (elem) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, (size_t)elem);
  }
}

/* Work item = one outer index; the last dim is a run: memcpy when both sides
 * are contiguous, a broadcast of one element when the input stride is 0,
 * else strided elements. */
static void rows_range_(void* vctx, int64_t i0, int64_t i1) {
  const strided_ctx_* c = vctx;
  const dt_strided_box* b = &c->box;
  int32_t last = b->ndim - 1;
  int64_t len = b->sizes[last], os = b->out_strides[last] * c->elem, is = b->inp_strides[last] * c->elem;
  walker_ w;
  walker_start_(&w, b, last, i0);
  for (int64_t i = i0; i < i1; i++, walker_next_(&w, b, last)) {
    char* dst = c->out + w.o * c->elem;
    const char* src = c->inp + w.p * c->elem;
    if (os == c->elem && is == c->elem) {
      memcpy(dst, src, (size_t)(len * c->elem));
    } else if (c->elem == 4 && os == 4) { /* the common float cases, as plain loops */
      float* d = (float*)dst;
      if (is == 0) {
        float v;
        memcpy(&v, src, 4);
        for (int64_t k = 0; k < len; k++) d[k] = v;
      } else {
        for (int64_t k = 0; k < len; k++) memcpy(d + k, src + k * is, 4);
      }
    } else {
      for (int64_t k = 0; k < len; k++) copy_elem_(dst + k * os, src + k * is, c->elem);
    }
  }
}

/* Work item = one (outer index, tile) pair of a plane whose output runs along
 * the last dim and whose input runs along the one before: TILE x TILE blocks
 * keep both the reads and the writes within a few cache lines. */
static void tiles_range_(void* vctx, int64_t i0, int64_t i1) {
  const strided_ctx_* c = vctx;
  const dt_strided_box* b = &c->box;
  int32_t r = b->ndim - 2, l = b->ndim - 1;
  int64_t per_plane = c->tiles_r * c->tiles_c;
  for (int64_t i = i0; i < i1; i++) {
    int64_t o, p;
    dt_strided_offsets(b, r, i / per_plane, &o, &p);
    int64_t t = i % per_plane;
    int64_t r0 = (t / c->tiles_c) * TILE, c0 = (t % c->tiles_c) * TILE;
    int64_t r1 = r0 + TILE < b->sizes[r] ? r0 + TILE : b->sizes[r];
    int64_t c1 = c0 + TILE < b->sizes[l] ? c0 + TILE : b->sizes[l];
    for (int64_t y = r0; y < r1; y++)
      for (int64_t x = c0; x < c1; x++)
        copy_elem_(c->out + (o + y * b->out_strides[r] + x * b->out_strides[l]) * c->elem,
                   c->inp + (p + y * b->inp_strides[r] + x * b->inp_strides[l]) * c->elem, c->elem);
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_strided_copy(void* out, const void* inp, int32_t ndim, const int64_t* sizes,
                                    const int64_t* out_strides, const int64_t* inp_strides, int64_t elem_bytes,
                                    void* stream) {
  (void)stream;
  strided_ctx_ c = {.out = out, .inp = inp, .elem = elem_bytes};
  int64_t total = 0;
  DT_TRY_(dt_check_strided_copy(out, inp, ndim, sizes, out_strides, inp_strides, elem_bytes, &c.box, &total));
  if (total == 0) return DT_OK;
  if (dt_strided_coalesce(&c.box) == 0) { /* a single element */
    copy_elem_(out, inp, elem_bytes);
    return DT_OK;
  }
  dt_strided_box* b = &c.box;
  int32_t nd = b->ndim;
  /* a plane transposed between output and input: walk it in tiles */
  int tiled = nd >= 2 && b->out_strides[nd - 1] == 1 && b->inp_strides[nd - 1] != 1 && b->inp_strides[nd - 2] == 1 &&
              b->sizes[nd - 1] >= 8 && b->sizes[nd - 2] >= 8;
  if (tiled) {
    c.tiles_r = (b->sizes[nd - 2] + TILE - 1) / TILE;
    c.tiles_c = (b->sizes[nd - 1] + TILE - 1) / TILE;
    int64_t items = total / (b->sizes[nd - 1] * b->sizes[nd - 2]) * c.tiles_r * c.tiles_c;
    int64_t bytes_per_item = TILE * TILE * elem_bytes;
    dt_parallel_for_(items, bytes_per_item >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / bytes_per_item, tiles_range_,
                     &c);
  } else {
    int64_t row_bytes = b->sizes[nd - 1] * elem_bytes;
    dt_parallel_for_(total / b->sizes[nd - 1], row_bytes >= COPY_GRAIN_BYTES ? 1 : COPY_GRAIN_BYTES / row_bytes,
                     rows_range_, &c);
  }
  return DT_OK;
}
