/* strided.h — the index arithmetic of dt_strided_copy: an n-dimensional box
 * of `sizes` read with one set of element strides and written with another
 * (permute, expand with stride 0, pad, slice, cat). Shared by the CPU walk and
 * a GPU thread per element. */
#pragma once
#include "dt_common.h"

/* Most dimensions a strided copy takes (after merging contiguous ones, real
 * tensors need far fewer). */
#define DT_MAX_DIMS 16

/* A strided box: sizes and the element strides of the output and the input. */
typedef struct {
  int32_t ndim;
  int64_t sizes[DT_MAX_DIMS];
  int64_t out_strides[DT_MAX_DIMS];
  int64_t inp_strides[DT_MAX_DIMS];
} dt_strided_box;

/* The output and input element offsets of linear index i over the box's
 * first nd dims (row-major over sizes[0:nd]). */
DT_HD void dt_strided_offsets(const dt_strided_box* box, int32_t nd, int64_t i, int64_t* out_off, int64_t* inp_off) {
  int64_t o = 0, p = 0;
  for (int32_t d = nd - 1; d >= 0; d--) {
    int64_t s = box->sizes[d];
    int64_t k = i % s;
    i /= s;
    o += k * box->out_strides[d];
    p += k * box->inp_strides[d];
  }
  *out_off = o;
  *inp_off = p;
}

/* Drops size-1 dimensions and merges each dimension into the next one when
 * both the output and the input step over it contiguously, so the walk has as
 * few and as long runs as the layout allows. Returns the new ndim. */
DT_HD int32_t dt_strided_coalesce(dt_strided_box* box) {
  int32_t n = 0;
  for (int32_t d = 0; d < box->ndim; d++) {
    if (box->sizes[d] == 1) continue;
    if (n > 0 && box->out_strides[n - 1] == box->out_strides[d] * box->sizes[d] &&
        box->inp_strides[n - 1] == box->inp_strides[d] * box->sizes[d]) {
      box->sizes[n - 1] *= box->sizes[d];
      box->out_strides[n - 1] = box->out_strides[d];
      box->inp_strides[n - 1] = box->inp_strides[d];
      continue;
    }
    box->sizes[n] = box->sizes[d];
    box->out_strides[n] = box->out_strides[d];
    box->inp_strides[n] = box->inp_strides[d];
    n++;
  }
  box->ndim = n;
  return n;
}
