/* gemm.c — dt_gemm on the CPU: argument checks, the choice of micro-kernel
 * for this CPU, and the Goto/BLIS loops around it (B panel and A block packed
 * into per-thread buffers, then micro-tiles), threaded over output tiles. */
#include "gemm_internal.h"
#include <stdlib.h>

/* ---- kernel choice -------------------------------------------------------------
 * The best kernel the CPU supports, capped by DTRAIN_CPU_ISA (avx512bf16,
 * avx512, avx2 or generic) so that every kernel can be tested and timed on one
 * machine. bf16 products use vdpbf16ps where the CPU has AVX512_BF16 and the
 * cap allows it; elsewhere they convert to f32 for the f32 kernel. */

static const dt_gemm_isa_* dt_gemm_isa_chosen_;
static int dt_gemm_bf16_dot_; /* bf16 products through gemm_bf16_avx512.c */

dt_status dt_gemm_pick_isa_(const dt_gemm_isa_** out) {
  const dt_gemm_isa_* isa = __atomic_load_n(&dt_gemm_isa_chosen_, __ATOMIC_ACQUIRE);
  if (isa) {
    *out = isa;
    return DT_OK;
  }
  const char* cap = getenv("DTRAIN_CPU_ISA");
  int level = 3; /* 3 = avx512bf16, 2 = avx512, 1 = avx2, 0 = generic */
  if (cap && *cap) {
    if (strcmp(cap, "avx512bf16") == 0) level = 3;
    else if (strcmp(cap, "avx512") == 0) level = 2;
    else if (strcmp(cap, "avx2") == 0) level = 1;
    else if (strcmp(cap, "generic") == 0) level = 0;
    else
      return dt_fail_(DT_ERR_ARG,
                      "dt_gemm: DTRAIN_CPU_ISA=%s is not supported: expected avx512bf16, avx512, avx2 or generic",
                      cap);
  }
  __builtin_cpu_init();
  int has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f");
  if (level >= 2 && has_avx512) isa = &dt_gemm_isa_avx512_;
  else if (level >= 1 && has_avx2) isa = &dt_gemm_isa_avx2_;
  else isa = &dt_gemm_isa_generic_;
  dt_gemm_bf16_dot_ = level >= 3 && has_avx512 && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  __atomic_store_n(&dt_gemm_isa_chosen_, isa, __ATOMIC_RELEASE);
  *out = isa;
  return DT_OK;
}

int dt_gemm_bf16_dot_available_(void) {
  const dt_gemm_isa_* isa = NULL;
  return dt_gemm_pick_isa_(&isa) == DT_OK && dt_gemm_bf16_dot_;
}

/** The kernel dt_gemm uses for `dtype` on this CPU under DTRAIN_CPU_ISA:
 *  "avx512bf16", "avx512", "avx2" or "generic" (NULL with the error text set
 *  for a bad DTRAIN_CPU_ISA or dtype). */
DT_EXPORT const char* dt_cpu_gemm_kernel(int32_t dtype) {
  const dt_gemm_isa_* isa = NULL;
  if (dtype != DT_F32 && dtype != DT_BF16 && dtype != DT_F16) {
    dt_fail_(DT_ERR_ARG, "dt_cpu_gemm_kernel: dtype %d is not DT_F32, DT_BF16 or DT_F16", dtype);
    return NULL;
  }
  if (dt_gemm_pick_isa_(&isa) != DT_OK) return NULL;
  return dtype == DT_BF16 && dt_gemm_bf16_dot_ ? "avx512bf16" : isa->name;
}

/* ---- per-thread buffers ----------------------------------------------------------
 * Packed panels live in buffers that each thread keeps and grows on demand, so
 * a call allocates nothing once the sizes it needs have been seen. */

typedef struct {
  float* ptr;
  size_t cap; /* floats */
} dt_gemm_buf_;

static __thread dt_gemm_buf_ dt_gemm_buf_a_, dt_gemm_buf_b_, dt_gemm_buf_c_;

static float* dt_gemm_reserve_(dt_gemm_buf_* buf, size_t floats) {
  if (buf->cap >= floats) return buf->ptr;
  void* p = NULL;
  if (posix_memalign(&p, 64, floats * sizeof(float)) != 0) return NULL;
  free(buf->ptr);
  buf->ptr = p;
  buf->cap = floats;
  return buf->ptr;
}

/* ---- the blocked product -------------------------------------------------------- */

static int64_t dt_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The K block of a product: equal blocks (not a full block and a sliver), 300 -> 150 + 150. */
static int64_t dt_gemm_kc_(const dt_gemm_isa_* isa, int64_t K) {
  return K <= isa->kc ? K : dt_ceil_div_(K, dt_ceil_div_(K, isa->kc));
}

