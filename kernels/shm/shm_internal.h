/* shm_internal.h — the layout of a process group's shared-memory segment (a
 * control area of per-rank records, two data buffers per rank, then each
 * rank's shared region for buffers that peers read directly) and the
 * helpers shared by the files of the shared-memory collective library. Not
 * part of the exported ABI. */
#pragma once
#include "dt_common.h"
#include "dt_error.h"
#include <stdatomic.h>

/* f64 has no code in dt_common.h yet; collectives accept it under this code
 * (the next free one) until dt_common.h gains DT_F64. */
#define DT_SHM_F64 6

#define DT_SHM_MAGIC 0x316d68736e727464ull /* "dtrnshm1" little-endian */
#define DT_SHM_LAYOUT_VERSION 3
#define DT_SHM_MAX_RANKS 256
#define DT_SHM_NAME_MAX 200
#define DT_SHM_DETAIL_MAX 32
#define DT_SHM_TEXT_MAX 384

/* open flags */
#define DT_SHM_FLAG_DETAIL 1 /* also compare barrier names across ranks */

/* Status for "a peer aborted the group or is gone"; dt_common.h has no
 * DT_ERR_ABORTED yet, so the closest existing code. */
#define DT_SHM_ERR_PEER DT_ERR_SYS

/* collective codes, as posted in a rank's call record */
enum { DT_SHM_OP_ALLREDUCE = 1, DT_SHM_OP_BROADCAST, DT_SHM_OP_ALLGATHER, DT_SHM_OP_REDUCE_SCATTER, DT_SHM_OP_BARRIER };
/* An allReduce of buffers in the ranks' shared regions (each rank reads and
 * writes the others' directly): posted under its own code, so a rank whose
 * buffer is shared never meets one whose buffer is not. */
#define DT_SHM_OP_ALLREDUCE_SHARED 6
/* dt_shm_reserve: every rank makes and maps the shared regions (shm_regions.c). */
#define DT_SHM_OP_RESERVE 7
/* reduction codes */
enum { DT_SHM_SUM = 0, DT_SHM_AVG = 1, DT_SHM_MAX = 2, DT_SHM_MIN = 3 };

/* One collective call as a rank announces it before its first wait; the
 * others compare it with their own to catch mismatched programs. */
typedef struct {
  uint64_t seq;  /* 1-based number of the collective on this group */
  int32_t op;    /* DT_SHM_OP_* */
  int32_t dtype; /* DT_* or DT_SHM_F64 */
  int64_t bytes; /* payload this rank contributes */
  int32_t root;  /* broadcast root, else -1 */
  int32_t redop; /* DT_SHM_SUM..MIN, else -1 */
  char detail[DT_SHM_DETAIL_MAX]; /* barrier name (truncated) */
} dt_shm_call_t;

enum { DT_SHM_RANK_ABSENT = 0, DT_SHM_RANK_ATTACHED = 1, DT_SHM_RANK_CLOSED = 2 };

/* What one rank owns in the control area; written only by that rank. */
typedef struct {
  _Atomic uint64_t arrived;  /* the last barrier phase this rank reached */
  _Atomic uint64_t last_seq; /* the collective this rank entered last */
  _Atomic int32_t pid;       /* 0 until the rank attaches */
  _Atomic int32_t state;     /* DT_SHM_RANK_* */
  /* In a DT_SHM_OP_ALLREDUCE_SHARED call: the buffer's offset in this rank's
   * shared region, written before the call's first barrier; peers read it
   * before its second, which this rank passes before it can write it again. */
  int64_t shared_at;
  /* dt_shm_reserve (shm_regions.c): what this rank's step of the current
   * reservation gave, published before the barrier after it. made_*: its own
   * region (under the limit it was given, created, its pages reserved and
   * mapped); mapped_*: the peers' regions. Status codes DT_SHM_RESERVE_*. */
  int64_t reserve_limit;
  int32_t made_status, made_errno;
  int32_t mapped_status, mapped_errno, mapped_peer;
  char pad_[4];
  dt_shm_call_t call[2];          /* by seq parity, so a fast rank never overwrites a record still read */
  char abort_text[DT_SHM_TEXT_MAX]; /* why this rank aborted the group */
} __attribute__((aligned(64))) dt_shm_rank_t;

/* The control area at the start of the segment. */
typedef struct {
  _Atomic uint32_t ready; /* 0 until rank 0 finished initialising, then 1 */
  uint32_t layout_version;
  uint64_t magic;
  int32_t world;
  int32_t creator_pid;
  int64_t chunk_bytes;   /* size of one data buffer */
  int64_t segment_bytes; /* whole segment */
  int64_t data_offset;   /* where the data buffers start */
  int64_t shared_offset; /* where the ranks' shared regions start (after the data buffers) */
  int64_t shared_bytes;  /* bytes of each rank's shared region (0: none) */
  _Atomic uint32_t wake;     /* futex word: bumped on every arrival, attach, close and abort */
  _Atomic uint32_t sleepers; /* ranks inside futex_wait on `wake` */
  _Atomic uint32_t attached; /* ranks that attached so far */
  _Atomic int32_t aborted_by; /* 0, or 1 + the rank that aborted the group */
  char pad1_[48];
  dt_shm_rank_t ranks[]; /* world entries */
} dt_shm_header_t;

