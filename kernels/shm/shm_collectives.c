/* shm_collectives.c — the exported collectives (allReduce, broadcast,
 * allGather, reduceScatter, barrier) over a process group's segment.
 *
 * Messages go through each rank's two data buffers in chunks (alternating
 * buffers, so writing chunk k+1 never waits for readers of chunk k); every
 * chunk ends in at least one barrier, and a collective's first barrier is
 * where the ranks' posted calls are compared.
 *
 * allReduce is reduce-scatter + all-gather inside each chunk: rank r reduces
 * share r of the chunk over all ranks (in rank order) and the others copy it.
 * A small message instead goes whole through one buffer and one barrier, each
 * rank reducing all of it in the same rank order (the same bits).
 *
 * Why two buffers suffice: buffer k+2 reuses buffer k's memory. A rank fills
 * its part of buffer k+2 only after passing barrier k+1, which every rank
 * reaches only after it has read what it needs of buffer k. The exception,
 * allReduce copying out the reduced shares of chunk k after barrier k+1, reads
 * only places that filling never writes (see dt_shm_layout_t). The buffer
 * counter runs on across calls, so this also holds between collectives. */
#include "shm_internal.h"
#include <stdint.h>

/* Posts the call, then checks that the group is usable and the arguments are
 * sane; a bad argument aborts the group so peers do not wait for this rank. */
static dt_status dt_shm_begin_(dt_shm_t* g, const char* fn, int32_t op, int32_t dtype, int64_t count, int32_t root,
                               int32_t redop, const char* detail, int64_t timeout_ms, int64_t* deadline) {
  if (!g) return dt_shm_fail_(DT_ERR_ARG, "%s: process-group handle is NULL", fn);
  size_t es = dt_shm_dtype_size_(dtype);
  int valid_count = es && count >= 0 && count <= INT64_MAX / (int64_t)es / g->world;
  dt_shm_post_call_(g, op, dtype, valid_count ? count * (int64_t)es : -1, root, redop, detail);
  dt_status st = dt_shm_check_alive_(g);
  if (st) return st;
  if (es == 0) {
    dt_shm_fail_(DT_ERR_ARG, "%s: unknown dtype code %d", fn, dtype);
  } else if (!valid_count) {
    dt_shm_fail_(DT_ERR_ARG, "%s: element count %lld is negative or too large", fn, (long long)count);
  } else if (redop >= 0 && !dt_shm_reduce_supported_(dtype, redop)) {
    dt_shm_fail_(DT_ERR_ARG, "%s: reduce op %s is not supported for %s (avg needs a floating dtype)", fn,
                 dt_shm_redop_name_(redop), dt_shm_dtype_name_(dtype));
  } else if (op == DT_SHM_OP_BROADCAST && (root < 0 || root >= g->world)) {
    dt_shm_fail_(DT_ERR_ARG, "%s: root %d is not a rank of this group (world size %d)", fn, root, g->world);
  } else if (timeout_ms <= 0) {
    dt_shm_fail_(DT_ERR_ARG, "%s: timeout %lld ms must be positive", fn, (long long)timeout_ms);
  } else {
    *deadline = dt_shm_now_ns_() + timeout_ms * 1000000LL;
    return DT_OK;
  }
  return dt_shm_abort_with_(g, DT_ERR_ARG);
}

static dt_status dt_shm_null_arg_(dt_shm_t* g, const char* fn, const char* what, int64_t count) {
  dt_shm_fail_(DT_ERR_ARG, "%s: %s is NULL but the count is %lld", fn, what, (long long)count);
  return dt_shm_abort_with_(g, DT_ERR_ARG);
}

/* How allReduce lays one chunk of m elements out: share q (the elements rank q
 * reduces) is [m*q/w, m*(q+1)/w) of the chunk, and sits in every slot at the
 * fixed offset q * stride, whatever m is. Fixed offsets matter: a rank writing
 * the chunk two ahead of one still being read touches other shares' places,
 * never the share being read, also when the last chunk is shorter. */
typedef struct {
  int64_t es, chunk, stride; /* element size; elements per chunk (a multiple of w) and per share */
  int stream;                /* write the caller's buffer with streaming stores (a large message) */
} dt_shm_layout_t;

