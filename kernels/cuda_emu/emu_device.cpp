/* emu_device.cpp — how the emulated GPU runs a kernel: each block on one host
 * thread, each CUDA thread of the block a fiber with its own small stack
 * (a hand-written context switch on x86-64). A fiber runs until it reaches
 * __syncthreads, a warp operation or its end; the block's scheduler resumes
 * the others, and a barrier opens only when every thread it names has
 * arrived. So barriers, shuffles and votes behave as on a GPU, and breaking
 * their rules (a thread that exits or waits elsewhere while others wait for
 * it, a mask that leaves out its caller or names lanes that do not exist,
 * threads meeting different __syncthreads) fails the launch with a message
 * naming the block and thread, instead of hanging or passing by luck. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <string>
#include "emu_internal.h"
#include "emu_racecheck.h"

#if !defined(__x86_64__)
#error "the emulated CUDA device switches fibers with x86-64 code"
#endif

thread_local const dt_emu_where* dt_emu_current_ = nullptr;

namespace {

constexpr size_t kStackBytes = 32 << 10;
constexpr size_t kGuardBytes = 4096;
constexpr size_t kSlotBytes = kStackBytes + kGuardBytes;

enum State : uint8_t { kRunnable, kAtBarrier, kAtWarp, kDone };

struct Fiber {
  void* sp; /* saved stack pointer while suspended */
  dt_emu_where where;
  uint32_t linear; /* x + y * bx + z * bx * by */
  State state;
  uint64_t wait_gen; /* the barrier or warp generation it waits for */
  char* stack_top;
};

struct Warp {
  uint64_t gen;     /* completed operations */
  uint32_t arrived; /* lanes waiting in the current operation */
  uint32_t mask;    /* the current operation's mask */
  int kind;
  uint32_t exists; /* lanes this block has */
  uint32_t exited; /* lanes that finished the kernel */
  const char* what;
  uint64_t vals[2][32]; /* by generation parity: a fast lane never overwrites values still read */
};

/* One host thread's block runner: fibers and their stacks, reused by every block. */
struct Runner {
  Fiber* fibers = nullptr;
  char* stacks = nullptr;
  int cap = 0;
  int n = 0;
  int done = 0;
  Warp warps[dt_emu::kMaxThreadsPerBlock / 32];
  uint64_t bar_gen = 0;
  int bar_arrived = 0;
  int bar_kind = 0;
  const char* bar_site = nullptr;
  int vote[2] = {0, 0};
  void* sched_sp = nullptr;
  int current = 0;
  const dt_emu::Launch* launch = nullptr;
  char* dyn = nullptr;
  size_t dyn_cap = 0;
  bool failed = false;
  std::string error;
  /* racecheck (DTRAIN_EMU_RACECHECK=1): this host thread's static shared
   * memory (the kernel library's thread-local block), its shadow (static
   * shared bytes first, then the dynamic ones) and the scheduling order's
   * random state */
  char* static_shared = nullptr;
  size_t static_shared_bytes = 0;
  dt_emu::RaceShadow race;
  uint64_t rng = 0;
};

thread_local Runner* tl_runner = nullptr;

}  // namespace

/* ---- the context switch ---------------------------------------------------------------
 * dt_emu_switch_(save, to): saves the callee-saved registers on the current
 * stack, stores the stack pointer in *save and resumes the stack `to`. A new
 * fiber's stack is laid out as if it had been suspended, with
 * dt_emu_fiber_entry_ as the return address and its Fiber* in r12. The
 * floating-point control state (MXCSR, x87 control word) is not switched:
 * kernels never change it, so every fiber runs with the host thread's. */
extern "C" void dt_emu_switch_(void** save, void* to);
extern "C" void dt_emu_fiber_entry_(void);
extern "C" __attribute__((visibility("hidden"), used, noreturn)) void dt_emu_fiber_main_(Fiber* f);

