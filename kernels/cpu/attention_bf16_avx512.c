/* attention_bf16_avx512.c — the heads of dt_attention_fwd/bwd for bf16 on CPUs
 * with AVX512_BF16: every tile product in vdpbf16ps (gemm_bf16_avx512.c's
 * micro-kernel), as FlashAttention does on tensor cores. Scores are
 * query-major (a tile is BQ query rows x bk keys); K^T and V^T, and K and V
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
#include "dt_math_avx512.h"
#include "gemm_internal.h"

#define BQ 48 /* query rows per tile: 4 micro-tiles of 12 */
/* Keys per tile (bk below): the whole sequence where it is at most 128 long
 * (a row's softmax then needs no running rescale: GPT-mini's T = 128 forward
 * ran 7 % faster, its backward 3 %, than in tiles of 64), else 64 (2
 * slivers). A row's exponentials run only up to its last visible key's
 * vector of 16 (dt_math_avx512.h's expf, the bits of dt_expf); the masked
 * rest of the tile is filled with what they would give (0, and dS's signed
 * zero): with the causal mask that halves them, backward 2.2 -> 1.7 ms per
 * GPT-mini layer. */
#define BK_LONG 64
#define BK_WHOLE 128
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
 * sliver s, pair q, column c is the pair q of row 32 s + c (0 past T). Blocks
 * of 16 rows by 16 pairs are loaded as dwords and transposed in registers
 * (dt_transpose16_epi32_; a gather per 16 values cost 8 % of GPT-mini's
 * attention on a Zen 5 core); the odd last element of a row is read alone
 * (the word after it is another head's, or past the buffer). */
T_ static void rows_to_slivers_(uint32_t* dst, const uint16_t* x, int64_t stride, const geo_* g) {
  const int64_t full = g->D / 2;
  for (int64_t s = 0; s < g->T32 / 32; s++) {
    uint32_t* d = dst + s * g->Dq * 32;
    for (int half = 0; half < 2; half++) {
      int64_t r0 = s * 32 + half * 16, rows = g->T - r0;
      const uint16_t* row0 = x + r0 * stride;
      for (int64_t q0 = 0; q0 < full; q0 += 16) {
        int64_t qn = full - q0 < 16 ? full - q0 : 16;
        __mmask16 qm = qn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << qn) - 1);
        __m512i r[16];
        for (int c = 0; c < 16; c++)
          r[c] = c < rows ? _mm512_maskz_loadu_epi32(qm, row0 + c * stride + 2 * q0) : _mm512_setzero_si512();
        dt_transpose16_epi32_(r);
        for (int64_t e = 0; e < qn; e++) _mm512_storeu_si512(d + (q0 + e) * 32 + half * 16, r[e]);
      }
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

/* The first n values of an f32 tile row (n a multiple of 16) rounded into
 * bf16 pairs along the row: what vdpbf16ps takes as an A row (a pair is two
 * adjacent bf16). */
T_ static inline void round_row_(uint32_t* dst, const float* src, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) _mm256_storeu_si256((__m256i*)((uint16_t*)dst + c), dt_bf16_round_(_mm512_loadu_ps(src + c)));
}

/* Rows 2q and 2q + 1 (q < pairs) of an f32 tile (row stride bk) rounded to
 * bf16 and interleaved, columns c < cols (a multiple of 16): the A rows of
 * its transpose (row c, pair q at dst[q * bk + c]). */
T_ static inline __attribute__((always_inline)) void interleave_tile_(uint32_t* dst, const float* src, const int bk,
                                                                      int64_t pairs, int64_t cols) {
  for (int64_t q = 0; q < pairs; q++) {
    const float* r0 = src + 2 * q * bk;
    const float* r1 = r0 + bk;
    for (int64_t c = 0; c < cols; c += 16) {
      __m512i lo = _mm512_cvtepu16_epi32(dt_bf16_round_(_mm512_loadu_ps(r0 + c)));
      __m512i hi = _mm512_cvtepu16_epi32(dt_bf16_round_(_mm512_loadu_ps(r1 + c)));
      _mm512_storeu_si512(dst + q * bk + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

/* The largest of r[0 .. n) (-inf for none) and the sum of r[0 .. bk), in a
 * fixed order: vectors added pairwise, (v0 + v1) + (v2 + v3) for 64. */
T_ static inline float row_max_(const float* r, int64_t n) {
  const __m512 none = _mm512_set1_ps(-INFINITY);
  __m512 m = none;
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(none, k, r + j));
  }
  return _mm512_reduce_max_ps(m);
}

T_ static inline __attribute__((always_inline)) float row_sum_(const float* r, const int bk) {
  __m512 v[BK_WHOLE / 16];
  for (int k = 0; k < bk / 16; k++) v[k] = _mm512_loadu_ps(r + 16 * k);
  for (int w = bk / 16; w > 1; w /= 2)
    for (int k = 0; k < w / 2; k++) v[k] = _mm512_add_ps(v[2 * k], v[2 * k + 1]);
  return _mm512_reduce_add_ps(v[0]);
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

#if BK_WHOLE % 64 != 0 || (BK_WHOLE & (BK_WHOLE - 1)) != 0
#error "row_sum_ adds a power of two of vectors of 16"
#endif

/* ---- forward ------------------------------------------------------------------------ */

/* One (batch, head) of dt_attention_fwd in bf16, key tiles of bk. */
T_ static inline __attribute__((always_inline)) void fwd_head_(const dt_att_args_* c, int64_t bh, int* failed,
                                                               const int bk) {
  const int64_t T = c->T, H = c->H, D = c->D, C = H * D, b = bh / H, h = bh % H, stride = 3 * C;
  const geo_ g = geo_of_(T, D);
  size_t need = (size_t)(g.T32 * g.Dq + g.Dp * g.Tq + BQ * g.Dq) * 4 + (size_t)(BQ * bk + BQ * g.Dp) * 4 +
                (size_t)(BQ * bk / 2) * 4 + 6 * 64;
  char* at = bf_reserve_(need);
  if (!at) {
    __atomic_store_n(failed, 1, __ATOMIC_RELAXED);
    return;
  }
  uint32_t* kt = take_(&at, (size_t)(g.T32 * g.Dq) * 4); /* K^T: slivers of keys, pairs along D */
  uint32_t* vi = take_(&at, (size_t)(g.Dp * g.Tq) * 4);  /* V in key pairs: slivers of D */
  uint32_t* qa = take_(&at, (size_t)(BQ * g.Dq) * 4);    /* the tile's Q rows */
  float* s = take_(&at, (size_t)(BQ * bk) * 4);          /* scores, then probabilities */
  float* o = take_(&at, (size_t)(BQ * g.Dp) * 4);        /* the output's f32 sums */
  uint32_t* pa = take_(&at, (size_t)(BQ * bk / 2) * 4);  /* P rounded, pairs along keys */
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
    for (int64_t k0 = 0; k0 < kend; k0 += bk) {
      int64_t nk = kend - k0 < bk ? kend - k0 : bk;
      const int64_t nk16 = (nk + 15) / 16 * 16;
      dt_bf16_tile_gemm_(nq, nk, g.Dq, qa, g.Dq, 1, kt + k0 / 32 * g.Dq * 32, g.Dq * 32, s, bk, c->scale, 0.0f);
      for (int64_t i = 0; i < nq; i++) {
        float* row = s + i * bk;
        int64_t vis = c->causal ? q0 + i - k0 + 1 : nk; /* keys of the tile this row sees */
        if (vis > nk) vis = nk;
        if (vis < 0) vis = 0;
        /* keys it does not see (and columns past nk) weigh exactly 0 (p_f of -inf): the
         * exponentials run up to the last visible key's vector, whose lanes past vis are
         * masked to 0, and the rest is set to 0 */
        const int64_t v16 = (vis + 15) / 16 * 16;
        float mt = row_max_(row, vis);
        const float m_old = m[i];
        float m_new = mt > m_old ? mt : m_old;
        /* nothing seen yet: the factor is 0 (no exponential to compute) */
        float corr = m_old == -INFINITY ? 0.0f : dt_attention_rescale_f(m_old, m_new);
        const __m512 vm = _mm512_set1_ps(m_new);
        for (int64_t j = 0; j < v16; j += 16) { /* dt_attention_p_f, 16 keys at a time */
          __m512 sv = _mm512_loadu_ps(row + j);
          __mmask16 seen = vis - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (vis - j)) - 1);
          __mmask16 weighed = _mm512_mask_cmp_ps_mask(seen, sv, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
          _mm512_storeu_ps(row + j, _mm512_maskz_mov_ps(weighed, dt_expf_avx512_(_mm512_sub_ps(sv, vm))));
        }
        for (int64_t j = v16; j < bk; j++) row[j] = 0.0f;
        float sum = row_sum_(row, bk);
        l[i] = l[i] * corr + sum;
        m[i] = m_new;
        /* while m_old was -inf every P so far was 0, so the sums are +-0 or NaN, which a factor
         * of 0 leaves as they are */
        if (corr != 1.0f && m_old != -INFINITY)
          for (int64_t e = 0; e < D; e++) o[i * g.Dp + e] *= corr;
        round_row_(pa + i * (bk / 2), row, nk16); /* P V reads the (nk + 1) / 2 pairs */
      }
      dt_bf16_tile_gemm_(nq, D, (nk + 1) / 2, pa, bk / 2, 1, vi + k0 / 2 * 32, g.Tq * 32, o, g.Dp, 1.0f, 1.0f);
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
 * each key tile (bk keys), then dV += P^T dO, dK += dS^T Q (sums of the whole
 * sequence in f32 scratch) and dQ += dS K. */
T_ static inline __attribute__((always_inline)) void bwd_head_(const dt_att_args_* c, int64_t bh, int* failed,
                                                               const int bk) {
  const int64_t T = c->T, H = c->H, D = c->D, C = H * D, b = bh / H, h = bh % H, stride = 3 * C;
  const geo_ g = geo_of_(T, D);
  /* the A rows of a transposed tile: keys up to bk rounded up to 12 readable */
  const int64_t ta = BQ / 2 * bk + 16;
  size_t need = (size_t)(2 * g.T32 * g.Dq + g.Dp * g.Tq + 2 * T * g.Dp + 2 * BQ * g.Dq + 2 * (BQ / 2) * g.Dp) * 4 +
                (size_t)(2 * BQ * bk + 2 * ta + BQ * bk / 2 + BQ * g.Dp) * 4 + 16 * 64;
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
  float* p = take_(&at, (size_t)(BQ * bk) * 4);               /* P */
  float* ds = take_(&at, (size_t)(BQ * bk) * 4);              /* dP, then dS */
  uint32_t* pt = take_(&at, (size_t)ta * 4);                  /* P^T rows, pairs along queries */
  uint32_t* dst = take_(&at, (size_t)ta * 4);                 /* dS^T rows */
  uint32_t* dsa = take_(&at, (size_t)(BQ * bk / 2) * 4);      /* dS rows, pairs along keys */
  float* dq = take_(&at, (size_t)(BQ * g.Dp) * 4);            /* dQ sums */
  const uint16_t* base = (const uint16_t*)c->qkv + b * T * stride + h * D;
  const uint16_t* gbase = (const uint16_t*)c->dout + b * T * C + h * D;
  const uint16_t* obase = (const uint16_t*)c->fwd_out + b * T * C + h * D;
  rows_to_slivers_(kt, base + C, stride, &g);
  rows_to_slivers_(vt, base + 2 * C, stride, &g);
  row_pairs_to_slivers_(ki, base + C, stride, 0, T, g.Tq, &g);
  memset(dk, 0, (size_t)(T * g.Dp) * 4);
  memset(dv, 0, (size_t)(T * g.Dp) * 4);
  memset(pt + BQ / 2 * bk, 0, 16 * 4);
  memset(dst + BQ / 2 * bk, 0, 16 * 4);
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
    for (int64_t k0 = 0; k0 < kend; k0 += bk) {
      int64_t nk = kend - k0 < bk ? kend - k0 : bk;
      dt_bf16_tile_gemm_(nq, nk, g.Dq, qa, g.Dq, 1, kt + k0 / 32 * g.Dq * 32, g.Dq * 32, p, bk, c->scale, 0.0f);
      dt_bf16_tile_gemm_(nq, nk, g.Dq, ga, g.Dq, 1, vt + k0 / 32 * g.Dq * 32, g.Dq * 32, ds, bk, 1.0f, 0.0f);
      /* Only what the products read is made: the rows of the kq query pairs (a last odd row
       * gets P = 0), the columns of the tile's keys rounded up to 16. Past them the products
       * read stale values only into rows of their tiles that they do not store. */
      const int64_t nk16 = (nk + 15) / 16 * 16;
      for (int64_t i = 0; i < 2 * kq; i++) {
        float* pr = p + i * bk;
        float* dr = ds + i * bk;
        int64_t vis = i >= nq ? 0 : c->causal ? q0 + i - k0 + 1 : nk; /* keys of the tile this row sees */
        if (vis > nk) vis = nk;
        if (vis < 0) vis = 0;
        /* what it does not see gets P = exp(-inf - lse) (0 for a finite lse) and dS = P (0 - delta)
         * scale, a signed zero: the exponentials run up to the last visible key's vector, whose
         * lanes past vis take those two values, and the rest is filled */
        const int64_t v16 = (vis + 15) / 16 * 16;
        /* exp(-inf) is exactly 0: the exponential is left to a row whose lse is -inf or NaN */
        const float p_unseen = lse[i] > -INFINITY ? 0.0f : dt_attention_p_lse_f(-INFINITY, lse[i]);
        const __m512 vl = _mm512_set1_ps(lse[i]), vd = _mm512_set1_ps(delta[i]), vs = _mm512_set1_ps(c->scale);
        const __m512 pu = _mm512_set1_ps(p_unseen), du = _mm512_set1_ps(dt_attention_ds_f(p_unseen, 0.0f, delta[i]) * c->scale);
        for (int64_t j = 0; j < v16; j += 16) { /* dt_attention_p_lse_f and _ds_f, 16 keys at a time */
          __mmask16 seen = vis - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (vis - j)) - 1);
          __m512 pv = dt_expf_avx512_(_mm512_sub_ps(_mm512_loadu_ps(pr + j), vl));
          __m512 dv = _mm512_mul_ps(_mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(dr + j), vd)), vs);
          _mm512_storeu_ps(pr + j, _mm512_mask_mov_ps(pu, seen, pv));
          _mm512_storeu_ps(dr + j, _mm512_mask_mov_ps(du, seen, dv));
        }
        const float ds0 = dt_attention_ds_f(0.0f, 0.0f, delta[i]) * c->scale;
        for (int64_t j = v16; j < nk16; j++) pr[j] = 0.0f, dr[j] = ds0;
        round_row_(dsa + i * (bk / 2), dr, nk16);
      }
      interleave_tile_(pt, p, bk, kq, nk16);
      interleave_tile_(dst, ds, bk, kq, nk16);
      dt_bf16_tile_gemm_(nk, D, kq, pt, 1, bk, gi, BQ / 2 * 32, dv + k0 * g.Dp, g.Dp, 1.0f, 1.0f);  /* dV += P^T dO */
      dt_bf16_tile_gemm_(nk, D, kq, dst, 1, bk, qi, BQ / 2 * 32, dk + k0 * g.Dp, g.Dp, 1.0f, 1.0f); /* dK += dS^T Q */
      dt_bf16_tile_gemm_(nq, D, (nk + 1) / 2, dsa, bk / 2, 1, ki + k0 / 2 * 32, g.Tq * 32, dq, g.Dp, 1.0f,
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

static int bk_of_(int64_t T) { return T <= BK_WHOLE ? BK_WHOLE : BK_LONG; }

T_ void dt_att_bf16_fwd_head_(const dt_att_args_* c, int64_t bh, int* failed) {
  if (bk_of_(c->T) == BK_WHOLE) fwd_head_(c, bh, failed, BK_WHOLE);
  else fwd_head_(c, bh, failed, BK_LONG);
}

T_ void dt_att_bf16_bwd_head_(const dt_att_args_* c, int64_t bh, int* failed) {
  if (bk_of_(c->T) == BK_WHOLE) bwd_head_(c, bh, failed, BK_WHOLE);
  else bwd_head_(c, bh, failed, BK_LONG);
}
