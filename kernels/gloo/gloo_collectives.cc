/* gloo_collectives.cc — the collectives of a Gloo group. dt_gloo_check runs
 * first for every call: each member sends every other a 72-byte record of
 * its call (op, sizes, dtype, reduce op, root, barrier name), so mismatched
 * calls fail on every rank with both sides described and a timeout names
 * the members that did not arrive; it is also the barrier. The data moves
 * with Gloo's own algorithms (ring all-reduce, broadcast, ring all-gather,
 * all-to-all for reduce-scatter, whose sums this library takes in rank order). */
#include <cstdio>
#include <cstring>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/unbound_buffer.h>

#include "gloo_internal.h"

namespace {

enum { OP_ALLREDUCE = 1, OP_BROADCAST, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BARRIER };
constexpr uint64_t kCheckSlot = (uint64_t)0xD8 << 56;
constexpr uint32_t kMagic = 0x64746731; /* "dtg1" */

struct Call {
  uint32_t magic;
  int32_t op;
  uint64_t seq;
  int64_t bytes;
  int32_t dtype;
  int32_t redop;
  int32_t root;
  uint32_t reserved;
  /* a barrier's name; its first 31 bytes are compared, as the shm group does */
  char name[32];
};
static_assert(sizeof(Call) == 72, "a call record is 72 bytes");

const char* op_name(int32_t op) {
  switch (op) {
    case OP_ALLREDUCE: return "allReduce";
    case OP_BROADCAST: return "broadcast";
    case OP_ALLGATHER: return "allGather";
    case OP_REDUCE_SCATTER: return "reduceScatter";
    case OP_BARRIER: return "barrier";
    default: return "unknown";
  }
}

const char* redop_name(int32_t r) {
  static const char* names[] = {"sum", "avg", "max", "min"};
  return r >= 0 && r <= 3 ? names[r] : "unknown";
}

const char* dtype_name(int32_t d) {
  switch (d) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_I32: return "i32";
    case DT_I64: return "i64";
    case DT_U8: return "u8";
    case DT_GLOO_F64: return "f64";
    default: return "unknown";
  }
}

/* `allReduce(sum, 10 x f32)`, `broadcast(root 1, 3 x i64)`, `barrier("epoch")` (as the shm group writes them) */
std::string describe(const Call& c) {
  char out[200];
  size_t es = dt_gloo_dtype_size_(c.dtype);
  long long count = es ? (long long)(c.bytes / (int64_t)es) : (long long)c.bytes;
  const char* per_rank = c.op == OP_ALLGATHER || c.op == OP_REDUCE_SCATTER ? " per rank" : "";
  switch (c.op) {
    case OP_BARRIER: snprintf(out, sizeof out, "barrier(\"%.*s\")", (int)sizeof c.name, c.name); break;
    case OP_BROADCAST:
      snprintf(out, sizeof out, "broadcast(root %d, %lld x %s)", c.root, count, dtype_name(c.dtype));
      break;
    case OP_ALLGATHER: snprintf(out, sizeof out, "allGather(%lld x %s%s)", count, dtype_name(c.dtype), per_rank); break;
    default:
      snprintf(out, sizeof out, "%s(%s, %lld x %s%s)", op_name(c.op), redop_name(c.redop), count,
               dtype_name(c.dtype), per_rank);
  }
  return out;
}

bool differ(const Call& a, const Call& b, bool detail) {
  if (a.magic != b.magic || a.seq != b.seq || a.op != b.op || a.bytes != b.bytes) return true;
  if (!detail) return false;
  return a.dtype != b.dtype || a.root != b.root || a.redop != b.redop || strncmp(a.name, b.name, sizeof a.name) != 0;
}

std::string labels_of(const dt_gloo_group* g, const std::vector<int>& members) {
  std::string out;
  for (size_t i = 0; i < members.size(); i++) {
    if (i) out += i + 1 == members.size() ? " and " : ", ";
    out += g->labels[(size_t)members[i]];
  }
  return out;
}

