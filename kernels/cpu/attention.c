/* attention.c — CPU loops of dt_attention_fwd/bwd: self-attention without the
 * T x T matrix. Each (batch, head) is one task for the thread pool; inside
 * it, K and V are converted to f32 rows once, tiles of QT query rows meet
 * tiles of KT keys (fully masked tiles are skipped), the scores of one tile
 * pair live in a KT x QT scratch, and the online softmax of attention.h folds
 * them into the output. Backward recomputes the probabilities from the saved
 * log-sum-exp and accumulates dK and dV for the whole sequence in f32
 * scratch. The tile products run on dt_gemm's micro-kernel for this CPU
 * (gemm_internal.h); rows are padded to a multiple of 32 floats, and every
 * sum is f32. Scratch grows with T (a few T x D rows), never with T^2. */
#include "dt_vectorize.h" /* first: its pragma must cover every inline body below */
#include <stdlib.h>
#include <string.h>
#include "attention.h"
#include "attention_internal.h"
#include "convert.h"
#include "cpu_internal.h"
#include "dt_math_avx512.h"
#include "transpose_avx512.h"
#include "gemm_internal.h"

/* Tiles are QT query rows by QT keys, QT a multiple of every micro-kernel's
 * nr, chosen per call by att_tile_. */
#define TILE_MAX 64
/* Multiply-adds below which a task does not wake another thread. */
#define ATT_GRAIN_FLOPS 4e6

/* ---- per-thread scratch ---------------------------------------------------------- */

typedef struct {
  float* ptr;
  size_t cap;
} att_buf_;

static __thread att_buf_ att_scratch_;

static float* att_reserve_(size_t floats) {
  if (att_scratch_.cap >= floats) return att_scratch_.ptr;
  void* p = NULL;
  if (posix_memalign(&p, 64, floats * sizeof(float)) != 0) return NULL;
  free(att_scratch_.ptr);
  att_scratch_.ptr = p;
  att_scratch_.cap = floats;
  return att_scratch_.ptr;
}

/* Rows padded to a multiple of 32 floats: every micro-kernel's B sliver (nr
 * <= 32 columns) stays inside the row. */
static int64_t att_pad_(int64_t D) { return (D + 31) / 32 * 32; }

/* ---- tiles --------------------------------------------------------------------------- */

/* The tile for sequences of T: 32 x 32 up to T = 256, else 64 x 64. Under a
 * causal mask a tile pair either side of the diagonal is skipped or computed
 * whole, so smaller tiles compute less that is masked off (T = 128: 10 of 16
 * pairs against 3 of 4); longer rows amortise each tile's softmax and the
 * output's rescaling over more keys. Per layer (fwd + bwd, one thread, CPU
 * clock): B 16, T 128, H 4, D 32 causal 9.4-10.4 ms with 64 against 8.5-9.1
 * with 32; B 2, T 1024, H 4, D 64 64.6-66.8 against 67.8-71.1 (causal) and
 * 118-121 against 124-128 (full). */
static int64_t att_tile_(int64_t T) { return T <= 256 ? 32 : TILE_MAX; }

typedef struct {
  void* out;       /* fwd: (B, T, H*D); bwd: dqkv (B, T, 3*H*D) */
  float* lse;      /* (B, H, T) */
  const void* qkv; /* (B, T, 3*H*D) */
  const void* dout;
  const void* fwd_out;
  const dt_gemm_isa_* isa;
  int bf16_dot; /* bf16 heads through attention_bf16_avx512.c */
  int32_t dtype, causal;
  int64_t T, H, D;
  int64_t tile; /* att_tile_(T): QT of the loops */
  int in_place;  /* f32 rows read where they are (att_in_place_) rather than copied into scratch */
  int exp16;     /* the tiles' exponentials through dt_math_avx512.h (dt_cpu_avx512_()) */
  float scale;
  int failed; /* a scratch allocation failed (no text: this may be a worker thread) */
} att_ctx_;