static inline int64_t dt_shm_share_lo_(int64_t m, int32_t q, int32_t w) { return m * q / w; }

/* Publishes what the others reduce: every share of the chunk but this rank's. */
static void dt_shm_publish_(dt_shm_t* g, const dt_shm_layout_t* L, const char* mine, int64_t m, uint64_t b) {
  char* slot = dt_shm_slot_(g, g->rank, b);
  for (int32_t q = 0; q < g->world; q++) {
    if (q == g->rank) continue;
    int64_t lo = dt_shm_share_lo_(m, q, g->world), hi = dt_shm_share_lo_(m, q + 1, g->world);
    memcpy(slot + q * L->stride * L->es, mine + lo * L->es, (size_t)((hi - lo) * L->es));
  }
}

/* Reduces this rank's share over all ranks, into its own buffer and its slot. */
static void dt_shm_reduce_share_(dt_shm_t* g, const dt_shm_layout_t* L, char* mine, int64_t m, uint64_t b,
                                 int32_t dtype, int32_t redop) {
  const int32_t w = g->world, r = g->rank;
  const int64_t lo = dt_shm_share_lo_(m, r, w), hi = dt_shm_share_lo_(m, r + 1, w), at = r * L->stride * L->es;
  const void* src[DT_SHM_MAX_RANKS];
  for (int32_t q = 0; q < w; q++) src[q] = q == r ? mine + lo * L->es : dt_shm_slot_(g, q, b) + at;
  if (dtype == DT_F32 && (redop == DT_SHM_SUM || redop == DT_SHM_AVG)) {
    dt_shm_add_f32_((float*)(mine + lo * L->es), (float*)(dt_shm_slot_(g, r, b) + at), (const float* const*)src, w,
                    hi - lo, redop == DT_SHM_AVG, L->stream);
  } else {
    dt_shm_reduce_(dtype, redop, mine + lo * L->es, dt_shm_slot_(g, r, b) + at, src, w, hi - lo);
  }
}

/* Copies the other ranks' reduced shares of a chunk into this rank's buffer. */
static void dt_shm_gather_shares_(dt_shm_t* g, const dt_shm_layout_t* L, char* mine, int64_t m, uint64_t b) {
  for (int32_t q = 0; q < g->world; q++) {
    if (q == g->rank) continue;
    int64_t lo = dt_shm_share_lo_(m, q, g->world), hi = dt_shm_share_lo_(m, q + 1, g->world);
    dt_shm_copy_(mine + lo * L->es, dt_shm_slot_(g, q, b) + q * L->stride * L->es, (hi - lo) * L->es, L->stream);
  }
}

/* A small message in one barrier: every rank publishes all of it, then each
 * reduces the whole message itself, in rank order as the shares are, so the
 * bits are those of the pipelined path. A step's gradient sync then waits for
 * its peers once instead of twice (the second wait, for a peer just woken
 * from its futex, is the costly one on a busy machine), at the price of w
 * reads of the message per rank instead of one: hence the size limit. */
static void dt_shm_allreduce_oneshot_(dt_shm_t* g, char* buf, int64_t count, uint64_t b, int32_t dtype,
                                      int32_t redop) {
  const void* src[DT_SHM_MAX_RANKS];
  for (int32_t q = 0; q < g->world; q++) src[q] = q == g->rank ? buf : dt_shm_slot_(g, q, b);
  if (dtype == DT_F32 && (redop == DT_SHM_SUM || redop == DT_SHM_AVG)) {
    dt_shm_add_f32_((float*)buf, NULL, (const float* const*)src, g->world, count, redop == DT_SHM_AVG, 0);
  } else {
    dt_shm_reduce_(dtype, redop, buf, NULL, src, g->world, count);
  }
}

/* Where `buf` of `bytes` lies in this rank's shared region: its offset, or -1
 * when it does not lie wholly inside. */
static int64_t dt_shm_shared_at_(dt_shm_t* g, const void* buf, int64_t bytes) {
  if (!g || !g->shared_bytes || !buf || bytes <= 0) return -1;
  uintptr_t lo = (uintptr_t)dt_shm_shared_region_(g, g->rank), p = (uintptr_t)buf;
  if (p < lo || p - lo > (uintptr_t)g->shared_bytes || (uintptr_t)bytes > (uintptr_t)g->shared_bytes - (p - lo))
    return -1;
  return (int64_t)(p - lo);
}

