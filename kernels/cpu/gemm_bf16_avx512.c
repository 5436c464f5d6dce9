/* gemm_bf16_avx512.c — bf16 GEMM on CPUs with AVX512_BF16: vdpbf16ps multiplies
 * a pair of bf16 along K by a pair and adds both products to an f32 lane, twice
 * the multiply-adds per instruction of the f32 kernel, with no conversion of the
 * operands. A 12 x 32 f32 tile in 24 zmm accumulators; A and B are packed as
 * dwords holding the pair (k, k+1), K padded to even with zeros.
 *
 * Arithmetic: each pair adds its two exact products to the accumulator one
 * after the other (k+1 first), rounding to nearest even each time, with bf16
 * denormals read as zero and f32 denormal sums flushed to zero (the
 * instruction's fixed mode). The plain path converts to f32 and adds k in
 * order; both keep f32 accumulators and round to bf16 once, so results agree
 * to about one bf16 rounding. Compiled with target attributes; dt_gemm calls it
 * only where the CPU reports AVX512_BF16. dt_cpu_gemm_bf16_mixed also gives
 * it f32 operands, rounded to bf16 as they are packed, and f32 outputs, which
 * receive the rounded result widened (autocast's f32 gradients, without a
 * cast pass after the product). */
#include "gemm_internal.h"
#include "bf16_avx512.h"
#include "dt_math_avx512.h"
#include "gemm_epilogue.h"
#include <stdlib.h>

#define MR 12
#define NR 32
#define MC 144 /* A block: MC x KC pairs-packed, in L2 */
/* K block (256 pairs): a B sliver of KC x NR bf16 is 32 KiB, in L1 beside the 12 KiB of A rows
 * it meets. K up to 512 (GPT-mini's MLP) is one block, without f32 partial sums written and read
 * back (1 MiB for 2048 x 128): 2048 x 128 x 512 ran at 294 -> 408 GFLOP/s after a cache flush,
 * 376 -> 420 without, against a KC of 384; other shapes level or faster. */
#define KC 512
#define NC 4096
#define BF16_ DT_BF16_TARGET_

static inline uint32_t dt_pair_(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

/* ---- packing ----------------------------------------------------------------------- */

/* A rows [i0, i0 + mc) x K [p0, p0 + kc) into slivers of MR rows: sliver s holds,
 * for each pair q, its MR dwords (rows past mc are zero) */
BF16_ static void dt_bf16_pack_a_(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                                  uint32_t* dst) {
  const int64_t kq = (kc + 1) / 2, full = kc / 2;
  const uint16_t* data = v->data;
  if (v->rs == 1) { /* A transposed: the sliver's rows are contiguous in each k; interleave k = 2q, 2q + 1 */
    uint16_t idx_words[32];
    for (int j = 0; j < 16; j++) {
      idx_words[2 * j] = (uint16_t)j;
      idx_words[2 * j + 1] = (uint16_t)(16 + j);
    }
    const __m512i idx = _mm512_loadu_si512(idx_words);
    for (int64_t s = 0; s * MR < mc; s++) {
      uint32_t* d = dst + s * kq * MR;
      int64_t rows = mc - s * MR < MR ? mc - s * MR : MR;
      __mmask16 m = (__mmask16)((1u << rows) - 1);
      const uint16_t* a = data + (i0 + s * MR) + p0 * v->cs;
      for (int64_t q = 0; q < kq; q++) {
        __m256i r0 = _mm256_maskz_loadu_epi16(m, a + 2 * q * v->cs);
        __m256i r1 = 2 * q + 1 < kc ? _mm256_maskz_loadu_epi16(m, a + (2 * q + 1) * v->cs) : _mm256_setzero_si256();
        __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(r0), r1, 1);
        _mm512_mask_storeu_epi32(d + q * MR, 0x0fff, _mm512_permutexvar_epi16(idx, both));
      }
    }
    return;
  }
  for (int64_t s = 0; s * MR < mc; s++) {
    uint32_t* sliver = dst + s * kq * MR;
    for (int i = 0; i < MR; i++) {
      uint32_t* d = sliver + i;
      int64_t row = s * MR + i;
      if (row >= mc) {
        for (int64_t q = 0; q < kq; q++) d[q * MR] = 0;
        continue;
      }
      const uint16_t* a = data + (i0 + row) * v->rs + p0 * v->cs;
      if (v->cs == 1) {
        for (int64_t q = 0; q < full; q++) memcpy(&d[q * MR], a + 2 * q, 4);
      } else {
        for (int64_t q = 0; q < full; q++) d[q * MR] = dt_pair_(a[2 * q * v->cs], a[(2 * q + 1) * v->cs]);
      }
      if (kc & 1) d[full * MR] = a[(kc - 1) * v->cs]; /* the odd last k pairs with a zero */
    }
  }
}