/* n rows of D values at x (row stride `stride` elements, dtype) into dst
 * (row stride ld >= D, the rest of each row 0) as f32. */
DT_VEC_CLONES static void load_rows_(float* dst, int64_t ld, const void* x, int32_t dtype, int64_t n,
                                     int64_t stride, int64_t D) {
  for (int64_t i = 0; i < n; i++) {
    float* d = dst + i * ld;
    int64_t at = i * stride;
    if (dtype == DT_F32) memcpy(d, (const float*)x + at, (size_t)D * sizeof(float));
    else
      for (int64_t e = 0; e < D; e++) d[e] = dt_load_float(x, dtype, at + e);
    if (ld > D) memset(d + D, 0, (size_t)(ld - D) * sizeof(float));
  }
}

/* n f32 values of src into a row of dtype at element `at` of dst: a copy for f32, whose
 * rows the dtype test inside dt_store_float's loop kept from being one (the same bits). */
DT_VEC_CLONES static void store_row_(void* dst, int32_t dtype, int64_t at, const float* src, int64_t n) {
  if (dtype == DT_F32) memcpy((float*)dst + at, src, (size_t)n * sizeof(float));
  else
    for (int64_t e = 0; e < n; e++) dt_store_float(dst, dtype, at + e, src[e]);
}

/* The same n rows transposed: dst[e * QT + i] for e < D, i < QT (zero past n). */
static inline __attribute__((always_inline)) void load_cols_(float* dst, const void* x, int32_t dtype, int64_t n, int64_t stride,
                                     int64_t D, int64_t QT) {
  for (int64_t e = 0; e < D; e++)
    for (int64_t i = n; i < QT; i++) dst[e * QT + i] = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    int64_t at = i * stride;
    if (dtype == DT_F32) {
      const float* s = (const float*)x + at;
      for (int64_t e = 0; e < D; e++) dst[e * QT + i] = s[e];
    } else {
      for (int64_t e = 0; e < D; e++) dst[e * QT + i] = dt_load_float(x, dtype, at + e);
    }
  }
}

/* load_cols_ of f32 rows with AVX-512F (exp16's CPUs), QT a multiple of 16:
 * blocks of 16 rows by 16 values transposed in registers, where the scalar
 * loop stores one float at a time down a column (a quarter of the f32 heads'
 * own time besides the products). */
__attribute__((target("avx512f"))) static void load_cols_f32_avx512_(float* dst, const float* x, int64_t n,
                                                                     int64_t stride, int64_t D, int64_t QT) {
  for (int64_t i0 = 0; i0 < QT; i0 += 16) {
    for (int64_t e0 = 0; e0 < D; e0 += 16) {
      const int64_t en = D - e0 < 16 ? D - e0 : 16;
      const __mmask16 em = en >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << en) - 1);
      __m512i r[16];
      for (int k = 0; k < 16; k++)
        r[k] = i0 + k < n ? _mm512_castps_si512(_mm512_maskz_loadu_ps(em, x + (i0 + k) * stride + e0))
                          : _mm512_setzero_si512();
      dt_transpose16_epi32_(r);
      for (int64_t e = 0; e < en; e++) _mm512_storeu_si512(dst + (e0 + e) * QT + i0, r[e]);
    }
  }
}

/* load_cols_, through the AVX-512F transpose where it can be (f32 rows, exp16). */
static inline __attribute__((always_inline)) void load_cols_any_(float* dst, const void* x, int32_t dtype, int64_t n,
                                                                 int64_t stride, int64_t D, int64_t QT, int exp16) {
  if (exp16 && dtype == DT_F32) load_cols_f32_avx512_(dst, x, n, stride, D, QT);
  else load_cols_(dst, x, dtype, n, stride, D, QT);
}

/* delta[i] = sum over e < D of dO[i][e] * O[i][e] in e order (a multiply, then an add), for
 * 16 rows at a time from their transposes gt and ot (D x QT, zero past the tile's rows). */
