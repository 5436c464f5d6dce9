/* dt_common.h — what every kernel file shares: the status codes, dtype codes,
 * the DT_HD qualifier that makes one arithmetic body compile for both the CPU
 * (static inline C) and the GPU (__host__ __device__ CUDA), and bf16/f16
 * conversions written once for both. */
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#ifdef __CUDACC__
#define DT_HD __host__ __device__ __forceinline__
#else
#define DT_HD static inline
#endif

#ifdef __cplusplus
#define DT_EXTERN_C extern "C"
#else
#define DT_EXTERN_C
#endif
#define DT_EXPORT DT_EXTERN_C __attribute__((visibility("default")))

/* Bump when any exported signature or semantics change; ffi/ checks it. */
#define DT_ABI_VERSION 3

typedef int32_t dt_status;
enum {
  DT_OK = 0,
  DT_ERR_ARG = 1,      /* bad argument: size, dtype, null pointer */
  DT_ERR_ALLOC = 2,    /* out of memory */
  DT_ERR_CUDA = 3,     /* CUDA runtime error (text has cudaGetErrorString) */
  DT_ERR_CUBLAS = 4,   /* cuBLAS(Lt) error */
  DT_ERR_NCCL = 5,     /* NCCL error */
  DT_ERR_INTERNAL = 6, /* a bug: an invariant did not hold */
  DT_ERR_TIMEOUT = 7,  /* a wait ran past its deadline */
  DT_ERR_SYS = 8       /* an operating-system call failed (text has strerror) */
};

enum {
  DT_F32 = 0,
  DT_BF16 = 1,
  DT_F16 = 2,
  DT_I32 = 3,
  DT_I64 = 4,
  DT_U8 = 5
};

/* Which call found an error in its data on the device (an index outside its
 * range, a value an integer cast cannot hold); the CUDA library keeps the
 * first in a dt_data_error_t until dt_deferred_error reports it. */
enum {
  DT_DATA_OK = 0,
  DT_DATA_EMBEDDING_FWD = 1,
  DT_DATA_EMBEDDING_BWD = 2,
  DT_DATA_GATHER_ROWS = 3,
  DT_DATA_CROSSENTROPY_FWD = 4,
  DT_DATA_CROSSENTROPY_BWD = 5,
  DT_DATA_CAST = 6,
  DT_DATA_GATHER_DIM = 7,
  DT_DATA_INDEX_SELECT = 8,
  DT_DATA_SCATTER_ADD_DIM = 9,
  DT_DATA_INDEX_ADD = 10,
  DT_DATA_MAXPOOL2D_BWD = 11,
  DT_DATA_BN_SQDEV = 12,     /* batch norm's element count (fvalue) below 1 */
  DT_DATA_BN_FINALIZE = 13,
  DT_DATA_BN_BWD_APPLY = 14
};

/* The first data error found on the device: enough to word it as the CPU library does. */
typedef struct {
  int32_t op;          /* DT_DATA_*; DT_DATA_OK: none */
  int32_t value_dtype; /* dtype of the bad value (a cast's input dtype) */
  int64_t position;    /* index of the bad element (row, for cross-entropy) */
  int64_t ivalue;      /* the bad value, when value_dtype is an integer type */
  double fvalue;       /* the bad value, when value_dtype is a float type */
  int64_t limit;       /* indices: the exclusive bound (-1: only negatives are refused); casts: the output dtype */
  int64_t ignore_index; /* cross-entropy's ignore_index */
} dt_data_error_t;

/* Binary elementwise op codes shared by dt_binary and the CUDA twin. */
enum { DT_OP_ADD = 0, DT_OP_SUB = 1, DT_OP_MUL = 2, DT_OP_DIV = 3 };

DT_HD size_t dt_dtype_size(int32_t dtype) {
  switch (dtype) {
    case DT_F32: return 4;
    case DT_BF16: return 2;
    case DT_F16: return 2;
    case DT_I32: return 4;
    case DT_I64: return 8;
    case DT_U8: return 1;
    default: return 0;
  }
}

/* bf16 <-> f32: round to nearest even, NaN kept quiet (as torch's c10::BFloat16). */
DT_HD float dt_bf16_to_f32(uint16_t h) {
  uint32_t u = ((uint32_t)h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
DT_HD uint16_t dt_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding_bias) >> 16);
}

/* f16 <-> f32, IEEE binary16, round to nearest even (software; no F16C needed). */
DT_HD float dt_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do { e++; mant <<= 1; } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
DT_HD uint16_t dt_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (absu < 0x38800000u) { /* subnormal or zero in f16 */
    if (absu < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absu >> 23;
    uint32_t m = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    /* round to nearest even on the bits shifted out */
    uint32_t res = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (res & 1u))) res++;
    return (uint16_t)(sign | res);
  }
  uint32_t res = ((absu >> 13) - (112u << 10));
  uint32_t rem = absu & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) res++;
  return (uint16_t)(sign | res);
}

/* Counter-based random bits for dropout: the same (seed, index) gives the
 * same bits on the CPU and the GPU, whatever the thread layout. (splitmix64) */
DT_HD uint32_t dt_hash_u32(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  return (uint32_t)(z >> 32);
}
