/* strided.cu — CUDA launch of dt_strided_copy, the one layout kernel behind
 * permute/transpose, expand, constant pad and its backward, slices and cat:
 * dimensions are merged on the host (strided.h's dt_strided_coalesce), then
 * a thread per element finds its two offsets with dt_strided_offsets and
 * copies the element in the widest word that divides the element size and
 * both addresses. Pure data movement: the CPU's bytes. */
#include "cuda_internal.cuh"
#include "ops_checks.h"
#include "strided.h"

/* ---- kernels -------------------------------------------------------------------- */

/* Element i of the box: `words` words of type W at element offsets o and p. */
template <typename W>
__global__ void dt_strided_copy_k_(W* out, const W* inp, dt_strided_box box, int64_t n, int64_t words) {
  DT_GRID_STRIDE(i, n) {
    int64_t o, p;
    dt_strided_offsets(&box, box.ndim, i, &o, &p);
    for (int64_t k = 0; k < words; k++) out[o * words + k] = inp[p * words + k];
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

template <typename W>
static dt_status dt_strided_as_(void* out, const void* inp, const dt_strided_box* box, int64_t n, int64_t elem,
                                cudaStream_t s) {
  int64_t words = elem / (int64_t)sizeof(W);
  DT_LAUNCH(dt_strided_copy_k_<W>, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, (W*)out, (const W*)inp, *box, n, words);
  DT_CHECK_LAUNCH(s, "dt_strided_copy");
  return DT_OK;
}

DT_EXPORT dt_status dt_strided_copy(void* out, const void* inp, int32_t ndim, const int64_t* sizes,
                                    const int64_t* out_strides, const int64_t* inp_strides, int64_t elem_bytes,
                                    void* stream) {
  dt_strided_box box;
  int64_t total = 0;
  DT_TRY_(dt_check_strided_copy(out, inp, ndim, sizes, out_strides, inp_strides, elem_bytes, &box, &total));
  if (total == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_strided_coalesce(&box); /* ndim 0 afterwards: a single element, offsets 0 */
  uintptr_t bits = (uintptr_t)out | (uintptr_t)inp | (uintptr_t)elem_bytes;
  if ((bits & 15) == 0) return dt_strided_as_<uint4>(out, inp, &box, total, elem_bytes, s);
  if ((bits & 7) == 0) return dt_strided_as_<uint2>(out, inp, &box, total, elem_bytes, s);
  if ((bits & 3) == 0) return dt_strided_as_<uint32_t>(out, inp, &box, total, elem_bytes, s);
  if ((bits & 1) == 0) return dt_strided_as_<uint16_t>(out, inp, &box, total, elem_bytes, s);
  return dt_strided_as_<uint8_t>(out, inp, &box, total, elem_bytes, s);
}