__attribute__((target("avx512f"))) static void bwd_delta_avx512_(float* delta, const float* gt, const float* ot,
                                                                 int64_t D, int64_t QT) {
  for (int64_t i0 = 0; i0 < QT; i0 += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t e = 0; e < D; e++)
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(gt + e * QT + i0), _mm512_loadu_ps(ot + e * QT + i0)));
    _mm512_storeu_ps(delta + i0, acc);
  }
}

/* C (m x n, row stride ldc) = alpha * A @ B + beta * C on the micro-kernel:
 * A is m x k with element (i, p) at a[i * rsa + p * csa]; B is k x n with
 * element (p, j) at b[p * rsb + j] and its rows readable up to n rounded up
 * to the kernel's nr. beta == 0 never reads C. */
static void tile_gemm_(const dt_gemm_isa_* isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa,
                       int64_t csa, const float* b, int64_t rsb, float* c, int64_t ldc, float alpha, float beta) {
  for (int64_t j = 0; j < n; j += isa->nr) {
    int nrr = n - j < isa->nr ? (int)(n - j) : isa->nr;
    for (int64_t i = 0; i < m; i += isa->mr) {
      int mrr = m - i < isa->mr ? (int)(m - i) : isa->mr;
      isa->kernel(k, a + i * rsa, rsa, csa, b + j, rsb, c + i * ldc + j, ldc, alpha, beta, mrr, nrr);
    }
  }
}

/* Whether every key of [k0, k0 + nk) is visible to every row of [q0, q0 + nq). */
static int tile_unmasked_(int64_t q0, int64_t k0, int64_t nk, int32_t causal) { return !causal || k0 + nk - 1 <= q0; }

/* Whether f32 rows of q, k, v, dO and O are read in place (row stride 3C or
 * C) by the tile products rather than copied into padded scratch rows: where
 * every product's B rows may be read up to D rounded up to the kernel's nr
 * without running past the head (D a multiple of nr). The same operations
 * on the same values; the copies were 15 % of GPT-mini's attention, a memcpy
 * per row of 32 floats. */
static int att_in_place_(int32_t dtype, int64_t D, const dt_gemm_isa_* isa) {
  return dtype == DT_F32 && D % isa->nr == 0;
}

/* online_tile_'s exponentials with AVX-512: st[j * QT + i] = p_f(st, mt[i])
 * and sum[i] += it, 16 query rows at a time (QT a multiple of 16), each row's
 * sum over j in the same order. */
__attribute__((target("avx512f"))) static void online_exp_avx512_(float* st, int64_t QT, int64_t nk, const float* mt,
                                                                  float* sum) {
  for (int64_t i0 = 0; i0 < QT; i0 += 16) {
    const __m512 vm = _mm512_loadu_ps(mt + i0), none = _mm512_set1_ps(-INFINITY);
    __m512 acc = _mm512_loadu_ps(sum + i0);
    for (int64_t j = 0; j < nk; j++) {
      __m512 sv = _mm512_loadu_ps(st + j * QT + i0);
      __mmask16 masked = _mm512_cmp_ps_mask(sv, none, _CMP_EQ_OQ);
      __m512 pv = _mm512_mask_mov_ps(dt_expf_avx512_(_mm512_sub_ps(sv, vm)), masked, _mm512_setzero_ps());
      _mm512_storeu_ps(st + j * QT + i0, pv);
      acc = _mm512_add_ps(acc, pv);
    }
    _mm512_storeu_ps(sum + i0, acc);
  }
}

/* att_bwd_probs_ with AVX-512, 16 query rows at a time: a row sees key k0 + j
 * when q0 + i >= k0 + j (causal), lanes below that weigh 0. */