dt_status check_alive(dt_gloo_group* g, const char* what) {
  if (!g) return dt_gloo_fail_(DT_ERR_ARG, "%s: handle is NULL", what);
  if (g->dead) {
    return dt_gloo_fail_(g->dead, "the Gloo process group cannot be used after an earlier failure on %s: %s",
                         g->labels[g->rank].c_str(), g->dead_text.c_str());
  }
  return DT_OK;
}

/* "#12 allReduce(sum, 1024 x f32)" for messages of the data ops */
std::string what_of(uint64_t seq, int32_t op, int32_t dtype, int64_t count, int32_t redop, int32_t root) {
  Call c = {};
  c.op = op;
  c.dtype = dtype;
  c.bytes = count * (int64_t)dt_gloo_dtype_size_(dtype);
  c.redop = redop;
  c.root = root;
  return "#" + std::to_string(seq) + " " + describe(c);
}

/* Runs a data op, turning Gloo's exceptions into a status with a message. */
template <typename F>
dt_status run(dt_gloo_group* g, const std::string& what, int64_t timeout_ms, F&& body) {
  try {
    body();
    return DT_OK;
  } catch (const gloo::IoException& e) {
    return dt_gloo_peer_failure_(g, what, dt_gloo_text_(e), timeout_ms);
  } catch (const std::exception& e) {
    dt_gloo_fail_(DT_ERR_INTERNAL, "%s on %s failed inside Gloo: %s", what.c_str(), g->labels[g->rank].c_str(),
                  dt_gloo_text_(e).c_str());
    return dt_gloo_abort_with_(g, DT_ERR_INTERNAL);
  }
}

template <typename T>
void allreduce_typed(dt_gloo_group* g, T* buf, int64_t count, int32_t dtype, int32_t redop, uint64_t seq,
                     int64_t timeout_ms) {
  gloo::AllreduceOptions opts(g->ctx);
  opts.setOutput(buf, (size_t)count);
  const int32_t combine = redop == DT_GLOO_AVG ? DT_GLOO_SUM : redop;
  opts.setReduceFunction([dtype, combine](void* out, const void* a, const void* b, size_t n) {
    dt_gloo_combine_(dtype, combine, out, a, b, n);
  });
  opts.setTag((uint32_t)seq);
  opts.setTimeout(std::chrono::milliseconds(timeout_ms));
  gloo::allreduce(opts);
}

/* Posts the receives of call `seq`'s records from every member not posted
 * yet into check_in[seq & 1]; throws when a connection is gone (members
 * posted so far stay recorded, so a later attempt never posts one twice). */
void post_check_receives(dt_gloo_group* g, uint64_t seq) {
  std::vector<char>& in = g->check_in[seq & 1];
  auto& buf = g->check_in_buf[seq & 1];
  if (!buf) {
    in.assign((size_t)g->size * sizeof(Call), 0);
    buf = g->ctx->createUnboundBuffer(in.data(), in.size());
  }
  if (g->check_posted_seq != seq) {
    g->check_posted_seq = seq;
    g->check_posted_from.assign((size_t)g->size, false);
  }
  const uint64_t slot = kCheckSlot | (uint32_t)seq;
  for (int p = 0; p < g->size; p++) {
    if (p == g->rank || g->check_posted_from[(size_t)p]) continue;
    buf->recv(p, slot, (size_t)p * sizeof(Call), sizeof(Call));
    g->check_posted_from[(size_t)p] = true;
  }
}

}  // namespace

/** Call #n (op, sizes, dtype, reduce op, root, barrier name) on every member:
 *  each member's record goes to every other, so a member that does not
 *  arrive is named and any mismatch fails the call on every member. The
 *  record's `count` is elements per rank as the shm group counts them. */
