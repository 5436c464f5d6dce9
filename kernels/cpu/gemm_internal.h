/* gemm_internal.h — what the files of dt_gemm share: a strided view of an
 * operand, the micro-kernel and packing signatures, and the table of kernels
 * per instruction set that gemm.c chooses from at run time. Not exported. */
#pragma once
#include "cpu_internal.h"

/* op(X) as a matrix: element (r, c) is at data[r * rs + c * cs], of dtype. */
typedef struct {
  const void* data;
  int32_t dtype; /* DT_F32, DT_BF16 or DT_F16 */
  int64_t rs, cs;
} dt_gemm_view_;

/* One micro-tile: C (mr x nr, row stride ldc) = alpha * A @ B + beta * C, and
 * C = alpha * A @ B without reading C when beta == 0.
 * A is mr x k: element (i, p) at a[i * rsa + p * csa]; rows >= mr are never
 * read (a kernel repeats row mr - 1 in their place and discards them).
 * B is k x NR: element (p, j) at b[p * rsb + j]; all NR columns must be
 * readable (packing pads them with zeros), columns >= nr are discarded.
 * Every kernel does the same arithmetic on full and edge tiles, so a result
 * does not depend on where its element fell in the tiling. */
typedef void (*dt_gemm_kernel_fn_)(int64_t k, const float* a, int64_t rsa, int64_t csa, const float* b,
                                   int64_t rsb, float* c, int64_t ldc, float alpha, float beta, int mr, int nr);

/* The micro-kernel of a full mr-row tile of a transposed f32 A that also
 * packs it: A's element (i, p) is at a[i + p * lda], and the tile's A sliver
 * is written at ap in the layout of dt_gemm_pack_a_fn_ (for each p, its mr
 * values contiguously) as the kernel reads it, so that the tiles of the
 * following B slivers read it packed without a separate pass over A. B, C,
 * alpha, beta and nr as for dt_gemm_kernel_fn_, and the same bits. */
typedef void (*dt_gemm_kernel_pack_fn_)(int64_t k, const float* a, int64_t lda, float* ap, const float* b,
                                        int64_t rsb, float* c, int64_t ldc, float alpha, float beta, int nr);

/* Packs B rows [p0, p0 + kc) x columns [j0, j0 + nc) of v into slivers of nr
 * columns: sliver s holds, for each p, its nr values contiguously, at
 * dst + s * kc * nr. Columns past nc are zero. */
typedef void (*dt_gemm_pack_b_fn_)(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                   int nr, float* dst);

/* Packs A rows [i0, i0 + mc) x columns [p0, p0 + kc) of v into slivers of mr
 * rows: sliver s holds, for each p, its mr values contiguously, at
 * dst + s * kc * mr. Rows past mc are zero. */
typedef void (*dt_gemm_pack_a_fn_)(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                                   int mr, float* dst);

/* C (m x n) = alpha * A @ B + beta * C as dot products, for f32 operands that
 * both run along K: row i of A at a + i * lda, column j of B at b + j * ldb.
 * beta == 0 never reads C. */