__attribute__((target("avx512f"))) static void bwd_probs_avx512_(float* pt, float* dst, int64_t QT, int64_t nk,
                                                                 int64_t q0, int64_t k0, int32_t causal,
                                                                 const float* lse, const float* delta, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < QT; i0 += 16) {
    const __m512 vl = _mm512_loadu_ps(lse + i0), vd = _mm512_loadu_ps(delta + i0);
    for (int64_t j = 0; j < nk; j++) {
      int64_t hidden = causal ? k0 + j - q0 - i0 : 0; /* lanes i < hidden do not see the key */
      __mmask16 seen = hidden <= 0 ? (__mmask16)0xffff : hidden >= 16 ? 0 : (__mmask16)(0xffffu << hidden);
      float* p = pt + j * QT + i0;
      float* d = dst + j * QT + i0;
      __m512 pv = _mm512_maskz_mov_ps(seen, dt_expf_avx512_(_mm512_sub_ps(_mm512_loadu_ps(p), vl)));
      _mm512_storeu_ps(p, pv);
      _mm512_storeu_ps(d, _mm512_mul_ps(_mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(d), vd)), vs));
    }
  }
}

/* The online softmax step of a tile: st[j * QT + i] holds the scaled score of
 * query row q0 + i and key k0 + j (j < nk, i < nq) and becomes its probability
 * against the row's updated running maximum m[i]; l[i] takes the new sum and
 * corr[i] the factor that rescales the row's earlier sum and output. */
static inline __attribute__((always_inline)) void online_tile_(float* st, int64_t QT, int64_t nq, int64_t nk, int64_t q0, int64_t k0,
                                       int32_t causal, float* m, float* l, float* corr, int exp16) {
  float mt[TILE_MAX], sum[TILE_MAX];
  for (int64_t i = 0; i < QT; i++) mt[i] = -INFINITY, sum[i] = 0.0f;
  if (!tile_unmasked_(q0, k0, nk, causal)) {
    for (int64_t j = 0; j < nk; j++)
      for (int64_t i = 0; i < nq; i++)
        if (!dt_attention_visible(q0 + i, k0 + j, causal)) st[j * QT + i] = -INFINITY;
  }
  for (int64_t j = 0; j < nk; j++)
    for (int64_t i = 0; i < QT; i++) mt[i] = st[j * QT + i] > mt[i] ? st[j * QT + i] : mt[i];
  for (int64_t i = 0; i < QT; i++) {
    float m_new = mt[i] > m[i] ? mt[i] : m[i];
    corr[i] = dt_attention_rescale_f(m[i], m_new);
    mt[i] = m_new; /* now the maximum to subtract */
  }
  if (exp16) {
    online_exp_avx512_(st, QT, nk, mt, sum);
  } else {
    for (int64_t j = 0; j < nk; j++)
      for (int64_t i = 0; i < QT; i++) {
        float p = dt_attention_p_f(st[j * QT + i], mt[i]);
        st[j * QT + i] = p;
        sum[i] += p;
      }
  }
  for (int64_t i = 0; i < nq; i++) {
    l[i] = l[i] * corr[i] + sum[i];
    m[i] = mt[i];
  }
}

/* One (batch, head): K and V rows converted once, then every query tile
 * against the key tiles it sees. Scores are kept transposed (key-major), so
 * Q is the one operand transposed, once per tile. */