/* B K [p0, p0 + kc) x columns [j0, j0 + nc) into slivers of NR columns: sliver s
 * holds, for each pair q, its NR dwords (columns past nc are zero) */
BF16_ static void dt_bf16_pack_b_(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                  uint32_t* dst) {
  const int64_t kq = (kc + 1) / 2, full = kc / 2;
  const uint16_t* data = v->data;
  /* word 2j of the result is r0[j], word 2j + 1 is r1[j] (index 32 + j) */
  uint16_t lo_idx[32], hi_idx[32];
  for (int j = 0; j < 16; j++) {
    lo_idx[2 * j] = (uint16_t)j;
    lo_idx[2 * j + 1] = (uint16_t)(32 + j);
    hi_idx[2 * j] = (uint16_t)(16 + j);
    hi_idx[2 * j + 1] = (uint16_t)(48 + j);
  }
  const __m512i lo = _mm512_loadu_si512(lo_idx), hi = _mm512_loadu_si512(hi_idx), zero = _mm512_setzero_si512();
  for (int64_t s = 0; s * NR < nc; s++) {
    uint32_t* d = dst + s * kq * NR;
    const int64_t cols = nc - s * NR < NR ? nc - s * NR : NR;
    const uint16_t* b = data + p0 * v->rs + (j0 + s * NR) * v->cs;
    if (v->cs == 1 && cols == NR) { /* rows of 32 contiguous bf16: interleave rows 2q and 2q + 1 */
      for (int64_t q = 0; q < kq; q++) {
        __m512i r0 = _mm512_loadu_si512(b + 2 * q * v->rs);
        __m512i r1 = 2 * q + 1 < kc ? _mm512_loadu_si512(b + (2 * q + 1) * v->rs) : zero;
        _mm512_storeu_si512(d + q * NR, _mm512_permutex2var_epi16(r0, lo, r1));
        _mm512_storeu_si512(d + q * NR + 16, _mm512_permutex2var_epi16(r0, hi, r1));
      }
      continue;
    }
    if (v->rs == 1 && cols == NR && kc % 2 == 0) { /* B transposed: a pair is a dword */
      /* blocks of 16 columns by 16 pairs, loaded as dwords and transposed in registers (a
       * gather per 16 dwords, as before, spent ~5 cycles a dword on a Zen 5 core) */
      for (int half = 0; half < 2; half++) {
        const uint16_t* col0 = b + (int64_t)half * 16 * v->cs;
        for (int64_t q0 = 0; q0 < kq; q0 += 16) {
          int64_t qn = kq - q0 < 16 ? kq - q0 : 16;
          __mmask16 qm = qn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << qn) - 1);
          __m512i r[16];
          for (int c = 0; c < 16; c++) r[c] = _mm512_maskz_loadu_epi32(qm, col0 + c * v->cs + 2 * q0);
          dt_transpose16_epi32_(r);
          for (int64_t e = 0; e < qn; e++) _mm512_storeu_si512(d + (q0 + e) * NR + half * 16, r[e]);
        }
      }
      continue;
    }
    for (int64_t q = 0; q < kq; q++) {
      for (int64_t j = 0; j < NR; j++) {
        if (j >= cols) {
          d[q * NR + j] = 0;
          continue;
        }
        const uint16_t* col = b + j * v->cs + 2 * q * v->rs;
        d[q * NR + j] = dt_pair_(col[0], q < full ? col[v->rs] : 0);
      }
    }
  }
}

/* ---- the micro-kernel ---------------------------------------------------------------- */

/* Where a 12 x 32 tile's sums go: f32 partial sums (first K blocks, `acc`
 * read too unless `first`), or the bf16 result alpha * sum + beta * c, with
 * the partial sums of earlier blocks (acc, unless first) added first. */
