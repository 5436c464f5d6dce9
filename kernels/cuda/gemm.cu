/* gemm.cu — dt_gemm on the GPU through cuBLASLt, opened with dlopen at run
 * time: argument checks (the CPU library's rules and text), the row-major to
 * column-major mapping, a cache of matmul plans (descriptors + the heuristic's
 * algorithm) per shape, and a 32 MiB workspace. f32 runs with
 * CUBLAS_COMPUTE_32F (exact f32, no TF32) unless dt_cuda_gemm_allow_tf32(1);
 * bf16 and f16 take f32 accumulation and scaling, rounded once into C. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cublaslt_api.h"
#include "cuda_internal.cuh"

#define DT_GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
#define DT_GEMM_PLANS 64

static const char* dt_cublas_status_name_(cublasStatus_t st);

/* ---- the library ------------------------------------------------------------------ */

static pthread_mutex_t dt_lt_mu_ = PTHREAD_MUTEX_INITIALIZER;
static dt_cublaslt_api_ lt_;
static void* dt_lt_lib_ = NULL;
static char dt_lt_path_[512];
static char dt_lt_load_error_[1024] = "cuBLASLt was never looked for";
static cublasLtHandle_t dt_lt_handle_ = NULL;
static void* dt_lt_workspace_ = NULL;
static int dt_gemm_tf32_ = 0;

/* Records cuBLASLt's status and text and returns DT_ERR_CUBLAS. */
static dt_status dt_cublas_fail_(cublasStatus_t st, const char* what, const char* file, int line) {
  const char* base = strrchr(file, '/');
  const char* text = lt_.cublasLtGetStatusString ? lt_.cublasLtGetStatusString(st) : "";
  return dt_fail_(DT_ERR_CUBLAS, "%s failed: %s%s%s (%s:%d)", what, dt_cublas_status_name_(st), *text ? ": " : "",
                  text, base ? base + 1 : file, line);
}

#define DT_CHECK_CUBLAS(call)                                                          \
  do {                                                                                 \
    cublasStatus_t dt_cst_ = (call);                                                   \
    if (dt_cst_ != CUBLAS_STATUS_SUCCESS) return dt_cublas_fail_(dt_cst_, #call, __FILE__, __LINE__); \
  } while (0)

/* A call whose every status is an answer the caller acts on (not fusable: fall back), left in
 * *result; kept a macro so tests/cuda/check_macros_test.ts sees that the status is looked at. */
#define DT_CHECK_CUBLAS_ANSWER(call, result) (*(result) = (call))

static const char* dt_cublas_status_name_(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_(unknown)";
  }
}

/* Opens `path` and resolves every function; on failure nothing is kept and
 * dt_lt_load_error_ says why. Called with dt_lt_mu_ held. */