/* Everything one dt_gemm call shares between its threads. */
typedef struct {
  const dt_gemm_isa_* isa;
  int32_t dtype;   /* what the products compute in */
  int32_t c_dtype; /* C's own dtype: dtype, or f32 under dt_cpu_gemm_bf16_mixed and dt_gemm_f32c_ */
  int c_exact;     /* f32 C of low-precision operands not rounded through their dtype (dt_gemm_f32c_) */
  const dt_gemm_bf16_epi_* epi; /* a bf16 C's epilogue (dt_gemm_bf16_epi_ex_), or NULL */
  int64_t M, N, K, kc; /* kc: the K block, the same for every tile */
  float alpha, beta;
  dt_gemm_view_ a, b;  /* op(A) (M x K) and op(B) (K x N) of batch 0 */
  void* c;
  int64_t ldc, stride_a, stride_b, stride_c;
  int64_t m_tile, n_tile, m_tiles, n_tiles; /* the output tiles that threads share */
  int status;                               /* first failure, written atomically */
  int64_t failed_floats;                    /* the buffer size that could not be allocated */
} dt_gemm_job_;

/* Widest tile for which a transposed f32 A is read in place (see below).
 * Read in place, each of its rows gives a kernel mr values, ld apart: for
 * every B sliver those rows miss L1 again and push B's sliver out of it.
 * Packing costs one pass over A, paid back from a few slivers on: on an AVX2
 * Zen 3 core, 128 x 512 x 2048 (A^T) runs 3 % faster packed, 512 x 128 x 2048
 * 3-4 % slower. */
#define DT_GEMM_DIRECT_A_MAX_N 256

/* Fewest B slivers for which a transposed f32 A is packed by the kernel of
 * its first sliver (isa->kernel_pack) rather than read in place or packed in
 * a pass of its own: the first sliver's tiles store A once more, paid back
 * by the other slivers reading it packed. On an AVX2 Zen 3 core, against
 * OpenBLAS in runs alternated with the code before (bench_gemm --clock cpu,
 * docs/BENCHMARKS.md): 128 x 512 x 2048 (packed in a pass of its own before)
 * went from 0.95-0.96x to 0.97-1.00x, 384 x 128 x 2048 from 0.96-0.97x to
 * 0.99-1.00x in the quietest sitting, while with 4 slivers 256 x 64 x 2048
 * ran 1-8 % slower than read in place. */
#define DT_GEMM_PACK_A_MIN_SLIVERS 8

/* How a block of A reaches the micro-kernel. */
typedef enum {
  DT_GEMM_A_DIRECT,     /* read in place */
  DT_GEMM_A_PACKED,     /* packed by isa->pack_a before its tiles */
  DT_GEMM_A_ON_THE_WAY, /* packed by isa->kernel_pack as the first B sliver's tiles read it */
} dt_gemm_a_mode_;

/* f32 A is read in place: the kernel broadcasts single elements, so any
 * layout will do, and packing would cost more than it saves on the model's
 * shapes. A transposed A feeding many columns is packed (its strided reads
 * would otherwise repeat for every B sliver): on the way where the kernel
 * can and the block has a full tile to pack (2 x 256 x 64 ran 20 % slower
 * packed), ahead otherwise, as are bf16 and f16, which are converted while
 * packing. Up to DT_GEMM_DIRECT_A_MAX_N columns, a transposed A whose rows
 * are no longer than a block (lda <= mc) stays in place: a K block of it is
 * then one stretch of memory, which the prefetchers stream as well as a
 * packed one (128 x 128 x 2048 ran 3 % slower packed on the way). */
static dt_gemm_a_mode_ dt_gemm_a_mode_of_(const dt_gemm_isa_* isa, const dt_gemm_view_* a, int64_t m, int64_t n) {
  if (a->dtype != DT_F32) return DT_GEMM_A_PACKED;
  if (a->cs == 1) return DT_GEMM_A_DIRECT;
  int64_t slivers = (n + isa->nr - 1) / isa->nr;
  int strided = n > DT_GEMM_DIRECT_A_MAX_N || a->cs > isa->mc;
  if (isa->kernel_pack && a->rs == 1 && m >= isa->mr && slivers >= DT_GEMM_PACK_A_MIN_SLIVERS && strided)
    return DT_GEMM_A_ON_THE_WAY;
  return n <= DT_GEMM_DIRECT_A_MAX_N ? DT_GEMM_A_DIRECT : DT_GEMM_A_PACKED;
}