asm(R"(
  .text
  .globl dt_emu_switch_
  .hidden dt_emu_switch_
  .type dt_emu_switch_, @function
dt_emu_switch_:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dt_emu_switch_, .-dt_emu_switch_

  .globl dt_emu_fiber_entry_
  .hidden dt_emu_fiber_entry_
  .type dt_emu_fiber_entry_, @function
dt_emu_fiber_entry_:
  movq %r12, %rdi
  call dt_emu_fiber_main_
  ud2
  .size dt_emu_fiber_entry_, .-dt_emu_fiber_entry_
)");

namespace {

/* Makes f start at dt_emu_fiber_entry_ when next switched to. */
void prepare_stack(Fiber* f) {
  /* six registers and the return address, placed so that the stack pointer
   * is 16-byte aligned at the entry's call (top - 72 + 56 = top - 16) */
  uint64_t* frame = (uint64_t*)(f->stack_top - 72);
  frame[0] = frame[1] = frame[2] = 0;                    /* r15, r14, r13 */
  frame[3] = (uint64_t)(uintptr_t)f;                     /* r12: the fiber */
  frame[4] = frame[5] = 0;                               /* rbx, rbp */
  frame[6] = (uint64_t)(uintptr_t)&dt_emu_fiber_entry_; /* return address */
  f->sp = frame;
}

/* Stacks for `threads` fibers, each below a guard page (an overflow faults at once). */
bool reserve(Runner* r, int threads) {
  if (threads <= r->cap) return true;
  int cap = dt_emu::kMaxThreadsPerBlock;
  size_t bytes = (size_t)cap * kSlotBytes;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  for (int i = 0; i < cap; i++) mprotect((char*)mem + (size_t)i * kSlotBytes, kGuardBytes, PROT_NONE);
  r->stacks = (char*)mem;
  r->fibers = (Fiber*)calloc((size_t)cap, sizeof(Fiber));
  if (!r->fibers) return false;
  /* Stack tops at different offsets within a page: all at the same offset,
   * the fibers' hot frames would fall into the same cache sets and evict
   * each other at every switch. */
  for (int i = 0; i < cap; i++)
    r->fibers[i].stack_top = r->stacks + (size_t)(i + 1) * kSlotBytes - (size_t)(i * 3 % 64) * 64;
  r->cap = cap;
  return true;
}

const char* warp_op_name(int kind) {
  switch (kind) {
    case DT_EMU_SHFL: return "__shfl_sync";
    case DT_EMU_SHFL_UP: return "__shfl_up_sync";
    case DT_EMU_SHFL_DOWN: return "__shfl_down_sync";
    case DT_EMU_SHFL_XOR: return "__shfl_xor_sync";
    case DT_EMU_BALLOT: return "__ballot_sync";
    case DT_EMU_ANY: return "__any_sync";
    case DT_EMU_ALL: return "__all_sync";
    default: return "__syncwarp";
  }
}

const char* base_name(const char* path) {
  const char* s = strrchr(path, '/');
  return s ? s + 1 : path;
}

const char* barrier_name(int kind) {
  switch (kind) {
    case DT_EMU_BAR_COUNT: return "__syncthreads_count";
    case DT_EMU_BAR_AND: return "__syncthreads_and";
    case DT_EMU_BAR_OR: return "__syncthreads_or";
    default: return "__syncthreads";
  }
}

/* The running fiber gives the scheduler back its host thread. */
void yield(Runner* r, Fiber* f) { dt_emu_switch_(&f->sp, r->sched_sp); }

/* Fails the launch: records why (naming the block and thread) and never
 * resumes the calling fiber. */
__attribute__((noreturn, format(printf, 3, 4))) void fail(Runner* r, Fiber* f, const char* fmt, ...) {
  char text[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  char where[160];
  snprintf(where, sizeof where, "block (%u,%u,%u) thread (%u,%u,%u)", f->where.block_idx.x, f->where.block_idx.y,
           f->where.block_idx.z, f->where.thread_idx.x, f->where.thread_idx.y, f->where.thread_idx.z);
  r->error = std::string(where) + ": " + text;
  r->failed = true;
  f->state = kDone;
  yield(r, f);
  __builtin_unreachable();
}

Runner* running(const char* what) {
  Runner* r = tl_runner;
  if (!r || !r->launch) {
    fprintf(stderr, "dtrain emulated CUDA device: %s called outside a kernel\n", what);
    abort();
  }
  return r;
}

/* Lanes of warp w that have not arrived at the current operation and can never
 * arrive (they exited). */
void check_warp_can_finish(Runner* r, Fiber* f, Warp* w, int warp) {
  uint32_t missing = w->mask & ~w->arrived & w->exited;
  if (w->arrived && missing)
    fail(r, f, "%s with mask 0x%08x in warp %d waits for lanes 0x%08x that have exited", w->what, w->mask, warp,
         missing);
}

void release_warp(Runner* r, Warp* w, int warp) {
  if (dt_emu::sanitizers().race) r->race.warp_synced(warp, w->mask);
  uint64_t gen = w->gen;
  w->gen++;
  w->arrived = 0;
  int first = warp * 32, last = first + 32 < r->n ? first + 32 : r->n;
  for (int i = first; i < last; i++) {
    Fiber* g = &r->fibers[i];
    if (g->state == kAtWarp && g->wait_gen == gen) g->state = kRunnable;
  }
}

void release_barrier(Runner* r) {
  if (dt_emu::sanitizers().race) r->race.next_interval();
  r->bar_gen++;
  r->vote[r->bar_gen & 1] = 0;
  r->bar_arrived = 0;
  for (int i = 0; i < r->n; i++)
    if (r->fibers[i].state == kAtBarrier) r->fibers[i].state = kRunnable;
}

}  // namespace

extern "C" void dt_emu_fiber_main_(Fiber* f) {
  Runner* r = tl_runner;
  r->launch->invoke(r->launch->closure);
  /* the thread is done: nobody may still be waiting for it */
  if (r->bar_arrived > 0)
    fail(r, f, "exited while %d other threads of its block wait at %s (a barrier must be reached by every thread)",
         r->bar_arrived, barrier_name(r->bar_kind));
  int warp = (int)(f->linear >> 5), lane = (int)(f->linear & 31);
  Warp* w = &r->warps[warp];
  w->exited |= 1u << lane;
  if (w->arrived && (w->mask >> lane & 1))
    fail(r, f, "exited while lanes 0x%08x of warp %d wait for it in %s with mask 0x%08x", w->arrived, warp, w->what,
         w->mask);
  f->state = kDone;
  r->done++;
  yield(r, f);
  __builtin_unreachable();
}

DT_EMU_API int dt_emu_barrier(int kind, int pred, const char* site) {
  Runner* r = running(barrier_name(kind));
  Fiber* f = &r->fibers[r->current];
  if (r->done > 0)
    fail(r, f, "reached %s after %d threads of its block exited (a barrier must be reached by every thread)",
         barrier_name(kind), r->done);
  if (r->bar_arrived == 0) {
    r->bar_kind = kind;
    r->bar_site = site;
  } else if (kind != r->bar_kind || strcmp(site, r->bar_site) != 0) {
    fail(r, f, "reached %s at %s while %d threads wait at %s at %s: threads of a block must meet at the same barrier",
         barrier_name(kind), base_name(site), r->bar_arrived, barrier_name(r->bar_kind), base_name(r->bar_site));
  }
  uint64_t gen = r->bar_gen;
  r->vote[gen & 1] += pred != 0;
  if (++r->bar_arrived == r->n) {
    release_barrier(r); /* the last one in opens it and goes on */
  } else {
    f->state = kAtBarrier;
    f->wait_gen = gen;
    yield(r, f);
  }
  int votes = r->vote[gen & 1];
  switch (kind) {
    case DT_EMU_BAR_COUNT: return votes;
    case DT_EMU_BAR_AND: return votes == r->n;
    case DT_EMU_BAR_OR: return votes > 0;
    default: return 0;
  }
}

DT_EMU_API uint64_t dt_emu_warp(int kind, unsigned mask, uint64_t value, int arg, int width, const void* site) {
  (void)site;
  Runner* r = running(warp_op_name(kind));
  Fiber* f = &r->fibers[r->current];
  int warp = (int)(f->linear >> 5), lane = (int)(f->linear & 31);
  Warp* w = &r->warps[warp];
  const char* name = warp_op_name(kind);
  if (!(mask >> lane & 1)) fail(r, f, "%s with mask 0x%08x leaves out its caller, lane %d", name, mask, lane);
  if (mask & ~w->exists)
    fail(r, f, "%s with mask 0x%08x names lanes 0x%08x that warp %d of this block does not have (%d threads)", name,
         mask, mask & ~w->exists, warp, r->n);
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail(r, f, "%s with width %d: expected a power of two in [1, 32]", name, width);
  if (w->arrived == 0) {
    w->mask = mask;
    w->kind = kind;
    w->what = name;
  } else if (w->mask != mask || w->kind != kind) {
    fail(r, f, "lanes of warp %d meet different warp operations: %s with mask 0x%08x while lanes 0x%08x wait in %s "
         "with mask 0x%08x", warp, name, mask, w->arrived, w->what, w->mask);
  }
  uint64_t gen = w->gen;
  w->vals[gen & 1][lane] = value;
  w->arrived |= 1u << lane;
  check_warp_can_finish(r, f, w, warp);
  if (w->arrived == w->mask) {
    release_warp(r, w, warp);
  } else {
    f->state = kAtWarp;
    f->wait_gen = gen;
    yield(r, f);
  }
  const uint64_t* v = w->vals[gen & 1];
  int seg = lane & ~(width - 1), pos = lane & (width - 1), src = lane;
  switch (kind) {
    case DT_EMU_SHFL: src = seg + (((arg % width) + width) % width); break;
    case DT_EMU_SHFL_UP: src = pos >= arg ? lane - arg : lane; break;
    case DT_EMU_SHFL_DOWN: src = pos + arg < width ? lane + arg : lane; break;
    case DT_EMU_SHFL_XOR: {
      int x = lane ^ arg;
      src = x >= 0 && x < 32 && x < seg + width ? x : lane; /* later groups: the caller's own value */
      break;
    }
    default: {
      uint64_t bits = 0;
      for (int l = 0; l < 32; l++)
        if ((mask >> l & 1) && v[l]) bits |= 1ull << l;
      if (kind == DT_EMU_BALLOT) return bits;
      if (kind == DT_EMU_ANY) return bits != 0;
      if (kind == DT_EMU_ALL) return bits == mask;
      return 0;
    }
  }
  if (!(mask >> src & 1))
    fail(r, f, "%s reads lane %d, which is not in its mask 0x%08x (the value would be undefined on a GPU)", name, src,
         mask);
  return v[src];
}

DT_EMU_API unsigned dt_emu_activemask(void) {
  Runner* r = running("__activemask");
  Fiber* f = &r->fibers[r->current];
  Warp* w = &r->warps[f->linear >> 5];
  return w->exists & ~w->exited;
}

DT_EMU_API void* dt_emu_dynamic_shared(void) { return running("dynamic shared memory")->dyn; }

/* ---- sanitizers: the instrumented kernel library reports its loads and stores ---------- */

namespace {

/* Set by the sanitizer build of the kernels: returns the address of one of its
 * thread-local variables, so that this host thread's block of them (where
 * __shared__ variables live) is allocated and can be found. */
void* (*g_shared_anchor)(void) = nullptr;

struct TlsSearch {
  uintptr_t anchor;
  char* base;
  size_t bytes;
};

int find_tls_block(struct dl_phdr_info* info, size_t, void* data) {
  TlsSearch* q = (TlsSearch*)data;
  if (!info->dlpi_tls_data) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_TLS) continue;
    uintptr_t lo = (uintptr_t)info->dlpi_tls_data;
    if (q->anchor >= lo && q->anchor < lo + ph.p_memsz) {
      q->base = (char*)info->dlpi_tls_data;
      q->bytes = ph.p_memsz;
      return 1;
    }
  }
  return 0;
}

