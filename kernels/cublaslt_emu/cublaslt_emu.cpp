/* cublaslt_emu.cpp — a cuBLASLt stand-in for the emulated device
 * (libdtrain_cublaslt_emu.so, built from this folder): the functions dt_gemm opens with dlopen, with
 * cuBLASLt's signatures, status codes and column-major conventions. The
 * descriptors that kernels/cuda/gemm.cu builds are checked as cuBLASLt would
 * (types, transposes, leading dimensions, batch strides, alignments, C and
 * D in place, epilogues with their bias and aux attributes) and a matmul is
 * queued on its stream, where it runs the CPU library's dt_gemm or dt_gemm_ex
 * (libdtrain_cpu.so beside this file) on the row-major problem the
 * column-major one describes. So every line of gemm.cu's descriptor building
 * runs, and a wrong mapping gives a wrong product. Epilogues: BIAS,
 * GELU_AUX_BIAS and BGRADB with bias and aux of D's type, as cuBLASLt takes
 * them; like cuBLASLt, GELU_AUX_BIAS needs an aux leading dimension that is a
 * multiple of 8 (otherwise no algorithm), which makes gemm.cu's fallback run
 * in tests too. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include "cublaslt_api.h"

#define DT_LT_API extern "C" __attribute__((visibility("default")))

struct cublasLtContext {
  uint32_t magic;
};
struct dt_cublaslt_desc_ {
  uint32_t magic;
  int compute;
  cudaDataType_t scale;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int32_t bias_type = -1; /* -1: D's type */
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t aux_type = -1;
};
struct dt_cublaslt_layout_ {
  uint32_t magic;
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct dt_cublaslt_preference_ {
  uint32_t magic;
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256}; /* A, B, C, D */
};