static inline __attribute__((always_inline)) void att_fwd_head_(att_ctx_* c, int64_t bh, float* scratch, const int64_t QT) {
  const int64_t T = c->T, H = c->H, D = c->D, C = H * D, b = bh / H, h = bh % H, Dp = att_pad_(D);
  const int64_t KT = QT;
  const int64_t es = (int64_t)dt_dtype_size(c->dtype);
  float* kbuf = scratch;     /* T x Dp */
  float* vbuf = kbuf + T * Dp; /* T x Dp */
  float* qt = vbuf + T * Dp;   /* D x QT */
  float* st = qt + Dp * QT;    /* KT x QT */
  float* o = st + KT * QT;     /* QT x Dp */
  float m[TILE_MAX], l[TILE_MAX], corr[TILE_MAX];
  const int64_t stride = 3 * C;
  const char* base = (const char*)c->qkv + (b * T * stride + h * D) * es;
  /* K and V rows: in place (row stride 3C), or converted into scratch (Dp) */
  const float* kf = kbuf;
  const float* vf = vbuf;
  int64_t ld = Dp;
  if (c->in_place) {
    kf = (const float*)(base + C * es);
    vf = (const float*)(base + 2 * C * es);
    ld = stride;
  } else {
    load_rows_(kbuf, Dp, base + C * es, c->dtype, T, stride, D);
    load_rows_(vbuf, Dp, base + 2 * C * es, c->dtype, T, stride, D);
  }
  for (int64_t q0 = 0; q0 < T; q0 += QT) {
    int64_t nq = T - q0 < QT ? T - q0 : QT;
    load_cols_any_(qt, base + q0 * stride * es, c->dtype, nq, stride, D, QT, c->exp16);
    for (int64_t i = 0; i < QT; i++) m[i] = -INFINITY, l[i] = 0.0f;
    memset(o, 0, (size_t)(nq * Dp) * sizeof(float));
    int64_t kend = dt_attention_key_end(q0 + nq, T, c->causal);
    for (int64_t k0 = 0; k0 < kend; k0 += KT) {
      int64_t nk = kend - k0 < KT ? kend - k0 : KT;
      tile_gemm_(c->isa, nk, nq, D, kf + k0 * ld, ld, 1, qt, QT, st, QT, c->scale, 0.0f); /* S^T = scale K Q^T */
      online_tile_(st, QT, nq, nk, q0, k0, c->causal, m, l, corr, c->exp16);
      /* the first key tile finds o all +0 (set above), which its factor of 0 would leave as is */
      if (k0 > 0)
        for (int64_t i = 0; i < nq; i++)
          if (corr[i] != 1.0f)
            for (int64_t e = 0; e < D; e++) o[i * Dp + e] *= corr[i];
      tile_gemm_(c->isa, nq, D, nk, st, 1, QT, vf + k0 * ld, ld, o, Dp, 1.0f, 1.0f); /* O += P V */
    }
    for (int64_t i = 0; i < nq; i++) {
      float inv = 1.0f / l[i];
      int64_t at = (b * T + q0 + i) * C + h * D;
      float* oi = o + i * Dp;
      for (int64_t e = 0; e < D; e++) oi[e] *= inv;
      store_row_(c->out, c->dtype, at, oi, D);
      c->lse[bh * T + q0 + i] = dt_attention_lse_f(m[i], l[i]);
    }
  }
}

/* Heads [t0, t1) with each tile size a constant, so that the tile loops are
 * compiled for it (a run-time size cost GPT-mini's attention 3-5 %). */
DT_VEC_CLONES static void att_fwd_heads32_(att_ctx_* c, int64_t t0, int64_t t1, float* scratch) {
  for (int64_t t = t0; t < t1; t++) att_fwd_head_(c, t, scratch, 32);
}
DT_VEC_CLONES static void att_fwd_heads64_(att_ctx_* c, int64_t t0, int64_t t1, float* scratch) {
  for (int64_t t = t0; t < t1; t++) att_fwd_head_(c, t, scratch, 64);
}

/* The arguments of the bf16 heads of attention_bf16_avx512.c. */
static dt_att_args_ att_args_(const att_ctx_* c) {
  return (dt_att_args_){.out = c->out, .lse = c->lse, .qkv = c->qkv, .dout = c->dout, .fwd_out = c->fwd_out,
                        .causal = c->causal, .T = c->T, .H = c->H, .D = c->D, .scale = c->scale};
}

