/* shm_segment.c — the life of a process group's segment: rank 0 creates it
 * (O_EXCL, so a stale one is refused, never reused), the others find it and
 * attach, and once every rank is in, the name is unlinked so nothing is left in
 * /dev/shm whatever happens later; close and abort. A segment may end in one
 * shared region per rank, where a rank keeps buffers its peers read and write
 * directly (dt_shm_shared; allReduce then copies nothing through the data
 * buffers). */
#define _GNU_SOURCE
#include "shm_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DT_SHM_MAX_CHUNK (1LL << 30)
/* Each rank's shared region is at most this large (it is reserved up front). */
#define DT_SHM_MAX_SHARED (64LL << 30)

static int64_t dt_shm_round_up_(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

static void dt_shm_sleep_ns_(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  nanosleep(&ts, NULL);
}

static dt_status dt_shm_check_args_(const char* name, int32_t rank, int32_t world, int64_t chunk_bytes,
                                    int64_t shared_bytes, int64_t spin_ns, int64_t timeout_ms,
                                    uint64_t* out_handle) {
  if (!out_handle) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_open: out_handle is NULL");
  *out_handle = 0;
  if (!name) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_open: name is NULL");
  size_t len = strnlen(name, DT_SHM_NAME_MAX + 1);
  if (name[0] != '/' || len < 2 || len > DT_SHM_NAME_MAX || strchr(name + 1, '/')) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "dt_shm_open: segment name \"%.*s\" must be '/' followed by 1 to %d characters without '/'",
                        DT_SHM_NAME_MAX, name, DT_SHM_NAME_MAX - 1);
  }
  if (world < 1 || world > DT_SHM_MAX_RANKS) {
    return dt_shm_fail_(DT_ERR_ARG, "dt_shm_open: world size %d is not in [1, %d]", world, DT_SHM_MAX_RANKS);
  }
  if (rank < 0 || rank >= world) {
    return dt_shm_fail_(DT_ERR_ARG, "dt_shm_open: rank %d is not in [0, %d)", rank, world);
  }
  if (chunk_bytes % 64 != 0 || chunk_bytes < 64LL * world || chunk_bytes > DT_SHM_MAX_CHUNK) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "dt_shm_open: chunk size %lld bytes must be a multiple of 64 between 64 x world size (%lld) "
                        "and %lld",
                        (long long)chunk_bytes, 64LL * world, DT_SHM_MAX_CHUNK);
  }
  if (shared_bytes < 0 || shared_bytes % 4096 != 0 || shared_bytes > DT_SHM_MAX_SHARED) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "dt_shm_open: shared region of %lld bytes per rank must be a multiple of 4096 between 0 and "
                        "%lld",
                        (long long)shared_bytes, DT_SHM_MAX_SHARED);
  }
  if (spin_ns < 0) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_open: spin time %lld ns is negative", (long long)spin_ns);
  if (timeout_ms <= 0) {
    return dt_shm_fail_(DT_ERR_ARG, "dt_shm_open: timeout %lld ms must be positive", (long long)timeout_ms);
  }
  return DT_OK;
}

