/* shm_regions.c — shared regions reserved after open (dt_shm_reserve), a
 * collective: each rank makes a segment of its own for its region (created,
 * sized, every page reserved with posix_fallocate so a full /dev/shm fails
 * here with ENOSPC instead of a SIGBUS later, mapped), publishes how that
 * went, and after a barrier every rank maps every peer's region by its name
 * (which each rank derives from the group's name, the owner's rank and pid,
 * and the call's sequence number); after a second barrier each unlinks its
 * own name, so nothing is left in /dev/shm from then on, whatever happens
 * (a rank killed between creating its region and that barrier leaves its
 * name behind, as one killed during the rendezvous leaves the group's).
 * A failure on any rank (a limit, no space, a mapping) is seen by every rank
 * from the published records: each then unmaps what it made, and every rank
 * returns the same error naming the first rank that failed; the group stays
 * usable. A third barrier keeps the records of this call from being
 * overwritten by the next one while a slow rank still reads them. Pages of a
 * region can be given back (dt_shm_release) when the buffers there are no
 * longer needed. */
#define _GNU_SOURCE
#include "shm_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest region dt_shm_reserve makes per rank (as for regions at open). */
#define DT_SHM_MAX_RESERVE (64LL << 30)

/* what a rank's step of a reservation gave (dt_shm_rank_t.made_status / mapped_status) */
enum {
  DT_SHM_RESERVE_OK = 0,
  DT_SHM_RESERVE_LIMIT = 1,  /* more than the limit this rank was given */
  DT_SHM_RESERVE_CREATE = 2, /* shm_open of its own region failed */
  DT_SHM_RESERVE_SPACE = 3,  /* ftruncate / posix_fallocate failed (a full or small /dev/shm) */
  DT_SHM_RESERVE_MAP = 4,    /* mmap of its own region failed */
  DT_SHM_RESERVE_PEER = 5,   /* opening or mapping a peer's region failed */
  DT_SHM_RESERVE_SKIPPED = 6 /* the peers' regions were not mapped: a rank failed before */
};

/* Rank r's region of the reservation with sequence number `seq`. The group's
 * name is capped so the whole fits (every rank caps it the same way). */
static void dt_shm_region_name_(dt_shm_t* g, int32_t r, char* out, size_t cap) {
  int pid = atomic_load(&g->hdr->ranks[r].pid);
  snprintf(out, cap, "%.160s-sh%d-%d-%llu", g->name, r, pid, (unsigned long long)g->seq);
}

/* The first rank whose made_status (or, with `mapped`, mapped_status) is a failure, or -1. */
static int32_t dt_shm_first_failed_(dt_shm_t* g, int mapped) {
  for (int32_t q = 0; q < g->world; q++) {
    const dt_shm_rank_t* rec = &g->hdr->ranks[q];
    int32_t s = mapped ? rec->mapped_status : rec->made_status;
    if (s != DT_SHM_RESERVE_OK && s != DT_SHM_RESERVE_SKIPPED) return q;
  }
  return -1;
}

/* The agreed error of a failed reservation: every rank writes the same text from rank q's record. */
static dt_status dt_shm_reserve_failed_(dt_shm_t* g, int32_t q, int64_t bytes, int mapped, int64_t* out) {
  const dt_shm_rank_t* rec = &g->hdr->ranks[q];
  const int32_t status = mapped ? rec->mapped_status : rec->made_status;
  const int32_t err = mapped ? rec->mapped_errno : rec->made_errno;
  out[0] = q;
  out[1] = status;
  out[2] = err;
  char peer_name[DT_SHM_NAME_MAX + 64];
  switch (status) {
    case DT_SHM_RESERVE_LIMIT:
      return dt_shm_fail_(DT_ERR_SYS,
                          "rank %d may reserve at most %lld bytes of shared memory (its limit), and %lld per rank "
                          "were asked for",
                          q, (long long)rec->reserve_limit, (long long)bytes);
    case DT_SHM_RESERVE_CREATE:
      return dt_shm_fail_(DT_ERR_SYS, "rank %d could not create its %lld-byte region in /dev/shm: %s", q,
                          (long long)bytes, strerror(err));
    case DT_SHM_RESERVE_SPACE:
      return dt_shm_fail_(DT_ERR_SYS,
                          "rank %d could not reserve %lld bytes in /dev/shm (%s): /dev/shm is too small or full "
                          "for %d ranks x %lld bytes",
                          q, (long long)bytes, strerror(err), g->world, (long long)bytes);
    case DT_SHM_RESERVE_MAP:
      return dt_shm_fail_(DT_ERR_SYS, "rank %d could not map its %lld-byte region: %s", q, (long long)bytes,
                          strerror(err));
    default:
      dt_shm_region_name_(g, rec->mapped_peer, peer_name, sizeof peer_name);
      return dt_shm_fail_(DT_ERR_SYS, "rank %d could not map rank %d's region /dev/shm%s: %s", q,
                          rec->mapped_peer, peer_name, strerror(err));
  }
}