/* The products with a kernel of their own, none of which packs anything: c (m
 * x n of a product M x N x K, f32) = alpha * a @ b + beta * c through one of
 * them where the shape fits, returning 1, or 0 where none fits. kc: the K
 * block of the rows kernel. */
static int dt_gemm_thin_f32_(const dt_gemm_isa_* isa, const dt_gemm_view_* a, const dt_gemm_view_* b, int64_t M,
                             int64_t N, int64_t m, int64_t n, int64_t K, int64_t kc, float alpha, float beta, float* c,
                             int64_t ldc) {
  if (a->dtype != DT_F32 || b->dtype != DT_F32) return 0;
  /* both operands along K and a tiny M or N: dot products */
  if (isa->dot && a->cs == 1 && b->rs == 1 && (M <= DT_GEMM_DOT_MAX || N <= DT_GEMM_DOT_MAX)) {
    isa->dot(m, n, K, alpha, a->data, a->rs, b->data, b->cs, beta, c, ldc);
    return 1;
  }
  /* a K of a few and B along N: K outer products, C stored in one pass */
  if (isa->outer && b->cs == 1 && K <= DT_GEMM_OUTER_MAX_K) {
    isa->outer(m, n, K, alpha, a->data, a->rs, a->cs, b->data, b->rs, beta, c, ldc);
    return 1;
  }
  /* a few rows and B along N: C's rows summed in registers, each B vector feeding all of them */
  if (isa->rows && b->cs == 1 && m <= DT_GEMM_ROWS_MAX_M) {
    isa->rows(m, n, K, kc, alpha, a->data, a->rs, a->cs, b->data, b->rs, beta, c, ldc);
    return 1;
  }
  return 0;
}

/* What one call of dt_gemm_blocked_ shares among its blocks. */
typedef struct {
  const dt_gemm_isa_* isa;
  const dt_gemm_view_ *a, *b;
  dt_gemm_a_mode_ a_mode;
  int direct_a, direct_b;
  float* ap; /* the packed A block (not direct_a) */
  float* c;
  int64_t ldc;
  float alpha;
} dt_gemm_blocks_;

/* Rows [ic, ic + mc) of C over columns [jc, jc + nc) gain the K block [pc, pc + kc): the A block
 * packed (or read in place), then every micro-tile against the B panel bp (or B in place). */
static void dt_gemm_block_(const dt_gemm_blocks_* g, const float* bp, int64_t jc, int64_t nc, int64_t pc,
                           int64_t kc, int64_t ic, int64_t mc, float beta_k) {
  const dt_gemm_isa_* isa = g->isa;
  const dt_gemm_view_ *a = g->a, *b = g->b;
  const int mr = isa->mr, nr = isa->nr;
  const int64_t n_full = nc / nr * nr;
  const float* ablk;
  int64_t rsa, csa, sliver;
  if (g->direct_a) {
    ablk = (const float*)a->data + ic * a->rs + pc * a->cs;
    rsa = a->rs;
    csa = a->cs;
    sliver = mr * a->rs;
  } else {
    int64_t full = mc / mr * mr;
    if (g->a_mode == DT_GEMM_A_PACKED) isa->pack_a(a, ic, mc, pc, kc, mr, g->ap);
    else if (full < mc) /* kernel_pack packs full tiles only: the short last one goes ahead */
      isa->pack_a(a, ic + full, mc - full, pc, kc, mr, g->ap + full * kc);
    ablk = g->ap;
    rsa = 1;
    csa = mr;
    sliver = mr * kc;
  }
  /* A block ending in a tile of 1 or 2 rows ends in two of about half
   * the height instead (6 + 2 rows -> 4 + 4), where the kernel has a
   * shorter body for them (the AVX2 kernel: 4 + 4 rows cost 8 rows'
   * work, 6 + 2 cost 10). Only where A is read in place: a packed A's
   * slivers hold exactly mr rows. The same bits either way. Only for
   * kernels whose bodies make it cheaper (isa->split_short_tail). */
  int64_t tail = mc % mr;
  int64_t split_at =
      isa->split_short_tail && g->direct_a && mc > mr && tail > 0 && tail <= 2 ? mc - mr - tail : -1;
  for (int64_t jr = 0; jr < nc; jr += nr) {
    int nrr = nc - jr < nr ? (int)(nc - jr) : nr;
    const float* bs = g->direct_b ? bp : bp + jr * kc;
    int64_t rsb = nr;
    if (g->direct_b && jr < n_full) {
      bs = (const float*)b->data + pc * b->rs + jc + jr;
      rsb = b->rs;
    }
    int pack_now = g->a_mode == DT_GEMM_A_ON_THE_WAY && jr == 0;
    for (int64_t ir = 0, mrr; ir < mc; ir += mrr) {
      mrr = mc - ir < mr ? mc - ir : mr;
      if (ir == split_at) mrr = (mr + tail + 1) / 2;
      float* cs = g->c + (ic + ir) * g->ldc + jc + jr;
      if (pack_now && mrr == mr) {
        const float* src = (const float*)a->data + (ic + ir) + pc * a->cs;
        isa->kernel_pack(kc, src, a->cs, g->ap + ir / mr * sliver, bs, rsb, cs, g->ldc, g->alpha, beta_k, nrr);
        continue;
      }
      const float* as = g->direct_a ? ablk + ir * rsa : ablk + ir / mr * sliver;
      isa->kernel(kc, as, rsa, csa, bs, rsb, cs, g->ldc, g->alpha, beta_k, (int)mrr, nrr);
    }
  }
}

