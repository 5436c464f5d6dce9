/* Compares kernels/cpu/dt_math_avx512.h with the scalar bodies it copies (dt_math.h, gelu.h) on
 * every one of the 2^32 floats: exp, tanh, GELU, and GELU's gradient for two values of dout.
 * The suite's tests/kernels/math_rows_test.ts samples about 4.2 M inputs; run this after any change
 * to the header (about 2 minutes on two cores, 4 on one; needs a CPU with AVX-512F):
 *
 *   gcc -O3 -march=x86-64 -mtune=generic -ffp-contract=off -pthread -Ikernels/cpu \
 *       -Ikernels/common scripts/math_avx512_exhaustive.c -o /tmp/math_exhaustive -lm
 *   /tmp/math_exhaustive
 *
 * It prints the count of inputs whose bits differ per function, and the first such input; the
 * exit status is 1 if any differ. (-ffp-contract=off: the library's flags, so the scalar bodies
 * round as they do in it.) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "dt_math_avx512.h"
#include "gelu.h"

enum { FUNCS = 5 };
static const char* const NAMES[FUNCS] = {"exp", "tanh", "gelu", "gelu_grad(dout 1)",
                                         "gelu_grad(dout -0.37)"};
static const float DOUTS[2] = {1.0f, -0.37f};

typedef struct {
  uint64_t lo, hi;
  uint64_t differ[FUNCS];
  int64_t first[FUNCS]; /* -1: none */
} part_t;

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float scalar(int f, float x) {
  switch (f) {
    case 0: return dt_expf(x);
    case 1: return dt_tanhf(x);
    case 2: return dt_gelu_f(x);
    default: return dt_gelu_grad_f(DOUTS[f - 3], x);
  }
}

__attribute__((target("avx512f"))) static void* compare(void* arg) {
  part_t* p = arg;
  float in[16], out[16];
  for (int f = 0; f < FUNCS; f++) p->differ[f] = 0, p->first[f] = -1;
  for (uint64_t b = p->lo; b < p->hi; b += 16) {
    for (int i = 0; i < 16; i++) {
      uint32_t u = (uint32_t)(b + (uint64_t)i);
      memcpy(&in[i], &u, 4);
    }
    __m512 x = _mm512_loadu_ps(in);
    __m512 v[FUNCS] = {dt_expf_avx512_(x), dt_tanhf_avx512_(x), dt_gelu_avx512_(x),
                       dt_gelu_grad_avx512_(_mm512_set1_ps(DOUTS[0]), x),
                       dt_gelu_grad_avx512_(_mm512_set1_ps(DOUTS[1]), x)};
    for (int f = 0; f < FUNCS; f++) {
      _mm512_storeu_ps(out, v[f]);
      for (int i = 0; i < 16; i++) {
        if (bits_of(scalar(f, in[i])) == bits_of(out[i])) continue;
        if (p->first[f] < 0) p->first[f] = (int64_t)bits_of(in[i]);
        p->differ[f]++;
      }
    }
  }
  return NULL;
}

int main(void) {
  if (!__builtin_cpu_supports("avx512f")) {
    fprintf(stderr, "this CPU has no AVX-512F: nothing to compare\n");
    return 2;
  }
  part_t parts[2] = {{.lo = 0, .hi = 1ull << 31}, {.lo = 1ull << 31, .hi = 1ull << 32}};
  pthread_t threads[2];
  for (int t = 0; t < 2; t++) pthread_create(&threads[t], NULL, compare, &parts[t]);
  for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
  int any = 0;
  for (int f = 0; f < FUNCS; f++) {
    uint64_t n = parts[0].differ[f] + parts[1].differ[f];
    int64_t first = parts[0].first[f] >= 0 ? parts[0].first[f] : parts[1].first[f];
    if (n) {
      printf("%s: %llu inputs differ, the first 0x%08llx\n", NAMES[f], (unsigned long long)n,
             (unsigned long long)first);
    } else {
      printf("%s: the same bits on all 2^32 inputs\n", NAMES[f]);
    }
    any |= n != 0;
  }
  return any;
}