/* Opens and maps rank q's region of `bytes`; NULL with errno set on failure. */
static char* dt_shm_map_peer_(dt_shm_t* g, int32_t q, int64_t bytes) {
  char name[DT_SHM_NAME_MAX + 64];
  dt_shm_region_name_(g, q, name, sizeof name);
  int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0) return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size != (off_t)bytes) {
    int e = errno ? errno : EINVAL;
    close(fd);
    errno = e;
    return NULL;
  }
  void* p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  errno = e;
  return p == MAP_FAILED ? NULL : p;
}

/** Collective: every rank gets a shared region of `bytes` (a multiple of
 *  4096, the same on every rank) that every peer maps, for arrays that an
 *  allReduce then reduces in place (dt_shm_shared hands it out). A rank fails
 *  its part when `bytes` exceeds its `limit_bytes` (< 0: none) or the system
 *  refuses; then every rank returns DT_ERR_SYS with the same text and
 *  out[0] = the first failing rank, out[1] its DT_SHM_RESERVE_* step, out[2]
 *  its errno, and the group stays usable. Otherwise out[0] = -1. A failed
 *  barrier (a peer gone, the deadline) aborts the group as in any collective
 *  (out[0] = -1). The group must not have a shared region yet. */
DT_EXPORT dt_status dt_shm_reserve(dt_shm_t* g, int64_t bytes, int64_t limit_bytes, int64_t timeout_ms,
                                   int64_t* out) {
  if (!g || !out) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_reserve: NULL argument");
  out[0] = -1;
  out[1] = out[2] = 0;
  /* the same on every rank (rank 0's shared_bytes is everyone's): refused alike, nothing posted */
  if (g->shared_bytes) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "reserveShared: the group already has a shared region of %lld bytes per rank; a group "
                        "reserves one once",
                        (long long)g->shared_bytes);
  }
  dt_shm_post_call_(g, DT_SHM_OP_RESERVE, DT_U8, bytes, -1, -1, NULL);
  dt_status st = dt_shm_check_alive_(g);
  if (st) return st;
  if (bytes <= 0 || bytes % 4096 != 0 || bytes > DT_SHM_MAX_RESERVE || timeout_ms <= 0) {
    dt_shm_fail_(DT_ERR_ARG,
                 "reserveShared: %lld bytes must be a positive multiple of 4096 up to %lld, and the timeout (%lld "
                 "ms) positive",
                 (long long)bytes, DT_SHM_MAX_RESERVE, (long long)timeout_ms);
    return dt_shm_abort_with_(g, DT_ERR_ARG);
  }
  const int64_t deadline = dt_shm_now_ns_() + timeout_ms * 1000000LL;
  dt_shm_rank_t* me = &g->hdr->ranks[g->rank];
  char name[DT_SHM_NAME_MAX + 64];
  dt_shm_region_name_(g, g->rank, name, sizeof name);
  char* map[DT_SHM_MAX_RANKS] = {0};
  int created = 0;
  int32_t status = DT_SHM_RESERVE_OK, err = 0;
  if (limit_bytes >= 0 && bytes > limit_bytes) {
    status = DT_SHM_RESERVE_LIMIT;
  } else {
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      status = DT_SHM_RESERVE_CREATE, err = errno;
    } else {
      created = 1;
      int rc = ftruncate(fd, (off_t)bytes) == 0 ? posix_fallocate(fd, 0, (off_t)bytes) : errno;
      if (rc != 0) {
        status = DT_SHM_RESERVE_SPACE, err = rc;
      } else {
        void* p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) status = DT_SHM_RESERVE_MAP, err = errno;
        else map[g->rank] = p;
      }
      close(fd);
    }
  }
  me->reserve_limit = limit_bytes;
  me->made_status = status;
  me->made_errno = err;
  /* 1: every rank made its region (or failed), and the calls match */
  st = dt_shm_sync_(g, 1, deadline);
  int32_t failed = -1, failed_mapped = 0;
  if (st == DT_OK) {
    failed = dt_shm_first_failed_(g, 0);
    int32_t mstatus = failed >= 0 ? DT_SHM_RESERVE_SKIPPED : DT_SHM_RESERVE_OK, merr = 0, mpeer = -1;
    for (int32_t q = 0; q < g->world && mstatus == DT_SHM_RESERVE_OK; q++) {
      if (q == g->rank) continue;
      errno = 0;
      map[q] = dt_shm_map_peer_(g, q, bytes);
      if (!map[q]) mstatus = DT_SHM_RESERVE_PEER, merr = errno ? errno : EINVAL, mpeer = q;
    }
    me->mapped_status = mstatus;
    me->mapped_errno = merr;
    me->mapped_peer = mpeer;
    /* 2: every rank mapped every region (or failed) */
    st = dt_shm_sync_(g, 0, deadline);
  }
  /* nobody opens this rank's region by name any more (or the group failed) */
  if (created) shm_unlink(name);
  if (st == DT_OK && failed < 0) {
    failed = dt_shm_first_failed_(g, 1);
    failed_mapped = 1;
  }
  /* the agreed error, written from the failing rank's record while it still holds this call's */
  dt_status agreed = DT_OK;
  if (st == DT_OK && failed >= 0) agreed = dt_shm_reserve_failed_(g, failed, bytes, failed_mapped, out);
  if (st == DT_OK) {
    /* 3: every rank has read the records of this call (the next one may overwrite them) */
    st = dt_shm_sync_(g, 0, deadline);
    if (st != DT_OK) out[0] = -1; /* the group failed: no agreed error */
  }
  if (st != DT_OK || failed >= 0) {
    for (int32_t q = 0; q < g->world; q++) {
      if (map[q]) munmap(map[q], (size_t)bytes);
    }
    return st != DT_OK ? st : agreed;
  }
  for (int32_t q = 0; q < g->world; q++) g->regions[q] = map[q];
  g->shared_bytes = bytes;
  g->reserved = 1;
  return DT_OK;
}