/* This host thread's static shared memory: the kernel library's thread-local block. */
bool locate_static_shared(Runner* r, std::string* error) {
  if (r->static_shared) return true;
  TlsSearch q = {(uintptr_t)g_shared_anchor(), nullptr, 0};
  dl_iterate_phdr(find_tls_block, &q);
  if (!q.base) {
    *error = "racecheck: cannot find the kernel library's thread-local block (its __shared__ variables)";
    return false;
  }
  r->static_shared = q.base;
  r->static_shared_bytes = q.bytes;
  return true;
}

void unpack_linear(const Runner* r, uint32_t linear, unsigned* x, unsigned* y, unsigned* z) {
  const dim3& b = r->launch->block;
  *x = linear % b.x;
  *y = linear / b.x % b.y;
  *z = linear / (b.x * b.y);
}

/* "libdtrain_cuda_emu_sanitize.so+0x1234": where an access is, for addr2line. */
std::string code_place(const void* pc) {
  Dl_info info;
  if (!pc || !dladdr(pc, &info) || !info.dli_fname) return "an unknown place";
  char text[320];
  snprintf(text, sizeof text, "%s+0x%zx", base_name(info.dli_fname), (size_t)((uintptr_t)pc - (uintptr_t)info.dli_fbase));
  return text;
}