/* Rank 0: create, size and initialise the segment, then publish `ready`. */
static dt_status dt_shm_create_(dt_shm_t* g, int64_t data_offset) {
  /* page-aligned regions; without any, the segment keeps its old size */
  const int64_t data_end = data_offset + (int64_t)g->world * 2 * g->chunk_bytes;
  int64_t shared_offset = g->shared_bytes ? dt_shm_round_up_(data_end, 4096) : data_end;
  int64_t bytes = shared_offset + (int64_t)g->world * g->shared_bytes;
  int fd = shm_open(g->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    return dt_shm_fail_(DT_ERR_SYS,
                        "Cannot create shared-memory segment /dev/shm%s for rank 0: it already exists. Another job "
                        "with the same DTRAIN_RUN_ID is running, or a run that crashed during its rendezvous left it "
                        "behind. Use a new DTRAIN_RUN_ID, or remove it (rm /dev/shm%s) if no job uses it",
                        g->name, g->name);
  }
  if (fd < 0) return dt_shm_fail_(DT_ERR_SYS, "Cannot create /dev/shm%s: %s", g->name, strerror(errno));
  /* posix_fallocate reserves every page now: a full /dev/shm is a clear error
   * here instead of a SIGBUS in the middle of a collective. */
  int rc = ftruncate(fd, (off_t)bytes) == 0 ? posix_fallocate(fd, 0, (off_t)bytes) : errno;
  void* base = rc == 0 ? mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (rc == 0 && base == MAP_FAILED) rc = errno;
  close(fd);
  if (rc != 0) {
    shm_unlink(g->name);
    return dt_shm_fail_(DT_ERR_SYS,
                        "Cannot reserve %lld bytes for /dev/shm%s (%d ranks x (2 x %lld-byte buffers + a %lld-byte "
                        "shared region)): %s",
                        (long long)bytes, g->name, g->world, (long long)g->chunk_bytes, (long long)g->shared_bytes,
                        strerror(rc));
  }
  dt_shm_header_t* hdr = base;
  hdr->layout_version = DT_SHM_LAYOUT_VERSION;
  hdr->magic = DT_SHM_MAGIC;
  hdr->world = g->world;
  hdr->creator_pid = (int32_t)getpid();
  hdr->chunk_bytes = g->chunk_bytes;
  hdr->segment_bytes = bytes;
  hdr->data_offset = data_offset;
  hdr->shared_offset = shared_offset;
  hdr->shared_bytes = g->shared_bytes;
  g->hdr = hdr;
  g->segment_bytes = bytes;
  atomic_store(&hdr->ready, 1);
  syscall(SYS_futex, (uint32_t*)&hdr->ready, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
  return DT_OK;
}

/* Other ranks: wait for rank 0's segment to exist and be ready, then map it. */
static dt_status dt_shm_find_(dt_shm_t* g, int64_t deadline_ns) {
  int64_t backoff = 200000; /* 0.2 ms, doubling to 10 ms: nothing notifies a name's creation */
  int fd = -1;
  struct stat st;
  for (;;) {
    fd = shm_open(g->name, O_RDWR, 0);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(dt_shm_header_t)) break;
    if (fd < 0 && errno != ENOENT) return dt_shm_fail_(DT_ERR_SYS, "Cannot open /dev/shm%s: %s", g->name, strerror(errno));
    if (fd >= 0) close(fd);
    if (dt_shm_now_ns_() >= deadline_ns) {
      return dt_shm_fail_(DT_ERR_TIMEOUT,
                          "Rendezvous timed out on rank %d after %lld ms: rank 0 did not create the shared-memory "
                          "segment /dev/shm%s. Rank 0 has not started, failed, or runs with a different DTRAIN_RUN_ID",
                          g->rank, (long long)((dt_shm_now_ns_() - g->call_start_ns) / 1000000), g->name);
    }
    dt_shm_sleep_ns_(backoff);
    if (backoff < 10000000) backoff *= 2;
  }
  dt_shm_header_t* hdr = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (hdr == MAP_FAILED) return dt_shm_fail_(DT_ERR_SYS, "Cannot map /dev/shm%s: %s", g->name, strerror(errno));
  g->hdr = hdr;
  g->segment_bytes = st.st_size;
  while (atomic_load(&hdr->ready) == 0) {
    int64_t left = deadline_ns - dt_shm_now_ns_();
    if (left <= 0) {
      return dt_shm_fail_(DT_ERR_TIMEOUT,
                          "Rendezvous timed out on rank %d: /dev/shm%s exists but rank 0 never finished setting it up "
                          "(a crashed earlier run with the same DTRAIN_RUN_ID may have left it; remove it)",
                          g->rank, g->name);
    }
    struct timespec ts = {0, left < 10000000 ? (long)left : 10000000L};
    syscall(SYS_futex, (uint32_t*)&hdr->ready, FUTEX_WAIT, 0, &ts, NULL, 0);
  }
  if (hdr->magic != DT_SHM_MAGIC || hdr->layout_version != DT_SHM_LAYOUT_VERSION ||
      hdr->segment_bytes != (int64_t)st.st_size) {
    return dt_shm_fail_(DT_ERR_SYS, "/dev/shm%s is not a dtrain process-group segment of this version", g->name);
  }
  if (hdr->world != g->world) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "Rank %d was started with WORLD_SIZE=%d but rank 0 created /dev/shm%s for world size %d: "
                        "every rank needs the same WORLD_SIZE",
                        g->rank, g->world, g->name, hdr->world);
  }
  if (kill(hdr->creator_pid, 0) == -1 && errno == ESRCH) {
    return dt_shm_fail_(DT_ERR_SYS,
                        "/dev/shm%s is stale: the rank 0 that created it (pid %d) is gone. A run with the same "
                        "DTRAIN_RUN_ID crashed during its rendezvous; remove it (rm /dev/shm%s) and use a new run id",
                        g->name, hdr->creator_pid, g->name);
  }
  g->chunk_bytes = hdr->chunk_bytes;
  g->shared_bytes = hdr->shared_bytes;
  return DT_OK;
}

