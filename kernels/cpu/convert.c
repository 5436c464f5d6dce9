/* convert.c — CPU loops of dt_fill and dt_cast: the f32 <-> bf16/f16 paths
 * that autocast uses run in parallel chunks; every other dtype pair goes
 * through convert.h's decode/encode, after a pass that refuses values the
 * destination cannot hold (so nothing is half-written on error). */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <math.h>
#include "cpu_internal.h"
#include "convert.h"

#define CAST_GRAIN (1 << 15)

/* ---- kernels ------------------------------------------------------------------ */

typedef struct {
  void* out;
  const void* inp;
  int32_t out_dtype, inp_dtype;
} cast_ctx_;

DT_VEC_CLONES static void cast_f32_to_half_range_(void* vctx, int64_t begin, int64_t end) {
  const cast_ctx_* c = vctx;
  const float* in = c->inp;
  uint16_t* out = c->out;
  if (c->out_dtype == DT_BF16)
    for (int64_t i = begin; i < end; i++) out[i] = dt_f32_to_bf16(in[i]);
  else
    for (int64_t i = begin; i < end; i++) out[i] = dt_f32_to_f16(in[i]);
}

DT_VEC_CLONES static void cast_half_to_f32_range_(void* vctx, int64_t begin, int64_t end) {
  const cast_ctx_* c = vctx;
  const uint16_t* in = c->inp;
  float* out = c->out;
  if (c->inp_dtype == DT_BF16)
    for (int64_t i = begin; i < end; i++) out[i] = dt_bf16_to_f32(in[i]);
  else
    for (int64_t i = begin; i < end; i++) out[i] = dt_f16_to_f32(in[i]);
}

/* Any pair, one element at a time through f32 or int64 (already range-checked). */
static void cast_generic_range_(void* vctx, int64_t begin, int64_t end) {
  const cast_ctx_* c = vctx;
  int in_float = dt_dtype_is_float(c->inp_dtype), out_float = dt_dtype_is_float(c->out_dtype);
  for (int64_t i = begin; i < end; i++) {
    if (in_float) {
      float v = dt_load_float(c->inp, c->inp_dtype, i);
      if (out_float) dt_store_float(c->out, c->out_dtype, i, v);
      else dt_store_int(c->out, c->out_dtype, i, (int64_t)v); /* truncates toward zero */
    } else {
      int64_t v = dt_load_int(c->inp, c->inp_dtype, i);
      if (out_float) dt_store_float(c->out, c->out_dtype, i, (float)v); /* rounds to nearest even */
      else dt_store_int(c->out, c->out_dtype, i, v);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------- */

DT_EXPORT dt_status dt_fill(void* out, int32_t dtype, int64_t n, double value, void* stream) {
  (void)stream;
  DT_TRY_(dt_check_fill(out, dtype, n, value));
  if (n == 0) return DT_OK;
  if (dt_dtype_is_float(dtype)) {
    float v = (float)value; /* torch: double scalar -> float -> bf16/f16 */
    if (dtype == DT_F32) {
      float* o = out;
      for (int64_t i = 0; i < n; i++) o[i] = v;
    } else {
      uint16_t h = dtype == DT_BF16 ? dt_f32_to_bf16(v) : dt_f32_to_f16(v);
      uint16_t* o = out;
      for (int64_t i = 0; i < n; i++) o[i] = h;
    }
    return DT_OK;
  }
  int64_t v = (int64_t)value;
  for (int64_t i = 0; i < n; i++) dt_store_int(out, dtype, i, v);
  return DT_OK;
}

/* The first element of inp that out_dtype cannot hold, or -1. */
static int64_t first_unrepresentable_(const void* inp, int32_t inp_dtype, int32_t out_dtype, int64_t n) {
  if (dt_dtype_is_float(out_dtype)) return -1; /* every value rounds to a float (inf when too large) */
  if (dt_dtype_is_float(inp_dtype)) {
    for (int64_t i = 0; i < n; i++)
      if (!dt_float_truncates_into(dt_load_float(inp, inp_dtype, i), out_dtype)) return i;
    return -1;
  }
  for (int64_t i = 0; i < n; i++)
    if (!dt_int_fits(dt_load_int(inp, inp_dtype, i), out_dtype)) return i;
  return -1;
}

DT_EXPORT dt_status dt_cast(void* out, int32_t out_dtype, const void* inp, int32_t inp_dtype, int64_t n,
                            void* stream) {
  (void)stream;
  DT_TRY_(dt_check_cast(out, out_dtype, inp, inp_dtype, n));
  if (n == 0) return DT_OK;
  if (out_dtype == inp_dtype) {
    memmove(out, inp, (size_t)n * dt_dtype_size(inp_dtype));
    return DT_OK;
  }
  cast_ctx_ c = {out, inp, out_dtype, inp_dtype};
  if (inp_dtype == DT_F32 && (out_dtype == DT_BF16 || out_dtype == DT_F16)) {
    dt_parallel_for_(n, CAST_GRAIN, cast_f32_to_half_range_, &c);
    return DT_OK;
  }
  if (out_dtype == DT_F32 && (inp_dtype == DT_BF16 || inp_dtype == DT_F16)) {
    dt_parallel_for_(n, CAST_GRAIN, cast_half_to_f32_range_, &c);
    return DT_OK;
  }
  int64_t bad = first_unrepresentable_(inp, inp_dtype, out_dtype, n);
  if (bad >= 0) {
    int in_float = dt_dtype_is_float(inp_dtype);
    return dt_fail_cast_value_(inp_dtype, out_dtype, bad, in_float ? (double)dt_load_float(inp, inp_dtype, bad) : 0.0,
                               in_float ? 0 : dt_load_int(inp, inp_dtype, bad));
  }
  cast_generic_range_(&c, 0, n);
  return DT_OK;
}
