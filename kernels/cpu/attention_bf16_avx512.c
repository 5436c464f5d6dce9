/* attention_bf16_avx512.c — the heads of dt_attention_fwd/bwd for bf16 on CPUs
 * with AVX512_BF16: every tile product in vdpbf16ps (gemm_bf16_avx512.c's
 * micro-kernel), as FlashAttention does on tensor cores. Scores are
 * query-major (a tile is BQ query rows x BK keys); K^T and V^T, and K and V
 * interleaved in key pairs, are laid out once per head as the kernel's B
 * slivers. Q K^T and dO V^T multiply the bf16 inputs exactly (f32 sums); the
 * probabilities P and the score gradients dS are f32 and are rounded to bf16
 * once where they enter P V, dS K, dS^T Q and P^T dO — what torch's composed
 * attention does under autocast (softmax's bf16 output into the bmm), where
 * the plain path (attention.c) widens everything to f32. Row sums, the online
 * softmax, lse and delta stay f32. Chosen by attention.c only where
 * dt_gemm_bf16_dot_available_(); scratch per thread grows with T, never T^2. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <stdlib.h>
#include <string.h>
#include "attention.h"
#include "attention_internal.h"
#include "bf16_avx512.h"
#include "gemm_internal.h"

#define BQ 48 /* query rows per tile: 4 micro-tiles of 12 */
#define BK 64 /* keys per tile: 2 slivers of 32 */
#define T_ DT_BF16_TARGET_

/* ---- per-thread scratch ---------------------------------------------------------- */

static __thread void* bf_scratch_;
static __thread size_t bf_cap_;

static void* bf_reserve_(size_t bytes) {
  if (bf_cap_ >= bytes) return bf_scratch_;
  void* p = NULL;
  if (posix_memalign(&p, 64, bytes) != 0) return NULL;
  free(bf_scratch_);
  bf_scratch_ = p;
  bf_cap_ = bytes;
  return p;
}

/* Sizes of one head, in elements (dwords or floats). */
typedef struct {
  int64_t T, D;
  int64_t Dq;  /* pairs along D */
  int64_t Dp;  /* D rounded up to the 32 columns of a B sliver */
  int64_t DA;  /* D rounded up to the 12 rows of a micro-tile */
  int64_t Tq;  /* pairs along T */
  int64_t T32; /* T rounded up to a sliver of keys */
} geo_;

static geo_ geo_of_(int64_t T, int64_t D) {
  geo_ g = {.T = T, .D = D, .Dq = (D + 1) / 2, .Dp = (D + 31) / 32 * 32, .DA = (D + 11) / 12 * 12,
            .Tq = (T + 1) / 2, .T32 = (T + 31) / 32 * 32};
  return g;
}

/* A bump allocator over the scratch: each piece 64-byte aligned. */
static void* take_(char** at, size_t bytes) {
  void* p = *at;
  *at += (bytes + 63) / 64 * 64;
  return p;
}

/* ---- layouts ---------------------------------------------------------------------- */

/* Rows [r0, r0 + n) as A rows of pairs along D (row stride Dq dwords); rows
 * n .. rows - 1 zero. */
T_ static void rows_pairs_(uint32_t* dst, const uint16_t* x, int64_t stride, int64_t r0, int64_t n, int64_t rows,
                           const geo_* g) {
  for (int64_t i = 0; i < rows; i++) {
    uint32_t* d = dst + i * g->Dq;
    if (i >= n) {
      memset(d, 0, (size_t)g->Dq * 4);
      continue;
    }
    const uint16_t* s = x + (r0 + i) * stride;
    int64_t full = g->D / 2;
    memcpy(d, s, (size_t)full * 4);
    if (g->D & 1) d[full] = s[g->D - 1];
  }
}

/* Rows [0, T) as B slivers of 32 rows (the kernel's columns), pairs along D:
 * sliver s, pair q, column c is the pair q of row 32 s + c (0 past T). Whole
 * pairs are gathered as dwords; the odd last element of a row is read alone
 * (the word after it is another head's, or past the buffer). */