static void att_fwd_range_(void* vctx, int64_t t0, int64_t t1) {
  att_ctx_* c = vctx;
  if (c->bf16_dot) {
    dt_att_args_ a = att_args_(c);
    for (int64_t t = t0; t < t1; t++) dt_att_bf16_fwd_head_(&a, t, &c->failed);
    return;
  }
  const int64_t Dp = att_pad_(c->D), QT = c->tile;
  float* scratch = att_reserve_((size_t)(2 * c->T * Dp + 2 * Dp * QT + QT * QT));
  if (!scratch) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  if (c->tile == 32) att_fwd_heads32_(c, t0, t1, scratch);
  else att_fwd_heads64_(c, t0, t1, scratch);
}

/* In place, transposed (key-major, as the scores): P = exp(S - lse) (0 where
 * masked) and dS = scale P (dP - delta). */
static inline __attribute__((always_inline)) void att_bwd_probs_(float* pt, float* dst, int64_t QT, int64_t nk, int64_t q0, int64_t k0,
                                         int32_t causal, const float* lse, const float* delta, float scale,
                                         int exp16) {
  if (exp16) {
    bwd_probs_avx512_(pt, dst, QT, nk, q0, k0, causal, lse, delta, scale);
    return;
  }
  int all = tile_unmasked_(q0, k0, nk, causal);
  for (int64_t j = 0; j < nk; j++) {
    float* p = pt + j * QT;
    float* d = dst + j * QT;
    for (int64_t i = 0; i < QT; i++) {
      float pij = all || dt_attention_visible(q0 + i, k0 + j, causal) ? dt_attention_p_lse_f(p[i], lse[i]) : 0.0f;
      p[i] = pij;
      d[i] = dt_attention_ds_f(pij, d[i], delta[i]) * scale;
    }
  }
}