/* A rank's private handle on the group (malloc'd, returned to TypeScript). */
typedef struct {
  dt_shm_header_t* hdr;
  char* data; /* hdr + data_offset */
  char* shared; /* hdr + shared_offset: rank 0's shared region, then rank 1's, ... */
  int64_t shared_bytes;
  /* every rank's shared region: in the segment (opened with shared_bytes), or
   * mappings of their own made by dt_shm_reserve (`reserved`) */
  char* regions[DT_SHM_MAX_RANKS];
  int reserved;
  int shared_handed_out; /* dt_shm_shared was called: the mapping outlives close (arrays may point into it) */
  int64_t segment_bytes;
  int64_t chunk_bytes;
  int32_t rank, world, flags;
  int64_t spin_ns;
  uint64_t seq;      /* collectives entered */
  uint64_t phase;    /* barriers passed */
  uint64_t buffers;  /* data chunks used: selects which of the two buffers is next */
  int64_t call_start_ns; /* when the current collective was entered */
  dt_status dead;        /* != 0 after this rank failed or saw an abort: every later call fails */
  char dead_text[DT_SHM_TEXT_MAX];
  char name[DT_SHM_NAME_MAX + 1];
} dt_shm_t;

/* ---- shm_runtime.c ---- */
/* The error machinery is kernels/common/dt_error.h's, as in the kernel libraries. */
#define dt_shm_fail_ dt_fail_
#define dt_shm_error_text_ dt_error_text_
int64_t dt_shm_now_ns_(void);

/* ---- shm_sync.c ---- */
/* Names of codes, for messages. */
const char* dt_shm_op_name_(int32_t op);
const char* dt_shm_redop_name_(int32_t redop);
const char* dt_shm_dtype_name_(int32_t dtype);
/* Bumps the futex word and wakes sleepers (after any store others wait for). */
void dt_shm_wake_all_(dt_shm_header_t* hdr);
/* The ranks a wait still needs: barrier phase `phase` not reached yet, or, for
 * a rendezvous (phase 0), not attached yet. Fills up to `max`, returns how many. */
int dt_shm_missing_(dt_shm_t* g, uint64_t phase, int32_t* ranks, int max);
/* Waits (spin, then futex) until no rank is missing, the deadline passes, the
 * group is aborted, or a missing rank is gone (closed or exited). Returns DT_OK,
 * or a status with the error text written; `what` names the wait in messages. */
dt_status dt_shm_wait_(dt_shm_t* g, uint64_t phase, int64_t deadline_ns, const char* what);
/* Announces this rank's next collective (increments seq). */
void dt_shm_post_call_(dt_shm_t* g, int32_t op, int32_t dtype, int64_t bytes, int32_t root, int32_t redop,
                       const char* detail);
/* One barrier among all ranks; `first` marks a collective's first barrier,
 * after which every rank's posted call is compared with this one's. */
dt_status dt_shm_sync_(dt_shm_t* g, int first, int64_t deadline_ns);
/* Marks the group dead on this rank and, unless another rank did so first,
 * publishes the abort with this rank's error text so peers stop waiting. */
dt_status dt_shm_abort_with_(dt_shm_t* g, dt_status status);
/* Fails at once when the group is already dead here or aborted by a peer. */
dt_status dt_shm_check_alive_(dt_shm_t* g);

/* ---- shm_reduce.c ---- */
/* True when (dtype, redop) is supported by dt_shm_reduce_. */
int dt_shm_reduce_supported_(int32_t dtype, int32_t redop);
/* out1[i] (and out2[i] when out2 != NULL) = src[0][i] op src[1][i] op ... op
 * src[w-1][i], combined in rank order; avg divides the sum by w. */
void dt_shm_reduce_(int32_t dtype, int32_t redop, void* out1, void* out2, const void* const* src, int w, int64_t n);
size_t dt_shm_dtype_size_(int32_t dtype);

/* ---- shm_stream.c ---- */
/* Messages of at least this many bytes are written into the caller's buffer
 * with streaming stores: they would not stay in cache anyway, and a streaming
 * store does not read the line it overwrites. */
#ifndef DT_SHM_STREAM_MIN_BYTES
#define DT_SHM_STREAM_MIN_BYTES (4LL << 20)
#endif
/* An allReduce of at most this many bytes times the world size (and of one
 * buffer) goes in one barrier, each rank reducing the whole message. */
#ifndef DT_SHM_ONESHOT_MAX_BYTES
#define DT_SHM_ONESHOT_MAX_BYTES (1LL << 20)
#endif
/* memcpy, with streaming stores when `stream`. */
void dt_shm_copy_(void* dst, const void* src, int64_t bytes, int stream);
/* out1[i] (and out2[i] unless NULL) = src[0][i] + ... + src[w-1][i] in rank
 * order, divided by w when `avg`; streaming stores into out1 when `stream`. */
void dt_shm_add_f32_(float* out1, float* out2, const float* const* src, int w, int64_t n, int avg, int stream);
/* Orders streaming stores before what follows (call before returning). */
void dt_shm_stream_fence_(void);

/* rank r's shared region */
static inline char* dt_shm_shared_region_(dt_shm_t* g, int32_t r) { return g->regions[r]; }

/* a data buffer: rank r's buffer b (0 or 1) */
static inline char* dt_shm_slot_(dt_shm_t* g, int32_t r, uint64_t b) {
  return g->data + ((int64_t)r * 2 + (int64_t)(b & 1)) * g->chunk_bytes;
}