T_ static void rows_to_slivers_(uint32_t* dst, const uint16_t* x, int64_t stride, const geo_* g) {
  const int64_t full = g->D / 2;
  const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32((int)stride));
  for (int64_t s = 0; s < g->T32 / 32; s++) {
    uint32_t* d = dst + s * g->Dq * 32;
    for (int half = 0; half < 2; half++) {
      int64_t r0 = s * 32 + half * 16, rows = g->T - r0;
      __mmask16 live = rows >= 16 ? (__mmask16)0xffff : rows <= 0 ? 0 : (__mmask16)((1u << rows) - 1);
      const uint16_t* row0 = x + r0 * stride;
      for (int64_t q = 0; q < full; q++)
        _mm512_storeu_si512(d + q * 32 + half * 16,
                            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, at, row0 + 2 * q, 2));
      if (g->D & 1)
        for (int64_t c = 0; c < 16; c++) d[full * 32 + half * 16 + c] = c < rows ? row0[c * stride + g->D - 1] : 0;
    }
  }
}

/* Rows [r0, r0 + n) interleaved in pairs of rows, as B slivers of 32
 * columns of D: sliver s, pair q, column c is (x[r0 + 2q][32 s + c],
 * x[r0 + 2q + 1][32 s + c]) (0 past n and D); sliver stride pairs * 32. */
T_ static void row_pairs_to_slivers_(uint32_t* dst, const uint16_t* x, int64_t stride, int64_t r0, int64_t n,
                                     int64_t pairs, const geo_* g) {
  for (int64_t s = 0; s < g->Dp / 32; s++) {
    uint32_t* d = dst + s * pairs * 32;
    for (int64_t q = 0; q < (n + 1) / 2; q++) {
      for (int64_t c = 0; c < 32; c += 16) { /* 16 columns at once: masked past D, a zero row past n */
        int64_t e = s * 32 + c, cols = g->D - e;
        __mmask16 k = cols >= 16 ? (__mmask16)0xffff : cols <= 0 ? 0 : (__mmask16)((1u << cols) - 1);
        const uint16_t* r = x + (r0 + 2 * q) * stride + e;
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, r));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(2 * q + 1 < n ? k : 0, r + stride));
        _mm512_storeu_si512(d + q * 32 + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
  }
}

/* An f32 tile row (BK values) rounded into bf16 pairs along the row: what
 * vdpbf16ps takes as an A row (a pair is two adjacent bf16). */
T_ static inline void round_row_(uint32_t* dst, const float* src) {
  for (int c = 0; c < BK; c += 16) _mm256_storeu_si256((__m256i*)((uint16_t*)dst + c), dt_bf16_round_(_mm512_loadu_ps(src + c)));
}

/* Rows 2q and 2q + 1 of an f32 tile (BQ x BK) rounded to bf16 and
 * interleaved: the A rows of its transpose (row c, pair q at dst[q * BK + c]). */
T_ static void interleave_tile_(uint32_t* dst, const float* src) {
  for (int64_t q = 0; q < BQ / 2; q++) {
    const float* r0 = src + 2 * q * BK;
    const float* r1 = r0 + BK;
    for (int c = 0; c < BK; c += 16) {
      __m512i lo = _mm512_cvtepu16_epi32(dt_bf16_round_(_mm512_loadu_ps(r0 + c)));
      __m512i hi = _mm512_cvtepu16_epi32(dt_bf16_round_(_mm512_loadu_ps(r1 + c)));
      _mm512_storeu_si512(dst + q * BK + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

/* The largest of r[0 .. n) (-inf for none) and the sum of r[0 .. BK), in a
 * fixed order. */
T_ static inline float row_max_(const float* r, int64_t n) {
  const __m512 none = _mm512_set1_ps(-INFINITY);
  __m512 m = none;
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(none, k, r + j));
  }
  return _mm512_reduce_max_ps(m);
}

T_ static inline float row_sum_(const float* r) {
  __m512 a = _mm512_add_ps(_mm512_loadu_ps(r), _mm512_loadu_ps(r + 16));
  __m512 b = _mm512_add_ps(_mm512_loadu_ps(r + 32), _mm512_loadu_ps(r + 48));
  return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

/* sum over e < D of x[e] * y[e], bf16 rows, f32 products and sums */
T_ static inline float dot_bf16_(const uint16_t* x, const uint16_t* y, int64_t D) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t e = 0; e < D; e += 16) {
    __mmask16 k = D - e >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (D - e)) - 1);
    __m512 a = dt_bf16_widen_(_mm256_maskz_loadu_epi16(k, x + e)), b = dt_bf16_widen_(_mm256_maskz_loadu_epi16(k, y + e));
    acc = _mm512_add_ps(acc, _mm512_mul_ps(a, b));
  }
  return _mm512_reduce_add_ps(acc);
}

