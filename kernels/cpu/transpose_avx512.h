/* transpose_avx512.h — a 16 x 16 transpose of dwords in AVX-512F registers,
 * for the packing and layout loops of the f32 and bf16 kernels. CPU library
 * only: call from code compiled for AVX-512F (a target attribute) on CPUs
 * that have it. */
#pragma once
#include <immintrin.h>

/* A 16 x 16 transpose of dwords in registers: r[i] lane j becomes r[j] lane i.
 * Pairs of rows interleaved (dwords, then qwords) inside each 128-bit lane,
 * then the lanes gathered across the four groups of four rows. */
__attribute__((target("avx512f"), always_inline)) static inline void dt_transpose16_epi32_(__m512i r[16]) {
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
