/* shm_stream.c — the memory-bound inner loops of the collectives, one pass
 * over the data each: copies and the f32 sum/avg over ranks (the gradient
 * average), with AVX-512 or AVX2 chosen once at run time, and streaming
 * (non-temporal) stores into the caller's buffer for messages too large to
 * stay in cache, so the result is written once without first being read. The
 * arithmetic is that of shm_reduce.c, element by element in rank order: the
 * vector paths change how many elements go at once, never a result's bits. */
#include "shm_internal.h"
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- plain C ---------------------------------------------------------------- */

static void dt_shm_copy_plain_(void* dst, const void* src, int64_t bytes, int stream) {
  (void)stream;
  memcpy(dst, src, (size_t)bytes);
}

/* sum over w sources in rank order, avg divides by w; out2 may be NULL */
static void dt_shm_sum_f32_plain_(float* out1, float* out2, const float* const* src, int w, int64_t n,
                                  int avg, int stream) {
  (void)stream;
  const float fw = (float)w;
  for (int64_t i = 0; i < n; i++) {
    float a = src[0][i];
    for (int q = 1; q < w; q++) a = a + src[q][i];
    if (avg) a = a / fw;
    out1[i] = a;
    if (out2) out2[i] = a;
  }
}

#if defined(__x86_64__)
#define DT_SHM_AVX512_ __attribute__((target("avx512f")))
#define DT_SHM_AVX2_ __attribute__((target("avx2")))

/* ---- AVX-512 ---------------------------------------------------------------- */

/* Stores 16 floats at p: streaming when asked and p is 64-byte aligned. */
DT_SHM_AVX512_ static inline void dt_shm_put16_(float* p, __m512 v, int stream) {
  if (stream) _mm512_stream_ps(p, v);
  else _mm512_storeu_ps(p, v);
}

/* Elements before `p` reaches a 64-byte boundary (at most n). */
static inline int64_t dt_shm_head_(const void* p, int64_t n, int64_t es) {
  int64_t mis = (int64_t)((uintptr_t)p & 63);
  int64_t head = mis == 0 ? 0 : (64 - mis) / es;
  return head < n ? head : n;
}

DT_SHM_AVX512_ static void dt_shm_copy_avx512_(void* dst_, const void* src_, int64_t bytes, int stream) {
  if (!stream || bytes < 256) {
    memcpy(dst_, src_, (size_t)bytes);
    return;
  }
  char* dst = dst_;
  const char* src = src_;
  int64_t head = dt_shm_head_(dst, bytes, 1);
  memcpy(dst, src, (size_t)head);
  int64_t i = head;
  for (; i + 256 <= bytes; i += 256) {
    __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 64);
    __m512 c = _mm512_loadu_ps(src + i + 128), d = _mm512_loadu_ps(src + i + 192);
    _mm512_stream_ps((float*)(dst + i), a);
    _mm512_stream_ps((float*)(dst + i + 64), b);
    _mm512_stream_ps((float*)(dst + i + 128), c);
    _mm512_stream_ps((float*)(dst + i + 192), d);
  }
  memcpy(dst + i, src + i, (size_t)(bytes - i));
}

