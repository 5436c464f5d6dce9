/* library_types.h (emulated) — the data-type codes of CUDA's library_types.h
 * that cublaslt_api.h uses, with CUDA's values. */
#pragma once

typedef enum cudaDataType_t {
  CUDA_R_16F = 2,
  CUDA_R_32F = 0,
  CUDA_R_16BF = 14
} cudaDataType_t;
