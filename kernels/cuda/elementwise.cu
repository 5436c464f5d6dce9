/* elementwise.cu — CUDA launches of the elementwise kernels: dt_binary (with
 * its broadcast forms), dt_scale, dt_axpy, ReLU, GELU and dropout, with
 * 128-bit loads and stores and broadcasting by multiply-and-shift division.
 * Each element runs the same kernels/common body as the CPU loop
 * (elementwise.h, gelu.h, dropout.h); argument checks mirror
 * kernels/cpu/elementwise.c. */
#include "cuda_internal.cuh"
#include "dropout.h"
#include "elementwise.h"
#include "gelu.h"

/* ---- kernels --------------------------------------------------------------------
 * Every map reads and writes 128 bits per access (4 floats) where all its
 * pointers share one 16-byte phase: a scalar head up to the first boundary,
 * aligned float4 vectors, a scalar tail; pointers of different phases (views
 * at odd offsets) take the scalar loop throughout. Each element is the same
 * kernels/common body either way, so the result never depends on alignment. */

/* How n floats at the given pointers (NULL ones ignored) split into head, vectors and tail. */
struct dt_f32_split_ {
  int64_t head, vecs;
};

static dt_f32_split_ dt_f32_split_of_(int64_t n, const void* out, const void* a, const void* b) {
  uintptr_t phase = (uintptr_t)out % 16;
  bool same = (uintptr_t)out % 4 == 0 && (!a || (uintptr_t)a % 16 == phase) && (!b || (uintptr_t)b % 16 == phase);
  if (!same) return {n, 0};
  int64_t head = (int64_t)((16 - phase) % 16) / 4;
  if (head > n) head = n;
  return {head, (n - head) / 4};
}

/* Element k (0 <= k < head + tail) of the scalar part: the head, then the tail. */
__device__ __forceinline__ int64_t dt_scalar_at_(int64_t k, int64_t head, int64_t tail0) {
  return k < head ? k : tail0 + (k - head);
}

/* out[j] = f(a[j], b[j], j) (b NULL: f(a[j], 0, j)) for j < n. */
template <class F>
__global__ void dt_map_k_(F f, float* out, const float* a, const float* b, int64_t n, int64_t head, int64_t vecs) {
  const int64_t tail0 = head + 4 * vecs;
  DT_GRID_STRIDE(v, vecs) {
    int64_t j = head + 4 * v;
    float4 x = *(const float4*)(a + j);
    float4 y = x;
    if (b) y = *(const float4*)(b + j);
    else y.x = y.y = y.z = y.w = 0.0f;
    float4 r;
    r.x = f(x.x, y.x, j);
    r.y = f(x.y, y.y, j + 1);
    r.z = f(x.z, y.z, j + 2);
    r.w = f(x.w, y.w, j + 3);
    *(float4*)(out + j) = r;
  }
  DT_GRID_STRIDE(k, head + (n - tail0)) {
    int64_t j = dt_scalar_at_(k, head, tail0);
    out[j] = f(a[j], b ? b[j] : 0.0f, j);
  }
}

/* The element functions of the maps. */
struct dt_binary_fn_ {
  int32_t op;
  __device__ float operator()(float x, float y, int64_t) const { return dt_binary_f(op, x, y); }
};
struct dt_scale_fn_ {
  float alpha;
  __device__ float operator()(float x, float, int64_t) const { return alpha * x; }
};
struct dt_axpy_fn_ { /* a = y, b = x */
  float alpha;
  __device__ float operator()(float y, float x, int64_t) const { return dt_axpy_f(y, alpha, x); }
};
struct dt_relu_fn_ {
  __device__ float operator()(float x, float, int64_t) const { return dt_relu_f(x); }
};
struct dt_relu_bwd_fn_ { /* a = dout, b = inp */
  __device__ float operator()(float dy, float x, int64_t) const { return dt_relu_grad_f(dy, x); }
};
struct dt_gelu_fn_ {
  __device__ float operator()(float x, float, int64_t) const { return dt_gelu_f(x); }
};
struct dt_gelu_bwd_fn_ {
  __device__ float operator()(float dy, float x, int64_t) const { return dt_gelu_grad_f(dy, x); }
};
struct dt_dropout_fn_ {
  uint64_t seed, offset, threshold;
  float scale;
  __device__ float operator()(float x, float, int64_t j) const {
    return dt_dropout_apply(x, seed, offset + (uint64_t)j, threshold, scale);
  }
};

