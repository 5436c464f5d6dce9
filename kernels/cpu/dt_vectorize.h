/* dt_vectorize.h — how the CPU loops are compiled: a hot loop twice (AVX+FMA
 * and baseline x86-64, picked once at load time by an ifunc). CPU library
 * only (the CUDA one never includes it). Nothing here changes the arithmetic:
 * -ffp-contract=off holds in both clones, so they round identically. Include
 * it first in a .c file, so its pragma covers the headers' inline bodies. */
#pragma once
#include <stdint.h>

#if defined(__x86_64__) && !defined(__CUDACC__)
/* The loops compute both sides of each select (clamps in dt_expf, the branch
 * of dt_tanhf); only without FP-trap semantics may GCC if-convert them and
 * vectorise. Kernels never unmask FP exceptions, so no result changes. */
#pragma GCC optimize("no-trapping-math")
/* An ISA clone ("fma", which implies AVX), not an arch= one: GCC refuses to
 * inline the DT_HD bodies into a function of another arch=, and a loop that
 * calls its per-element body does not vectorise. */
#define DT_VEC_CLONES __attribute__((target_clones("fma", "default")))
#else
#define DT_VEC_CLONES
#endif
