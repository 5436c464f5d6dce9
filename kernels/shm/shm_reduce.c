/* shm_reduce.c — the arithmetic of reductions over the ranks' data: for each
 * element, src[0] op src[1] op ... op src[w-1] in rank order (so every rank
 * and every run gets the same bits), in cache-sized blocks.
 *
 * sum, max and min for f32, f64, bf16, f16, i32, i64 and u8; avg (sum / w) for
 * the floats. Integer sums wrap around; max and min propagate NaN, as
 * torch.maximum does; bf16 and f16 combine in f32 and round once at the end. */
#include "shm_internal.h"

#define DT_SHM_BLOCK_BYTES_ 8192

size_t dt_shm_dtype_size_(int32_t dtype) { return dtype == DT_SHM_F64 ? 8 : dt_dtype_size(dtype); }

/* combine a (the running value) with x (the next rank's) */
#define DT_SHM_SUM_(a, x) ((a) + (x))
#define DT_SHM_MAX_(a, x) (((x) > (a) || (x) != (x)) ? (x) : (a))
#define DT_SHM_MIN_(a, x) (((x) < (a) || (x) != (x)) ? (x) : (a))

/* One reduction over native elements T; FINISH(v) maps the combined value. */
#define DT_SHM_REDUCE_FN_(NAME, T, COMBINE, FINISH)                                                   \
  static void NAME(void* out1_, void* out2_, const void* const* src, int w, int64_t n) {              \
    enum { B = DT_SHM_BLOCK_BYTES_ / sizeof(T) };                                                     \
    T* out1 = out1_;                                                                                  \
    T* out2 = out2_;                                                                                  \
    T tmp[B];                                                                                         \
    (void)w;                                                                                          \
    for (int64_t b = 0; b < n; b += B) {                                                              \
      int64_t m = n - b < B ? n - b : B;                                                              \
      const T* s0 = (const T*)src[0] + b;                                                             \
      for (int64_t j = 0; j < m; j++) tmp[j] = s0[j];                                                 \
      for (int q = 1; q < w; q++) {                                                                   \
        const T* s = (const T*)src[q] + b;                                                            \
        for (int64_t j = 0; j < m; j++) tmp[j] = COMBINE(tmp[j], s[j]);                               \
      }                                                                                               \
      for (int64_t j = 0; j < m; j++) tmp[j] = FINISH(tmp[j]);                                        \
      memcpy(out1 + b, tmp, (size_t)m * sizeof(T));                                                   \
      if (out2) memcpy(out2 + b, tmp, (size_t)m * sizeof(T));                                         \
    }                                                                                                 \
  }

/* The same over 16-bit floats: widen to f32, combine, FINISH, round once. */
#define DT_SHM_REDUCE_HALF_FN_(NAME, TO_F32, FROM_F32, COMBINE, FINISH)                               \
  static void NAME(void* out1_, void* out2_, const void* const* src, int w, int64_t n) {              \
    enum { B = DT_SHM_BLOCK_BYTES_ / sizeof(float) };                                                 \
    uint16_t* out1 = out1_;                                                                           \
    uint16_t* out2 = out2_;                                                                           \
    float tmp[B];                                                                                     \
    uint16_t res[B];                                                                                  \
    (void)w;                                                                                          \
    for (int64_t b = 0; b < n; b += B) {                                                              \
      int64_t m = n - b < B ? n - b : B;                                                              \
      const uint16_t* s0 = (const uint16_t*)src[0] + b;                                               \
      for (int64_t j = 0; j < m; j++) tmp[j] = TO_F32(s0[j]);                                         \
      for (int q = 1; q < w; q++) {                                                                   \
        const uint16_t* s = (const uint16_t*)src[q] + b;                                              \
        for (int64_t j = 0; j < m; j++) tmp[j] = COMBINE(tmp[j], TO_F32(s[j]));                       \
      }                                                                                               \
      for (int64_t j = 0; j < m; j++) res[j] = FROM_F32(FINISH(tmp[j]));                              \
      memcpy(out1 + b, res, (size_t)m * 2);                                                           \
      if (out2) memcpy(out2 + b, res, (size_t)m * 2);                                                 \
    }                                                                                                 \
  }

#define DT_SHM_KEEP_(v) (v)
/* avg divides by the world size in the element type, as torch's v.div_(world) */
#define DT_SHM_DIV_WF_(v) ((v) / (float)w)
#define DT_SHM_DIV_WD_(v) ((v) / (double)w)
/* integer sums wrap around (two's complement), which C only defines unsigned */
#define DT_SHM_SUM_I32_(a, x) ((int32_t)((uint32_t)(a) + (uint32_t)(x)))
#define DT_SHM_SUM_I64_(a, x) ((int64_t)((uint64_t)(a) + (uint64_t)(x)))
#define DT_SHM_SUM_U8_(a, x) ((uint8_t)((a) + (x)))

