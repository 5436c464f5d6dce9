/* optim.cu — CUDA launches of the fused optimizer steps (dt_adamw, dt_sgd:
 * torch 1.13 single-tensor semantics; dt_adamw_many, dt_sgd_many: every
 * tensor in one launch; dt_zero_many: zero_grad in one launch) and of the
 * loss-scale unscale/inf check. The per-step scalars are computed once on the host and each element
 * runs kernels/common/adamw.h, sgd.h or loss_scale.h, as on the CPU. */
#include "adamw.h"
#include "cuda_internal.cuh"
#include "loss_scale.h"
#include "optim_many.h"
#include "sgd.h"

/* ---- kernels -------------------------------------------------------------------- */

__global__ void dt_adamw_k_(float* p, const float* g, float* m, float* v, int64_t n, dt_adamw_scalars s) {
  DT_GRID_STRIDE(i, n) dt_adamw_update(&p[i], g[i], &m[i], &v[i], &s);
}

__global__ void dt_sgd_k_(float* p, const float* g, float* buf, int64_t n, dt_sgd_scalars s) {
  DT_GRID_STRIDE(i, n) {
    float unused = 0.0f;
    dt_sgd_update(&p[i], g[i], s.use_momentum ? &buf[i] : &unused, &s);
  }
}

/* One block per chunk (optim_many.h), the grid striding over chunks; the
 * threads of a block take consecutive elements, so loads coalesce. */
__global__ void dt_adamw_many_k_(const dt_adamw_entry* E, const int64_t* first, int64_t num, int64_t chunks) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const dt_adamw_entry* e = &E[dt_optim_chunk_owner(first, num, c)];
    int64_t start = (c - first[e - E]) * DT_OPTIM_CHUNK;
    int64_t end = start + DT_OPTIM_CHUNK < e->n ? start + DT_OPTIM_CHUNK : e->n;
    dt_adamw_scalars s = e->s;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) dt_adamw_update(&e->p[i], e->g[i], &e->m[i], &e->v[i], &s);
  }
}

__global__ void dt_sgd_many_k_(const dt_sgd_entry* E, const int64_t* first, int64_t num, int64_t chunks) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const dt_sgd_entry* e = &E[dt_optim_chunk_owner(first, num, c)];
    int64_t start = (c - first[e - E]) * DT_OPTIM_CHUNK;
    int64_t end = start + DT_OPTIM_CHUNK < e->n ? start + DT_OPTIM_CHUNK : e->n;
    dt_sgd_scalars s = e->s;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
      float unused = 0.0f;
      dt_sgd_update(&e->p[i], e->g[i], s.use_momentum ? &e->buf[i] : &unused, &s);
    }
  }
}

__global__ void dt_zero_many_k_(const dt_zero_entry* E, const int64_t* first, int64_t num, int64_t chunks) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const dt_zero_entry* e = &E[dt_optim_chunk_owner(first, num, c)];
    int64_t start = (c - first[e - E]) * DT_OPTIM_CHUNK;
    int64_t end = start + DT_OPTIM_CHUNK < e->n ? start + DT_OPTIM_CHUNK : e->n;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) e->p[i] = 0.0f;
  }
}

/* found_inf is only ever set to 1, so racing writers store the same value. */
__global__ void dt_unscale_k_(float* g, int64_t n, float inv_scale, float* found_inf) {
  int nonfinite = 0;
  DT_GRID_STRIDE(i, n) g[i] = dt_unscale_f(g[i], inv_scale, &nonfinite);
  if (__syncthreads_or(nonfinite) && threadIdx.x == 0) *found_inf = 1.0f;
}

/* ---- launchers ---------------------------------------------------------------------- */

DT_EXPORT dt_status dt_adamw(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1,
                             double beta2, double eps, double weight_decay, int64_t step, void* stream) {
  DT_TRY_(dt_check_adamw(p, g, m, v, n, beta1, beta2, step));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_adamw_scalars sc = dt_adamw_make_scalars(lr, beta1, beta2, eps, weight_decay, step);
  DT_LAUNCH(dt_adamw_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, p, g, m, v, n, sc);
  DT_CHECK_LAUNCH(s, "dt_adamw");
  return DT_OK;
}