/** Gives back the pages of [offset, offset + bytes) of this rank's shared
 *  region (whole pages inside the range; madvise MADV_REMOVE frees their
 *  memory): they read as zeros afterwards, on every rank, and take memory
 *  again once written. out[0] = bytes given back. Not collective. */
DT_EXPORT dt_status dt_shm_release(dt_shm_t* g, int64_t offset, int64_t bytes, int64_t* out) {
  if (!g || !out) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_release: NULL argument");
  out[0] = 0;
  if (offset < 0 || bytes < 0 || offset > g->shared_bytes || bytes > g->shared_bytes - offset) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "releaseShared: bytes [%lld, %lld) are not inside this rank's shared region of %lld bytes",
                        (long long)offset, (long long)(offset + bytes), (long long)g->shared_bytes);
  }
  const int64_t page = 4096;
  const int64_t lo = (offset + page - 1) / page * page, hi = (offset + bytes) / page * page;
  if (hi <= lo) return DT_OK;
  char* base = dt_shm_shared_region_(g, g->rank);
  if (madvise(base + lo, (size_t)(hi - lo), MADV_REMOVE) != 0) {
    return dt_shm_fail_(DT_ERR_SYS, "releaseShared: madvise(MADV_REMOVE) of %lld bytes failed: %s",
                        (long long)(hi - lo), strerror(errno));
  }
  out[0] = hi - lo;
  return DT_OK;
}