typedef void (*dt_gemm_dot_fn_)(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/* C (m x n) = alpha * A @ B + beta * C for a K of at most
 * DT_GEMM_OUTER_MAX_K, as K outer products: A's element (i, p) at
 * a[i * rsa + p * csa], B's row p at b + p * ldb (columns contiguous); the
 * bits of the micro-kernel. beta == 0 never reads C. */
typedef void (*dt_gemm_outer_fn_)(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa,
                                  int64_t csa, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
#define DT_GEMM_OUTER_MAX_K 4

/* C (m x n) = alpha * A @ B + beta * C for an m of at most
 * DT_GEMM_ROWS_MAX_M with B along N, C's rows summed in registers over K
 * blocks of kc: the bits of the micro-kernel under the same kc. Layouts as
 * dt_gemm_outer_fn_. */
typedef void (*dt_gemm_rows_fn_)(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float* a,
                                 int64_t rsa, int64_t csa, const float* b, int64_t ldb, float beta, float* c,
                                 int64_t ldc);
#define DT_GEMM_ROWS_MAX_M 4

/* A micro-kernel with the blocking that suits it and its packing routines. */
typedef struct {
  const char* name; /* "avx512", "avx2" or "generic" */
  int mr, nr;       /* micro-tile */
  /* cache blocks: A block mc x kc in L2, B sliver kc x nr in L1, B panel
   * kc x nc; mc is a multiple of mr and nc of nr (packing buffers rely on it) */
  int64_t mc, kc, nc;
  dt_gemm_kernel_fn_ kernel;
  dt_gemm_kernel_pack_fn_ kernel_pack; /* NULL: a transposed A is packed beforehand or read in place */
  dt_gemm_pack_a_fn_ pack_a;
  dt_gemm_pack_b_fn_ pack_b;
  dt_gemm_dot_fn_ dot; /* for M or N <= DT_GEMM_DOT_MAX; NULL: use the kernel */
  dt_gemm_outer_fn_ outer; /* for K <= DT_GEMM_OUTER_MAX_K with B along N; NULL: use the kernel */
  dt_gemm_rows_fn_ rows;   /* for M <= DT_GEMM_ROWS_MAX_M with B along N; NULL: use the kernel */
  /* whether an A block read in place that ends in a tile of 1 or 2 rows is
   * better split into two tiles of about half the height (gemm.c): so with
   * the AVX2 kernel's bodies of 6, 4 and 2 rows; the AVX-512 kernel has
   * bodies of 2 and 1 rows, so 8 + 2 costs it less than 5 + 5 (8 + 8) */
  int split_short_tail;
} dt_gemm_isa_;

/* The dot-product path takes over when M or N is at most this: a micro-tile
 * would be mostly padding there. */
#define DT_GEMM_DOT_MAX 4

/* The kernel for this CPU under DTRAIN_CPU_ISA (gemm.c), chosen once; other
 * files use its micro-kernel for products of their own tiles (attention.c). */
dt_status dt_gemm_pick_isa_(const dt_gemm_isa_** out);

extern const dt_gemm_isa_ dt_gemm_isa_generic_;
extern const dt_gemm_isa_ dt_gemm_isa_avx2_;
extern const dt_gemm_isa_ dt_gemm_isa_avx512_;

/* Plain C packing for every dtype and layout (gemm_pack.c). */
void dt_gemm_pack_a_generic_(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr,
                             float* dst);
void dt_gemm_pack_b_generic_(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int nr,
                             float* dst);

/* AVX2 packing of f32 A and B (gemm_pack_avx2.c); other dtypes go to the plain
 * C packers. Call only on CPUs with AVX2. */
void dt_gemm_pack_a_avx2_(const dt_gemm_view_* v, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr,
                          float* dst);
void dt_gemm_pack_b_avx2_(const dt_gemm_view_* v, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int nr,
                          float* dst);

/* Dot-product GEMM with AVX2 + FMA (gemm_dot_avx2.c). Call only on CPUs with AVX2. */
void dt_gemm_dot_avx2_(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float beta, float* c, int64_t ldc);

/* The dot products with AVX-512 (gemm_dot_avx512.c), and the GEMMs of a tiny
 * K and of a few rows (gemm_outer_avx512.c). Call only on CPUs with
 * AVX-512F. */
void dt_gemm_outer_avx512_(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa, int64_t csa,
                           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void dt_gemm_rows_avx512_(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float* a, int64_t rsa,
                          int64_t csa, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void dt_gemm_dot_avx512_(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                         int64_t ldb, float beta, float* c, int64_t ldc);

/* dt_gemm_ex's bias or bias + GELU epilogue for a bf16 C, applied by the
 * bf16 kernel as it stores each tile: pre = product + bias[j] (bf16 bias),
 * C = pre or gelu(pre), aux = pre (with GELU), each rounded once, the bits
 * of dt_gemm_ex's f32 product then epilogue. bias and aux point at the
 * block's first column and row. */
typedef struct {
  int32_t epilogue; /* DT_EPI_BIAS or DT_EPI_GELU_BIAS */
  const uint16_t* bias;
  uint16_t* aux;
  int64_t ldaux;
} dt_gemm_bf16_epi_;

/* bf16 C (m x n, row stride ldc) = alpha * A @ B + beta * C with AVX512_BF16
 * (gemm_bf16_avx512.c); beta == 0 never reads C. An f32 C (c_dtype) gets the
 * bf16 result widened, or with c_exact the f32 result. epi (NULL: none) is a
 * bf16 C's epilogue. Fails only to allocate (*failed_floats set). Call only
 * on CPUs with AVX512_BF16. */
dt_status dt_gemm_bf16_(const dt_gemm_view_* a, const dt_gemm_view_* b, int64_t m, int64_t n, int64_t K,
                        float alpha, float beta, void* c, int32_t c_dtype, int c_exact, int64_t ldc,
                        const dt_gemm_bf16_epi_* epi, int64_t* failed_floats);

/* dt_gemm_ex's product and bias (+ GELU) epilogue in one pass for bf16
 * operands and C, beta 0, where dt_gemm_bf16_dot_available_() (gemm.c). */
dt_status dt_gemm_bf16_epi_ex_(int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc,
                               const dt_gemm_bf16_epi_* epi);

/* Whether dt_gemm runs bf16 through gemm_bf16_avx512.c here (the CPU has
 * AVX512_BF16 and DTRAIN_CPU_ISA allows it); 0 when the choice fails. */
int dt_gemm_bf16_dot_available_(void);

/* C (m x n f32, row stride ldc) = alpha * A @ B + beta * C on the vdpbf16ps
 * micro-kernel (12 x 32 tiles) for tiles of attention_bf16_avx512.c: pair q
 * of A's row i (two bf16 along K, the lower first) is the dword
 * a[i * a_row + q * a_q], rows up to m rounded up to 12 readable; B is in
 * slivers of 32 columns, sliver s at b + s * b_sliver, pair q's 32 dwords at
 * + q * 32, all readable. beta == 0 never reads C. Call only where
 * dt_gemm_bf16_dot_available_(). */
void dt_bf16_tile_gemm_(int64_t m, int64_t n, int64_t kq, const uint32_t* a, int64_t a_row, int64_t a_q,
                        const uint32_t* b, int64_t b_sliver, float* c, int64_t ldc, float alpha, float beta);

/* An f32 C (row stride ldc, one product) of A and B of `dtype`, not rounded
 * to the operands' dtype: dt_gemm's kernels (vdpbf16ps for bf16 where the CPU
 * has it, f16 widened while packing) for dt_gemm_ex's product. */
dt_status dt_gemm_f32c_(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
                        int64_t ldc);

/* Reads element i of a float buffer of dtype as f32. */
static inline float dt_gemm_load_(const void* p, int32_t dtype, int64_t i) {
  switch (dtype) {
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t*)p)[i]);
    case DT_F16: return dt_f16_to_f32(((const uint16_t*)p)[i]);
    default: return ((const float*)p)[i];
  }
}