DT_EXPORT dt_status dt_gloo_check(dt_gloo_group* g, int32_t op, int32_t dtype, int64_t count, int32_t redop,
                                  int32_t root, const char* name, int64_t timeout_ms) {
  dt_status st = check_alive(g, "dt_gloo_check");
  if (st) return st;
  Call mine = {};
  mine.magic = kMagic;
  mine.op = op;
  mine.seq = ++g->seq;
  mine.bytes = count * (int64_t)(dt_gloo_dtype_size_(dtype) ? dt_gloo_dtype_size_(dtype) : 1);
  mine.dtype = dtype;
  mine.redop = redop;
  mine.root = root;
  if (name) strncpy(mine.name, name, sizeof mine.name - 1);
  const std::string what = "#" + std::to_string(mine.seq) + " " + describe(mine);
  const int n = g->size;
  if (n == 1) return DT_OK;
  std::vector<bool> got((size_t)n, false);
  const uint64_t slot = kCheckSlot | (uint32_t)mine.seq;
  const int64_t deadline = dt_gloo_now_ms_() + timeout_ms;
  try {
    post_check_receives(g, mine.seq); /* usually posted when the previous call completed */
    if (!g->check_out_buf) {
      g->check_out.assign((size_t)n * sizeof(Call), 0);
      g->check_out_buf = g->ctx->createUnboundBuffer(g->check_out.data(), g->check_out.size());
    }
    for (int p = 0; p < n; p++) {
      if (p == g->rank) continue;
      memcpy(g->check_out.data() + (size_t)p * sizeof(Call), &mine, sizeof mine);
      g->check_out_buf->send(p, slot, (size_t)p * sizeof(Call), sizeof(Call));
    }
    auto& inb = g->check_in_buf[mine.seq & 1];
    for (int k = 0; k < n - 1; k++) {
      int src = -1;
      int64_t left = deadline - dt_gloo_now_ms_();
      try {
        inb->waitRecv(&src, std::chrono::milliseconds(left > 1 ? left : 1));
      } catch (const gloo::IoException& e) {
        if (std::string(e.what()).find("Timed out") == std::string::npos) throw;
        std::vector<int> missing;
        for (int p = 0; p < n; p++) {
          if (p != g->rank && !got[(size_t)p]) missing.push_back(p);
        }
        dt_gloo_fail_(DT_ERR_TIMEOUT, "%s timed out on %s after %lld ms: %s %s not arrived", what.c_str(),
                      g->labels[g->rank].c_str(), (long long)timeout_ms, labels_of(g, missing).c_str(),
                      missing.size() == 1 ? "has" : "have");
        return dt_gloo_abort_with_(g, DT_ERR_TIMEOUT);
      }
      if (src >= 0 && src < n) got[(size_t)src] = true;
    }
    for (int k = 0; k < n - 1; k++) {
      int64_t left = deadline - dt_gloo_now_ms_();
      g->check_out_buf->waitSend(nullptr, std::chrono::milliseconds(left > 1 ? left : 1));
    }
  } catch (const gloo::IoException& e) {
    return dt_gloo_peer_failure_(g, what, dt_gloo_text_(e), timeout_ms);
  } catch (const std::exception& e) {
    dt_gloo_fail_(DT_ERR_INTERNAL, "%s on %s failed inside Gloo: %s", what.c_str(), g->labels[g->rank].c_str(),
                  dt_gloo_text_(e).c_str());
    return dt_gloo_abort_with_(g, DT_ERR_INTERNAL);
  }
  const Call* theirs = (const Call*)g->check_in[mine.seq & 1].data();
  const bool detail = (g->flags & DT_GLOO_FLAG_DETAIL) != 0;
  for (int q = 0; q < n; q++) {
    if (q == g->rank || !differ(mine, theirs[q], detail)) continue;
    const Call& t = theirs[q];
    dt_gloo_fail_(DT_ERR_ARG,
                  "Collective mismatch at #%llu: %s called %s but %s called #%llu %s. Every rank must call the same "
                  "collectives in the same order with the same sizes%s",
                  (unsigned long long)mine.seq, g->labels[g->rank].c_str(), describe(mine).c_str(),
                  g->labels[(size_t)q].c_str(), (unsigned long long)t.seq,
                  t.magic == kMagic ? describe(t).c_str() : "(an unreadable call record)",
                  detail ? "" : " (set DTRAIN_DISTRIBUTED_DEBUG=DETAIL to also compare dtypes, reduce ops, roots and "
                                "barrier names)");
    std::string text = dt_gloo_error_text_();
    g->dead = DT_ERR_ARG; /* every member finds the same mismatch: no abort record needed */
    g->dead_text = text;
    return DT_ERR_ARG;
  }
  try {
    post_check_receives(g, mine.seq + 1); /* the next call's records then go out at once */
  } catch (const gloo::IoException&) {
    /* this call is complete; a member that left after it fails the next call, which names it */
  }
  return DT_OK;
}