/* Packed B panels of every K block at once, where they take at most this many bytes: then
 * each A block gains all its K blocks in turn, while its rows of C stay in L2. */
#define DT_GEMM_ALL_K_BYTES (512 << 10)

/* c (m x n f32, row stride ldc) = alpha * a @ b + beta * c, where a is m x k
 * and b is k x n: loops over B panels (nc x kc), A blocks (mc x kc) and
 * micro-tiles. K blocks after the first add onto c (beta = 1). With several K
 * blocks and several A blocks, and B packed, the K blocks are the inner loop
 * where all of B's panels fit DT_GEMM_ALL_K_BYTES: a row block of C is then
 * written once and read back from L2, rather than all of C written by one K
 * block and read back by the next (2048 x 128 x 512, NT and NN, after a cache
 * flush: 191-201 -> 200-215 GFLOP/s); each element gains its K blocks in the
 * same order, so the bits do not change. Fails only to allocate
 * (DT_ERR_ALLOC, with job->failed_floats set; no text, since this may run on
 * a worker thread). */
static dt_status dt_gemm_blocked_(dt_gemm_job_* job, const dt_gemm_view_* a, const dt_gemm_view_* b,
                                  int64_t m, int64_t n, float* c, int64_t ldc, float alpha, float beta) {
  const dt_gemm_isa_* isa = job->isa;
  const int mr = isa->mr, nr = isa->nr;
  const int64_t K = job->K, KC = job->kc;
  int64_t nc_max = n < isa->nc ? (n + nr - 1) / nr * nr : isa->nc;
  int64_t mc_max = m < isa->mc ? (m + mr - 1) / mr * mr : isa->mc;
  if (dt_gemm_thin_f32_(isa, a, b, job->M, job->N, m, n, K, KC, alpha, beta, c, ldc)) return DT_OK;
  dt_gemm_a_mode_ a_mode = dt_gemm_a_mode_of_(isa, a, m, n);
  int direct_a = a_mode == DT_GEMM_A_DIRECT;
  /* with a single A sliver each B sliver is used once: f32 rows of B are read
   * in place too, and only a partial last sliver is packed (zero padded). So
   * is a B of one sliver whose rows are no wider than it (n <= nr, ldb <=
   * nr): it is then one stretch of memory, which stays in L1 as a packed copy
   * would (attention's P V, 128 x 32 x 128, packed B in 5 % of its time). */
  int direct_b = b->dtype == DT_F32 && b->cs == 1 && (m <= mr || (n <= nr && b->rs <= nr));
  const int64_t k_blocks = dt_ceil_div_(K, KC);
  const int all_k = !direct_b && k_blocks > 1 && m > isa->mc &&
                    (size_t)(k_blocks * KC * nc_max) * sizeof(float) <= DT_GEMM_ALL_K_BYTES;
  const int64_t b_floats = (all_k ? k_blocks : 1) * KC * (direct_b ? nr : nc_max);
  float* bp = dt_gemm_reserve_(&dt_gemm_buf_b_, (size_t)b_floats);
  float* ap = direct_a ? NULL : dt_gemm_reserve_(&dt_gemm_buf_a_, (size_t)(KC * mc_max));
  if (!bp || (!direct_a && !ap)) {
    job->failed_floats = bp ? KC * mc_max : b_floats;
    return DT_ERR_ALLOC;
  }
  const dt_gemm_blocks_ g = {isa, a, b, a_mode, direct_a, direct_b, ap, c, ldc, alpha};
  for (int64_t jc = 0; jc < n; jc += isa->nc) {
    int64_t nc = n - jc < isa->nc ? n - jc : isa->nc;
    int64_t n_full = nc / nr * nr;
    if (all_k) {
      /* block pc's panel at bp + pc * nc_max: kc <= KC rows of at most nc_max columns */
      for (int64_t pc = 0; pc < K; pc += KC) {
        int64_t kc = K - pc < KC ? K - pc : KC;
        isa->pack_b(b, pc, kc, jc, nc, nr, bp + pc * nc_max);
      }
      for (int64_t ic = 0; ic < m; ic += isa->mc) {
        int64_t mc = m - ic < isa->mc ? m - ic : isa->mc;
        for (int64_t pc = 0; pc < K; pc += KC) {
          int64_t kc = K - pc < KC ? K - pc : KC;
          dt_gemm_block_(&g, bp + pc * nc_max, jc, nc, pc, kc, ic, mc, pc == 0 ? beta : 1.0f);
        }
      }
      continue;
    }
    for (int64_t pc = 0; pc < K; pc += KC) {
      int64_t kc = K - pc < KC ? K - pc : KC;
      if (!direct_b) isa->pack_b(b, pc, kc, jc, nc, nr, bp);
      else if (n_full < nc) isa->pack_b(b, pc, kc, jc + n_full, nc - n_full, nr, bp); /* the partial sliver */
      for (int64_t ic = 0; ic < m; ic += isa->mc) {
        int64_t mc = m - ic < isa->mc ? m - ic : isa->mc;
        dt_gemm_block_(&g, bp, jc, nc, pc, kc, ic, mc, pc == 0 ? beta : 1.0f);
      }
    }
  }
  return DT_OK;
}