/* Prints a sanitizer's finding (with the kernel's name) and fails the launch. */
__attribute__((noreturn)) void report_finding(Runner* r, Fiber* f, const std::string& text) {
  fprintf(stderr, "dtrain emulated device: kernel %s (launched at %s:%d), block (%u,%u,%u) thread (%u,%u,%u): %s\n",
          r->launch->kernel, base_name(r->launch->file), r->launch->line, f->where.block_idx.x, f->where.block_idx.y,
          f->where.block_idx.z, f->where.thread_idx.x, f->where.thread_idx.y, f->where.thread_idx.z, text.c_str());
  fail(r, f, "%s", text.c_str());
}

}  // namespace

namespace dt_emu {
const Sanitizers& sanitizers() {
  static const Sanitizers s = [] {
    Sanitizers v;
    const char* race = getenv("DTRAIN_EMU_RACECHECK");
    const char* mem = getenv("DTRAIN_EMU_MEMCHECK");
    const char* seed = getenv("DTRAIN_EMU_RACECHECK_SEED");
    v.race = race && strcmp(race, "1") == 0;
    v.mem = mem && strcmp(mem, "1") == 0;
    if (seed && *seed) v.seed = strtoull(seed, nullptr, 10);
    return v;
  }();
  return s;
}
}  // namespace dt_emu