#if BK != 64
#error "row_sum_ adds four vectors of 16"
#endif

/* ---- forward ------------------------------------------------------------------------ */

/* One (batch, head) of dt_attention_fwd in bf16. */
T_ void dt_att_bf16_fwd_head_(const dt_att_args_* c, int64_t bh, int* failed) {
  const int64_t T = c->T, H = c->H, D = c->D, C = H * D, b = bh / H, h = bh % H, stride = 3 * C;
  const geo_ g = geo_of_(T, D);
  size_t need = (size_t)(g.T32 * g.Dq + g.Dp * g.Tq + BQ * g.Dq) * 4 + (size_t)(BQ * BK + BQ * g.Dp) * 4 +
                (size_t)(BQ * BK / 2) * 4 + 6 * 64;
  char* at = bf_reserve_(need);
  if (!at) {
    __atomic_store_n(failed, 1, __ATOMIC_RELAXED);
    return;
  }
  uint32_t* kt = take_(&at, (size_t)(g.T32 * g.Dq) * 4); /* K^T: slivers of keys, pairs along D */
  uint32_t* vi = take_(&at, (size_t)(g.Dp * g.Tq) * 4);  /* V in key pairs: slivers of D */
  uint32_t* qa = take_(&at, (size_t)(BQ * g.Dq) * 4);    /* the tile's Q rows */
  float* s = take_(&at, (size_t)(BQ * BK) * 4);          /* scores, then probabilities */
  float* o = take_(&at, (size_t)(BQ * g.Dp) * 4);        /* the output's f32 sums */
  uint32_t* pa = take_(&at, (size_t)(BQ * BK / 2) * 4);  /* P rounded, pairs along keys */
  const uint16_t* base = (const uint16_t*)c->qkv + b * T * stride + h * D;
  rows_to_slivers_(kt, base + C, stride, &g);
  row_pairs_to_slivers_(vi, base + 2 * C, stride, 0, T, g.Tq, &g);
  float m[BQ], l[BQ];
  for (int64_t q0 = 0; q0 < T; q0 += BQ) {
    int64_t nq = T - q0 < BQ ? T - q0 : BQ;
    rows_pairs_(qa, base, stride, q0, nq, BQ, &g);
    for (int64_t i = 0; i < BQ; i++) m[i] = -INFINITY, l[i] = 0.0f;
    memset(o, 0, (size_t)(BQ * g.Dp) * 4);
    int64_t kend = dt_attention_key_end(q0 + nq, T, c->causal);
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
      int64_t nk = kend - k0 < BK ? kend - k0 : BK;
      dt_bf16_tile_gemm_(nq, nk, g.Dq, qa, g.Dq, 1, kt + k0 / 32 * g.Dq * 32, g.Dq * 32, s, BK, c->scale, 0.0f);
      for (int64_t i = 0; i < nq; i++) {
        float* row = s + i * BK;
        int64_t vis = c->causal ? q0 + i - k0 + 1 : nk; /* keys of the tile this row sees */
        if (vis > nk) vis = nk;
        if (vis < 0) vis = 0;
        /* keys it does not see (and columns past nk) weigh exactly 0: the loops run over whole tiles */
        for (int64_t j = vis; j < BK; j++) row[j] = -INFINITY;
        float mt = row_max_(row, BK);
        float m_new = mt > m[i] ? mt : m[i];
        float corr = dt_attention_rescale_f(m[i], m_new);
        for (int64_t j = 0; j < BK; j++) row[j] = dt_attention_p_f(row[j], m_new);
        float sum = row_sum_(row);
        l[i] = l[i] * corr + sum;
        m[i] = m_new;
        if (corr != 1.0f)
          for (int64_t e = 0; e < D; e++) o[i * g.Dp + e] *= corr;
        round_row_(pa + i * (BK / 2), row);
      }
      dt_bf16_tile_gemm_(nq, D, (nk + 1) / 2, pa, BK / 2, 1, vi + k0 / 2 * 32, g.Tq * 32, o, g.Dp, 1.0f, 1.0f);
    }
    uint16_t* out = c->out;
    for (int64_t i = 0; i < nq; i++) {
      float inv = 1.0f / l[i];
      int64_t off = (b * T + q0 + i) * C + h * D;
      for (int64_t e = 0; e < D; e++) out[off + e] = dt_f32_to_bf16(o[i * g.Dp + e] * inv);
      c->lse[bh * T + q0 + i] = dt_attention_lse_f(m[i], l[i]);
    }
  }
}

