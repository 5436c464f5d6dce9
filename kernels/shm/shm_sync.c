/* shm_sync.c — how ranks wait for each other in the control area: barriers on
 * per-rank phase words (spin, then futex-sleep on one shared word), deadlines,
 * the abort word, noticing ranks that exited or closed, and comparing the
 * ranks' posted calls to catch mismatched collectives. */
#define _GNU_SOURCE
#include "shm_internal.h"
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How often a sleeping waiter re-checks that the ranks it waits for still live. */
#define DT_SHM_LIVENESS_NS 100000000LL
#define DT_SHM_LIST_MAX 8
/* A waiter spins without yielding for this long first (a barrier round trip
 * between two running ranks takes well under a microsecond). */
#define DT_SHM_PURE_SPIN_NS 5000

/* ---- names, for messages ------------------------------------------------ */

const char* dt_shm_op_name_(int32_t op) {
  switch (op) {
    case DT_SHM_OP_ALLREDUCE: return "allReduce";
    case DT_SHM_OP_ALLREDUCE_SHARED: return "allReduce[shared buffer]";
    case DT_SHM_OP_BROADCAST: return "broadcast";
    case DT_SHM_OP_ALLGATHER: return "allGather";
    case DT_SHM_OP_REDUCE_SCATTER: return "reduceScatter";
    case DT_SHM_OP_BARRIER: return "barrier";
    case DT_SHM_OP_RESERVE: return "reserveShared";
    default: return "unknown";
  }
}

const char* dt_shm_redop_name_(int32_t redop) {
  switch (redop) {
    case DT_SHM_SUM: return "sum";
    case DT_SHM_AVG: return "avg";
    case DT_SHM_MAX: return "max";
    case DT_SHM_MIN: return "min";
    default: return "unknown";
  }
}

const char* dt_shm_dtype_name_(int32_t dtype) {
  switch (dtype) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_I64: return "i64";
    case DT_U8: return "u8";
    case DT_SHM_F64: return "f64";
    default: return "unknown";
  }
}

/* `allReduce(sum, 10 x f32)`, `broadcast(root 1, 3 x i64)`, `barrier("epoch")` */
static void dt_shm_describe_call_(const dt_shm_call_t* c, char* out, size_t cap) {
  size_t esize = dt_shm_dtype_size_(c->dtype);
  long long count = esize ? (long long)(c->bytes / (int64_t)esize) : (long long)c->bytes;
  const char* per_rank = c->op == DT_SHM_OP_ALLGATHER || c->op == DT_SHM_OP_REDUCE_SCATTER ? " per rank" : "";
  switch (c->op) {
    case DT_SHM_OP_BARRIER:
      snprintf(out, cap, "barrier(\"%s\")", c->detail);
      break;
    case DT_SHM_OP_BROADCAST:
      snprintf(out, cap, "broadcast(root %d, %lld x %s)", c->root, count, dt_shm_dtype_name_(c->dtype));
      break;
    case DT_SHM_OP_RESERVE:
      snprintf(out, cap, "reserveShared(%lld bytes per rank)", (long long)c->bytes);
      break;
    case DT_SHM_OP_ALLGATHER:
      snprintf(out, cap, "allGather(%lld x %s%s)", count, dt_shm_dtype_name_(c->dtype), per_rank);
      break;
    default:
      snprintf(out, cap, "%s(%s, %lld x %s%s)", dt_shm_op_name_(c->op), dt_shm_redop_name_(c->redop), count,
               dt_shm_dtype_name_(c->dtype), per_rank);
  }
}

/* "#5 allReduce(sum, 10 x f32)": this rank's current collective. */
static void dt_shm_describe_current_(dt_shm_t* g, char* out, size_t cap) {
  char call[160];
  dt_shm_describe_call_(&g->hdr->ranks[g->rank].call[g->seq & 1], call, sizeof call);
  snprintf(out, cap, "#%llu %s", (unsigned long long)g->seq, call);
}

/* ---- futex ---------------------------------------------------------------- */

