/* convert.h — one element of dt_fill / dt_cast: decode any dtype into a float
 * or an integer, encode it into any dtype, and the range rules that make a
 * conversion refuse (instead of hitting C's undefined float->int behaviour). */
#pragma once
#include "dt_common.h"

DT_HD int dt_dtype_is_float(int32_t dtype) { return dtype == DT_F32 || dtype == DT_BF16 || dtype == DT_F16; }

/* Element i of a float-typed buffer (f32, bf16 or f16) as f32 (exact). */
DT_HD float dt_load_float(const void* p, int32_t dtype, int64_t i) {
  switch (dtype) {
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t*)p)[i]);
    case DT_F16: return dt_f16_to_f32(((const uint16_t*)p)[i]);
    default: return ((const float*)p)[i];
  }
}

/* Element i of an integer buffer (i32, i64 or u8) as int64. */
DT_HD int64_t dt_load_int(const void* p, int32_t dtype, int64_t i) {
  switch (dtype) {
    case DT_I32: return ((const int32_t*)p)[i];
    case DT_U8: return ((const uint8_t*)p)[i];
    default: return ((const int64_t*)p)[i];
  }
}

/* v rounded to a float dtype's precision (nearest even), as an f32. */
DT_HD float dt_round_float(float v, int32_t dtype) {
  switch (dtype) {
    case DT_BF16: return dt_bf16_to_f32(dt_f32_to_bf16(v));
    case DT_F16: return dt_f16_to_f32(dt_f32_to_f16(v));
    default: return v;
  }
}

/* Stores f32 v into a float buffer, rounding to nearest even for bf16/f16. */
DT_HD void dt_store_float(void* p, int32_t dtype, int64_t i, float v) {
  switch (dtype) {
    case DT_BF16: ((uint16_t*)p)[i] = dt_f32_to_bf16(v); break;
    case DT_F16: ((uint16_t*)p)[i] = dt_f32_to_f16(v); break;
    default: ((float*)p)[i] = v;
  }
}

/* Stores v into an integer buffer; the caller has checked dt_int_fits. */
DT_HD void dt_store_int(void* p, int32_t dtype, int64_t i, int64_t v) {
  switch (dtype) {
    case DT_I32: ((int32_t*)p)[i] = (int32_t)v; break;
    case DT_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    default: ((int64_t*)p)[i] = v;
  }
}

/* Whether integer v is representable in integer dtype `dtype`. */
DT_HD int dt_int_fits(int64_t v, int32_t dtype) {
  switch (dtype) {
    case DT_I32: return v >= INT32_MIN && v <= INT32_MAX;
    case DT_U8: return v >= 0 && v <= 255;
    default: return 1;
  }
}

/* Whether truncating v toward zero gives a value representable in integer
 * dtype `dtype` (false for NaN and infinities). */
DT_HD int dt_float_truncates_into(double v, int32_t dtype) {
  switch (dtype) {
    case DT_I32: return v > -2147483649.0 && v < 2147483648.0;
    case DT_U8: return v > -1.0 && v < 256.0;
    default: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  }
}