static dt_gemm_view_ dt_gemm_offset_(const dt_gemm_view_* v, int64_t elements, int64_t r0, int64_t c0) {
  dt_gemm_view_ out = *v;
  size_t esize = dt_dtype_size(v->dtype);
  out.data = (const char*)v->data + (size_t)(elements + r0 * v->rs + c0 * v->cs) * esize;
  return out;
}

/* Output tile t of the job: rows [i0, i1) x columns [j0, j1) of batch entry bi.
 * f32 accumulates straight into C; bf16 and f16 accumulate into an f32
 * scratch tile and are rounded once, on the way into C. */
static dt_status dt_gemm_tile_(dt_gemm_job_* job, int64_t t) {
  int64_t per_batch = job->m_tiles * job->n_tiles;
  int64_t bi = t / per_batch, mi = t % per_batch / job->n_tiles, ni = t % job->n_tiles;
  int64_t i0 = mi * job->m_tile, j0 = ni * job->n_tile;
  int64_t m = job->M - i0 < job->m_tile ? job->M - i0 : job->m_tile;
  int64_t n = job->N - j0 < job->n_tile ? job->N - j0 : job->n_tile;
  dt_gemm_view_ a = dt_gemm_offset_(&job->a, bi * job->stride_a, i0, 0);
  dt_gemm_view_ b = dt_gemm_offset_(&job->b, bi * job->stride_b, 0, j0);
  size_t esize = dt_dtype_size(job->c_dtype);
  char* c = (char*)job->c + (size_t)(bi * job->stride_c + i0 * job->ldc + j0) * esize;
  if (job->dtype == DT_F32) return dt_gemm_blocked_(job, &a, &b, m, n, (float*)c, job->ldc, job->alpha, job->beta);
  if (job->dtype == DT_BF16 && dt_gemm_bf16_dot_) {
    dt_gemm_bf16_epi_ epi;
    if (job->epi) { /* the tile's columns of the bias and its block of aux */
      epi = *job->epi;
      epi.bias += j0;
      if (epi.aux) epi.aux += i0 * epi.ldaux + j0;
    }
    return dt_gemm_bf16_(&a, &b, m, n, job->K, job->alpha, job->beta, c, job->c_dtype, job->c_exact, job->ldc,
                         job->epi ? &epi : NULL, &job->failed_floats);
  }
  /* an exact f32 C of any operands (converted while packing) accumulates in place */
  if (job->c_exact) return dt_gemm_blocked_(job, &a, &b, m, n, (float*)c, job->ldc, job->alpha, job->beta);

  float* acc = dt_gemm_reserve_(&dt_gemm_buf_c_, (size_t)(m * n));
  if (!acc) {
    job->failed_floats = m * n;
    return DT_ERR_ALLOC;
  }
  dt_status st = dt_gemm_blocked_(job, &a, &b, m, n, acc, n, 1.0f, 0.0f);
  if (st != DT_OK) return st;
  uint16_t* ch = (uint16_t*)c;
  int bf16 = job->dtype == DT_BF16;
  float alpha = job->alpha, beta = job->beta;
  for (int64_t i = 0; i < m; i++) {
    uint16_t* row = ch + i * job->ldc;
    for (int64_t j = 0; j < n; j++) {
      float v = alpha * acc[i * n + j];
      if (beta != 0.0f) v += beta * (bf16 ? dt_bf16_to_f32(row[j]) : dt_f16_to_f32(row[j]));
      row[j] = bf16 ? dt_f32_to_bf16(v) : dt_f32_to_f16(v);
    }
  }
  return DT_OK;
}