typedef struct {
  float* acc;      /* f32 partial sums, row stride acc_ld (NULL: single K block) */
  int64_t acc_ld;
  void* c;         /* bf16 (or f32, c_f32) output, row stride ldc; NULL: write partial sums only */
  int64_t ldc;
  int c_f32;       /* C is f32: it receives the bf16 result widened, and beta reads it as f32 */
  int c_exact;     /* with c_f32: the f32 result itself, not rounded through bf16 (dt_gemm_f32c_) */
  float alpha, beta;
  int first;       /* no earlier K block */
  const dt_gemm_bf16_epi_* epi; /* a bf16 C's epilogue (bias and aux at the tile's corner), or NULL */
  float* gelu_pre;              /* with GELU: the tile's pre-activations, MR x NR */
} dt_bf16_out_;

/* C = gelu(pre) rounded, for the mr x nr corner of a tile's pre-activations:
 * one loop over the whole tile, after the micro-kernel (its accumulators no
 * longer hold the registers GELU needs). */
BF16_ static void dt_bf16_gelu_tile_(float* pre, int mr, int nr, uint16_t* c, int64_t ldc) {
  for (int j = 0; j < MR * NR; j += 16) _mm512_storeu_ps(pre + j, dt_gelu_avx512_(_mm512_loadu_ps(pre + j)));
  __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  for (int i = 0; i < mr; i++) {
    _mm256_mask_storeu_epi16(c + i * ldc, m0, dt_bf16_round_(_mm512_loadu_ps(pre + i * NR)));
    _mm256_mask_storeu_epi16(c + i * ldc + 16, m1, dt_bf16_round_(_mm512_loadu_ps(pre + i * NR + 16)));
  }
}