/* Bytes per step of the shared path when one result goes to more than two
 * ranks: it is written into this rank's buffer (and one peer's) and copied
 * from there to the others while still in cache. */
#define DT_SHM_SHARED_BLOCK_BYTES_ (128LL << 10)

/* allReduce of buffers that every rank keeps in its shared region (the
 * offsets are in the rank records): after one barrier rank r reduces share r
 * straight from every rank's buffer and writes the result into all of them,
 * then a second barrier says every share is written. Each byte of every
 * buffer is read once and written once (on 2 ranks), the least memory traffic
 * an in-place allReduce can have; the pipelined path also moves each byte
 * through a data buffer (written there once, read back once). Plain stores,
 * not streaming ones: every line written was just read by this thread, so a
 * store costs no extra read, and streaming stores into such lines (the
 * peer's) measured 4x slower. Share r of a buffer is read and
 * written by rank r alone, and the bits are the pipelined path's: the same
 * sources, in rank order. */
static dt_status dt_shm_allreduce_shared_(dt_shm_t* g, int64_t count, int32_t dtype, int32_t redop,
                                          int64_t deadline) {
  dt_status st = dt_shm_sync_(g, 1, deadline);
  if (st) return st;
  const int32_t w = g->world, r = g->rank;
  const int64_t es = (int64_t)dt_shm_dtype_size_(dtype);
  const int64_t lo = dt_shm_share_lo_(count, r, w), n = dt_shm_share_lo_(count, r + 1, w) - lo;
  char* at[DT_SHM_MAX_RANKS];
  for (int32_t q = 0; q < w; q++) {
    at[q] = dt_shm_shared_region_(g, q) + g->hdr->ranks[q].shared_at + lo * es;
  }
  const int f32_sum = dtype == DT_F32 && (redop == DT_SHM_SUM || redop == DT_SHM_AVG);
  char* second = w > 1 ? at[(r + 1) % w] : NULL;
  const int64_t block = w > 2 ? DT_SHM_SHARED_BLOCK_BYTES_ / es : n;
  const void* src[DT_SHM_MAX_RANKS];
  for (int64_t b = 0; b < n; b += block) {
    const int64_t m = n - b < block ? n - b : block, off = b * es;
    for (int32_t q = 0; q < w; q++) src[q] = at[q] + off;
    if (f32_sum) {
      dt_shm_add_f32_((float*)(at[r] + off), second ? (float*)(second + off) : NULL, (const float* const*)src, w, m,
                      redop == DT_SHM_AVG, 0);
    } else {
      dt_shm_reduce_(dtype, redop, at[r] + off, second ? second + off : NULL, src, w, m);
    }
    for (int32_t k = 2; k < w; k++) dt_shm_copy_(at[(r + k) % w] + off, at[r] + off, m * es, 0);
  }
  return dt_shm_sync_(g, 0, deadline);
}

/** In place: buf[i] = op over ranks of buf[i], the same bits on every rank.
 *  A message of one buffer whose w copies stay in cache goes in one barrier
 *  (dt_shm_allreduce_oneshot_). Larger ones are pipelined over chunks with
 *  one barrier each: after chunk k's barrier a rank copies out the reduced
 *  shares of chunk k-1 and reduces its share of chunk k; the last barrier is
 *  followed by the last copy-out only. */