DT_EMU_API void dt_emu_san_register(void* (*shared_anchor)(void)) { g_shared_anchor = shared_anchor; }

/* One load (kind 0), store (1) or atomic (2: no race, checked for memcheck only) of
 * the instrumented kernels, at code address pc. */
DT_EMU_API void dt_emu_san_access(const void* p, size_t n, int kind, const void* pc) {
  const bool write = kind == 1;
  const dt_emu::Sanitizers& san = dt_emu::sanitizers();
  if (!san.race && !san.mem) return; /* the instrumented library loaded with both off */
  Runner* r = tl_runner;
  if (!r || !r->launch) return; /* host code of the kernel library, outside any kernel */
  Fiber* f = &r->fibers[r->current];
  const uintptr_t a = (uintptr_t)p;
  const char* region = nullptr;
  size_t offset = 0, shadow_at = 0, region_bytes = 0;
  if (a - (uintptr_t)r->static_shared < r->static_shared_bytes) {
    region = "static shared memory (__shared__)";
    offset = a - (uintptr_t)r->static_shared;
    shadow_at = offset;
    region_bytes = r->static_shared_bytes;
  } else if (r->launch->smem && a - (uintptr_t)r->dyn < r->launch->smem + dt_emu::kRedZoneBytes) {
    /* (under the sanitizers the buffer has a red zone's room past the launch's bytes) */
    region = "dynamic shared memory";
    offset = a - (uintptr_t)r->dyn;
    shadow_at = r->static_shared_bytes + offset;
    region_bytes = r->launch->smem;
  }
  const char* verb = kind == 2 ? "atomic" : write ? "write" : "read";
  if (region) {
    if (offset + n > region_bytes) {
      char text[320];
      snprintf(text, sizeof text, "memcheck: %s of %zu bytes at byte %zu of %s runs past its end (%zu bytes)", verb, n,
               offset, region, region_bytes);
      report_finding(r, f, text);
    }
    if (!san.race || kind == 2) return;
    dt_emu::RaceHit hit;
    if (r->race.access(shadow_at, n, write, f->linear, &hit)) return;
    unsigned x, y, z;
    unpack_linear(r, hit.other, &x, &y, &z);
    char text[640];
    snprintf(text, sizeof text,
             "racecheck: %s of %zu bytes at byte %zu of %s (code at %s) races with a %s of byte %zu by thread "
             "(%u,%u,%u) of the same block: no __syncthreads between them, and no warp operation (__syncwarp, a "
             "shuffle, a vote) that both took part in",
             verb, n, offset, region, code_place(pc).c_str(), hit.other_writes ? "write" : "read",
             hit.offset - (shadow_at - offset), x, y, z);
    report_finding(r, f, text);
  }
  if (!san.mem) return;
  std::string why;
  if (!dt_emu::memcheck_red_zone(p, n, &why)) return;
  char text[640];
  snprintf(text, sizeof text, "memcheck: %s of %zu bytes at %p (code at %s) is outside device memory: %s", verb, n, p,
           code_place(pc).c_str(), why.c_str());
  report_finding(r, f, text);
}