/* n f32 (contiguous) to bf16 as dt_f32_to_bf16 does */
BF16_ static void dt_bf16_convert_(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i*)(dst + i), dt_bf16_round_(_mm512_loadu_ps(src + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, m, dt_bf16_round_(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

/* ---- f32 operands ------------------------------------------------------------------------
 * An f32 block is rounded to bf16 into a per-thread scratch laid out as the
 * operand is (rows or columns contiguous), and packed from there by the bf16
 * packers: one pass over the f32 data that stays in cache for the packing,
 * instead of a cast of the whole tensor into memory before the product. */

static __thread uint16_t* dt_bf16_scratch_[2];
static __thread size_t dt_bf16_scratch_cap_[2];

static uint16_t* dt_bf16_scratch_reserve_(int which, size_t halves) {
  if (dt_bf16_scratch_cap_[which] >= halves) return dt_bf16_scratch_[which];
  void* p = NULL;
  if (posix_memalign(&p, 64, halves * sizeof(uint16_t)) != 0) return NULL;
  free(dt_bf16_scratch_[which]);
  dt_bf16_scratch_[which] = p;
  dt_bf16_scratch_cap_[which] = halves;
  return p;
}

/* Rows [r0, r0 + rows) x columns [c0, c0 + cols) of an f32 view, rounded into
 * s; returns the bf16 view of s with the same orientation. */
BF16_ static dt_gemm_view_ dt_bf16_round_block_(const dt_gemm_view_* v, int64_t r0, int64_t rows, int64_t c0,
                                                int64_t cols, uint16_t* s) {
  const float* f = v->data;
  if (v->rs == 1 && v->cs != 1) { /* columns contiguous */
    for (int64_t c = 0; c < cols; c++) dt_bf16_convert_(f + r0 + (c0 + c) * v->cs, s + c * rows, rows);
    return (dt_gemm_view_){s, DT_BF16, 1, rows};
  }
  if (v->cs == 1) {
    for (int64_t r = 0; r < rows; r++) dt_bf16_convert_(f + (r0 + r) * v->rs + c0, s + r * cols, cols);
  } else {
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) s[r * cols + c] = dt_f32_to_bf16(f[(r0 + r) * v->rs + (c0 + c) * v->cs]);
  }
  return (dt_gemm_view_){s, DT_BF16, cols, 1};
}

/* dt_bf16_pack_a_ / _b_ for a bf16 or an f32 view (0, or DT_ERR_ALLOC) */
BF16_ static dt_status dt_bf16_pack_a_any_(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                                           uint32_t* dst) {
  if (v->dtype == DT_BF16) {
    dt_bf16_pack_a_(v, i0, mc, p0, kc, dst);
    return DT_OK;
  }
  uint16_t* s = dt_bf16_scratch_reserve_(0, (size_t)(mc * kc));
  if (!s) return DT_ERR_ALLOC;
  dt_gemm_view_ b = dt_bf16_round_block_(v, i0, mc, p0, kc, s);
  dt_bf16_pack_a_(&b, 0, mc, 0, kc, dst);
  return DT_OK;
}

BF16_ static dt_status dt_bf16_pack_b_any_(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                           uint32_t* dst) {
  if (v->dtype == DT_BF16) {
    dt_bf16_pack_b_(v, p0, kc, j0, nc, dst);
    return DT_OK;
  }
  uint16_t* s = dt_bf16_scratch_reserve_(1, (size_t)(kc * nc));
  if (!s) return DT_ERR_ALLOC;
  dt_gemm_view_ b = dt_bf16_round_block_(v, p0, kc, j0, nc, s);
  dt_bf16_pack_b_(&b, 0, kc, 0, nc, dst);
  return DT_OK;
}

/* One row of the tile's 32 sums (columns past the masks untouched). */
BF16_ static inline void dt_bf16_store_row_(const dt_bf16_out_* o, int64_t i, __m512 s0, __m512 s1, __mmask16 m0,
                                            __mmask16 m1) {
  if (o->acc && !o->first) {
    const float* p = o->acc + i * o->acc_ld;
    s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(m0, p));
    s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(m1, p + 16));
  }
  if (!o->c) {
    float* p = o->acc + i * o->acc_ld;
    _mm512_mask_storeu_ps(p, m0, s0);
    _mm512_mask_storeu_ps(p + 16, m1, s1);
    return;
  }
  __m512 va = _mm512_set1_ps(o->alpha);
  __m512 v0 = _mm512_mul_ps(va, s0), v1 = _mm512_mul_ps(va, s1);
  if (o->c_f32) {
    float* frow = (float*)o->c + i * o->ldc;
    if (o->beta != 0.0f) {
      __m512 vb = _mm512_set1_ps(o->beta);
      v0 = _mm512_add_ps(v0, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m0, frow)));
      v1 = _mm512_add_ps(v1, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m1, frow + 16)));
    }
    if (!o->c_exact) {
      v0 = dt_bf16_widen_(dt_bf16_round_(v0));
      v1 = dt_bf16_widen_(dt_bf16_round_(v1));
    }
    _mm512_mask_storeu_ps(frow, m0, v0);
    _mm512_mask_storeu_ps(frow + 16, m1, v1);
    return;
  }
  uint16_t* row = (uint16_t*)o->c + i * o->ldc;
  if (o->epi) { /* dt_gemm_ex's epilogue, beta 0: pre = product + bias, rounded once (with GELU also kept) */
    v0 = _mm512_add_ps(v0, dt_bf16_widen_(_mm256_maskz_loadu_epi16(m0, o->epi->bias)));
    v1 = _mm512_add_ps(v1, dt_bf16_widen_(_mm256_maskz_loadu_epi16(m1, o->epi->bias + 16)));
    if (o->epi->epilogue == DT_EPI_GELU_BIAS) { /* pre kept; GELU after the tile (dt_bf16_gelu_tile_) */
      uint16_t* aux = o->epi->aux + i * o->epi->ldaux;
      _mm256_mask_storeu_epi16(aux, m0, dt_bf16_round_(v0));
      _mm256_mask_storeu_epi16(aux + 16, m1, dt_bf16_round_(v1));
      _mm512_storeu_ps(o->gelu_pre + i * NR, v0);
      _mm512_storeu_ps(o->gelu_pre + i * NR + 16, v1);
      return;
    }
  }
  if (o->beta != 0.0f) {
    __m512 vb = _mm512_set1_ps(o->beta);
    __m512 old0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m0, row)), 16));
    __m512 old1 =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m1, row + 16)), 16));
    v0 = _mm512_add_ps(v0, _mm512_mul_ps(vb, old0));
    v1 = _mm512_add_ps(v1, _mm512_mul_ps(vb, old1));
  }
  _mm256_mask_storeu_epi16(row, m0, dt_bf16_round_(v0));
  _mm256_mask_storeu_epi16(row + 16, m1, dt_bf16_round_(v1));
}

/* The sums of a 12 x 32 tile over kq pairs: A pair q of row i is the dword at
 * a + i * a_row + q * a_q (bytes), B pair q is the 32 dwords at b + q * NR. */
#define DT_ROW_(i)                                                             \
  do {                                                                         \
    int32_t w;                                                                 \
    memcpy(&w, a + (i) * a_row, 4);                                            \
    __m512bh x = (__m512bh)_mm512_set1_epi32(w);                               \
    c##i##0 = _mm512_dpbf16_ps(c##i##0, x, b0);                                \
    c##i##1 = _mm512_dpbf16_ps(c##i##1, x, b1);                                \
  } while (0)