DT_SHM_AVX512_ static void dt_shm_sum_f32_avx512_(float* out1, float* out2, const float* const* src, int w,
                                                   int64_t n, int avg, int stream) {
  int64_t head = stream ? dt_shm_head_(out1, n, 4) : 0;
  dt_shm_sum_f32_plain_(out1, out2, src, w, head, avg, 0);
  const __m512 fw = _mm512_set1_ps((float)w);
  int64_t i = head;
  if (w == 2) { /* the common case, without the inner loop over ranks */
    const float *s0 = src[0], *s1 = src[1];
    for (; i + 32 <= n; i += 32) {
      __m512 a = _mm512_add_ps(_mm512_loadu_ps(s0 + i), _mm512_loadu_ps(s1 + i));
      __m512 b = _mm512_add_ps(_mm512_loadu_ps(s0 + i + 16), _mm512_loadu_ps(s1 + i + 16));
      if (avg) {
        a = _mm512_div_ps(a, fw);
        b = _mm512_div_ps(b, fw);
      }
      dt_shm_put16_(out1 + i, a, stream);
      dt_shm_put16_(out1 + i + 16, b, stream);
      if (out2) {
        _mm512_storeu_ps(out2 + i, a);
        _mm512_storeu_ps(out2 + i + 16, b);
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_loadu_ps(src[0] + i);
    for (int q = 1; q < w; q++) a = _mm512_add_ps(a, _mm512_loadu_ps(src[q] + i));
    if (avg) a = _mm512_div_ps(a, fw);
    dt_shm_put16_(out1 + i, a, stream);
    if (out2) _mm512_storeu_ps(out2 + i, a);
  }
  const float* rest[DT_SHM_MAX_RANKS];
  for (int q = 0; q < w; q++) rest[q] = src[q] + i;
  dt_shm_sum_f32_plain_(out1 + i, out2 ? out2 + i : NULL, rest, w, n - i, avg, 0);
}

/* ---- AVX2 -------------------------------------------------------------------- */

DT_SHM_AVX2_ static void dt_shm_copy_avx2_(void* dst_, const void* src_, int64_t bytes, int stream) {
  if (!stream || bytes < 128) {
    memcpy(dst_, src_, (size_t)bytes);
    return;
  }
  char* dst = dst_;
  const char* src = src_;
  int64_t head = dt_shm_head_(dst, bytes, 1);
  memcpy(dst, src, (size_t)head);
  int64_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    __m256 a = _mm256_loadu_ps((const float*)(src + i)), b = _mm256_loadu_ps((const float*)(src + i + 32));
    __m256 c = _mm256_loadu_ps((const float*)(src + i + 64)), d = _mm256_loadu_ps((const float*)(src + i + 96));
    _mm256_stream_ps((float*)(dst + i), a);
    _mm256_stream_ps((float*)(dst + i + 32), b);
    _mm256_stream_ps((float*)(dst + i + 64), c);
    _mm256_stream_ps((float*)(dst + i + 96), d);
  }
  memcpy(dst + i, src + i, (size_t)(bytes - i));
}

DT_SHM_AVX2_ static void dt_shm_sum_f32_avx2_(float* out1, float* out2, const float* const* src, int w, int64_t n,
                                               int avg, int stream) {
  int64_t head = stream ? dt_shm_head_(out1, n, 4) : 0;
  dt_shm_sum_f32_plain_(out1, out2, src, w, head, avg, 0);
  const __m256 fw = _mm256_set1_ps((float)w);
  int64_t i = head;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(src[0] + i);
    for (int q = 1; q < w; q++) a = _mm256_add_ps(a, _mm256_loadu_ps(src[q] + i));
    if (avg) a = _mm256_div_ps(a, fw);
    if (stream) _mm256_stream_ps(out1 + i, a);
    else _mm256_storeu_ps(out1 + i, a);
    if (out2) _mm256_storeu_ps(out2 + i, a);
  }
  const float* rest[DT_SHM_MAX_RANKS];
  for (int q = 0; q < w; q++) rest[q] = src[q] + i;
  dt_shm_sum_f32_plain_(out1 + i, out2 ? out2 + i : NULL, rest, w, n - i, avg, 0);
}
#endif

/* ---- choice ------------------------------------------------------------------ */

typedef void (*dt_shm_copy_fn_)(void*, const void*, int64_t, int);
typedef void (*dt_shm_sum_fn_)(float*, float*, const float* const*, int, int64_t, int, int);

static dt_shm_copy_fn_ dt_shm_copy_impl_;
static dt_shm_sum_fn_ dt_shm_sum_impl_;

/* The widest vector unit the CPU has, capped by DTRAIN_CPU_ISA as the GEMM is
 * (an unknown value means no cap here: dt_gemm is the one that reports it). */
static void dt_shm_pick_(void) {
  dt_shm_copy_fn_ copy = dt_shm_copy_plain_;
  dt_shm_sum_fn_ sum = dt_shm_sum_f32_plain_;
#if defined(__x86_64__)
  const char* cap = getenv("DTRAIN_CPU_ISA");
  int level = 2;
  if (cap && strcmp(cap, "avx2") == 0) level = 1;
  else if (cap && strcmp(cap, "generic") == 0) level = 0;
  __builtin_cpu_init();
  if (level >= 2 && __builtin_cpu_supports("avx512f")) {
    copy = dt_shm_copy_avx512_;
    sum = dt_shm_sum_f32_avx512_;
  } else if (level >= 1 && __builtin_cpu_supports("avx2")) {
    copy = dt_shm_copy_avx2_;
    sum = dt_shm_sum_f32_avx2_;
  }
#endif
  __atomic_store_n(&dt_shm_sum_impl_, sum, __ATOMIC_RELEASE);
  __atomic_store_n(&dt_shm_copy_impl_, copy, __ATOMIC_RELEASE);
}

void dt_shm_copy_(void* dst, const void* src, int64_t bytes, int stream) {
  dt_shm_copy_fn_ f = __atomic_load_n(&dt_shm_copy_impl_, __ATOMIC_ACQUIRE);
  if (!f) {
    dt_shm_pick_();
    f = dt_shm_copy_impl_;
  }
  if (bytes > 0) f(dst, src, bytes, stream);
}

void dt_shm_add_f32_(float* out1, float* out2, const float* const* src, int w, int64_t n, int avg, int stream) {
  dt_shm_sum_fn_ f = __atomic_load_n(&dt_shm_sum_impl_, __ATOMIC_ACQUIRE);
  if (!f) {
    dt_shm_pick_();
    f = dt_shm_sum_impl_;
  }
  if (n > 0) f(out1, out2, src, w, n, avg, stream);
}

void dt_shm_stream_fence_(void) {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}