static void dt_gemm_tiles_(void* ctx, int64_t begin, int64_t end) {
  dt_gemm_job_* job = ctx;
  for (int64_t t = begin; t < end; t++) {
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED) != DT_OK) return;
    dt_status st = dt_gemm_tile_(job, t);
    if (st != DT_OK) {
      int expected = DT_OK;
      __atomic_compare_exchange_n(&job->status, &expected, st, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
      return;
    }
  }
}

/* ---- work split ------------------------------------------------------------------
 * A thread is worth waking only for about this much arithmetic; below it the
 * pool's wake-up costs more than it saves. */
#define DT_GEMM_FLOPS_PER_THREAD 8e6
/* bf16/f16 tiles are bounded so that their f32 scratch stays small (1 MiB). */
#define DT_GEMM_HALF_TILE_M 240
#define DT_GEMM_HALF_TILE_N 1024

/* Splits each batch entry's M x N output into tiles: as few as possible, but
 * enough (and a multiple of the thread count) to keep every thread busy. */
static void dt_gemm_split_(dt_gemm_job_* job, int64_t batch) {
  int64_t mr = job->isa->mr, nr = job->isa->nr;
  int64_t m_tile = job->M, n_tile = job->N;
  if (job->dtype != DT_F32 && !job->c_exact && !(job->dtype == DT_BF16 && dt_gemm_bf16_dot_)) {
    if (m_tile > DT_GEMM_HALF_TILE_M) m_tile = DT_GEMM_HALF_TILE_M;
    if (n_tile > DT_GEMM_HALF_TILE_N) n_tile = DT_GEMM_HALF_TILE_N;
  }
  double flops = 2.0 * (double)job->M * (double)job->N * (double)job->K * (double)batch;
  int64_t threads = dt_num_threads_();
  if (threads > 1 && flops < DT_GEMM_FLOPS_PER_THREAD * (double)threads)
    threads = (int64_t)(flops / DT_GEMM_FLOPS_PER_THREAD);
  if (threads < 1) threads = 1;
  int64_t tiles = batch * dt_ceil_div_(job->M, m_tile) * dt_ceil_div_(job->N, n_tile);
  if (tiles < 4 * threads && tiles % threads != 0) {
    /* cut each tile into `threads` strips: along M when it is tall enough */
    if (m_tile >= threads * mr) m_tile = dt_ceil_div_(dt_ceil_div_(m_tile, threads), mr) * mr;
    else if (n_tile >= threads * nr) n_tile = dt_ceil_div_(dt_ceil_div_(n_tile, threads), nr) * nr;
  }
  job->m_tile = m_tile;
  job->n_tile = n_tile;
  job->m_tiles = dt_ceil_div_(job->M, m_tile);
  job->n_tiles = dt_ceil_div_(job->N, n_tile);
}

/* ---- the trivial products: C = beta * C -------------------------------------------
 * When K == 0 or alpha == 0 the product vanishes and A and B are not read, as
 * in BLAS; beta == 0 writes zeros without reading C. */
static void dt_gemm_scale_c_(int32_t dtype, void* c, int64_t M, int64_t N, int64_t ldc, int64_t batch,
                             int64_t stride_c, float beta) {
  for (int64_t bi = 0; bi < batch; bi++) {
    for (int64_t i = 0; i < M; i++) {
      int64_t row = bi * stride_c + i * ldc;
      for (int64_t j = 0; j < N; j++) {
        if (dtype == DT_F32) {
          float* p = (float*)c + row + j;
          *p = beta == 0.0f ? 0.0f : beta * *p;
        } else {
          uint16_t* p = (uint16_t*)c + row + j;
          float v = beta == 0.0f ? 0.0f : beta * dt_gemm_load_(c, dtype, row + j);
          *p = dtype == DT_BF16 ? dt_f32_to_bf16(v) : dt_f32_to_f16(v);
        }
      }
    }
  }
}