static int dt_lt_open_locked_(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(dt_lt_load_error_, sizeof dt_lt_load_error_, "dlopen(%s): %s", path, dlerror());
    return 0;
  }
  dt_cublaslt_api_ api;
  memset(&api, 0, sizeof api);
  struct {
    void** slot;
    const char* name;
  } fns[] = {
      {(void**)&api.cublasLtCreate, "cublasLtCreate"},
      {(void**)&api.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate"},
      {(void**)&api.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy"},
      {(void**)&api.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"},
      {(void**)&api.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate"},
      {(void**)&api.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"},
      {(void**)&api.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute"},
      {(void**)&api.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"},
      {(void**)&api.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"},
      {(void**)&api.cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"},
      {(void**)&api.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"},
      {(void**)&api.cublasLtMatmul, "cublasLtMatmul"},
      {(void**)&api.cublasLtGetVersion, "cublasLtGetVersion"},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    *fns[i].slot = dlsym(h, fns[i].name);
    if (!*fns[i].slot) {
      snprintf(dt_lt_load_error_, sizeof dt_lt_load_error_, "%s has no symbol %s (cuBLASLt 11.4 or later is needed)",
               path, fns[i].name);
      dlclose(h);
      return 0;
    }
  }
  api.cublasLtGetStatusString = (const char* (*)(cublasStatus_t))dlsym(h, "cublasLtGetStatusString");
  lt_ = api;
  dt_lt_lib_ = h;
  snprintf(dt_lt_path_, sizeof dt_lt_path_, "%s", path);
  return 1;
}

/* Creates the handle and the workspace once the library is open. Called with dt_lt_mu_ held. */
static dt_status dt_lt_prepare_locked_(void) {
  if (!dt_lt_lib_) {
    const char* names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
    char tried[1024] = "";
    for (size_t i = 0; i < 3 && !dt_lt_lib_; i++) {
      if (!dt_lt_open_locked_(names[i]))
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", i ? "; " : "", dt_lt_load_error_);
    }
    if (!dt_lt_lib_)
      return dt_fail_(DT_ERR_CUBLAS,
                      "cuBLASLt is not loaded: %s. Install cuBLAS (the CUDA toolkit, or pip's nvidia-cublas) and "
                      "put its lib folder on LD_LIBRARY_PATH; `dtrain doctor` shows where dtrain looked",
                      tried);
  }
  if (!dt_lt_handle_) DT_CHECK_CUBLAS(lt_.cublasLtCreate(&dt_lt_handle_));
  if (!dt_lt_workspace_) DT_CHECK_CUDA(cudaMalloc(&dt_lt_workspace_, DT_GEMM_WORKSPACE_BYTES));
  return DT_OK;
}

/* Opens cuBLASLt from `path` (the file the TypeScript side found; NULL: the
 * usual sonames through the system search path) and prepares its handle and
 * workspace on the library's GPU (call dt_cuda_set_device first). *version =
 * cuBLASLt's version. */
DT_EXPORT dt_status dt_cuda_load_cublaslt(const char* path, int64_t* version) {
  DT_REQUIRE_(version, "dt_cuda_load_cublaslt: null version");
  cudaStream_t unused;
  DT_TRY_(dt_cuda_stream_(NULL, &unused)); /* the workspace goes on the library's GPU */
  pthread_mutex_lock(&dt_lt_mu_);
  dt_status st = DT_OK;
  if (!dt_lt_lib_ && path && !dt_lt_open_locked_(path))
    st = dt_fail_(DT_ERR_CUBLAS, "cannot load cuBLASLt: %s", dt_lt_load_error_);
  if (st == DT_OK) st = dt_lt_prepare_locked_();
  if (st == DT_OK) *version = (int64_t)lt_.cublasLtGetVersion();
  pthread_mutex_unlock(&dt_lt_mu_);
  return st;
}

/* 1: f32 products may use TF32 tensor cores (about 10 mantissa bits); 0 (the
 * default): exact f32, as the CPU library. */
DT_EXPORT dt_status dt_cuda_gemm_allow_tf32(int32_t allow) {
  DT_REQUIRE_(allow == 0 || allow == 1, "dt_cuda_gemm_allow_tf32: %d is not 0 or 1", allow);
  dt_gemm_tf32_ = allow;
  return DT_OK;
}

/* ---- plans -------------------------------------------------------------------------- */

typedef struct {
  int32_t dtype, c_dtype, ta, tb, tf32, epilogue; /* epilogue: DT_EPI_* */
  int64_t M, N, K, lda, ldb, ldc, batch, sa, sb, sc, ldaux;
  uint32_t align_a, align_b, align_c, align_bias, align_aux;
} dt_gemm_key_;

typedef struct {
  dt_gemm_key_ key;
  int used;
  int supported; /* 0: cuBLASLt has no algorithm for this epilogue (dt_gemm_ex then runs its own kernels) */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c; /* cuBLASLt's A is our B and its B our A (see dt_gemm_plan_build_) */
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
} dt_gemm_plan_;

static dt_gemm_plan_ dt_plans_[DT_GEMM_PLANS];
static int dt_plan_next_ = 0;

static dt_status dt_gemm_plan_release_(dt_gemm_plan_* p) {
  dt_gemm_plan_ old = *p;
  memset(p, 0, sizeof *p);
  if (old.desc) DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescDestroy(old.desc));
  if (old.a) DT_CHECK_CUBLAS(lt_.cublasLtMatrixLayoutDestroy(old.a));
  if (old.b) DT_CHECK_CUBLAS(lt_.cublasLtMatrixLayoutDestroy(old.b));
  if (old.c) DT_CHECK_CUBLAS(lt_.cublasLtMatrixLayoutDestroy(old.c));
  return DT_OK;
}

static dt_status dt_gemm_preference_destroy_(cublasLtMatmulPreference_t pref) {
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceDestroy(pref));
  return DT_OK;
}

static dt_status dt_gemm_layout_(cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows, int64_t cols,
                                 int64_t ld, int64_t batch, int64_t stride) {
  DT_CHECK_CUBLAS(lt_.cublasLtMatrixLayoutCreate(out, type, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    DT_CHECK_CUBLAS(lt_.cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    DT_CHECK_CUBLAS(
        lt_.cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return DT_OK;
}

static const char* dt_epilogue_name_(int32_t epilogue) {
  return epilogue == DT_EPI_BIAS ? "bias" : epilogue == DT_EPI_GELU_BIAS ? "bias + GELU" : "bias gradient";
}

/* Marks plan p as "cuBLASLt does not fuse this epilogue for this shape": every later call of the
 * shape (the plan is cached) runs the plain product and dtrain's epilogue kernel, without asking
 * cuBLASLt again. Said once per shape on stderr under DTRAIN_PROFILE=1, as a fused GEMM that is
 * not fused is a cost the profile should explain. */
static void dt_gemm_no_fusion_(dt_gemm_plan_* p, const dt_gemm_key_* k, const char* call, cublasStatus_t st) {
  p->supported = 0;
  const char* profile = getenv("DTRAIN_PROFILE");
  if (!profile || strcmp(profile, "1") != 0) return;
  fprintf(stderr,
          "[dtrain] profile: dt_gemm_ex: cuBLASLt does not fuse the %s epilogue of %s x %s -> %s M=%lld N=%lld "
          "K=%lld (transA %d, transB %d): %s answered %s; this shape runs the plain product, then dtrain's "
          "epilogue kernel\n",
          dt_epilogue_name_(k->epilogue), dt_dtype_name(k->dtype), dt_dtype_name(k->dtype), dt_dtype_name(k->c_dtype),
          (long long)k->M, (long long)k->N, (long long)k->K, k->ta, k->tb, call,
          st == CUBLAS_STATUS_SUCCESS ? "no algorithm" : dt_cublas_status_name_(st));
}

static dt_status dt_gemm_pick_algo_(dt_gemm_plan_* p, const dt_gemm_key_* k, cublasLtMatmulPreference_t pref) {
  uint64_t ws = DT_GEMM_WORKSPACE_BYTES;
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  /* pointers that are not 256-byte aligned (views into a larger buffer) need algorithms that allow them */
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_b,
                                                           sizeof k->align_b));
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_a,
                                                           sizeof k->align_a));
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_c,
                                                           sizeof k->align_c));
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_c,
                                                           sizeof k->align_c));
  cublasLtMatmulHeuristicResult_t result;
  memset(&result, 0, sizeof result);
  int found = 0;
  cublasStatus_t hs;
  DT_CHECK_CUBLAS_ANSWER(lt_.cublasLtMatmulAlgoGetHeuristic(dt_lt_handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                                            &result, &found),
                         &hs);
  /* an epilogue cuBLASLt does not fuse here (a type, layout, leading dimension or architecture it
   * does not take) is not an error however cuBLASLt says so (NOT_SUPPORTED, another status, zero
   * algorithms): dt_gemm_ex falls back to a plain product and its own epilogue kernels */
  if (k->epilogue != DT_EPI_NONE && (hs != CUBLAS_STATUS_SUCCESS || found < 1)) {
    dt_gemm_no_fusion_(p, k, "cublasLtMatmulAlgoGetHeuristic", hs);
    return DT_OK;
  }
  if (hs != CUBLAS_STATUS_SUCCESS) return dt_cublas_fail_(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  DT_REQUIRE_(found > 0, "dt_gemm: cuBLASLt has no algorithm for %s (C %s) M=%lld N=%lld K=%lld (transA %d, "
              "transB %d, lda %lld, ldb %lld, ldc %lld, batch %lld, alignments %u/%u/%u bytes)",
              dt_dtype_name(k->dtype), dt_dtype_name(k->c_dtype), (long long)k->M, (long long)k->N, (long long)k->K,
              k->ta, k->tb, (long long)k->lda, (long long)k->ldb, (long long)k->ldc, (long long)k->batch,
              k->align_a, k->align_b, k->align_c);
  p->supported = 1;
  p->algo = result.algo;
  p->workspace = result.workspaceSize;
  return DT_OK;
}

static cudaDataType_t dt_cuda_type_(int32_t dtype) {
  return dtype == DT_F32 ? CUDA_R_32F : dtype == DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The epilogue's attributes on a plan's descriptor: its kind and types once,
 * the bias and aux pointers of the call (set again before every matmul). */
static dt_status dt_gemm_set_epilogue_(cublasLtMatmulDesc_t desc, const dt_gemm_key_* k, const void* bias,
                                       const void* aux, int first) {
  if (k->epilogue == DT_EPI_NONE) return DT_OK;
  if (first) {
    uint32_t epi = k->epilogue == DT_EPI_BIAS        ? CUBLASLT_EPILOGUE_BIAS
                   : k->epilogue == DT_EPI_GELU_BIAS ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                     : CUBLASLT_EPILOGUE_BGRADB;
    int32_t type = dt_cuda_type_(k->c_dtype); /* bias (or its gradient) and aux have C's type */
    DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type));
    if (k->epilogue == DT_EPI_GELU_BIAS) {
      DT_CHECK_CUBLAS(
          lt_.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k->ldaux, sizeof k->ldaux));
      DT_CHECK_CUBLAS(
          lt_.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &type, sizeof type));
    }
  }
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (k->epilogue == DT_EPI_GELU_BIAS)
    DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  return DT_OK;
}

/* Row-major C (M x N) = op(A) op(B) is column-major C^T (N x M) = op(B)^T op(A)^T:
 * cuBLASLt's first operand is our B (stored N x K column-major when transB = 0,
 * K x N when 1), its second our A (K x M when transA = 0, M x K when 1). */
static dt_status dt_gemm_plan_build_(dt_gemm_plan_* p, const dt_gemm_key_* k, const void* bias, const void* aux) {
  cudaDataType_t type = dt_cuda_type_(k->dtype), ctype = dt_cuda_type_(k->c_dtype);
  int compute = k->dtype == DT_F32 && k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  int32_t op_first = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  DT_CHECK_CUBLAS(
      lt_.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  DT_TRY_(dt_gemm_layout_(&p->a, type, k->tb ? k->K : k->N, k->tb ? k->N : k->K, k->ldb, k->batch, k->sb));
  DT_TRY_(dt_gemm_layout_(&p->b, type, k->ta ? k->M : k->K, k->ta ? k->K : k->M, k->lda, k->batch, k->sa));
  DT_TRY_(dt_gemm_layout_(&p->c, ctype, k->N, k->M, k->ldc, k->batch, k->sc));
  if (dt_gemm_set_epilogue_(p->desc, k, bias, aux, 1) != DT_OK) {
    /* this cuBLASLt does not take the epilogue's attributes (an older version): not fusable */
    dt_gemm_no_fusion_(p, k, "cublasLtMatmulDescSetAttribute (epilogue)", CUBLAS_STATUS_NOT_SUPPORTED);
    return DT_OK;
  }
  cublasLtMatmulPreference_t pref = NULL;
  DT_CHECK_CUBLAS(lt_.cublasLtMatmulPreferenceCreate(&pref));
  dt_status st = dt_gemm_pick_algo_(p, k, pref);
  dt_status freed = dt_gemm_preference_destroy_(pref);
  return st != DT_OK ? st : freed;
}

/* The cached plan for key k, built on first use (the oldest plan makes room). */
static dt_status dt_gemm_find_plan_(const dt_gemm_key_* k, const void* bias, const void* aux, dt_gemm_plan_** out) {
  for (int i = 0; i < DT_GEMM_PLANS; i++) {
    if (dt_plans_[i].used && memcmp(&dt_plans_[i].key, k, sizeof *k) == 0) {
      *out = &dt_plans_[i];
      return DT_OK;
    }
  }
  dt_gemm_plan_* p = &dt_plans_[dt_plan_next_];
  dt_plan_next_ = (dt_plan_next_ + 1) % DT_GEMM_PLANS;
  DT_TRY_(dt_gemm_plan_release_(p));
  dt_status st = dt_gemm_plan_build_(p, k, bias, aux);
  if (st != DT_OK) {
    dt_gemm_plan_release_(p); /* the build's error is the one to report */
    return st;
  }
  p->key = *k;
  p->used = 1;
  *out = p;
  return DT_OK;
}

/* Largest power of two (at most 256) dividing the address and every batch offset. */
static uint32_t dt_alignment_(const void* ptr, int64_t batch, int64_t stride, size_t esize) {
  uintptr_t bits = (uintptr_t)ptr | (batch > 1 ? (uintptr_t)(stride * (int64_t)esize) : 0) | 256;
  return (uint32_t)(bits & (~bits + 1));
}

/* cublasLtMatmul with a prepared plan: C = alpha * op(A) op(B) + beta * C (C is also cuBLASLt's D). */
static cublasStatus_t dt_gemm_matmul_(const dt_gemm_plan_* p, float alpha, const void* A, const void* B, float beta,
                                      void* C, cudaStream_t s) {
  dt_cuda_count_work_(1);
  cublasStatus_t st;
  DT_CHECK_CUBLAS_ANSWER(lt_.cublasLtMatmul(dt_lt_handle_, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, C, p->c,
                                            &p->algo, dt_lt_workspace_, DT_GEMM_WORKSPACE_BYTES, s),
                         &st);
  return st;
}

static dt_status dt_gemm_run_(const dt_gemm_plan_* p, float alpha, const void* A, const void* B, float beta, void* C,
                              cudaStream_t s) {
  DT_CHECK_CUBLAS(dt_gemm_matmul_(p, alpha, A, B, beta, C, s));
  return DT_OK;
}

/* ---- the trivial products: C = beta * C ------------------------------------------------- */

__global__ void dt_gemm_scale_c_k_(void* c, int32_t dtype, int64_t M, int64_t N, int64_t ldc, int64_t batch,
                                   int64_t stride_c, float beta) {
  int64_t total = batch * M * N;
  DT_GRID_STRIDE(e, total) {
    int64_t bi = e / (M * N), i = e / N % M, j = e % N;
    int64_t at = bi * stride_c + i * ldc + j;
    if (dtype == DT_F32) {
      float* p = (float*)c + at;
      *p = beta == 0.0f ? 0.0f : beta * *p;
    } else {
      uint16_t* p = (uint16_t*)c + at;
      float old = dtype == DT_BF16 ? dt_bf16_to_f32(*p) : dt_f16_to_f32(*p);
      float v = beta == 0.0f ? 0.0f : beta * old;
      *p = dtype == DT_BF16 ? dt_f32_to_bf16(v) : dt_f32_to_f16(v);
    }
  }
}

DT_EXPORT dt_status dt_gemm(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                            int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
                            void* stream) {
  DT_TRY_(dt_check_gemm(dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, batch, stride_a, stride_b,
                        stride_c));
  if (M == 0 || N == 0 || batch == 0) return DT_OK;
  /* K == 0 or alpha == 0: the product vanishes, A and B are not read (as BLAS) */
  int trivial = K == 0 || alpha == 0.0f;
  DT_REQUIRE_(batch <= INT32_MAX, "dt_gemm: batch = %lld exceeds cuBLASLt's limit of 2^31 - 1", (long long)batch);
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  if (trivial) {
    DT_LAUNCH(dt_gemm_scale_c_k_, dt_grid_for_(batch * M * N, DT_BLOCK), DT_BLOCK, 0, s,
              C, dtype, M, N, ldc, batch, stride_c, beta);
    DT_CHECK_LAUNCH(s, "dt_gemm (C = beta * C)");
    return DT_OK;
  }
  size_t esize = dt_dtype_size(dtype);
  dt_gemm_key_ key;
  memset(&key, 0, sizeof key); /* the key is compared bytewise: no stray padding */
  key.dtype = dtype;
  key.c_dtype = dtype;
  key.ta = trans_a;
  key.tb = trans_b;
  key.tf32 = dtype == DT_F32 && dt_gemm_tf32_;
  key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = batch;
  key.sa = batch > 1 ? stride_a : 0, key.sb = batch > 1 ? stride_b : 0, key.sc = batch > 1 ? stride_c : 0;
  key.align_a = dt_alignment_(A, batch, stride_a, esize);
  key.align_b = dt_alignment_(B, batch, stride_b, esize);
  key.align_c = dt_alignment_(C, batch, stride_c, esize);
  pthread_mutex_lock(&dt_lt_mu_);
  dt_status st = dt_lt_prepare_locked_();
  dt_gemm_plan_* plan = NULL;
  if (st == DT_OK) st = dt_gemm_find_plan_(&key, NULL, NULL, &plan);
  if (st == DT_OK) st = dt_gemm_run_(plan, alpha, A, B, beta, C, s);
  pthread_mutex_unlock(&dt_lt_mu_);
  return st;
}

/* ---- dt_gemm_ex: C of another dtype, and epilogues ----------------------------------------- */

/* dt_gemm_ex's own epilogue kernels (gemm_epilogue.cu), for the products
 * cuBLASLt cannot fuse one into, and for the trivial products. */
dt_status dt_gemm_epilogue_run_(const float* acc, int64_t lacc, void* C, int32_t c_dtype, int64_t M, int64_t N,
                                int64_t ldc, float beta, int32_t epilogue, const void* bias, void* aux, int64_t ldaux,
                                cudaStream_t s);
dt_status dt_gemm_bgrad_run_(void* bias, int32_t c_dtype, const void* A, int32_t ab_dtype, int32_t trans_a,
                             int64_t M, int64_t K, int64_t lda, cudaStream_t s);

/* One product through cuBLASLt (epilogue fused when *fused comes back 1;
 * with 0 nothing ran: cuBLASLt has no algorithm for that epilogue). */
static dt_status dt_gemm_ex_lt_(int32_t ab_dtype, int32_t c_dtype, int32_t trans_a, int32_t trans_b, int64_t M,
                                int64_t N, int64_t K, float alpha, const void* A, int64_t lda, const void* B,
                                int64_t ldb, float beta, void* C, int64_t ldc, int32_t epilogue, void* bias, void* aux,
                                int64_t ldaux, cudaStream_t s, int* fused) {
  dt_gemm_key_ key;
  memset(&key, 0, sizeof key);
  key.dtype = ab_dtype;
  key.c_dtype = c_dtype;
  key.ta = trans_a;
  key.tb = trans_b;
  key.tf32 = ab_dtype == DT_F32 && dt_gemm_tf32_;
  key.epilogue = epilogue;
  key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = 1;
  key.ldaux = epilogue == DT_EPI_GELU_BIAS ? ldaux : 0;
  key.align_a = dt_alignment_(A, 1, 0, dt_dtype_size(ab_dtype));
  key.align_b = dt_alignment_(B, 1, 0, dt_dtype_size(ab_dtype));
  key.align_c = dt_alignment_(C, 1, 0, dt_dtype_size(c_dtype));
  key.align_bias = epilogue != DT_EPI_NONE ? dt_alignment_(bias, 1, 0, dt_dtype_size(c_dtype)) : 0;
  key.align_aux = epilogue == DT_EPI_GELU_BIAS ? dt_alignment_(aux, 1, 0, dt_dtype_size(c_dtype)) : 0;
  pthread_mutex_lock(&dt_lt_mu_);
  dt_status st = dt_lt_prepare_locked_();
  dt_gemm_plan_* plan = NULL;
  if (st == DT_OK) st = dt_gemm_find_plan_(&key, bias, aux, &plan);
  *fused = st == DT_OK && plan->supported;
  if (*fused) st = dt_gemm_set_epilogue_(plan->desc, &key, bias, aux, 0);
  if (*fused && st == DT_OK) {
    cublasStatus_t ms = dt_gemm_matmul_(plan, alpha, A, B, beta, C, s);
    if (epilogue != DT_EPI_NONE && (ms == CUBLAS_STATUS_NOT_SUPPORTED || ms == CUBLAS_STATUS_INVALID_VALUE ||
                                    ms == CUBLAS_STATUS_ARCH_MISMATCH)) {
      /* refused before anything ran (the heuristic's algorithm does not take it after all) */
      dt_gemm_no_fusion_(plan, &key, "cublasLtMatmul", ms);
      *fused = 0;
    } else if (ms != CUBLAS_STATUS_SUCCESS) {
      st = dt_cublas_fail_(ms, "cublasLtMatmul", __FILE__, __LINE__);
    }
  }
  pthread_mutex_unlock(&dt_lt_mu_);
  return st;
}

DT_EXPORT dt_status dt_gemm_ex(int32_t ab_dtype, int32_t c_dtype, int32_t trans_a, int32_t trans_b, int64_t M,
                               int64_t N, int64_t K, float alpha, const void* A, int64_t lda, const void* B,
                               int64_t ldb, float beta, void* C, int64_t ldc, int32_t epilogue, void* bias, void* aux,
                               int64_t ldaux, void* stream) {
  DT_TRY_(dt_check_gemm_ex(ab_dtype, c_dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue, bias,
                           aux, ldaux));
  if (M == 0 || (N == 0 && epilogue != DT_EPI_BGRAD)) return DT_OK;
  if (ab_dtype == c_dtype && epilogue == DT_EPI_NONE)
    return dt_gemm(ab_dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, 0, 0, 0, stream);
  cudaStream_t s;
  DT_TRY_(dt_cuda_stream_(stream, &s));
  int bgrad = epilogue == DT_EPI_BGRAD;
  if (N == 0) return dt_gemm_bgrad_run_(bias, c_dtype, A, ab_dtype, trans_a, M, K, lda, s); /* no C, row sums only */
  if (K == 0 || alpha == 0.0f) { /* no product: C = beta C, then the epilogue */
    DT_TRY_(dt_gemm_epilogue_run_(NULL, 0, C, c_dtype, M, N, ldc, beta, bgrad ? DT_EPI_NONE : epilogue, bias, aux,
                                  ldaux, s));
    return bgrad ? dt_gemm_bgrad_run_(bias, c_dtype, A, ab_dtype, trans_a, M, K, lda, s) : DT_OK;
  }
  int fused = 0;
  DT_TRY_(dt_gemm_ex_lt_(ab_dtype, c_dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue,
                         bias, aux, ldaux, s, &fused));
  if (fused) return DT_OK;
  /* cuBLASLt cannot fuse this epilogue here: a plain product, then our kernels */
  if (bgrad || c_dtype == DT_F32) {
    DT_TRY_(dt_gemm_ex_lt_(ab_dtype, c_dtype, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                           DT_EPI_NONE, NULL, NULL, 0, s, &fused));
    if (bgrad) return dt_gemm_bgrad_run_(bias, c_dtype, A, ab_dtype, trans_a, M, K, lda, s);
    return dt_gemm_epilogue_run_((const float*)C, ldc, C, c_dtype, M, N, ldc, 0.0f, epilogue, bias, aux, ldaux, s);
  }
  /* a low-precision C: the product in f32 scratch, rounded once by the epilogue kernel */
  float* acc = NULL;
  DT_TRY_(dt_scratch_alloc_((void**)&acc, (size_t)(M * N) * sizeof(float), s, "dt_gemm_ex"));
  dt_status st = dt_gemm_ex_lt_(ab_dtype, DT_F32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, acc, N,
                                DT_EPI_NONE, NULL, NULL, 0, s, &fused);
  if (st == DT_OK) st = dt_gemm_epilogue_run_(acc, N, C, c_dtype, M, N, ldc, beta, epilogue, bias, aux, ldaux, s);
  dt_status freed = dt_scratch_free_(acc, s);
  return st != DT_OK ? st : freed;
}
