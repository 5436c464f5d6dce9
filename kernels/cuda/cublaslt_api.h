/* cublaslt_api.h — the few cuBLASLt types, enum values and functions that
 * dt_gemm uses, declared here because the library is opened with dlopen at
 * run time (no cuBLAS headers or link-time dependency). Values are those of
 * the public cublasLt.h / cublas_api.h of CUDA 11.4 and later, which have not
 * changed since. */
#pragma once
#include <library_types.h> /* cudaDataType_t: CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF */
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

typedef int cublasStatus_t;
enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
};

/* cublasComputeType_t */
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
/* cublasOperation_t */
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
/* cublasLtMatmulDescAttributes_t */
enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
};
/* cublasLtEpilogue_t (the ones dt_gemm_ex uses) */
enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_BGRADB = 512
};
/* cublasLtMatrixLayoutAttribute_t */
enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 };
/* cublasLtMatmulPreferenceAttributes_t */
enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
};

typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct dt_cublaslt_desc_* cublasLtMatmulDesc_t;         /* cublasLtMatmulDescOpaque_t* */
typedef struct dt_cublaslt_layout_* cublasLtMatrixLayout_t;     /* cublasLtMatrixLayoutOpaque_t* */
typedef struct dt_cublaslt_preference_* cublasLtMatmulPreference_t; /* cublasLtMatmulPreferenceOpaque_t* */

typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

/* The functions, as pointers filled by dlsym. Member names are the C names,
 * so every call site reads like the documented API. */
typedef struct {
  cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t* handle);
  cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t* desc, int compute_type, cudaDataType_t scale_type);
  cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t desc);
  cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t desc, int attr, const void* buf, size_t size);
  cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                               uint64_t cols, int64_t ld);
  cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t layout);
  cublasStatus_t (*cublasLtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t layout, int attr, const void* buf,
                                                     size_t size);
  cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t* pref);
  cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t pref);
  cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t pref, int attr, const void* buf,
                                                         size_t size);
  cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                   cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                   cublasLtMatmulPreference_t pref, int requested,
                                                   cublasLtMatmulHeuristicResult_t* results, int* returned);
  cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                   const void* A, cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b,
                                   const void* beta, const void* C, cublasLtMatrixLayout_t c, void* D,
                                   cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream);
  size_t (*cublasLtGetVersion)(void);
  /* optional (cuBLAS 11.4+): NULL when absent */
  const char* (*cublasLtGetStatusString)(cublasStatus_t status);
} dt_cublaslt_api_;