DT_EXPORT dt_status dt_shm_allreduce(dt_shm_t* g, void* buf, int64_t count, int32_t dtype, int32_t redop,
                                     int64_t timeout_ms) {
  int64_t deadline = 0;
  /* a message that would go in one barrier anyway stays on that path */
  const size_t es = dt_shm_dtype_size_(dtype);
  const int sized = g && es && count > 0 && count <= INT64_MAX / (int64_t)es / g->world;
  const int64_t bytes = sized ? count * (int64_t)es : 0;
  const int oneshot = g && bytes <= g->chunk_bytes && bytes * g->world <= DT_SHM_ONESHOT_MAX_BYTES;
  const int64_t shared_at = sized && !oneshot ? dt_shm_shared_at_(g, buf, bytes) : -1;
  const int32_t op = shared_at >= 0 ? DT_SHM_OP_ALLREDUCE_SHARED : DT_SHM_OP_ALLREDUCE;
  dt_status st = dt_shm_begin_(g, "allReduce", op, dtype, count, -1, redop, NULL, timeout_ms, &deadline);
  if (st) return st;
  if (count > 0 && !buf) return dt_shm_null_arg_(g, "allReduce", "buf", count);
  if (count == 0) return dt_shm_sync_(g, 1, deadline);
  if (shared_at >= 0) {
    /* read by the peers after the first barrier, whose release publishes it */
    g->hdr->ranks[g->rank].shared_at = shared_at;
    return dt_shm_allreduce_shared_(g, count, dtype, redop, deadline);
  }
  if (oneshot) {
    const uint64_t b = g->buffers++;
    memcpy(dt_shm_slot_(g, g->rank, b), buf, (size_t)bytes);
    if ((st = dt_shm_sync_(g, 1, deadline))) return st;
    dt_shm_allreduce_oneshot_(g, buf, count, b, dtype, redop);
    return DT_OK;
  }
  dt_shm_layout_t L;
  L.es = (int64_t)dt_shm_dtype_size_(dtype);
  L.stride = g->chunk_bytes / L.es / g->world;
  L.chunk = L.stride * g->world;
  L.stream = count * L.es >= DT_SHM_STREAM_MIN_BYTES;
  const int64_t chunks = (count + L.chunk - 1) / L.chunk;
  const uint64_t b0 = g->buffers;
  g->buffers += (uint64_t)chunks;
  char* base = buf;
#define DT_SHM_CHUNK_LEN_(k) (count - (k) * L.chunk < L.chunk ? count - (k) * L.chunk : L.chunk)
  for (int64_t k = 0; k <= chunks; k++) {
    char* at = base + k * L.chunk * L.es;
    if (k < chunks) dt_shm_publish_(g, &L, at, DT_SHM_CHUNK_LEN_(k), b0 + (uint64_t)k);
    if ((st = dt_shm_sync_(g, k == 0, deadline))) return st;
    if (k > 0) dt_shm_gather_shares_(g, &L, at - L.chunk * L.es, DT_SHM_CHUNK_LEN_(k - 1), b0 + (uint64_t)(k - 1));
    if (k < chunks) dt_shm_reduce_share_(g, &L, at, DT_SHM_CHUNK_LEN_(k), b0 + (uint64_t)k, dtype, redop);
  }
#undef DT_SHM_CHUNK_LEN_
  if (L.stream) dt_shm_stream_fence_();
  return DT_OK;
}

/** buf on every rank = buf on `root`. */
DT_EXPORT dt_status dt_shm_broadcast(dt_shm_t* g, void* buf, int64_t count, int32_t dtype, int32_t root,
                                     int64_t timeout_ms) {
  int64_t deadline = 0;
  dt_status st = dt_shm_begin_(g, "broadcast", DT_SHM_OP_BROADCAST, dtype, count, root, -1, NULL, timeout_ms, &deadline);
  if (st) return st;
  if (count > 0 && !buf) return dt_shm_null_arg_(g, "broadcast", "buf", count);
  const int64_t bytes = count * (int64_t)dt_shm_dtype_size_(dtype);
  if (bytes == 0) return dt_shm_sync_(g, 1, deadline);
  int64_t m = 0;
  for (int64_t off = 0; off < bytes; off += m) {
    m = bytes - off < g->chunk_bytes ? bytes - off : g->chunk_bytes;
    char* slot = dt_shm_slot_(g, root, g->buffers++);
    if (g->rank == root) memcpy(slot, (char*)buf + off, (size_t)m);
    if ((st = dt_shm_sync_(g, off == 0, deadline))) return st;
    if (g->rank != root) memcpy((char*)buf + off, slot, (size_t)m);
  }
  return DT_OK;
}

/** out[q * count + i] = inp[i] of rank q; out holds world x count elements.
 *  inp may be this rank's own block of out (in-place all-gather). */