/* Threads a map needs: one per vector or per scalar element, whichever are more. */
static int64_t dt_map_threads_(int64_t n, dt_f32_split_ sp) {
  int64_t scalars = n - 4 * sp.vecs;
  return sp.vecs > scalars ? sp.vecs : scalars;
}

/* Queues dt_map_k_ of f over n floats. */
template <class F>
static dt_status dt_map_(const char* name, F f, float* out, const float* a, const float* b, int64_t n,
                         cudaStream_t s) {
  dt_f32_split_ sp = dt_f32_split_of_(n, out, a, b);
  int64_t work = dt_map_threads_(n, sp);
  DT_LAUNCH(dt_map_k_<F>, dt_grid_for_(work, DT_BLOCK), DT_BLOCK, 0, s, f, out, a, b, n, sp.head, sp.vecs);
  DT_CHECK_LAUNCH(s, name);
  return DT_OK;
}

/* Division by a fixed d in [1, 2^31] of n < 2^31 without a divide instruction
 * (Granlund and Montgomery's multiply and shift, as PyTorch's IntDivider):
 * n / d = (mulhi(n, m) + n) >> s with s = ceil(log2 d), m = 2^32 (2^s - d) / d + 1. */
struct dt_divmod_ {
  uint32_t d, m, s;
};

static dt_divmod_ dt_divmod_of_(int64_t d) {
  uint32_t s = 0;
  while (((int64_t)1 << s) < d) s++;
  uint64_t m = (((uint64_t)1 << 32) * (((uint64_t)1 << s) - (uint64_t)d)) / (uint64_t)d + 1;
  return {(uint32_t)d, (uint32_t)m, s};
}

__device__ __forceinline__ uint32_t dt_div_(dt_divmod_ q, uint32_t n) {
  uint32_t t = (uint32_t)(((uint64_t)n * q.m) >> 32);
  return (t + n) >> q.s;
}

/* out[i] = op(a[i], b[(i / inner) % bn]) for n < 2^31: a and out by float4 where they share a phase. */
__global__ void dt_binary_bcast_k_(int32_t op, float* out, const float* a, const float* b, int64_t n, int64_t head,
                                   int64_t vecs, dt_divmod_ inner, dt_divmod_ bn) {
  const int64_t tail0 = head + 4 * vecs;
  auto bat = [&](int64_t i) {
    uint32_t q = dt_div_(inner, (uint32_t)i);
    return b[q - dt_div_(bn, q) * bn.d];
  };
  DT_GRID_STRIDE(v, vecs) {
    int64_t j = head + 4 * v;
    float4 x = *(const float4*)(a + j);
    float4 r;
    r.x = dt_binary_f(op, x.x, bat(j));
    r.y = dt_binary_f(op, x.y, bat(j + 1));
    r.z = dt_binary_f(op, x.z, bat(j + 2));
    r.w = dt_binary_f(op, x.w, bat(j + 3));
    *(float4*)(out + j) = r;
  }
  DT_GRID_STRIDE(k, head + (n - tail0)) {
    int64_t j = dt_scalar_at_(k, head, tail0);
    out[j] = dt_binary_f(op, a[j], bat(j));
  }
}

