/* bf16_avx512.h — f32 <-> bf16 for 16 lanes with AVX-512, the bits of
 * dt_f32_to_bf16 / dt_bf16_to_f32 (round to nearest even, NaN kept quiet),
 * and the 16 x 16 dword transpose that lays bf16 pairs out as B slivers,
 * for the files compiled with AVX512_BF16 target attributes
 * (gemm_bf16_avx512.c, attention_bf16_avx512.c). Call only on CPUs with
 * AVX512F and AVX512BW. */
#pragma once
#include <immintrin.h>
#include <stdint.h>

#define DT_BF16_TARGET_ __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* 16 f32 to bf16 bits as dt_f32_to_bf16 */
DT_BF16_TARGET_ static inline __m256i dt_bf16_round_(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

/* 16 bf16 as the f32 values they are */
DT_BF16_TARGET_ static inline __m512 dt_bf16_widen_(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* A 16 x 16 transpose of dwords in registers: r[i] lane j becomes r[j] lane i.
 * Pairs of rows interleaved (dwords, then qwords) inside each 128-bit lane,
 * then the lanes gathered across the four groups of four rows. */
DT_BF16_TARGET_ static inline void dt_transpose16_epi32_(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; k++) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  /* u[4g + e], lane L: rows 4g .. 4g + 3 at column 4L + e */
  for (int g = 0; g < 4; g++) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int e = 0; e < 4; e++) {
    __m512i lo01 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), lo23 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44);
    __m512i hi01 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xee), hi23 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xee);
    r[e] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);      /* column e (lane 0) */
    r[4 + e] = _mm512_shuffle_i32x4(lo01, lo23, 0xdd);  /* column 4 + e (lane 1) */
    r[8 + e] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);  /* lane 2 */
    r[12 + e] = _mm512_shuffle_i32x4(hi01, hi23, 0xdd); /* lane 3 */
  }
}