DT_EXPORT dt_status dt_gemm(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                            int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
                            void* stream) {
  (void)stream;
  DT_TRY_(dt_check_gemm(dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, batch, stride_a, stride_b,
                        stride_c));
  if (M == 0 || N == 0 || batch == 0) return DT_OK;
  if (K == 0 || alpha == 0.0f) { /* the product vanishes: A and B are not read, as in BLAS */
    dt_gemm_scale_c_(dtype, C, M, N, ldc, batch, stride_c, beta);
    return DT_OK;
  }
  dt_status st;
  const dt_gemm_isa_* isa = NULL;
  if ((st = dt_gemm_pick_isa_(&isa)) != DT_OK) return st;
  dt_gemm_view_ a = {A, dtype, trans_a ? 1 : lda, trans_a ? lda : 1};
  dt_gemm_view_ b = {B, dtype, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  /* A product too small to share (one tile on the calling thread, as
   * dt_gemm_split_ would make it) whose shape has a kernel of its own goes
   * straight to it, with the bits the job would give: building the job and
   * splitting it took two thirds of a 2 x 16 x 1 product's time (50.7 ns, now
   * 16.3 ns; cblas_sgemm 15.0 ns, in a C loop) and 30-45 ns of toy fc2's. */
  if (dtype == DT_F32 && batch == 1 && 2.0 * (double)M * (double)N * (double)K < 2 * DT_GEMM_FLOPS_PER_THREAD &&
      dt_gemm_thin_f32_(isa, &a, &b, M, N, M, N, K, dt_gemm_kc_(isa, K), alpha, beta, (float*)C, ldc))
    return DT_OK;
  dt_gemm_job_ job = {.isa = isa, .dtype = dtype, .c_dtype = dtype, .M = M, .N = N, .K = K, .alpha = alpha,
                      .beta = beta, .a = a, .b = b, .c = C, .ldc = ldc, .stride_a = stride_a, .stride_b = stride_b,
                      .stride_c = stride_c, .status = DT_OK};
  job.kc = dt_gemm_kc_(job.isa, K);
  dt_gemm_split_(&job, batch);
  dt_parallel_for_(batch * job.m_tiles * job.n_tiles, 1, dt_gemm_tiles_, &job);
  /* tiles may fail on worker threads, whose error text is their own: say it here */
  if (job.status != DT_OK)
    return dt_fail_(job.status, "dt_gemm: cannot allocate a buffer of %lld floats (%s kernel, M = %lld, N = %lld, K = %lld)",
                    (long long)job.failed_floats, job.isa->name, (long long)M, (long long)N, (long long)K);
  return DT_OK;
}

/** dt_gemm computed in bf16 products (vdpbf16ps) for operands that need not
 *  be bf16: A and B each DT_F32 or DT_BF16, an f32 one rounded to bf16 as it
 *  is packed (as dt_cast rounds); C DT_BF16, or DT_F32 receiving the bf16
 *  result widened (beta reads C as it is). The bits are those of casting A and
 *  B to bf16, dt_gemm(DT_BF16) and casting C to f32, without the passes over
 *  memory and the temporaries. Only where dt_cpu_gemm_kernel(DT_BF16) is
 *  "avx512bf16"; elsewhere it fails (DT_ERR_ARG) and nothing is written. */
DT_EXPORT dt_status dt_cpu_gemm_bf16_mixed(int32_t a_dtype, int32_t b_dtype, int32_t c_dtype, int32_t trans_a,
                                           int32_t trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                                           int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                                           int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  const int32_t dt[3] = {a_dtype, b_dtype, c_dtype};
  for (int i = 0; i < 3; i++) {
    if (dt[i] != DT_F32 && dt[i] != DT_BF16)
      return dt_fail_(DT_ERR_ARG, "dt_cpu_gemm_bf16_mixed: the dtype of %c is %d: expected DT_F32 (0) or DT_BF16 (1)",
                      "ABC"[i], dt[i]);
  }
  /* shapes, strides and pointers as dt_gemm checks them, each operand with its own element size */
  DT_TRY_(dt_check_gemm(DT_BF16, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, batch, stride_a,
                        stride_b, stride_c));
  DT_TRY_(dt_check_gemm_matrix_("dt_cpu_gemm_bf16_mixed", "A", "lda", trans_a ? K : M, trans_a ? M : K, lda, batch, stride_a, "strideA",
                                (int64_t)dt_dtype_size(a_dtype)));
  DT_TRY_(dt_check_gemm_matrix_("dt_cpu_gemm_bf16_mixed", "B", "ldb", trans_b ? N : K, trans_b ? K : N, ldb, batch, stride_b, "strideB",
                                (int64_t)dt_dtype_size(b_dtype)));
  DT_TRY_(dt_check_gemm_matrix_("dt_cpu_gemm_bf16_mixed", "C", "ldc", M, N, ldc, batch, stride_c, "strideC", (int64_t)dt_dtype_size(c_dtype)));
  dt_gemm_job_ job = {.dtype = DT_BF16, .c_dtype = c_dtype, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                      .c = C, .ldc = ldc, .stride_a = stride_a, .stride_b = stride_b, .stride_c = stride_c,
                      .status = DT_OK};
  dt_status st;
  if ((st = dt_gemm_pick_isa_(&job.isa)) != DT_OK) return st;
  if (!dt_gemm_bf16_dot_)
    return dt_fail_(DT_ERR_ARG, "dt_cpu_gemm_bf16_mixed: this CPU (or DTRAIN_CPU_ISA) has no AVX512_BF16 kernel");
  if (M == 0 || N == 0 || batch == 0) return DT_OK;
  if (K == 0 || alpha == 0.0f) { /* C = beta * C, rounded to bf16 as the product would be */
    for (int64_t bi = 0; bi < batch; bi++) {
      for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
          int64_t at = bi * stride_c + i * ldc + j;
          float v = beta == 0.0f ? 0.0f : beta * dt_gemm_load_(C, c_dtype, at);
          uint16_t h = dt_f32_to_bf16(v);
          if (c_dtype == DT_F32) ((float*)C)[at] = dt_bf16_to_f32(h);
          else ((uint16_t*)C)[at] = h;
        }
      }
    }
    return DT_OK;
  }
  job.a = (dt_gemm_view_){A, a_dtype, trans_a ? 1 : lda, trans_a ? lda : 1};
  job.b = (dt_gemm_view_){B, b_dtype, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  job.kc = dt_gemm_kc_(job.isa, K);
  dt_gemm_split_(&job, batch);
  dt_parallel_for_(batch * job.m_tiles * job.n_tiles, 1, dt_gemm_tiles_, &job);
  if (job.status != DT_OK)
    return dt_fail_(job.status, "dt_cpu_gemm_bf16_mixed: cannot allocate a buffer of %lld floats (M = %lld, N = %lld, K = %lld)",
                    (long long)job.failed_floats, (long long)M, (long long)N, (long long)K);
  return DT_OK;
}