DT_SHM_REDUCE_FN_(dt_shm_sum_f32_, float, DT_SHM_SUM_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_avg_f32_, float, DT_SHM_SUM_, DT_SHM_DIV_WF_)
DT_SHM_REDUCE_FN_(dt_shm_max_f32_, float, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_min_f32_, float, DT_SHM_MIN_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_sum_f64_, double, DT_SHM_SUM_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_avg_f64_, double, DT_SHM_SUM_, DT_SHM_DIV_WD_)
DT_SHM_REDUCE_FN_(dt_shm_max_f64_, double, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_min_f64_, double, DT_SHM_MIN_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_sum_i32_, int32_t, DT_SHM_SUM_I32_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_max_i32_, int32_t, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_min_i32_, int32_t, DT_SHM_MIN_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_sum_i64_, int64_t, DT_SHM_SUM_I64_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_max_i64_, int64_t, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_min_i64_, int64_t, DT_SHM_MIN_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_sum_u8_, uint8_t, DT_SHM_SUM_U8_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_max_u8_, uint8_t, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_FN_(dt_shm_min_u8_, uint8_t, DT_SHM_MIN_, DT_SHM_KEEP_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_sum_bf16_, dt_bf16_to_f32, dt_f32_to_bf16, DT_SHM_SUM_, DT_SHM_KEEP_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_avg_bf16_, dt_bf16_to_f32, dt_f32_to_bf16, DT_SHM_SUM_, DT_SHM_DIV_WF_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_max_bf16_, dt_bf16_to_f32, dt_f32_to_bf16, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_min_bf16_, dt_bf16_to_f32, dt_f32_to_bf16, DT_SHM_MIN_, DT_SHM_KEEP_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_sum_f16_, dt_f16_to_f32, dt_f32_to_f16, DT_SHM_SUM_, DT_SHM_KEEP_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_avg_f16_, dt_f16_to_f32, dt_f32_to_f16, DT_SHM_SUM_, DT_SHM_DIV_WF_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_max_f16_, dt_f16_to_f32, dt_f32_to_f16, DT_SHM_MAX_, DT_SHM_KEEP_)
DT_SHM_REDUCE_HALF_FN_(dt_shm_min_f16_, dt_f16_to_f32, dt_f32_to_f16, DT_SHM_MIN_, DT_SHM_KEEP_)

typedef void (*dt_shm_reduce_fn_)(void* out1, void* out2, const void* const* src, int w, int64_t n);

/* by dtype, then DT_SHM_SUM, AVG, MAX, MIN; NULL: not supported */
static dt_shm_reduce_fn_ dt_shm_reduce_lookup_(int32_t dtype, int32_t redop) {
  if (redop < DT_SHM_SUM || redop > DT_SHM_MIN) return NULL;
  static const dt_shm_reduce_fn_ f32[4] = {dt_shm_sum_f32_, dt_shm_avg_f32_, dt_shm_max_f32_, dt_shm_min_f32_};
  static const dt_shm_reduce_fn_ f64[4] = {dt_shm_sum_f64_, dt_shm_avg_f64_, dt_shm_max_f64_, dt_shm_min_f64_};
  static const dt_shm_reduce_fn_ bf16[4] = {dt_shm_sum_bf16_, dt_shm_avg_bf16_, dt_shm_max_bf16_, dt_shm_min_bf16_};
  static const dt_shm_reduce_fn_ f16[4] = {dt_shm_sum_f16_, dt_shm_avg_f16_, dt_shm_max_f16_, dt_shm_min_f16_};
  static const dt_shm_reduce_fn_ i32[4] = {dt_shm_sum_i32_, NULL, dt_shm_max_i32_, dt_shm_min_i32_};
  static const dt_shm_reduce_fn_ i64[4] = {dt_shm_sum_i64_, NULL, dt_shm_max_i64_, dt_shm_min_i64_};
  static const dt_shm_reduce_fn_ u8[4] = {dt_shm_sum_u8_, NULL, dt_shm_max_u8_, dt_shm_min_u8_};
  switch (dtype) {
    case DT_F32: return f32[redop];
    case DT_SHM_F64: return f64[redop];
    case DT_BF16: return bf16[redop];
    case DT_F16: return f16[redop];
    case DT_I32: return i32[redop];
    case DT_I64: return i64[redop];
    case DT_U8: return u8[redop];
    default: return NULL;
  }
}

int dt_shm_reduce_supported_(int32_t dtype, int32_t redop) { return dt_shm_reduce_lookup_(dtype, redop) != NULL; }

void dt_shm_reduce_(int32_t dtype, int32_t redop, void* out1, void* out2, const void* const* src, int w, int64_t n) {
  dt_shm_reduce_fn_ fn = dt_shm_reduce_lookup_(dtype, redop);
  if (fn && n > 0) fn(out1, out2, src, w, n);
}