DT_EXPORT dt_status dt_shm_allgather(dt_shm_t* g, void* out, const void* inp, int64_t count, int32_t dtype,
                                     int64_t timeout_ms) {
  int64_t deadline = 0;
  dt_status st = dt_shm_begin_(g, "allGather", DT_SHM_OP_ALLGATHER, dtype, count, -1, -1, NULL, timeout_ms, &deadline);
  if (st) return st;
  if (count > 0 && (!out || !inp)) return dt_shm_null_arg_(g, "allGather", out ? "inp" : "out", count);
  const int64_t bytes = count * (int64_t)dt_shm_dtype_size_(dtype);
  if (bytes == 0) return dt_shm_sync_(g, 1, deadline);
  const int32_t w = g->world, r = g->rank;
  char* own = (char*)out + r * bytes;
  int64_t m = 0;
  for (int64_t off = 0; off < bytes; off += m) {
    m = bytes - off < g->chunk_bytes ? bytes - off : g->chunk_bytes;
    uint64_t b = g->buffers++;
    memcpy(dt_shm_slot_(g, r, b), (const char*)inp + off, (size_t)m);
    if (own != (const char*)inp) memmove(own + off, (const char*)inp + off, (size_t)m);
    if ((st = dt_shm_sync_(g, off == 0, deadline))) return st;
    for (int32_t q = 0; q < w; q++) {
      if (q != r) memcpy((char*)out + q * bytes + off, dt_shm_slot_(g, q, b), (size_t)m);
    }
  }
  return DT_OK;
}

/** out[i] = op over ranks q of inp_q[rank * count + i]; inp holds world x
 *  count elements. out may be this rank's own block of inp. */
DT_EXPORT dt_status dt_shm_reduce_scatter(dt_shm_t* g, void* out, const void* inp, int64_t count, int32_t dtype,
                                          int32_t redop, int64_t timeout_ms) {
  int64_t deadline = 0;
  dt_status st =
      dt_shm_begin_(g, "reduceScatter", DT_SHM_OP_REDUCE_SCATTER, dtype, count, -1, redop, NULL, timeout_ms, &deadline);
  if (st) return st;
  if (count > 0 && (!out || !inp)) return dt_shm_null_arg_(g, "reduceScatter", out ? "inp" : "out", count);
  if (count == 0) return dt_shm_sync_(g, 1, deadline);
  const int32_t w = g->world, r = g->rank;
  const int64_t es = (int64_t)dt_shm_dtype_size_(dtype);
  /* each buffer holds one piece per destination rank; pieces are 64-byte
   * multiples, so the chunk count does not depend on the dtype */
  const int64_t piece_bytes = g->chunk_bytes / w / 64 * 64, piece = piece_bytes / es;
  const void* src[DT_SHM_MAX_RANKS];
  int64_t m = 0;
  for (int64_t off = 0; off < count; off += m) {
    m = count - off < piece ? count - off : piece;
    uint64_t b = g->buffers++;
    char* slot = dt_shm_slot_(g, r, b);
    for (int32_t d = 0; d < w; d++) {
      if (d != r) memcpy(slot + d * piece_bytes, (const char*)inp + (d * count + off) * es, (size_t)(m * es));
    }
    if ((st = dt_shm_sync_(g, off == 0, deadline))) return st;
    for (int32_t q = 0; q < w; q++) {
      src[q] = q == r ? (const char*)inp + (r * count + off) * es : dt_shm_slot_(g, q, b) + r * piece_bytes;
    }
    dt_shm_reduce_(dtype, redop, (char*)out + off * es, NULL, src, w, m);
  }
  return DT_OK;
}

/** Returns once every rank has called barrier; `name` (may be NULL) is shown
 *  in timeout and mismatch messages and compared across ranks under DETAIL. */
DT_EXPORT dt_status dt_shm_barrier(dt_shm_t* g, const char* name, int64_t timeout_ms) {
  int64_t deadline = 0;
  dt_status st = dt_shm_begin_(g, "barrier", DT_SHM_OP_BARRIER, DT_U8, 0, -1, -1, name, timeout_ms, &deadline);
  if (st) return st;
  return dt_shm_sync_(g, 1, deadline);
}
