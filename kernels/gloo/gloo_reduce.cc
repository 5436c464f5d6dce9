/* gloo_reduce.cc — the arithmetic the Gloo group does itself: the pairwise
 * combine that Gloo's ring all-reduce calls, the divide of avg, 16-bit float
 * widening (bf16 and f16 are reduced in f32 and rounded once, as the
 * shared-memory group does), and reduce-scatter's reduction over blocks in
 * rank order. Integer sums wrap; max and min propagate NaN. */
#include <cstring>

#include "gloo_internal.h"

namespace {

template <typename T>
inline T sum_(T a, T x) { return a + x; }
template <>
inline int32_t sum_(int32_t a, int32_t x) { return (int32_t)((uint32_t)a + (uint32_t)x); }
template <>
inline int64_t sum_(int64_t a, int64_t x) { return (int64_t)((uint64_t)a + (uint64_t)x); }
template <>
inline uint8_t sum_(uint8_t a, uint8_t x) { return (uint8_t)(a + x); }
/* a is the running value, x the next rank's (the shared-memory group's rule) */
template <typename T>
inline T max_(T a, T x) { return (x > a || x != x) ? x : a; }
template <typename T>
inline T min_(T a, T x) { return (x < a || x != x) ? x : a; }

template <typename T>
void combine_(int32_t redop, T* out, const T* a, const T* b, size_t n) {
  switch (redop) {
    case DT_GLOO_MAX: for (size_t i = 0; i < n; i++) out[i] = max_(a[i], b[i]); break;
    case DT_GLOO_MIN: for (size_t i = 0; i < n; i++) out[i] = min_(a[i], b[i]); break;
    default: for (size_t i = 0; i < n; i++) out[i] = sum_(a[i], b[i]); break;
  }
}

template <typename T>
void in_order_(int32_t redop, T* out, const char* src, size_t stride, int w, size_t n) {
  const T* s0 = (const T*)src;
  if (out != s0) memcpy(out, s0, n * sizeof(T));
  for (int q = 1; q < w; q++) combine_(redop, out, out, (const T*)(src + (size_t)q * stride), n);
}

}  // namespace

size_t dt_gloo_dtype_size_(int32_t dtype) { return dtype == DT_GLOO_F64 ? 8 : dt_dtype_size(dtype); }

bool dt_gloo_reduce_supported_(int32_t dtype, int32_t redop) {
  if (redop < DT_GLOO_SUM || redop > DT_GLOO_MIN || dt_gloo_dtype_size_(dtype) == 0) return false;
  bool floating = dtype == DT_F32 || dtype == DT_GLOO_F64 || dtype == DT_BF16 || dtype == DT_F16;
  return redop != DT_GLOO_AVG || floating;
}

void dt_gloo_combine_(int32_t dtype, int32_t redop, void* out, const void* a, const void* b, size_t n) {
  switch (dtype) {
    case DT_F32: combine_(redop, (float*)out, (const float*)a, (const float*)b, n); break;
    case DT_GLOO_F64: combine_(redop, (double*)out, (const double*)a, (const double*)b, n); break;
    case DT_I32: combine_(redop, (int32_t*)out, (const int32_t*)a, (const int32_t*)b, n); break;
    case DT_I64: combine_(redop, (int64_t*)out, (const int64_t*)a, (const int64_t*)b, n); break;
    case DT_U8: combine_(redop, (uint8_t*)out, (const uint8_t*)a, (const uint8_t*)b, n); break;
    default: break; /* 16-bit floats are widened to f32 first */
  }
}

void dt_gloo_divide_(int32_t dtype, void* buf, size_t n, int64_t divisor) {
  if (dtype == DT_F32) {
    float* p = (float*)buf;
    for (size_t i = 0; i < n; i++) p[i] = p[i] / (float)divisor;
  } else if (dtype == DT_GLOO_F64) {
    double* p = (double*)buf;
    for (size_t i = 0; i < n; i++) p[i] = p[i] / (double)divisor;
  }
}

void dt_gloo_widen_(int32_t dtype, float* out, const void* in, size_t n) {
  const uint16_t* h = (const uint16_t*)in;
  if (dtype == DT_BF16) {
    for (size_t i = 0; i < n; i++) out[i] = dt_bf16_to_f32(h[i]);
  } else {
    for (size_t i = 0; i < n; i++) out[i] = dt_f16_to_f32(h[i]);
  }
}

void dt_gloo_narrow_(int32_t dtype, void* out, const float* in, size_t n) {
  uint16_t* h = (uint16_t*)out;
  if (dtype == DT_BF16) {
    for (size_t i = 0; i < n; i++) h[i] = dt_f32_to_bf16(in[i]);
  } else {
    for (size_t i = 0; i < n; i++) h[i] = dt_f32_to_f16(in[i]);
  }
}

void dt_gloo_reduce_in_order_(int32_t dtype, int32_t redop, void* out, const char* src, size_t stride, int w,
                              size_t n, int64_t divisor) {
  if (n == 0) return;
  if (dtype == DT_BF16 || dtype == DT_F16) {
    /* combine in f32, one block at a time, and round once */
    enum { B = 2048 };
    float acc[B], next[B];
    for (size_t b = 0; b < n; b += B) {
      size_t m = n - b < B ? n - b : B;
      dt_gloo_widen_(dtype, acc, src + b * 2, m);
      for (int q = 1; q < w; q++) {
        dt_gloo_widen_(dtype, next, src + (size_t)q * stride + b * 2, m);
        combine_(redop, acc, acc, next, m);
      }
      if (redop == DT_GLOO_AVG) dt_gloo_divide_(DT_F32, acc, m, divisor);
      dt_gloo_narrow_(dtype, (char*)out + b * 2, acc, m);
    }
    return;
  }
  switch (dtype) {
    case DT_F32: in_order_(redop, (float*)out, src, stride, w, n); break;
    case DT_GLOO_F64: in_order_(redop, (double*)out, src, stride, w, n); break;
    case DT_I32: in_order_(redop, (int32_t*)out, src, stride, w, n); break;
    case DT_I64: in_order_(redop, (int64_t*)out, src, stride, w, n); break;
    case DT_U8: in_order_(redop, (uint8_t*)out, src, stride, w, n); break;
    default: return;
  }
  if (redop == DT_GLOO_AVG) dt_gloo_divide_(dtype, out, n, divisor);
}