#define DT_STORE_(i) \
  if (i < mr) dt_bf16_store_row_(o, i, c##i##0, c##i##1, m0, m1)

BF16_ static void dt_bf16_kernel_(int64_t kq, const char* a, int64_t a_row, int64_t a_q, const uint32_t* b,
                                  const dt_bf16_out_* o, int mr, int nr) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  __m512 c80 = c00, c81 = c00, c90 = c00, c91 = c00, c100 = c00, c101 = c00, c110 = c00, c111 = c00;
  for (int64_t q = 0; q < kq; q++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
    DT_ROW_(0);
    DT_ROW_(1);
    DT_ROW_(2);
    DT_ROW_(3);
    DT_ROW_(4);
    DT_ROW_(5);
    DT_ROW_(6);
    DT_ROW_(7);
    DT_ROW_(8);
    DT_ROW_(9);
    DT_ROW_(10);
    DT_ROW_(11);
    a += a_q;
    b += NR;
  }
  __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  DT_STORE_(0);
  DT_STORE_(1);
  DT_STORE_(2);
  DT_STORE_(3);
  DT_STORE_(4);
  DT_STORE_(5);
  DT_STORE_(6);
  DT_STORE_(7);
  DT_STORE_(8);
  DT_STORE_(9);
  DT_STORE_(10);
  DT_STORE_(11);
}
#undef DT_ROW_
#undef DT_STORE_

/* ---- the blocked product -------------------------------------------------------------- */

static __thread uint32_t *dt_bf16_buf_a_, *dt_bf16_buf_b_;
static __thread float* dt_bf16_buf_acc_;
static __thread size_t dt_bf16_acc_cap_;

static uint32_t* dt_bf16_reserve_(uint32_t** buf, size_t dwords) {
  if (!*buf) {
    void* p = NULL;
    if (posix_memalign(&p, 64, dwords * sizeof(uint32_t)) != 0) return NULL;
    *buf = p;
  }
  return *buf;
}

/* bf16 C (m x n, row stride ldc) = alpha * A @ B + beta * C (beta == 0 never
 * reads C) for views a (m x K) and b (K x n), each bf16 or f32 (rounded to
 * bf16 as it is packed); an f32 C (c_dtype) gets the bf16 result widened,
 * or with c_exact the f32 result itself.
 * Sums of several K blocks meet in an f32 scratch; the last block writes C. */