/* Runs a job of dt_gemm_ex's internal entries (f32 output of narrow operands, the bf16
 * epilogue kernel): the kernel chosen at run time, A and B of the job's dtype as given. */
static dt_status dt_gemm_run_ex_(dt_gemm_job_* job, int32_t trans_a, int32_t trans_b, const void* A, int64_t lda,
                                 const void* B, int64_t ldb) {
  dt_status st;
  if ((st = dt_gemm_pick_isa_(&job->isa)) != DT_OK) return st;
  job->a = (dt_gemm_view_){A, job->dtype, trans_a ? 1 : lda, trans_a ? lda : 1};
  job->b = (dt_gemm_view_){B, job->dtype, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  job->kc = dt_gemm_kc_(job->isa, job->K);
  dt_gemm_split_(job, 1);
  dt_parallel_for_(job->m_tiles * job->n_tiles, 1, dt_gemm_tiles_, job);
  if (job->status != DT_OK)
    return dt_fail_(job->status, "dt_gemm_ex: cannot allocate a buffer of %lld floats (%s kernel, M = %lld, N = %lld, K = %lld)",
                    (long long)job->failed_floats, job->isa->name, (long long)job->M, (long long)job->N, (long long)job->K);
  return DT_OK;
}

dt_status dt_gemm_f32c_(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
                        int64_t ldc) {
  if (dtype == DT_F32)
    return dt_gemm(DT_F32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, 0, 0, 0, NULL);
  if (M == 0 || N == 0) return DT_OK;
  if (K == 0 || alpha == 0.0f) {
    dt_gemm_scale_c_(DT_F32, C, M, N, ldc, 1, 0, beta);
    return DT_OK;
  }
  dt_gemm_job_ job = {.dtype = dtype, .c_dtype = DT_F32, .c_exact = 1, .M = M, .N = N, .K = K, .alpha = alpha,
                      .beta = beta, .c = C, .ldc = ldc, .status = DT_OK};
  return dt_gemm_run_ex_(&job, trans_a, trans_b, A, lda, B, ldb);
}

dt_status dt_gemm_bf16_epi_ex_(int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc,
                               const dt_gemm_bf16_epi_* epi) {
  dt_gemm_job_ job = {.dtype = DT_BF16, .c_dtype = DT_BF16, .epi = epi, .M = M, .N = N, .K = K, .alpha = alpha,
                      .beta = 0.0f, .c = C, .ldc = ldc, .status = DT_OK};
  return dt_gemm_run_ex_(&job, trans_a, trans_b, A, lda, B, ldb);
}