static void dt_shm_futex_wait_(_Atomic uint32_t* word, uint32_t expected, int64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / 1000000000LL), (long)(timeout_ns % 1000000000LL)};
  /* Not FUTEX_PRIVATE: the word is shared between processes. EAGAIN (the word
   * changed), EINTR and ETIMEDOUT all just send the caller round its loop. */
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void dt_shm_wake_all_(dt_shm_header_t* hdr) {
  atomic_fetch_add(&hdr->wake, 1);
  if (atomic_load(&hdr->sleepers) > 0) syscall(SYS_futex, (uint32_t*)&hdr->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline void dt_shm_pause_(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* ---- waiting --------------------------------------------------------------- */

/* Whether rank r has not reached `phase` (phase 0: has not attached). */
static int dt_shm_rank_missing_(dt_shm_t* g, uint64_t phase, int32_t r) {
  dt_shm_rank_t* rec = &g->hdr->ranks[r];
  return phase == 0 ? atomic_load(&rec->state) == DT_SHM_RANK_ABSENT : atomic_load(&rec->arrived) < phase;
}

int dt_shm_missing_(dt_shm_t* g, uint64_t phase, int32_t* ranks, int max) {
  int n = 0;
  for (int32_t r = 0; r < g->world; r++) {
    if (dt_shm_rank_missing_(g, phase, r)) {
      if (n < max) ranks[n] = r;
      n++;
    }
  }
  return n;
}

#ifdef DT_SHM_TEST_PROBE_GATE
/* Test builds only (tests/distributed/shm_liveness_race_test.ts): the first
 * time a waiter in a barrier named `name` reaches this point with a peer
 * missing, it creates "$DT_SHM_TEST_GATE.held" and waits (at most a minute)
 * for "$DT_SHM_TEST_GATE.go", so that a test can make peers arrive, finish
 * the barrier, exit, close or abort before the waiter looks again. "gate"
 * holds it after it read the missing ranks, "gate-late" after it also read
 * the abort word. */
static void dt_shm_test_gate_(dt_shm_t* g, const char* name) {
  static int passed = 0;
  const char* gate = getenv("DT_SHM_TEST_GATE");
  const dt_shm_call_t* c = &g->hdr->ranks[g->rank].call[g->seq & 1];
  if (passed || !gate || g->seq == 0 || c->op != DT_SHM_OP_BARRIER || strcmp(c->detail, name) != 0) return;
  passed = 1;
  char path[512];
  snprintf(path, sizeof path, "%s.held", gate);
  FILE* f = fopen(path, "w");
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s.go", gate);
  for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++) usleep(1000);
}
#endif

/* A zombie still answers kill(pid, 0), so also read its state from /proc. */
static int dt_shm_pid_gone_(int32_t pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) == -1 && errno == ESRCH) return 1;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char* close_paren = strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* Writes why rank r can never arrive into `why`, or returns 0 when it may
 * still. The pid probe costs system calls, so only when `probe_pid`. */
static int dt_shm_rank_gone_(dt_shm_t* g, int32_t r, int probe_pid, char* why, size_t cap) {
  dt_shm_rank_t* rec = &g->hdr->ranks[r];
  int32_t pid = atomic_load(&rec->pid);
  if (atomic_load(&rec->state) == DT_SHM_RANK_CLOSED) {
    snprintf(why, cap, "rank %d (pid %d) closed its process group", r, pid);
    return 1;
  }
  if (probe_pid && dt_shm_pid_gone_(pid)) {
    snprintf(why, cap, "rank %d (pid %d) exited", r, pid);
    return 1;
  }
  return 0;
}

/* ", rank 1 (last entered #6 barrier("x"))" for each missing rank. */
static void dt_shm_describe_missing_(dt_shm_t* g, uint64_t phase, const int32_t* miss, int n, char* out,
                                     size_t cap) {
  size_t len = 0;
  out[0] = 0;
  int shown = n < DT_SHM_LIST_MAX ? n : DT_SHM_LIST_MAX;
  for (int i = 0; i < shown && len < cap; i++) {
    int32_t r = miss[i];
    const char* sep = i == 0 ? "" : ", ";
    if (phase == 0) {
      len += (size_t)snprintf(out + len, cap - len, "%srank %d has not attached", sep, r);
      continue;
    }
    dt_shm_rank_t* rec = &g->hdr->ranks[r];
    uint64_t last = atomic_load(&rec->last_seq);
    char call[160];
    if (last == 0) {
      len += (size_t)snprintf(out + len, cap - len, "%srank %d has not entered any collective yet", sep, r);
    } else if (last == g->seq) {
      len += (size_t)snprintf(out + len, cap - len, "%srank %d is in the same collective but has not reached this step", sep, r);
    } else {
      dt_shm_describe_call_(&rec->call[last & 1], call, sizeof call);
      len += (size_t)snprintf(out + len, cap - len, "%srank %d is still at #%llu %s", sep, r,
                              (unsigned long long)last, call);
    }
  }
  if (n > shown && len < cap) snprintf(out + len, cap - len, " and %d more", n - shown);
}

/* Marks the local handle dead with the current error text; returns status. */
static dt_status dt_shm_mark_dead_(dt_shm_t* g, dt_status status) {
  if (!g->dead) {
    g->dead = status;
    snprintf(g->dead_text, sizeof g->dead_text, "%s", dt_shm_error_text_());
  }
  return status;
}

static dt_status dt_shm_peer_aborted_(dt_shm_t* g, int32_t aborted_by, const char* what) {
  int32_t r = aborted_by - 1;
  char what_buf[200];
  if (!what) {
    dt_shm_describe_current_(g, what_buf, sizeof what_buf);
    what = what_buf;
  }
  dt_shm_fail_(DT_SHM_ERR_PEER, "%s on rank %d stopped: rank %d aborted the process group: %s", what, g->rank, r,
               g->hdr->ranks[r].abort_text);
  return dt_shm_mark_dead_(g, DT_SHM_ERR_PEER);
}

dt_status dt_shm_wait_(dt_shm_t* g, uint64_t phase, int64_t deadline_ns, const char* what) {
  dt_shm_header_t* hdr = g->hdr;
  int32_t miss[DT_SHM_MAX_RANKS];
  const int64_t spin_from = dt_shm_now_ns_(), spin_until = spin_from + g->spin_ns;
  int64_t next_liveness = 0;
  char what_buf[200];
  for (;;) {
    uint32_t word = atomic_load(&hdr->wake); /* read before the check, so a later arrival changes it */
    int n = dt_shm_missing_(g, phase, miss, DT_SHM_MAX_RANKS);
    if (n == 0) return DT_OK;
#ifdef DT_SHM_TEST_PROBE_GATE
    dt_shm_test_gate_(g, "gate");
#endif
    int32_t aborted_by = atomic_load(&hdr->aborted_by);
#ifdef DT_SHM_TEST_PROBE_GATE
    dt_shm_test_gate_(g, "gate-late");
#endif
    /* One clock reading decides both whether to spin and whether `what` needs
     * its description: every path past the spin below writes a message with
     * `what`, so it must never be NULL there (two readings once let the spin
     * end between them, and a message read "(null) on rank 0 cannot complete"). */
    int64_t now = dt_shm_now_ns_();
    if (!what && (aborted_by != 0 || now >= spin_until)) {
      dt_shm_describe_current_(g, what_buf, sizeof what_buf);
      what = what_buf;
    }
    /* As for a rank found gone below: the abort may have come after the last missing rank arrived. */
    if (aborted_by != 0 && aborted_by - 1 != g->rank) {
      if (dt_shm_missing_(g, phase, miss, DT_SHM_MAX_RANKS) == 0) return DT_OK;
      return dt_shm_peer_aborted_(g, aborted_by, what);
    }
    if (now < spin_until) {
      /* After the first few µs, yield between short spins: with more runnable
       * threads than cores, the rank being waited for may need this core. */
      for (int i = 0; i < 32; i++) dt_shm_pause_();
      if (now > spin_from + DT_SHM_PURE_SPIN_NS) sched_yield();
      continue;
    }
    if (now >= deadline_ns) {
      char missing[600];
      dt_shm_describe_missing_(g, phase, miss, n, missing, sizeof missing);
      dt_shm_fail_(DT_ERR_TIMEOUT, "%s timed out on rank %d after %lld ms: %s", what, g->rank,
                   (long long)((now - g->call_start_ns) / 1000000), missing);
      return dt_shm_mark_dead_(g, DT_ERR_TIMEOUT);
    }
    int probe_pid = now >= next_liveness;
    if (probe_pid) next_liveness = now + DT_SHM_LIVENESS_NS;
    char why[120];
    int gone = 0;
    for (int i = 0; i < n && !gone; i++) {
      /* `miss` was read before the probe: a rank may have arrived since,
       * finished this collective with the others and then closed its group or
       * exited. Its arrival is stored before it can do either, so a rank
       * found gone that is still missing on a second look never arrives. */
      gone = dt_shm_rank_gone_(g, miss[i], probe_pid, why, sizeof why) && dt_shm_rank_missing_(g, phase, miss[i]);
    }
    if (gone) {
      /* A missing rank may have closed its group or exited because another rank
       * aborted after aborted_by was read above: the abort, stored first, is the
       * cause to name. */
      aborted_by = atomic_load(&hdr->aborted_by);
      if (aborted_by != 0 && aborted_by - 1 != g->rank) return dt_shm_peer_aborted_(g, aborted_by, what);
      dt_shm_fail_(DT_SHM_ERR_PEER, "%s on rank %d cannot complete: %s", what, g->rank, why);
      return dt_shm_mark_dead_(g, DT_SHM_ERR_PEER);
    }
    int64_t slice = deadline_ns - now;
    if (slice > DT_SHM_LIVENESS_NS) slice = DT_SHM_LIVENESS_NS;
    atomic_fetch_add(&hdr->sleepers, 1);
    dt_shm_futex_wait_(&hdr->wake, word, slice);
    atomic_fetch_sub(&hdr->sleepers, 1);
  }
}

/* ---- collectives' bookkeeping ---------------------------------------------- */

void dt_shm_post_call_(dt_shm_t* g, int32_t op, int32_t dtype, int64_t bytes, int32_t root, int32_t redop,
                       const char* detail) {
  g->seq++;
  g->call_start_ns = dt_shm_now_ns_();
  dt_shm_rank_t* me = &g->hdr->ranks[g->rank];
  dt_shm_call_t* c = &me->call[g->seq & 1];
  c->seq = g->seq;
  c->op = op;
  c->dtype = dtype;
  c->bytes = bytes;
  c->root = root;
  c->redop = redop;
  memset(c->detail, 0, sizeof c->detail);
  if (detail) strncpy(c->detail, detail, sizeof c->detail - 1);
  atomic_store(&me->last_seq, g->seq);
}

/* Sequence, op, size, dtype, reduce op and root always (a few integer
 * compares per peer); barrier names only under DETAIL. */
static int dt_shm_calls_differ_(const dt_shm_call_t* a, const dt_shm_call_t* b, int detail) {
  if (a->seq != b->seq || a->op != b->op || a->bytes != b->bytes || a->dtype != b->dtype || a->root != b->root ||
      a->redop != b->redop)
    return 1;
  return detail && strncmp(a->detail, b->detail, sizeof a->detail) != 0;
}

/* After a collective's first barrier every rank's call record for it is
 * posted; each rank compares them all with its own. */
static dt_status dt_shm_check_calls_(dt_shm_t* g) {
  const dt_shm_call_t* mine = &g->hdr->ranks[g->rank].call[g->seq & 1];
  int detail = (g->flags & DT_SHM_FLAG_DETAIL) != 0;
  for (int32_t q = 0; q < g->world; q++) {
    if (q == g->rank) continue;
    const dt_shm_call_t* theirs = &g->hdr->ranks[q].call[g->seq & 1];
    if (!dt_shm_calls_differ_(mine, theirs, detail)) continue;
    char a[160], b[160];
    dt_shm_describe_call_(mine, a, sizeof a);
    dt_shm_describe_call_(theirs, b, sizeof b);
    return dt_shm_fail_(DT_ERR_ARG,
                        "Collective mismatch at #%llu: rank %d called %s but rank %d called #%llu %s. "
                        "Every rank must call the same collectives in the same order with the same sizes, dtypes, "
                        "reduce ops and roots%s",
                        (unsigned long long)g->seq, g->rank, a, q, (unsigned long long)theirs->seq, b,
                        detail ? "" : " (set DTRAIN_DISTRIBUTED_DEBUG=DETAIL to also compare barrier names)");
  }
  return DT_OK;
}

dt_status dt_shm_sync_(dt_shm_t* g, int first, int64_t deadline_ns) {
  uint64_t phase = ++g->phase;
  atomic_store(&g->hdr->ranks[g->rank].arrived, phase);
  dt_shm_wake_all_(g->hdr);
  dt_status st = dt_shm_wait_(g, phase, deadline_ns, NULL);
  if (st == DT_OK && first) st = dt_shm_check_calls_(g);
  return st == DT_OK ? DT_OK : dt_shm_abort_with_(g, st);
}

dt_status dt_shm_abort_with_(dt_shm_t* g, dt_status status) {
  dt_shm_mark_dead_(g, status);
  dt_shm_rank_t* me = &g->hdr->ranks[g->rank];
  if (atomic_load(&g->hdr->aborted_by) == 0) {
    snprintf(me->abort_text, sizeof me->abort_text, "%s", g->dead_text);
    int32_t none = 0;
    atomic_compare_exchange_strong(&g->hdr->aborted_by, &none, g->rank + 1);
    dt_shm_wake_all_(g->hdr);
  }
  /* the caller's status and text stand, even when a peer aborted first */
  dt_shm_fail_(status, "%s", g->dead_text);
  return status;
}

dt_status dt_shm_check_alive_(dt_shm_t* g) {
  if (g->dead) {
    return dt_shm_fail_(g->dead, "process group %s cannot be used after an earlier failure on rank %d: %s", g->name,
                        g->rank, g->dead_text);
  }
  int32_t aborted_by = atomic_load(&g->hdr->aborted_by);
  if (aborted_by != 0) return dt_shm_peer_aborted_(g, aborted_by, NULL);
  return DT_OK;
}