/** In place: buf[i] = op over the members (Gloo's ring all-reduce; every
 *  member ends with the same bits). avg divides the sum by `divisor` in the
 *  element type; bf16 and f16 are reduced in f32 and rounded once. */
DT_EXPORT dt_status dt_gloo_allreduce(dt_gloo_group* g, void* buf, int64_t count, int32_t dtype, int32_t redop,
                                      int64_t divisor, uint64_t seq, int64_t timeout_ms) {
  dt_status st = check_alive(g, "dt_gloo_allreduce");
  if (st) return st;
  if (!dt_gloo_reduce_supported_(dtype, redop) || count < 0 || (count > 0 && !buf) || divisor < 1) {
    return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_allreduce: dtype %d, op %d, count %lld, divisor %lld are not valid",
                         dtype, redop, (long long)count, (long long)divisor);
  }
  if (count == 0) return DT_OK;
  const std::string what = what_of(seq, OP_ALLREDUCE, dtype, count, redop, -1);
  return run(g, what, timeout_ms, [&] {
    if (dtype == DT_BF16 || dtype == DT_F16) {
      float* wide = (float*)dt_gloo_scratch_(g, (size_t)count * sizeof(float));
      dt_gloo_widen_(dtype, wide, buf, (size_t)count);
      if (g->size > 1) allreduce_typed(g, wide, count, DT_F32, redop, seq, timeout_ms);
      if (redop == DT_GLOO_AVG) dt_gloo_divide_(DT_F32, wide, (size_t)count, divisor);
      dt_gloo_narrow_(dtype, buf, wide, (size_t)count);
      return;
    }
    if (g->size > 1) {
      switch (dtype) {
        case DT_F32: allreduce_typed(g, (float*)buf, count, dtype, redop, seq, timeout_ms); break;
        case DT_GLOO_F64: allreduce_typed(g, (double*)buf, count, dtype, redop, seq, timeout_ms); break;
        case DT_I32: allreduce_typed(g, (int32_t*)buf, count, dtype, redop, seq, timeout_ms); break;
        case DT_I64: allreduce_typed(g, (int64_t*)buf, count, dtype, redop, seq, timeout_ms); break;
        default: allreduce_typed(g, (uint8_t*)buf, count, dtype, redop, seq, timeout_ms); break;
      }
    }
    if (redop == DT_GLOO_AVG) dt_gloo_divide_(dtype, buf, (size_t)count, divisor);
  });
}