/* Claims this rank's record in the control area. */
static dt_status dt_shm_register_(dt_shm_t* g) {
  dt_shm_rank_t* me = &g->hdr->ranks[g->rank];
  int32_t none = 0;
  if (!atomic_compare_exchange_strong(&me->pid, &none, (int32_t)getpid())) {
    return dt_shm_fail_(DT_ERR_ARG,
                        "Rank %d cannot attach to /dev/shm%s: pid %d already attached as rank %d. Two processes were "
                        "started with RANK=%d, or an earlier run with the same DTRAIN_RUN_ID is still running",
                        g->rank, g->name, none, g->rank, g->rank);
  }
  atomic_store(&me->state, DT_SHM_RANK_ATTACHED);
  atomic_fetch_add(&g->hdr->attached, 1);
  dt_shm_wake_all_(g->hdr);
  return DT_OK;
}

/* Unmaps the segment, but for the shared regions once arrays were made over
 * them: those stay mapped (and their pages held) until the process exits, so
 * an array used after close() reads stale numbers instead of crashing. */
static void dt_shm_free_(dt_shm_t* g) {
  if (g->hdr && g->reserved) {
    /* regions of their own (dt_shm_reserve): the peers' go, this rank's too unless handed out */
    for (int32_t q = 0; q < g->world; q++) {
      if (g->regions[q] && !(q == g->rank && g->shared_handed_out)) munmap(g->regions[q], (size_t)g->shared_bytes);
    }
    munmap(g->hdr, (size_t)g->segment_bytes);
  } else if (g->hdr) {
    size_t keep_from = (size_t)g->hdr->shared_offset;
    munmap(g->hdr, g->shared_handed_out ? keep_from : (size_t)g->segment_bytes);
  }
  free(g);
}

/** Joins (rank 0: creates) the process group whose segment is `name`
 *  ("/dtrain-<run id>-pg"). Every rank waits until all `world` ranks are in,
 *  then the name is unlinked. `chunk_bytes` sizes each rank's two data
 *  buffers and `shared_bytes` its shared region (rank 0's values win); waits
 *  spin `spin_ns` before sleeping. On success *out_handle holds the handle
 *  for the other dt_shm_* calls. */