dt_status dt_gemm_bf16_(const dt_gemm_view_* a, const dt_gemm_view_* b, int64_t m, int64_t n, int64_t K,
                        float alpha, float beta, void* c, int32_t c_dtype, int c_exact, int64_t ldc,
                        const dt_gemm_bf16_epi_* epi, int64_t* failed_floats) {
  uint32_t* ap = dt_bf16_reserve_(&dt_bf16_buf_a_, (size_t)MC * (KC / 2));
  uint32_t* bp = dt_bf16_reserve_(&dt_bf16_buf_b_, (size_t)NC * (KC / 2));
  if (!ap || !bp) {
    *failed_floats = ap ? (int64_t)NC * (KC / 2) : (int64_t)MC * (KC / 2);
    return DT_ERR_ALLOC;
  }
  /* equal K blocks of an even length (but the last), so pairs never straddle blocks */
  const int64_t blocks = (K + KC - 1) / KC, kc_even = ((K + blocks - 1) / blocks + 1) / 2 * 2;
  float* acc = NULL;
  int64_t acc_ld = 0;
  if (blocks > 1) {
    acc_ld = n < NC ? n : NC;
    size_t need = (size_t)(m * acc_ld);
    if (dt_bf16_acc_cap_ < need) {
      free(dt_bf16_buf_acc_);
      dt_bf16_buf_acc_ = NULL;
      dt_bf16_acc_cap_ = 0;
      void* p = NULL;
      if (posix_memalign(&p, 64, need * sizeof(float)) != 0) {
        *failed_floats = (int64_t)need;
        return DT_ERR_ALLOC;
      }
      dt_bf16_buf_acc_ = p;
      dt_bf16_acc_cap_ = need;
    }
    acc = dt_bf16_buf_acc_;
  }
  /* bf16 A read in place when its rows hold K contiguously: a pair is a dword */
  const int direct_a = a->cs == 1 && a->dtype == DT_BF16;
  const int c_f32 = c_dtype == DT_F32;
  const size_t c_es = c_f32 ? 4 : 2;
  dt_status st;
  for (int64_t jc = 0; jc < n; jc += NC) {
    int64_t nc = n - jc < NC ? n - jc : NC;
    for (int64_t pc = 0; pc < K; pc += kc_even) {
      int64_t kc = K - pc < kc_even ? K - pc : kc_even, kq = (kc + 1) / 2;
      int last = pc + kc >= K;
      if ((st = dt_bf16_pack_b_any_(b, pc, kc, jc, nc, bp)) != DT_OK) {
        *failed_floats = (kc * nc + 1) / 2;
        return st;
      }
      for (int64_t ic = 0; ic < m; ic += MC) {
        int64_t mc = m - ic < MC ? m - ic : MC;
        /* the odd last k of a direct A cannot be read as a dword (the next
         * element may be past the matrix): such blocks are packed */
        int direct = direct_a && kc % 2 == 0;
        if (!direct && (st = dt_bf16_pack_a_any_(a, ic, mc, pc, kc, ap)) != DT_OK) {
          *failed_floats = (mc * kc + 1) / 2;
          return st;
        }
        for (int64_t jr = 0; jr < nc; jr += NR) {
          int nrr = nc - jr < NR ? (int)(nc - jr) : NR;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            int mrr = mc - ir < MR ? (int)(mc - ir) : MR;
            dt_bf16_out_ o = {
                .acc = acc ? acc + (ic + ir) * acc_ld + jr : NULL,
                .acc_ld = acc_ld,
                .c = last ? (char*)c + ((ic + ir) * ldc + jc + jr) * c_es : NULL,
                .ldc = ldc,
                .c_f32 = c_f32,
                .c_exact = c_exact,
                .alpha = alpha,
                .beta = beta,
                .first = pc == 0,
            };
            dt_gemm_bf16_epi_ tile_epi;
            float gelu_pre[MR * NR] __attribute__((aligned(64)));
            if (epi && last) {
              tile_epi = *epi;
              tile_epi.bias += jc + jr;
              if (tile_epi.aux) tile_epi.aux += (ic + ir) * tile_epi.ldaux + jc + jr;
              o.epi = &tile_epi;
              o.gelu_pre = gelu_pre;
            }
            const char* at;
            int64_t a_row, a_q;
            if (direct) {
              at = (const char*)a->data + ((ic + ir) * a->rs + pc) * 2;
              a_row = a->rs * 2;
              a_q = 4;
              if (mrr < MR) { /* the kernel reads 12 rows; give it a packed copy of the few */
                dt_bf16_pack_a_(a, ic + ir, mrr, pc, kc, ap);
                at = (const char*)ap;
                a_row = 4;
                a_q = 4 * MR;
              }
            } else {
              at = (const char*)(ap + ir * kq);
              a_row = 4;
              a_q = 4 * MR;
            }
            dt_bf16_kernel_(kq, at, a_row, a_q, bp + jr * kq, &o, mrr, nrr);
            if (o.epi && o.epi->epilogue == DT_EPI_GELU_BIAS) dt_bf16_gelu_tile_(gelu_pre, mrr, nrr, o.c, ldc);
          }
        }
      }
    }
  }
  return DT_OK;
}

/* C (m x n f32, row stride ldc) = alpha * A @ B + beta * C for attention's
 * tiles (attention_bf16_avx512.c): pair q of A's row i is the dword at
 * a[i * a_row + q * a_q], rows up to m rounded up to 12 readable (the
 * kernel's extra rows are computed and dropped); B in slivers of 32 columns,
 * sliver s at b + s * b_sliver, pair q's 32 dwords at + q * 32 (all readable;
 * columns past n are dropped). beta == 0 never reads C. */
BF16_ void dt_bf16_tile_gemm_(int64_t m, int64_t n, int64_t kq, const uint32_t* a, int64_t a_row, int64_t a_q,
                              const uint32_t* b, int64_t b_sliver, float* c, int64_t ldc, float alpha, float beta) {
  for (int64_t jr = 0; jr < n; jr += NR) {
    int nrr = n - jr < NR ? (int)(n - jr) : NR;
    for (int64_t ir = 0; ir < m; ir += MR) {
      int mrr = m - ir < MR ? (int)(m - ir) : MR;
      dt_bf16_out_ o = {.c = c + ir * ldc + jr, .ldc = ldc, .c_f32 = 1, .c_exact = 1, .alpha = alpha, .beta = beta,
                        .first = 1};
      dt_bf16_kernel_(kq, (const char*)(a + ir * a_row), a_row * 4, a_q * 4, b + jr / NR * b_sliver, &o, mrr, nrr);
    }
  }
}