DT_EXPORT dt_status dt_sgd(float* p, const float* g, float* buf, int64_t n, double lr, double momentum,
                           double dampening, double weight_decay, int32_t nesterov, int32_t first, void* stream) {
  DT_TRY_(dt_check_sgd(p, g, buf, n, momentum, dampening, nesterov));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  dt_sgd_scalars sc = dt_sgd_make_scalars(lr, momentum, dampening, weight_decay, nesterov, first);
  DT_LAUNCH(dt_sgd_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, p, g, buf, n, sc);
  DT_CHECK_LAUNCH(s, "dt_sgd");
  return DT_OK;
}

DT_EXPORT dt_status dt_unscale_check(float* g, int64_t n, float inv_scale, float* found_inf, void* stream) {
  DT_TRY_(dt_check_unscale(g, n, found_inf));
  if (n == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  DT_LAUNCH(dt_unscale_k_, dt_grid_for_(n, DT_BLOCK), DT_BLOCK, 0, s, g, n, inv_scale, found_inf);
  DT_CHECK_LAUNCH(s, "dt_unscale_check");
  return DT_OK;
}

static dt_status dt_optim_upload_(void* dev, const void* host, size_t bytes, cudaStream_t s) {
  DT_CHECK_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
  return DT_OK;
}

/* The table of a one-launch step in device scratch: `num` entries of
 * `entry_bytes` (already filled in `host`), then first[num + 1] computed
 * here from the counts. The pageable copy is staged when it returns, so the
 * host buffer may go. *dev is freed by the caller (dt_scratch_free_). */
static dt_status dt_optim_table_(void** dev, int64_t** first_dev, int64_t* chunks, char* host, size_t entry_bytes,
                                 const int64_t* counts, int64_t num, cudaStream_t s, const char* who) {
  size_t head = ((size_t)num * entry_bytes + 15) / 16 * 16;
  int64_t* first = (int64_t*)(host + head);
  first[0] = 0;
  for (int64_t t = 0; t < num; t++) first[t + 1] = first[t] + dt_optim_chunks(counts[t]);
  *chunks = first[num];
  size_t bytes = head + (size_t)(num + 1) * sizeof(int64_t);
  DT_TRY_(dt_scratch_alloc_(dev, bytes, s, who));
  dt_status st = dt_optim_upload_(*dev, host, bytes, s);
  if (st != DT_OK) {
    dt_scratch_free_(*dev, s);
    return st;
  }
  *first_dev = (int64_t*)((char*)*dev + head);
  return DT_OK;
}

/* Host room for a table of num entries of entry_bytes plus first[num + 1]. */
static char* dt_optim_host_table_(size_t entry_bytes, int64_t num) {
  return (char*)calloc(1, ((size_t)num * entry_bytes + 15) / 16 * 16 + (size_t)(num + 1) * sizeof(int64_t));
}

DT_EXPORT dt_status dt_adamw_many(float* const* p, const float* const* g, float* const* m, float* const* v,
                                  const int64_t* counts, const int64_t* steps, const double* hyper, int64_t num,
                                  void* stream) {
  DT_TRY_(dt_check_adamw_many(p, g, m, v, counts, steps, hyper, num));
  if (num == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  char* host = dt_optim_host_table_(sizeof(dt_adamw_entry), num);
  if (!host) return dt_fail_(DT_ERR_ALLOC, "dt_adamw_many: cannot allocate a table of %lld tensors", (long long)num);
  dt_adamw_entry* E = (dt_adamw_entry*)host;
  for (int64_t t = 0; t < num; t++) {
    const double* h = hyper + 5 * t;
    E[t].p = p[t];
    E[t].g = g[t];
    E[t].m = m[t];
    E[t].v = v[t];
    E[t].n = counts[t];
    E[t].s = dt_adamw_make_scalars(h[0], h[1], h[2], h[3], h[4], steps[t]);
  }
  void* dev = NULL;
  int64_t* first = NULL;
  int64_t chunks = 0;
  dt_status st = dt_optim_table_(&dev, &first, &chunks, host, sizeof(dt_adamw_entry), counts, num, s, "dt_adamw_many");
  free(host);
  if (st != DT_OK) return st;
  if (chunks > 0) {
    DT_LAUNCH(dt_adamw_many_k_, dt_grid_for_(chunks * DT_BLOCK, DT_BLOCK), DT_BLOCK, 0, s, (const dt_adamw_entry*)dev,
              (const int64_t*)first, num, chunks);
    DT_CHECK_LAUNCH(s, "dt_adamw_many");
  }
  return dt_scratch_free_(dev, s);
}

DT_EXPORT dt_status dt_sgd_many(float* const* p, const float* const* g, float* const* buf, const int64_t* counts,
                                const double* hyper, const int32_t* flags, int64_t num, void* stream) {
  DT_TRY_(dt_check_sgd_many(p, g, buf, counts, hyper, flags, num));
  if (num == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  char* host = dt_optim_host_table_(sizeof(dt_sgd_entry), num);
  if (!host) return dt_fail_(DT_ERR_ALLOC, "dt_sgd_many: cannot allocate a table of %lld tensors", (long long)num);
  dt_sgd_entry* E = (dt_sgd_entry*)host;
  for (int64_t t = 0; t < num; t++) {
    const double* h = hyper + 4 * t;
    E[t].p = p[t];
    E[t].g = g[t];
    E[t].buf = buf[t];
    E[t].n = counts[t];
    E[t].s = dt_sgd_make_scalars(h[0], h[1], h[2], h[3], flags[2 * t], flags[2 * t + 1]);
  }
  void* dev = NULL;
  int64_t* first = NULL;
  int64_t chunks = 0;
  dt_status st = dt_optim_table_(&dev, &first, &chunks, host, sizeof(dt_sgd_entry), counts, num, s, "dt_sgd_many");
  free(host);
  if (st != DT_OK) return st;
  if (chunks > 0) {
    DT_LAUNCH(dt_sgd_many_k_, dt_grid_for_(chunks * DT_BLOCK, DT_BLOCK), DT_BLOCK, 0, s, (const dt_sgd_entry*)dev,
              (const int64_t*)first, num, chunks);
    DT_CHECK_LAUNCH(s, "dt_sgd_many");
  }
  return dt_scratch_free_(dev, s);
}

DT_EXPORT dt_status dt_zero_many(float* const* p, const int64_t* counts, int64_t num, void* stream) {
  DT_TRY_(dt_check_zero_many(p, counts, num));
  if (num == 0) return DT_OK;
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  char* host = dt_optim_host_table_(sizeof(dt_zero_entry), num);
  if (!host) return dt_fail_(DT_ERR_ALLOC, "dt_zero_many: cannot allocate a table of %lld tensors", (long long)num);
  dt_zero_entry* E = (dt_zero_entry*)host;
  for (int64_t t = 0; t < num; t++) {
    E[t].p = p[t];
    E[t].n = counts[t];
  }
  void* dev = NULL;
  int64_t* first = NULL;
  int64_t chunks = 0;
  dt_status st = dt_optim_table_(&dev, &first, &chunks, host, sizeof(dt_zero_entry), counts, num, s, "dt_zero_many");
  free(host);
  if (st != DT_OK) return st;
  if (chunks > 0) {
    DT_LAUNCH(dt_zero_many_k_, dt_grid_for_(chunks * DT_BLOCK, DT_BLOCK), DT_BLOCK, 0, s, (const dt_zero_entry*)dev,
              (const int64_t*)first, num, chunks);
    DT_CHECK_LAUNCH(s, "dt_zero_many");
  }
  return dt_scratch_free_(dev, s);
}