DT_EXPORT dt_status dt_shm_open_shared(const char* name, int32_t rank, int32_t world, int64_t chunk_bytes,
                                       int64_t shared_bytes, int64_t spin_ns, int32_t flags, int64_t timeout_ms,
                                       uint64_t* out_handle) {
  dt_status st =
      dt_shm_check_args_(name, rank, world, chunk_bytes, shared_bytes, spin_ns, timeout_ms, out_handle);
  if (st) return st;
  dt_shm_t* g = calloc(1, sizeof *g);
  if (!g) return dt_shm_fail_(DT_ERR_ALLOC, "dt_shm_open: out of memory");
  snprintf(g->name, sizeof g->name, "%s", name);
  g->rank = rank;
  g->world = world;
  g->flags = flags;
  g->spin_ns = spin_ns;
  g->chunk_bytes = chunk_bytes;
  g->shared_bytes = shared_bytes;
  g->call_start_ns = dt_shm_now_ns_();
  int64_t deadline = g->call_start_ns + timeout_ms * 1000000LL;
  int64_t data_offset = dt_shm_round_up_((int64_t)sizeof(dt_shm_header_t) + world * (int64_t)sizeof(dt_shm_rank_t), 4096);
  st = rank == 0 ? dt_shm_create_(g, data_offset) : dt_shm_find_(g, deadline);
  int member = 0; /* this rank holds a record in the segment */
  if (st == DT_OK) {
    g->data = (char*)g->hdr + g->hdr->data_offset;
    g->shared = (char*)g->hdr + g->hdr->shared_offset;
    if (g->shared_bytes) {
      for (int32_t r = 0; r < world; r++) g->regions[r] = g->shared + (int64_t)r * g->shared_bytes;
    }
    st = dt_shm_register_(g);
    member = st == DT_OK;
  }
  if (st == DT_OK) {
    char what[DT_SHM_NAME_MAX + 64];
    snprintf(what, sizeof what, "Rendezvous on /dev/shm%s", g->name);
    st = dt_shm_wait_(g, 0, deadline, what);
    if (st != DT_OK) dt_shm_abort_with_(g, st);
  }
  /* Every member unlinks (the first succeeds) before returning, also after a
   * failed rendezvous, so no name outlives it and a rank that re-creates the
   * group at once can never find the old one. A rank that could not join
   * leaves the name alone: it may belong to another live job. */
  if (member || (rank == 0 && g->hdr)) shm_unlink(g->name);
  if (st != DT_OK) {
    dt_shm_free_(g);
    return st;
  }
  *out_handle = (uint64_t)(uintptr_t)g;
  return DT_OK;
}

/** dt_shm_open_shared without shared regions. */
DT_EXPORT dt_status dt_shm_open(const char* name, int32_t rank, int32_t world, int64_t chunk_bytes, int64_t spin_ns,
                                int32_t flags, int64_t timeout_ms, uint64_t* out_handle) {
  return dt_shm_open_shared(name, rank, world, chunk_bytes, 0, spin_ns, flags, timeout_ms, out_handle);
}

/** out[0] = the address of this rank's shared region, out[1] = its bytes (0:
 *  the group has none). With `keep` (arrays are made over it), the region
 *  stays mapped until the process exits, also after dt_shm_close. */
DT_EXPORT dt_status dt_shm_shared(dt_shm_t* g, int32_t keep, uint64_t* out) {
  if (!g || !out) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_shared: NULL argument");
  out[0] = g->shared_bytes ? (uint64_t)(uintptr_t)dt_shm_shared_region_(g, g->rank) : 0;
  out[1] = (uint64_t)g->shared_bytes;
  if (g->shared_bytes && keep) g->shared_handed_out = 1;
  return DT_OK;
}

/** Detaches: peers still waiting on this rank fail at once ("closed its
 *  process group") instead of at their timeout. */
DT_EXPORT dt_status dt_shm_close(dt_shm_t* g) {
  if (!g) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_close: handle is NULL");
  atomic_store(&g->hdr->ranks[g->rank].state, DT_SHM_RANK_CLOSED);
  dt_shm_wake_all_(g->hdr);
  dt_shm_free_(g);
  return DT_OK;
}

/** Marks the group failed with `reason` (an error seen outside the native
 *  calls); peers waiting in a collective stop with this text. */
DT_EXPORT dt_status dt_shm_abort(dt_shm_t* g, int32_t status, const char* reason) {
  if (!g) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_abort: handle is NULL");
  dt_shm_fail_(status == DT_OK ? DT_ERR_ARG : status, "%s", reason ? reason : "(no reason given)");
  dt_shm_abort_with_(g, status == DT_OK ? DT_ERR_ARG : status);
  return DT_OK;
}

/** out[0..5] = rank, world, chunk_bytes, segment_bytes, collectives entered, flags. */
DT_EXPORT dt_status dt_shm_info(dt_shm_t* g, int64_t* out) {
  if (!g || !out) return dt_shm_fail_(DT_ERR_ARG, "dt_shm_info: NULL argument");
  out[0] = g->rank;
  out[1] = g->world;
  out[2] = g->chunk_bytes;
  out[3] = g->segment_bytes;
  out[4] = (int64_t)g->seq;
  out[5] = g->flags;
  return DT_OK;
}
