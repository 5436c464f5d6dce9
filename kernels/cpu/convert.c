/* convert.c — CPU loops of dt_fill and dt_cast: the f32 <-> bf16/f16 paths
 * that autocast uses run in parallel chunks; every other dtype pair goes
 * through convert.h's decode/encode, after a pass that refuses values the
 * destination cannot hold (so nothing is half-written on error). */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <math.h>
#include "cpu_internal.h"
#include "convert.h"

#define CAST_GRAIN (1 << 15)

static const char* dtype_name_(int32_t dtype) {
  switch (dtype) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_I64: return "i64";
    case DT_U8: return "u8";
    default: return "unknown";
  }
}

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
  size_t size = dt_dtype_size(dtype);
  DT_REQUIRE_(size > 0, "dt_fill: unknown dtype %d", dtype);
  DT_REQUIRE_(n >= 0, "dt_fill: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out, "dt_fill: null pointer");
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
  DT_REQUIRE_(dt_float_truncates_into(value, dtype), "dt_fill: value %.17g does not fit in %s", value,
              dtype_name_(dtype));
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
  DT_REQUIRE_(dt_dtype_size(out_dtype) > 0, "dt_cast: unknown output dtype %d", out_dtype);
  DT_REQUIRE_(dt_dtype_size(inp_dtype) > 0, "dt_cast: unknown input dtype %d", inp_dtype);
  DT_REQUIRE_(n >= 0, "dt_cast: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_cast: null pointer (out=%p inp=%p)", out, inp);
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
    if (dt_dtype_is_float(inp_dtype))
      return dt_fail_(DT_ERR_ARG, "dt_cast: %s value %.9g at index %lld does not fit in %s", dtype_name_(inp_dtype),
                      (double)dt_load_float(inp, inp_dtype, bad), (long long)bad, dtype_name_(out_dtype));
    return dt_fail_(DT_ERR_ARG, "dt_cast: %s value %lld at index %lld is outside the %s range",
                    dtype_name_(inp_dtype), (long long)dt_load_int(inp, inp_dtype, bad), (long long)bad,
                    dtype_name_(out_dtype));
  }
  cast_generic_range_(&c, 0, n);
  return DT_OK;
}