namespace {

constexpr uint32_t kHandle = 0x4c544831, kDesc = 0x4c544431, kLayout = 0x4c544c31, kPref = 0x4c545031;
constexpr uint64_t kAlgo = 0x756d652d74627563ull; /* "cubt-emu" */

typedef int32_t (*dt_gemm_fn)(int32_t, int32_t, int32_t, int64_t, int64_t, int64_t, float, const void*, int64_t,
                              const void*, int64_t, float, void*, int64_t, int64_t, int64_t, int64_t, int64_t, void*);
typedef int32_t (*dt_gemm_ex_fn)(int32_t, int32_t, int32_t, int32_t, int64_t, int64_t, int64_t, float, const void*,
                                 int64_t, const void*, int64_t, float, void*, int64_t, int32_t, void*, void*, int64_t,
                                 void*);

dt_gemm_fn cpu_gemm = nullptr;
dt_gemm_ex_fn cpu_gemm_ex = nullptr;
/* set when a queued product failed; every later matmul then fails */
int failed_status = 0;

/* The CPU library's dt_gemm, from libdtrain_cpu.so in this file's folder
 * (looked up in that library only, never the emulated one's dt_gemm). */
cublasStatus_t load_cpu_gemm() {
  if (cpu_gemm) return CUBLAS_STATUS_SUCCESS;
  Dl_info info;
  if (!dladdr((void*)&load_cpu_gemm, &info) || !info.dli_fname) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::string dir(info.dli_fname);
  size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : dir.substr(0, slash);
  void* h = dlopen((dir + "/libdtrain_cpu.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  cpu_gemm = (dt_gemm_fn)dlsym(h, "dt_gemm");
  cpu_gemm_ex = (dt_gemm_ex_fn)dlsym(h, "dt_gemm_ex");
  return cpu_gemm && cpu_gemm_ex ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

size_t type_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

/* The dtype code of kernels/common/dt_common.h. */
int32_t dt_dtype(cudaDataType_t t) { return t == CUDA_R_32F ? 0 : t == CUDA_R_16BF ? 1 : 2; }

bool is_device(const void* p) {
  cudaPointerAttributes a;
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
}

/* One matmul, as the stream runs it. */
struct Job {
  int32_t dtype, c_dtype, ta, tb;
  int32_t epilogue; /* DT_EPI_* of dt_gemm_ex: 0 none, 1 bias, 2 bias + gelu, 3 bias gradient */
  int64_t M, N, K, lda, ldb, ldc, batch, sa, sb, sc, ldaux;
  float alpha, beta;
  const void *A, *B;
  void *C, *bias, *aux;
};

/* Every argument was checked before queueing, so only host memory can run
 * out; then the output is left as it is and the next matmul reports it. */
void run_job(void* p) {
  Job* j = (Job*)p;
  int32_t st = j->batch == 1 && (j->c_dtype != j->dtype || j->epilogue != 0)
                   ? cpu_gemm_ex(j->dtype, j->c_dtype, j->ta, j->tb, j->M, j->N, j->K, j->alpha, j->A, j->lda, j->B,
                                 j->ldb, j->beta, j->C, j->ldc, j->epilogue, j->bias, j->aux, j->ldaux, nullptr)
                   : cpu_gemm(j->dtype, j->ta, j->tb, j->M, j->N, j->K, j->alpha, j->A, j->lda, j->B, j->ldb, j->beta,
                              j->C, j->ldc, j->batch, j->sa, j->sb, j->sc, nullptr);
  if (st != 0) __atomic_store_n(&failed_status, st, __ATOMIC_RELAXED);
  delete j;
}

/* The checks both AlgoGetHeuristic and Matmul make; fills the row-major job
 * (all but pointers and scalars). cuBLASLt's D = op(A) op(B) is column-major
 * m x n; read row-major it is D^T = op(B)^T op(A)^T, so the CPU's A is
 * cuBLASLt's B and the CPU's B cuBLASLt's A, each transposed exactly when
 * cuBLASLt's op is T (a column-major matrix read row-major is its transpose). */
cublasStatus_t plan(const dt_cublaslt_desc_* d, const dt_cublaslt_layout_* a, const dt_cublaslt_layout_* b,
                    const dt_cublaslt_layout_* c, const dt_cublaslt_layout_* dd, Job* j) {
  if (!d || d->magic != kDesc || !a || a->magic != kLayout || !b || b->magic != kLayout || !c || c->magic != kLayout ||
      !dd || dd->magic != kLayout)
    return CUBLAS_STATUS_INVALID_VALUE;
  /* A and B of one type; C = D of that type or f32 (the mixed-precision row of cuBLASLt's table) */
  if (a->type != b->type || c->type != dd->type || !type_size(a->type) || !type_size(c->type) ||
      (c->type != a->type && c->type != CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (c->rows != dd->rows || c->cols != dd->cols || c->ld != dd->ld || c->batch != dd->batch ||
      c->stride != dd->stride)
    return CUBLAS_STATUS_NOT_SUPPORTED; /* the stand-in computes D in place of C only */
  uint64_t m = c->rows, n = c->cols;
  uint64_t am = d->transa == CUBLAS_OP_N ? a->rows : a->cols, k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
  uint64_t bk = d->transb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
  if (am != m || bk != k || bn != n) return CUBLAS_STATUS_INVALID_VALUE;
  if (a->batch != c->batch || b->batch != c->batch) return CUBLAS_STATUS_INVALID_VALUE;
  j->dtype = dt_dtype(a->type);
  j->c_dtype = dt_dtype(c->type);
  j->epilogue = 0;
  j->ldaux = 0;
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    /* bias (or its gradient) and aux in D's type, one matrix: what dt_gemm_ex implements */
    int32_t dtype = (int32_t)dd->type;
    if (c->batch != 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->bias_type != -1 && d->bias_type != dtype) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
      if (d->aux_type != -1 && d->aux_type != dtype) return CUBLAS_STATUS_NOT_SUPPORTED;
      /* cuBLASLt: the GELU input's leading dimension is divisible by 8 and at least D's rows */
      if (d->aux_ld < (int64_t)m || d->aux_ld % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    j->epilogue = d->epilogue == CUBLASLT_EPILOGUE_BIAS ? 1 : d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? 2 : 3;
    j->ldaux = d->aux_ld;
  }
  j->M = (int64_t)n, j->N = (int64_t)m, j->K = (int64_t)k;
  j->ta = d->transb == CUBLAS_OP_T, j->lda = b->ld, j->sa = b->stride;
  j->tb = d->transa == CUBLAS_OP_T, j->ldb = a->ld, j->sb = a->stride;
  j->ldc = c->ld, j->sc = c->stride, j->batch = c->batch;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t set_value(T* field, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

DT_LT_API size_t cublasLtGetVersion(void) { return 130000; }

DT_LT_API const char* cublasLtGetStatusString(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized (emulated: libdtrain_cpu.so not found)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "unknown error";
  }
}

DT_LT_API cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t st = load_cpu_gemm();
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  *handle = new cublasLtContext{kHandle};
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, int compute, cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  if ((compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) || scale != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new dt_cublaslt_desc_{kDesc, compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  if (!desc || desc->magic != kDesc) return CUBLAS_STATUS_INVALID_VALUE;
  desc->magic = 0;
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, int attr, const void* buf,
                                                        size_t size) {
  if (!desc || desc->magic != kDesc) return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t st;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: st = set_value(&desc->transa, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: st = set_value(&desc->transb, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      st = set_value(&desc->epilogue, buf, size);
      uint32_t e = desc->epilogue;
      if (st == CUBLAS_STATUS_SUCCESS && e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS &&
          e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && e != CUBLASLT_EPILOGUE_BGRADB)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the stand-in implements what dt_gemm_ex uses */
      return st;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_value(&desc->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_value(&desc->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_value(&desc->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_value(&desc->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set_value(&desc->aux_type, buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (st == CUBLAS_STATUS_SUCCESS && ((desc->transa != CUBLAS_OP_N && desc->transa != CUBLAS_OP_T) ||
                                      (desc->transb != CUBLAS_OP_N && desc->transb != CUBLAS_OP_T)))
    return CUBLAS_STATUS_INVALID_VALUE;
  return st;
}

DT_LT_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                                    uint64_t rows, uint64_t cols, int64_t ld) {
  if (!layout || !type_size(type)) return CUBLAS_STATUS_INVALID_VALUE;
  if (ld < (int64_t)(rows ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE; /* column-major: ld >= rows */
  *layout = new dt_cublaslt_layout_{kLayout, type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  if (!layout || layout->magic != kLayout) return CUBLAS_STATUS_INVALID_VALUE;
  layout->magic = 0;
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, int attr, const void* buf,
                                                          size_t size) {
  if (!layout || layout->magic != kLayout) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      cublasStatus_t st = set_value(&layout->batch, buf, size);
      return st == CUBLAS_STATUS_SUCCESS && layout->batch < 1 ? CUBLAS_STATUS_INVALID_VALUE : st;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set_value(&layout->stride, buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

DT_LT_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new dt_cublaslt_preference_{kPref};
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!pref || pref->magic != kPref) return CUBLAS_STATUS_INVALID_VALUE;
  pref->magic = 0;
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

DT_LT_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, int attr,
                                                              const void* buf, size_t size) {
  if (!pref || pref->magic != kPref) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_value(&pref->workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_value(&pref->align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_value(&pref->align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_value(&pref->align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_value(&pref->align[3], buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

/* One algorithm for any valid problem; it needs no workspace. */
/* DTRAIN_CUBLASLT_EMU_EPILOGUE: how this stand-in refuses every fused epilogue, to exercise the
 * ways a real cuBLASLt says it has no algorithm for one (tests of dt_gemm_ex's fallback):
 * "not-supported" (the heuristic answers CUBLAS_STATUS_NOT_SUPPORTED), "invalid-value" (it answers
 * CUBLAS_STATUS_INVALID_VALUE), "no-algorithm" (success with zero results), "matmul-refuses" (the
 * heuristic offers one, cublasLtMatmul then answers CUBLAS_STATUS_NOT_SUPPORTED). Unset: fused. */
static const char* refused_epilogue(cublasLtMatmulDesc_t desc) {
  const char* how = getenv("DTRAIN_CUBLASLT_EMU_EPILOGUE");
  if (!how || !*how || !desc || desc->magic != kDesc || desc->epilogue == CUBLASLT_EPILOGUE_DEFAULT) return nullptr;
  return how;
}

DT_LT_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                        cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                        cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                        cublasLtMatmulPreference_t pref, int requested,
                                                        cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (!handle || handle->magic != kHandle || !pref || pref->magic != kPref || requested < 1 || !results || !returned)
    return CUBLAS_STATUS_INVALID_VALUE;
  Job j;
  cublasStatus_t st = plan(desc, a, b, c, d, &j);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (const char* how = refused_epilogue(desc)) {
    if (!strcmp(how, "not-supported")) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!strcmp(how, "invalid-value")) return CUBLAS_STATUS_INVALID_VALUE;
    if (!strcmp(how, "no-algorithm")) {
      *returned = 0;
      return CUBLAS_STATUS_SUCCESS;
    }
  }
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = kAlgo;
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* Checks everything a GPU would need, then queues the product on `stream`. */
DT_LT_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                        const void* A, cublasLtMatrixLayout_t a, const void* B,
                                        cublasLtMatrixLayout_t b, const void* beta, const void* C,
                                        cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                                        const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream) {
  (void)workspace;
  (void)workspace_bytes;
  if (!handle || handle->magic != kHandle || !alpha || !beta || !algo || algo->data[0] != kAlgo)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (__atomic_load_n(&failed_status, __ATOMIC_RELAXED)) return CUBLAS_STATUS_EXECUTION_FAILED;
  Job j;
  cublasStatus_t st = plan(desc, a, b, c, d, &j);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (C != D) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (const char* how = refused_epilogue(desc)) {
    if (!strcmp(how, "matmul-refuses")) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  size_t esize = type_size(a->type);
  /* cuBLASLt reads and writes these from the GPU: they must be device memory */
  if (!is_device(A) || !is_device(B) || !is_device(D)) return CUBLAS_STATUS_INVALID_VALUE;
  if ((uintptr_t)A % esize || (uintptr_t)B % esize || (uintptr_t)D % type_size(d->type))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (j.epilogue != 0 && !is_device(desc->bias)) return CUBLAS_STATUS_INVALID_VALUE;
  if (j.epilogue == 2 && !is_device(desc->aux)) return CUBLAS_STATUS_INVALID_VALUE;
  j.bias = desc->bias;
  j.aux = desc->aux;
  memcpy(&j.alpha, alpha, 4); /* host pointer mode: read now */
  memcpy(&j.beta, beta, 4);
  j.A = B; /* the CPU's A is cuBLASLt's B (see plan) */
  j.B = A;
  j.C = D;
  Job* queued = new Job(j);
  if (cudaLaunchHostFunc(stream, run_job, queued) != cudaSuccess) {
    delete queued;
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