/* The same for n >= 2^31, in 64-bit division. */
__global__ void dt_binary_bcast64_k_(int32_t op, float* out, const float* a, const float* b, int64_t n, int64_t bn,
                                     int64_t inner) {
  DT_GRID_STRIDE(i, n) out[i] = dt_binary_f(op, a[i], b[(i / inner) % bn]);
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_binary(int32_t op, float* out, const float* a, const float* b, int64_t n, int64_t bn,
                              int64_t inner, void* stream) {
  DT_TRY_(dt_check_binary(op, out, a, b, n, bn, inner));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (inner == 1 && bn == n) return dt_map_("dt_binary", dt_binary_fn_{op}, out, a, b, n, s);
  if (n >= ((int64_t)1 << 31)) {
    DT_LAUNCH(dt_binary_bcast64_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, op, out, a, b, n, bn, inner);
    DT_CHECK_LAUNCH(s, "dt_binary");
    return DT_OK;
  }
  dt_f32_split_ sp = dt_f32_split_of_(n, out, a, NULL);
  DT_LAUNCH(dt_binary_bcast_k_, dt_grid_for_(dt_map_threads_(n, sp), DT_BLOCK), DT_BLOCK, 0, s, op, out, a, b, n,
            sp.head, sp.vecs, dt_divmod_of_(inner), dt_divmod_of_(bn));
  DT_CHECK_LAUNCH(s, "dt_binary");
  return DT_OK;
}

DT_EXPORT dt_status dt_scale(float* out, const float* inp, int64_t n, float alpha, void* stream) {
  DT_TRY_(dt_check_scale(out, inp, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  return dt_map_("dt_scale", dt_scale_fn_{alpha}, out, inp, NULL, n, s);
}

DT_EXPORT dt_status dt_axpy(float* y, const float* x, int64_t n, float alpha, void* stream) {
  DT_TRY_(dt_check_axpy(y, x, n));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  return dt_map_("dt_axpy", dt_axpy_fn_{alpha}, y, y, x, n, s);
}

/* Shared checks of the unary forward/backward launchers; on success *s is the stream. */
static dt_status dt_unary_prepare_(const char* name, const float* out, const float* x, const float* y, int needs_y,
                                   int64_t n, void* stream, cudaStream_t* s) {
  DT_TRY_(dt_check_unary(name, out, x, y, needs_y, n));
  if (n == 0) return DT_OK;
  return dt_cuda_stream_(stream, s);
}

DT_EXPORT dt_status dt_relu_fwd(float* out, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_relu_fwd", out, inp, NULL, 0, n, stream, &s));
  if (n == 0) return DT_OK;
  return dt_map_("dt_relu_fwd", dt_relu_fn_{}, out, inp, NULL, n, s);
}

DT_EXPORT dt_status dt_relu_bwd(float* dinp, const float* dout, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_relu_bwd", dinp, inp, dout, 1, n, stream, &s));
  if (n == 0) return DT_OK;
  return dt_map_("dt_relu_bwd", dt_relu_bwd_fn_{}, dinp, dout, inp, n, s);
}

DT_EXPORT dt_status dt_gelu_fwd(float* out, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_gelu_fwd", out, inp, NULL, 0, n, stream, &s));
  if (n == 0) return DT_OK;
  return dt_map_("dt_gelu_fwd", dt_gelu_fn_{}, out, inp, NULL, n, s);
}

DT_EXPORT dt_status dt_gelu_bwd(float* dinp, const float* dout, const float* inp, int64_t n, void* stream) {
  cudaStream_t s;
  DT_TRY_(dt_unary_prepare_("dt_gelu_bwd", dinp, inp, dout, 1, n, stream, &s));
  if (n == 0) return DT_OK;
  return dt_map_("dt_gelu_bwd", dt_gelu_bwd_fn_{}, dinp, dout, inp, n, s);
}

static dt_status dt_dropout_run_(const char* name, float* out, const float* inp, int64_t n, float p, int64_t seed,
                                 int64_t offset, void* stream) {
  DT_TRY_(dt_check_dropout(name, out, inp, n, p, offset));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  return dt_map_(name, dt_dropout_fn_{(uint64_t)seed, (uint64_t)offset, dt_dropout_threshold(p), dt_dropout_scale(p)},
                 out, inp, NULL, n, s);
}

DT_EXPORT dt_status dt_dropout_fwd(float* out, const float* inp, int64_t n, float p, int64_t seed, int64_t offset,
                                   void* stream) {
  return dt_dropout_run_("dt_dropout_fwd", out, inp, n, p, seed, offset, stream);
}

DT_EXPORT dt_status dt_dropout_bwd(float* dinp, const float* dout, int64_t n, float p, int64_t seed, int64_t offset,
                                   void* stream) {
  return dt_dropout_run_("dt_dropout_bwd", dinp, dout, n, p, seed, offset, stream);
}
