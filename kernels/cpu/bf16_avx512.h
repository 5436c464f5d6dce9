/* bf16_avx512.h — f32 <-> bf16 for 16 lanes with AVX-512, the bits of
 * dt_f32_to_bf16 / dt_bf16_to_f32 (round to nearest even, NaN kept quiet),
 * with the 16 x 16 dword transpose (transpose_avx512.h) that lays bf16 pairs
 * out as B slivers, for the files compiled with AVX512_BF16 target attributes
 * (gemm_bf16_avx512.c, attention_bf16_avx512.c). Call only on CPUs with
 * AVX512F and AVX512BW. */
#pragma once
#include <immintrin.h>
#include <stdint.h>
#include "transpose_avx512.h"

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