/* ---- backward ----------------------------------------------------------------------- */

/* One (batch, head) of dt_attention_bwd in bf16: per query tile, P and dS of
 * each key tile, then dV += P^T dO, dK += dS^T Q (sums of the whole sequence
 * in f32 scratch) and dQ += dS K. */
T_ void dt_att_bf16_bwd_head_(const dt_att_args_* c, int64_t bh, int* failed) {
  const int64_t T = c->T, H = c->H, D = c->D, C = H * D, b = bh / H, h = bh % H, stride = 3 * C;
  const geo_ g = geo_of_(T, D);
  /* the A rows of a transposed tile: keys up to BK rounded up to 12 readable */
  const int64_t ta = BQ / 2 * BK + 16;
  size_t need = (size_t)(2 * g.T32 * g.Dq + g.Dp * g.Tq + 2 * T * g.Dp + 2 * BQ * g.Dq + 2 * (BQ / 2) * g.Dp) * 4 +
                (size_t)(2 * BQ * BK + 2 * ta + BQ * BK / 2 + BQ * g.Dp) * 4 + 16 * 64;
  char* at = bf_reserve_(need);
  if (!at) {
    __atomic_store_n(failed, 1, __ATOMIC_RELAXED);
    return;
  }
  uint32_t* kt = take_(&at, (size_t)(g.T32 * g.Dq) * 4);      /* K^T as B slivers */
  uint32_t* vt = take_(&at, (size_t)(g.T32 * g.Dq) * 4);      /* V^T as B slivers */
  uint32_t* ki = take_(&at, (size_t)(g.Dp * g.Tq) * 4);       /* K in key pairs */
  float* dk = take_(&at, (size_t)(T * g.Dp) * 4);             /* dK sums (T x Dp) */
  float* dv = take_(&at, (size_t)(T * g.Dp) * 4);             /* dV sums */
  uint32_t* qa = take_(&at, (size_t)(BQ * g.Dq) * 4);         /* Q rows */
  uint32_t* ga = take_(&at, (size_t)(BQ * g.Dq) * 4);         /* dO rows */
  uint32_t* qi = take_(&at, (size_t)(BQ / 2 * g.Dp) * 4);     /* Q in query pairs (B slivers of D) */
  uint32_t* gi = take_(&at, (size_t)(BQ / 2 * g.Dp) * 4);     /* dO in query pairs */
  float* p = take_(&at, (size_t)(BQ * BK) * 4);               /* P */
  float* ds = take_(&at, (size_t)(BQ * BK) * 4);              /* dP, then dS */
  uint32_t* pt = take_(&at, (size_t)ta * 4);                  /* P^T rows, pairs along queries */
  uint32_t* dst = take_(&at, (size_t)ta * 4);                 /* dS^T rows */
  uint32_t* dsa = take_(&at, (size_t)(BQ * BK / 2) * 4);      /* dS rows, pairs along keys */
  float* dq = take_(&at, (size_t)(BQ * g.Dp) * 4);            /* dQ sums */
  const uint16_t* base = (const uint16_t*)c->qkv + b * T * stride + h * D;
  const uint16_t* gbase = (const uint16_t*)c->dout + b * T * C + h * D;
  const uint16_t* obase = (const uint16_t*)c->fwd_out + b * T * C + h * D;
  rows_to_slivers_(kt, base + C, stride, &g);
  rows_to_slivers_(vt, base + 2 * C, stride, &g);
  row_pairs_to_slivers_(ki, base + C, stride, 0, T, g.Tq, &g);
  memset(dk, 0, (size_t)(T * g.Dp) * 4);
  memset(dv, 0, (size_t)(T * g.Dp) * 4);
  memset(pt + BQ / 2 * BK, 0, 16 * 4);
  memset(dst + BQ / 2 * BK, 0, 16 * 4);
  float lse[BQ], delta[BQ];
  for (int64_t q0 = 0; q0 < T; q0 += BQ) {
    int64_t nq = T - q0 < BQ ? T - q0 : BQ, kq = (nq + 1) / 2;
    rows_pairs_(qa, base, stride, q0, nq, BQ, &g);
    rows_pairs_(ga, gbase, C, q0, nq, BQ, &g);
    row_pairs_to_slivers_(qi, base, stride, q0, nq, BQ / 2, &g);
    row_pairs_to_slivers_(gi, gbase, C, q0, nq, BQ / 2, &g);
    for (int64_t i = 0; i < BQ; i++) {
      delta[i] = i < nq ? dot_bf16_(gbase + (q0 + i) * C, obase + (q0 + i) * C, D) : 0.0f;
      lse[i] = i < nq ? c->lse[bh * T + q0 + i] : 0.0f;
    }
    memset(dq, 0, (size_t)(BQ * g.Dp) * 4);
    int64_t kend = dt_attention_key_end(q0 + nq, T, c->causal);
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
      int64_t nk = kend - k0 < BK ? kend - k0 : BK;
      dt_bf16_tile_gemm_(nq, nk, g.Dq, qa, g.Dq, 1, kt + k0 / 32 * g.Dq * 32, g.Dq * 32, p, BK, c->scale, 0.0f);
      dt_bf16_tile_gemm_(nq, nk, g.Dq, ga, g.Dq, 1, vt + k0 / 32 * g.Dq * 32, g.Dq * 32, ds, BK, 1.0f, 0.0f);
      for (int64_t i = 0; i < BQ; i++) {
        float* pr = p + i * BK;
        float* dr = ds + i * BK;
        int64_t vis = i >= nq ? 0 : c->causal ? q0 + i - k0 + 1 : nk; /* keys of the tile this row sees */
        if (vis > nk) vis = nk;
        if (vis < 0) vis = 0;
        /* what it does not see gets P = exp(-inf) = 0 and dS = 0: the loop runs over the whole tile */
        for (int64_t j = vis; j < BK; j++) pr[j] = -INFINITY, dr[j] = 0.0f;
        for (int64_t j = 0; j < BK; j++) {
          float pij = dt_attention_p_lse_f(pr[j], lse[i]);
          pr[j] = pij;
          dr[j] = dt_attention_ds_f(pij, dr[j], delta[i]) * c->scale;
        }
        round_row_(dsa + i * (BK / 2), dr);
      }
      interleave_tile_(pt, p);
      interleave_tile_(dst, ds);
      dt_bf16_tile_gemm_(nk, D, kq, pt, 1, BK, gi, BQ / 2 * 32, dv + k0 * g.Dp, g.Dp, 1.0f, 1.0f);  /* dV += P^T dO */
      dt_bf16_tile_gemm_(nk, D, kq, dst, 1, BK, qi, BQ / 2 * 32, dk + k0 * g.Dp, g.Dp, 1.0f, 1.0f); /* dK += dS^T Q */
      dt_bf16_tile_gemm_(nq, D, (nk + 1) / 2, dsa, BK / 2, 1, ki + k0 / 2 * 32, g.Tq * 32, dq, g.Dp, 1.0f,
                         1.0f); /* dQ += dS K */
    }
    uint16_t* out = c->out;
    for (int64_t i = 0; i < nq; i++) {
      uint16_t* o = out + (b * T + q0 + i) * stride + h * D;
      for (int64_t e = 0; e < D; e++) o[e] = dt_f32_to_bf16(dq[i * g.Dp + e]);
    }
  }
  uint16_t* out = c->out;
  for (int64_t t = 0; t < T; t++) {
    uint16_t* o = out + (b * T + t) * stride + h * D;
    for (int64_t e = 0; e < D; e++) o[C + e] = dt_f32_to_bf16(dk[t * g.Dp + e]);
    for (int64_t e = 0; e < D; e++) o[2 * C + e] = dt_f32_to_bf16(dv[t * g.Dp + e]);
  }
}