/** buf on every member = buf on member `root`. */
DT_EXPORT dt_status dt_gloo_broadcast(dt_gloo_group* g, void* buf, int64_t count, int32_t dtype, int32_t root,
                                      uint64_t seq, int64_t timeout_ms) {
  dt_status st = check_alive(g, "dt_gloo_broadcast");
  if (st) return st;
  size_t es = dt_gloo_dtype_size_(dtype);
  if (es == 0 || count < 0 || (count > 0 && !buf) || root < 0 || root >= g->size) {
    return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_broadcast: dtype %d, count %lld, root %d are not valid", dtype,
                         (long long)count, root);
  }
  if (count == 0 || g->size == 1) return DT_OK;
  const std::string what = what_of(seq, OP_BROADCAST, dtype, count, -1, root);
  return run(g, what, timeout_ms, [&] {
    gloo::BroadcastOptions opts(g->ctx);
    opts.setOutput((uint8_t*)buf, (size_t)count * es);
    opts.setRoot(root);
    opts.setTag((uint32_t)seq);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    gloo::broadcast(opts);
  });
}

/** out (size x count) = the members' inp (count each), in member order. */
DT_EXPORT dt_status dt_gloo_allgather(dt_gloo_group* g, void* out, const void* inp, int64_t count, int32_t dtype,
                                      uint64_t seq, int64_t timeout_ms) {
  dt_status st = check_alive(g, "dt_gloo_allgather");
  if (st) return st;
  size_t es = dt_gloo_dtype_size_(dtype);
  if (es == 0 || count < 0 || (count > 0 && (!out || !inp))) {
    return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_allgather: dtype %d, count %lld are not valid", dtype, (long long)count);
  }
  if (count == 0) return DT_OK;
  const size_t bytes = (size_t)count * es;
  char* mine = (char*)out + (size_t)g->rank * bytes;
  if (g->size == 1) {
    if (mine != inp) memmove(mine, inp, bytes);
    return DT_OK;
  }
  const std::string what = what_of(seq, OP_ALLGATHER, dtype, count, -1, -1);
  return run(g, what, timeout_ms, [&] {
    gloo::AllgatherOptions opts(g->ctx);
    if (mine != inp) opts.setInput((uint8_t*)const_cast<void*>(inp), bytes);
    opts.setOutput((uint8_t*)out, bytes * (size_t)g->size);
    opts.setTag((uint32_t)seq);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    gloo::allgather(opts);
  });
}

/** out (count) = op over the members of block `rank` of their inp (size x
 *  count): blocks travel with Gloo's all-to-all and are combined here in
 *  member order (avg divides by the group's size). */
DT_EXPORT dt_status dt_gloo_reduce_scatter(dt_gloo_group* g, void* out, const void* inp, int64_t count,
                                           int32_t dtype, int32_t redop, uint64_t seq, int64_t timeout_ms) {
  dt_status st = check_alive(g, "dt_gloo_reduce_scatter");
  if (st) return st;
  size_t es = dt_gloo_dtype_size_(dtype);
  if (!dt_gloo_reduce_supported_(dtype, redop) || count < 0 || (count > 0 && (!out || !inp))) {
    return dt_gloo_fail_(DT_ERR_ARG, "dt_gloo_reduce_scatter: dtype %d, op %d, count %lld are not valid", dtype, redop,
                         (long long)count);
  }
  if (count == 0) return DT_OK;
  const size_t block = (size_t)count * es;
  const std::string what = what_of(seq, OP_REDUCE_SCATTER, dtype, count, redop, -1);
  return run(g, what, timeout_ms, [&] {
    char* blocks = dt_gloo_scratch_(g, block * (size_t)g->size);
    if (g->size > 1) {
      gloo::AlltoallOptions opts(g->ctx);
      opts.setInput((uint8_t*)const_cast<void*>(inp), block * (size_t)g->size);
      opts.setOutput((uint8_t*)blocks, block * (size_t)g->size);
      opts.setTag((uint32_t)seq);
      opts.setTimeout(std::chrono::milliseconds(timeout_ms));
      gloo::alltoall(opts);
    } else {
      memcpy(blocks, inp, block);
    }
    dt_gloo_reduce_in_order_(dtype, redop, out, blocks, block, g->size, (size_t)count, g->size);
  });
}