/* Backward of one (batch, head). */
static inline __attribute__((always_inline)) void att_bwd_head_(att_ctx_* c, int64_t bh, float* scratch, const int64_t QT) {
  const int64_t T = c->T, H = c->H, D = c->D, C = H * D, b = bh / H, h = bh % H, Dp = att_pad_(D);
  const int64_t KT = QT;
  const int64_t es = (int64_t)dt_dtype_size(c->dtype);
  float* kbuf = scratch;      /* T x Dp */
  float* vbuf = kbuf + T * Dp; /* T x Dp */
  float* dk = vbuf + T * Dp;   /* T x Dp */
  float* dv = dk + T * Dp;  /* T x Dp */
  float* q = dv + T * Dp;   /* QT x Dp */
  float* g = q + QT * Dp;   /* QT x Dp: dO */
  float* qt = g + QT * Dp;  /* D x QT */
  float* gt = qt + Dp * QT; /* D x QT */
  float* dq = gt + Dp * QT; /* QT x Dp */
  float* pt = dq + QT * Dp; /* KT x QT */
  float* dst = pt + KT * QT; /* KT x QT */
  float* ot = dst + KT * QT; /* D x QT: O, for delta with AVX-512 */
  float lse[TILE_MAX], delta[TILE_MAX];
  const int64_t stride = 3 * C;
  const char* base = (const char*)c->qkv + (b * T * stride + h * D) * es;
  const char* gbase = (const char*)c->dout + (b * T * C + h * D) * es;
  const char* obase = (const char*)c->fwd_out + (b * T * C + h * D) * es;
  /* rows of K, V, Q, dO and O: in place (row strides 3C and C), or converted into scratch */
  const float* kf = kbuf;
  const float* vf = vbuf;
  int64_t ld = Dp, ldq = Dp, ldg = Dp;
  if (c->in_place) {
    kf = (const float*)(base + C * es);
    vf = (const float*)(base + 2 * C * es);
    ld = ldq = stride;
    ldg = C;
  } else {
    load_rows_(kbuf, Dp, base + C * es, c->dtype, T, stride, D);
    load_rows_(vbuf, Dp, base + 2 * C * es, c->dtype, T, stride, D);
  }
  memset(dk, 0, (size_t)(2 * T * Dp) * sizeof(float)); /* dk and dv, adjacent */
  for (int64_t q0 = 0; q0 < T; q0 += QT) {
    int64_t nq = T - q0 < QT ? T - q0 : QT;
    const float* qr = q;
    const float* gr = g;
    const float* orow = dq;
    if (c->in_place) {
      qr = (const float*)(base + q0 * stride * es);
      gr = (const float*)(gbase + q0 * C * es);
      orow = (const float*)(obase + q0 * C * es);
    } else {
      load_rows_(q, Dp, base + q0 * stride * es, c->dtype, nq, stride, D);
      load_rows_(g, Dp, gbase + q0 * C * es, c->dtype, nq, C, D);
      load_rows_(dq, Dp, obase + q0 * C * es, c->dtype, nq, C, D);
    }
    load_cols_any_(qt, base + q0 * stride * es, c->dtype, nq, stride, D, QT, c->exp16);
    load_cols_any_(gt, gbase + q0 * C * es, c->dtype, nq, C, D, QT, c->exp16);
    /* delta = rowsum(dO * O), O as the forward stored it: 16 rows at a time down the columns
     * of dO and O with AVX-512, else row by row, the same sum in the same order */
    if (c->exp16) {
      load_cols_any_(ot, obase + q0 * C * es, c->dtype, nq, C, D, QT, 1);
      bwd_delta_avx512_(delta, gt, ot, D, QT);
    } else {
      for (int64_t i = 0; i < QT; i++) {
        float acc = 0.0f;
        if (i < nq)
          for (int64_t e = 0; e < D; e++) acc += gr[i * ldg + e] * orow[i * ldg + e];
        delta[i] = acc;
      }
    }
    for (int64_t i = 0; i < QT; i++) lse[i] = i < nq ? c->lse[bh * T + q0 + i] : 0.0f;
    memset(dq, 0, (size_t)(nq * Dp) * sizeof(float));
    int64_t kend = dt_attention_key_end(q0 + nq, T, c->causal);
    for (int64_t k0 = 0; k0 < kend; k0 += KT) {
      int64_t nk = kend - k0 < KT ? kend - k0 : KT;
      const float* kk = kf + k0 * ld;
      tile_gemm_(c->isa, nk, QT, D, kk, ld, 1, qt, QT, pt, QT, c->scale, 0.0f);         /* S^T = scale K Q^T */
      tile_gemm_(c->isa, nk, QT, D, vf + k0 * ld, ld, 1, gt, QT, dst, QT, 1.0f, 0.0f); /* dP^T = V dO^T */
      att_bwd_probs_(pt, dst, QT, nk, q0, k0, c->causal, lse, delta, c->scale, c->exp16);
      tile_gemm_(c->isa, nq, D, nk, dst, 1, QT, kk, ld, dq, Dp, 1.0f, 1.0f);           /* dQ += dS K */
      tile_gemm_(c->isa, nk, D, nq, dst, QT, 1, qr, ldq, dk + k0 * Dp, Dp, 1.0f, 1.0f); /* dK += dS^T Q */
      tile_gemm_(c->isa, nk, D, nq, pt, QT, 1, gr, ldg, dv + k0 * Dp, Dp, 1.0f, 1.0f);  /* dV += P^T dO */
    }
    for (int64_t i = 0; i < nq; i++) {
      store_row_(c->out, c->dtype, (b * T + q0 + i) * stride + h * D, dq + i * Dp, D);
    }
  }
  for (int64_t t = 0; t < T; t++) {
    int64_t at = (b * T + t) * stride + h * D;
    store_row_(c->out, c->dtype, at + C, dk + t * Dp, D);
    store_row_(c->out, c->dtype, at + 2 * C, dv + t * Dp, D);
  }
}

DT_VEC_CLONES static void att_bwd_heads32_(att_ctx_* c, int64_t t0, int64_t t1, float* scratch) {
  for (int64_t t = t0; t < t1; t++) att_bwd_head_(c, t, scratch, 32);
}
DT_VEC_CLONES static void att_bwd_heads64_(att_ctx_* c, int64_t t0, int64_t t1, float* scratch) {
  for (int64_t t = t0; t < t1; t++) att_bwd_head_(c, t, scratch, 64);
}

