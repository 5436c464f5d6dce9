/* gemm_pack_avx2.c — AVX2 packing of f32 operands, used by the AVX2 and
 * AVX-512 kernels: vector copies where the sliver layout matches the source,
 * 8 x 8 register transposes for a transposed B. Other dtypes go to the plain
 * C packers. */
#include "gemm_internal.h"
#include <immintrin.h>

#define AVX2_ __attribute__((target("avx2,fma")))

/* r[i] holds 8 values of row i; afterwards r[q] holds element q of each row. */
AVX2_ static inline void transpose8_(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* B not transposed: whole slivers with vector moves, the last partial one
 * padded with zeros, 8 rows at a time: those rows' pieces go to one sliver
 * after another. Row by row, the writes would go to every sliver at once,
 * kc * nr floats apart, which for the usual kc is a multiple of 4 KiB (the same
 * L1 set for all); sliver by sliver, the reads would walk all kc rows once per
 * sliver. On a 2048 x 512 B (AVX2 Zen 3): 5.0 floats/ns, against 3.7 row by
 * row and 3.4-4.0 sliver by sliver. */
#define PACK_B_ROWS_ 8
AVX2_ static void pack_b_rows_(const float* src, int64_t ld, int64_t kc, int64_t nc, int nr, float* dst) {
  int64_t full = nc / nr, rest = nc - full * nr;
  for (int64_t p0 = 0; p0 < kc; p0 += PACK_B_ROWS_) {
    int64_t p1 = kc - p0 < PACK_B_ROWS_ ? kc : p0 + PACK_B_ROWS_;
    for (int64_t s = 0; s < full; s++) {
      const float* col = src + s * nr;
      float* out = dst + s * kc * nr;
      for (int64_t p = p0; p < p1; p++)
        for (int j = 0; j < nr; j += 8) _mm256_storeu_ps(out + p * nr + j, _mm256_loadu_ps(col + p * ld + j));
    }
    if (rest) {
      float* out = dst + full * kc * nr;
      for (int64_t p = p0; p < p1; p++) {
        const float* row = src + p * ld + full * nr;
        for (int64_t j = 0; j < rest; j++) out[p * nr + j] = row[j];
        for (int64_t j = rest; j < nr; j++) out[p * nr + j] = 0.0f;
      }
    }
  }
}

/* B transposed (column j of op(B) is row j of src, contiguous in p): blocks
 * of 8 columns x 8 values of p are transposed in registers. */
AVX2_ static void pack_b_cols_(const float* src, int64_t ld, int64_t kc, int64_t nc, int nr, float* dst) {
  int64_t k8 = kc / 8 * 8;
  for (int64_t j = 0; j < nc; j += 8) {
    float* out = dst + j / nr * kc * nr + j % nr; /* column j's place in its sliver */
    int cols = nc - j < 8 ? (int)(nc - j) : 8;
    if (cols == 8) {
      for (int64_t p = 0; p < k8; p += 8) {
        __m256 r[8];
        for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(src + (j + q) * ld + p);
        transpose8_(r);
        for (int q = 0; q < 8; q++) _mm256_storeu_ps(out + (p + q) * nr, r[q]);
      }
    }
    for (int64_t p = cols == 8 ? k8 : 0; p < kc; p++) {
      for (int q = 0; q < cols; q++) out[p * nr + q] = src[(j + q) * ld + p];
      for (int q = cols; q < 8; q++) out[p * nr + q] = 0.0f;
    }
  }
  /* the rest of a partial last sliver past its last 8-column group */
  int64_t groups_end = (nc + 7) / 8 * 8;
  int64_t sliver_end = (nc + nr - 1) / nr * nr;
  for (int64_t j = groups_end; j < sliver_end; j++) {
    float* out = dst + j / nr * kc * nr + j % nr;
    for (int64_t p = 0; p < kc; p++) out[p * nr] = 0.0f;
  }
}

/* A transposed (column p of op(A) contiguous in i): row p of the source
 * holds column p of every sliver. 8 rows at a time, their mr-value pieces go
 * to one sliver after another (see pack_b_rows_: slivers are kc * mr floats
 * apart, and writing all of them for each row keeps evicting each other from
 * L1; one sliver at a time would walk all kc rows once per sliver). On a
 * 2048 x 512 A^T (AVX2 Zen 3): 1.9 floats/ns row by row, 4.0-4.4 16 rows at a
 * time (8: 3.5, 32: 2.5). */
#define PACK_A_ROWS_ 16
AVX2_ static void pack_a_cols_(const float* src, int64_t ld, int64_t mc, int64_t kc, int mr, float* dst) {
  int64_t full = mc / mr, rest = mc - full * mr;
  for (int64_t p0 = 0; p0 < kc; p0 += PACK_A_ROWS_) {
    int64_t p1 = kc - p0 < PACK_A_ROWS_ ? kc : p0 + PACK_A_ROWS_;
    for (int64_t s = 0; s < full; s++) {
      const float* first = src + s * mr;
      float* out = dst + s * kc * mr;
      if (mr == 6) {
        for (int64_t p = p0; p < p1; p++) {
          _mm_storeu_ps(out + p * 6, _mm_loadu_ps(first + p * ld));
          _mm_storel_pi((__m64*)(out + p * 6 + 4), _mm_castpd_ps(_mm_load_sd((const double*)(first + p * ld + 4))));
        }
      } else if (mr == 8) {
        for (int64_t p = p0; p < p1; p++) _mm256_storeu_ps(out + p * 8, _mm256_loadu_ps(first + p * ld));
      } else {
        for (int64_t p = p0; p < p1; p++)
          for (int i = 0; i < mr; i++) out[p * mr + i] = first[p * ld + i];
      }
    }
    if (rest) {
      const float* first = src + full * mr;
      float* out = dst + full * kc * mr;
      for (int64_t p = p0; p < p1; p++) {
        for (int64_t i = 0; i < rest; i++) out[p * mr + i] = first[p * ld + i];
        for (int64_t i = rest; i < mr; i++) out[p * mr + i] = 0.0f;
      }
    }
  }
}

void dt_gemm_pack_a_avx2_(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr,
                          float* dst) {
  /* f32 A is packed only when transposed (gemm.c reads it in place otherwise) */
  if (v->dtype == DT_F32) {
    const float* src = (const float*)v->data + i0 * v->rs + p0 * v->cs;
    if (v->rs == 1) return pack_a_cols_(src, v->cs, mc, kc, mr, dst);
  }
  dt_gemm_pack_a_generic_(v, i0, mc, p0, kc, mr, dst);
}

void dt_gemm_pack_b_avx2_(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int nr,
                          float* dst) {
  if (v->dtype == DT_F32 && nr % 8 == 0) {
    const float* src = (const float*)v->data + p0 * v->rs + j0 * v->cs;
    if (v->cs == 1) return pack_b_rows_(src, v->rs, kc, nc, nr, dst);
    if (v->rs == 1) return pack_b_cols_(src, v->cs, kc, nc, nr, dst);
  }
  dt_gemm_pack_b_generic_(v, p0, kc, j0, nc, nr, dst);
}
