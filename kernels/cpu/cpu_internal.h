/* cpu_internal.h — helpers shared by the CPU kernel files: the thread pool,
 * plus the error machinery and argument checks that both kernel libraries
 * take from kernels/common. Not part of the exported ABI. */
#pragma once
#include "dt_checks.h"
#include "dt_common.h"
#include "dt_error.h"

/* Runs fn(ctx, begin, end) over [0, n) split into contiguous chunks across the
 * pool's threads (the calling thread takes one). Chunks are at least `grain`. */
typedef void (*dt_range_fn_)(void* ctx, int64_t begin, int64_t end);
void dt_parallel_for_(int64_t n, int64_t grain, dt_range_fn_ fn, void* ctx);
int dt_num_threads_(void);

/* out[j] = exp(x[j]), tanh(x[j]), gelu(x[j]) and dout[j] * gelu'(x[j]) for
 * j < n, f32, the bits of dt_math.h's and gelu.h's bodies (math_rows.c); out
 * may be x. */
void dt_exp_rows_(float* out, const float* x, int64_t n);
/* Whether the CPU loops take their AVX-512 intrinsic forms (the same bits as
 * the plain ones): where the GEMM uses its AVX-512 kernel, that is on a CPU
 * with AVX-512F under a DTRAIN_CPU_ISA that allows it (math_rows.c). */
int dt_cpu_avx512_(void);
/* layernorm.h's dt_layernorm_bwd_row in AVX-512 intrinsics, its bits
 * (layernorm_avx512.c); only where dt_cpu_avx512_(). */
void dt_layernorm_bwd_row_avx512_(float* dinp, const float* dout, const float* x, const float* weight,
                                  float mean, float rstd, int64_t C);
/* layernorm.h's dt_layernorm_moments the same way (layernorm_avx512.c). */
void dt_layernorm_moments_avx512_(const float* x, int64_t C, float eps, float* mean_out, float* rstd_out);
/* The moments of two rows at once (means and rstds in [0] and [1]), each row's bits, their chains
 * of dependent adds interleaved. */
void dt_layernorm_moments2_avx512_(const float* x0, const float* x1, int64_t C, float eps, float* mean_out,
                                   float* rstd_out);
void dt_tanh_rows_(float* out, const float* x, int64_t n);
void dt_gelu_rows_(float* out, const float* x, int64_t n);
void dt_gelu_grad_rows_(float* out, const float* dout, const float* x, int64_t n);