static void att_bwd_range_(void* vctx, int64_t t0, int64_t t1) {
  att_ctx_* c = vctx;
  if (c->bf16_dot) {
    dt_att_args_ a = att_args_(c);
    for (int64_t t = t0; t < t1; t++) dt_att_bf16_bwd_head_(&a, t, &c->failed);
    return;
  }
  const int64_t Dp = att_pad_(c->D), QT = c->tile;
  float* scratch = att_reserve_((size_t)(4 * c->T * Dp + 3 * QT * Dp + 3 * Dp * QT + 2 * QT * QT));
  if (!scratch) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  if (c->tile == 32) att_bwd_heads32_(c, t0, t1, scratch);
  else att_bwd_heads64_(c, t0, t1, scratch);
}

/* ---- launchers ------------------------------------------------------------------------ */

/* (batch, head) tasks per thread chunk: enough multiply-adds to pay for a wake-up. */
static int64_t att_grain_(int64_t T, int64_t D, int32_t causal) {
  double per_head = 2.0 * (double)T * (double)T * (double)D * (causal ? 0.5 : 1.0);
  int64_t g = (int64_t)(ATT_GRAIN_FLOPS / (per_head + 1.0));
  return g < 1 ? 1 : g;
}

DT_EXPORT dt_status dt_attention_fwd(void* out, float* lse, const void* qkv, int32_t dtype, int64_t B, int64_t T,
                                     int64_t H, int64_t D, int32_t causal, float scale, void* stream) {
  (void)stream;
  int empty = 1;
  DT_TRY_(dt_check_attention_fwd(out, lse, qkv, dtype, B, T, H, D, causal, scale, &empty));
  if (empty) return DT_OK;
  att_ctx_ c = {.out = out, .lse = lse, .qkv = qkv, .dtype = dtype, .causal = causal, .T = T, .H = H, .D = D,
                .tile = att_tile_(T), .scale = scale};
  DT_TRY_(dt_gemm_pick_isa_(&c.isa));
  c.bf16_dot = dtype == DT_BF16 && dt_gemm_bf16_dot_available_();
  c.in_place = att_in_place_(dtype, D, c.isa);
  c.exp16 = dt_cpu_avx512_();
  dt_parallel_for_(B * H, att_grain_(T, D, causal), att_fwd_range_, &c);
  if (c.failed)
    return dt_fail_(DT_ERR_ALLOC, "dt_attention_fwd: cannot allocate the scratch of a tile (D=%lld)", (long long)D);
  return DT_OK;
}

DT_EXPORT dt_status dt_attention_bwd(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                     int32_t dtype, int64_t B, int64_t T, int64_t H, int64_t D, int32_t causal,
                                     float scale, void* stream) {
  (void)stream;
  int empty = 1;
  DT_TRY_(dt_check_attention_bwd(dqkv, dout, qkv, out, lse, dtype, B, T, H, D, causal, scale, &empty));
  if (empty) return DT_OK;
  att_ctx_ c = {.out = dqkv, .lse = (float*)lse, .qkv = qkv, .dout = dout, .fwd_out = out, .dtype = dtype,
                .causal = causal, .T = T, .H = H, .D = D, .tile = att_tile_(T), .scale = scale};
  DT_TRY_(dt_gemm_pick_isa_(&c.isa));
  c.bf16_dot = dtype == DT_BF16 && dt_gemm_bf16_dot_available_();
  c.in_place = att_in_place_(dtype, D, c.isa);
  c.exp16 = dt_cpu_avx512_();
  dt_parallel_for_(B * H, att_grain_(T, D, causal), att_bwd_range_, &c);
  if (c.failed)
    return dt_fail_(DT_ERR_ALLOC, "dt_attention_bwd: cannot allocate the scratch of a sequence (T=%lld D=%lld)",
                    (long long)T, (long long)D);
  return DT_OK;
}