namespace dt_emu {

static uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Runs one block; false when the emulator failed the launch. */
static bool run_block(Runner* r, const Launch& l, uint3 block_idx) {
  const int bx = (int)l.block.x, by = (int)l.block.y, n = bx * by * (int)l.block.z;
  r->n = n;
  r->done = 0;
  r->bar_arrived = 0;
  r->vote[0] = r->vote[1] = 0;
  r->failed = false;
  for (int w = 0; w * 32 < n; w++) {
    Warp* wp = &r->warps[w];
    int lanes = n - w * 32 < 32 ? n - w * 32 : 32;
    wp->arrived = 0;
    wp->exited = 0;
    wp->exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  for (int i = 0; i < n; i++) {
    Fiber* f = &r->fibers[i];
    f->linear = (uint32_t)i;
    f->where.thread_idx = {(unsigned)(i % bx), (unsigned)(i / bx % by), (unsigned)(i / (bx * by))};
    f->where.block_idx = block_idx;
    f->where.block_dim = l.block;
    f->where.grid_dim = l.grid;
    f->state = kRunnable;
    prepare_stack(f);
  }
  if (l.smem) memset(r->dyn, 0xff, l.smem); /* uninitialised shared memory reads as NaN */
  const bool shuffle = sanitizers().race;
  if (shuffle) r->race.next_interval();
  while (r->done < n) {
    bool ran = false;
    /* Under racecheck, each pass over the threads starts at a random one and
     * strides by a random step prime to n (seeded): a result that depends on
     * the order in which threads run between barriers changes with the seed. */
    int start = 0, stride = 1;
    if (shuffle) {
      r->rng ^= r->rng << 13, r->rng ^= r->rng >> 7, r->rng ^= r->rng << 17;
      start = (int)(r->rng % (uint64_t)n);
      stride = 1 + (int)((r->rng >> 20) % (uint64_t)n);
      while (gcd((uint64_t)stride, (uint64_t)n) != 1) stride++;
    }
    for (int k = 0, i = start; k < n; k++, i = (int)(((int64_t)i + stride) % n)) {
      Fiber* f = &r->fibers[i];
      if (f->state != kRunnable) continue;
      r->current = i;
      dt_emu_current_ = &f->where;
      dt_emu_switch_(&r->sched_sp, f->sp);
      ran = true;
      if (r->failed) return false;
    }
    if (!ran) { /* everyone waits and nobody can arrive */
      int at_bar = 0, at_warp = 0;
      std::string warps;
      for (int i = 0; i < n; i++) at_bar += r->fibers[i].state == kAtBarrier, at_warp += r->fibers[i].state == kAtWarp;
      for (int w = 0; w * 32 < n; w++) {
        Warp* wp = &r->warps[w];
        if (!wp->arrived) continue;
        char part[160];
        snprintf(part, sizeof part, "; warp %d: lanes 0x%08x in %s with mask 0x%08x", w, wp->arrived, wp->what,
                 wp->mask);
        warps += part;
      }
      char text[320];
      snprintf(text, sizeof text,
               "block (%u,%u,%u): deadlock: %d threads wait at %s%s%s, %d in warp operations, %d exited", block_idx.x,
               block_idx.y, block_idx.z, at_bar, barrier_name(r->bar_kind), at_bar ? " at " : "",
               at_bar ? base_name(r->bar_site) : "", at_warp, r->done);
      r->error = text + warps;
      return false;
    }
  }
  return true;
}

bool run_grid(const Launch& l, std::string* error) {
  if (!tl_runner) tl_runner = new Runner();
  Runner* r = tl_runner;
  int threads = (int)(l.block.x * l.block.y * l.block.z);
  if (!reserve(r, threads)) {
    *error = std::string("cannot reserve fiber stacks: ") + strerror(errno);
    return false;
  }
  if (l.smem > r->dyn_cap) {
    free(r->dyn);
    const Sanitizers& san = sanitizers();
    /* under the sanitizers, room for an access past the end to land in and be reported */
    r->dyn = (char*)malloc(l.smem + (san.race || san.mem ? kRedZoneBytes : 0));
    r->dyn_cap = r->dyn ? l.smem : 0;
    if (!r->dyn) {
      *error = "cannot allocate dynamic shared memory";
      return false;
    }
  }
  const Sanitizers& san = sanitizers();
  if (san.race || san.mem) {
    if (!g_shared_anchor) {
      *error = std::string(san.race ? "DTRAIN_EMU_RACECHECK" : "DTRAIN_EMU_MEMCHECK") +
               "=1, but the kernels were built without the sanitizer's instrumentation (they are in "
               "libdtrain_cuda_emu_sanitize.so)";
      return false;
    }
    if (!locate_static_shared(r, error)) return false;
    r->race.reserve(r->static_shared_bytes + l.smem);
    if (!r->rng) r->rng = san.seed * 0x9e3779b97f4a7c15ull | 1;
  }
  r->launch = &l;
  /* blocks in a fixed order that is not index order: a kernel whose result
   * depends on which block runs first differs from the CPU's here too */
  uint64_t blocks = (uint64_t)l.grid.x * l.grid.y * l.grid.z;
  uint64_t step = blocks / 2 + 1;
  while (gcd(step, blocks) != 1) step++;
  uint64_t b = 0;
  bool ok = true;
  for (uint64_t k = 0; k < blocks && ok; k++, b = (b + step) % blocks) {
    uint3 idx = {(unsigned)(b % l.grid.x), (unsigned)(b / l.grid.x % l.grid.y),
                 (unsigned)(b / ((uint64_t)l.grid.x * l.grid.y))};
    ok = run_block(r, l, idx);
  }
  if (!ok) *error = r->error;
  r->launch = nullptr;
  dt_emu_current_ = nullptr;
  return ok;
}

}  // namespace dt_emu
