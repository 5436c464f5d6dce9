/* dt_vectorize.h — how the CPU loops are compiled: a hot loop three times
 * (x86-64-v4, x86-64-v3 and baseline x86-64, picked once at load time by an
 * ifunc). CPU library only (the CUDA one never includes it). Nothing here
 * changes the arithmetic: -ffp-contract=off holds in every clone, so they
 * round identically. Include it first in a .c file, so its pragma covers the
 * headers' inline bodies. */
#pragma once
#include <stdint.h>

#if defined(__x86_64__) && !defined(__CUDACC__)
/* The loops compute both sides of each select (clamps in dt_expf, the branch
 * of dt_tanhf); only without FP-trap semantics may GCC if-convert them and
 * vectorise. Kernels never unmask FP exceptions, so no result changes. */
#pragma GCC optimize("no-trapping-math")
/* The x86-64-v3 clone (AVX2, FMA, BMI): 256-bit integer lanes too, which the
 * bit-level parts of the bodies (dt_expf's exponent, the bf16/f16 rounding)
 * need to vectorise at full width; with "fma" alone (AVX without AVX2) GCC
 * vectorised those loops two floats at a time. x86-64-v4 adds AVX-512. */
#define DT_VEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DT_VEC_CLONES
#endif
