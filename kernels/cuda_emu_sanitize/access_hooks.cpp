/* access_hooks.cpp — the other half of the emulated device's sanitizers
 * (DTRAIN_EMU_RACECHECK, DTRAIN_EMU_MEMCHECK), linked into
 * libdtrain_cuda_emu_sanitize.so. The kernels/cuda sources are compiled with
 * g++'s ThreadSanitizer instrumentation, which turns every load, store and
 * atomic (also of thread-local variables, where `__shared__` ones live, which
 * AddressSanitizer's skips at constant offsets) into a call; its run time is
 * not ThreadSanitizer's (the library is linked without it) but these hooks,
 * which send each access to dt_emu_san_access in the emulated runtime: that
 * one knows the running kernel, block and thread, the block's shared memory
 * and the device allocations (between red zones under memcheck). Atomics
 * are done here, for real, and count for memcheck only (they are no race).
 * Nothing in this file is instrumented. */
#include <stddef.h>
#include <stdint.h>
#include "cuda_emu.h"

DT_EMU_API void dt_emu_san_access(const void* p, size_t n, int kind, const void* pc);
DT_EMU_API void dt_emu_san_register(void* (*shared_anchor)(void));

/* the kinds of dt_emu_san_access */
enum { kRead = 0, kWrite = 1, kAtomic = 2 };

/* (signatures as g++ declares them; the library's version script keeps them unexported) */
#define DT_SAN_HOOK extern "C" __attribute__((no_sanitize_thread, used))
#define DT_SAN_PC __builtin_return_address(0)

namespace {
/* A variable of this library's thread-local block, where `__shared__` variables live. */
thread_local char tls_anchor;

__attribute__((no_sanitize_thread)) void* shared_anchor() { return &tls_anchor; }

__attribute__((constructor, no_sanitize_thread)) void register_hooks() { dt_emu_san_register(&shared_anchor); }
}  // namespace

DT_SAN_HOOK void __tsan_init(void) {}
DT_SAN_HOOK void __tsan_func_entry(void*) {}
DT_SAN_HOOK void __tsan_func_exit(void*) {}
DT_SAN_HOOK void __tsan_vptr_update(void*, void*) {}
DT_SAN_HOOK void __tsan_vptr_read(void*) {}

#define DT_SAN_SIZED_(n)                                                                                          \
  DT_SAN_HOOK void __tsan_read##n(void* p) { dt_emu_san_access(p, n, kRead, DT_SAN_PC); }                         \
  DT_SAN_HOOK void __tsan_write##n(void* p) { dt_emu_san_access(p, n, kWrite, DT_SAN_PC); }                       \
  DT_SAN_HOOK void __tsan_unaligned_read##n(void* p) { dt_emu_san_access(p, n, kRead, DT_SAN_PC); }               \
  DT_SAN_HOOK void __tsan_unaligned_write##n(void* p) { dt_emu_san_access(p, n, kWrite, DT_SAN_PC); }             \
  DT_SAN_HOOK void __tsan_volatile_read##n(void* p) { dt_emu_san_access(p, n, kRead, DT_SAN_PC); }                \
  DT_SAN_HOOK void __tsan_volatile_write##n(void* p) { dt_emu_san_access(p, n, kWrite, DT_SAN_PC); }
DT_SAN_SIZED_(1)
DT_SAN_SIZED_(2)
DT_SAN_SIZED_(4)
DT_SAN_SIZED_(8)
DT_SAN_SIZED_(16)
#undef DT_SAN_SIZED_

DT_SAN_HOOK void __tsan_read_range(void* p, long n) { dt_emu_san_access(p, (size_t)n, kRead, DT_SAN_PC); }
DT_SAN_HOOK void __tsan_write_range(void* p, long n) { dt_emu_san_access(p, (size_t)n, kWrite, DT_SAN_PC); }

/* ---- atomics: done here with the order asked for (ThreadSanitizer's codes are the __ATOMIC_ ones) ---- */

static inline int order_of(int mo) { return mo >= __ATOMIC_RELAXED && mo <= __ATOMIC_SEQ_CST ? mo : __ATOMIC_SEQ_CST; }

#define DT_SAN_ATOMICS_(bits, T)                                                                                  \
  DT_SAN_HOOK T __tsan_atomic##bits##_load(const volatile void* a, int mo) {                                     \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    (void)mo;                                                                                                     \
    return __atomic_load_n((const volatile T*)a, __ATOMIC_SEQ_CST);                                               \
  }                                                                                                               \
  DT_SAN_HOOK void __tsan_atomic##bits##_store(volatile void* a, T v, int mo) {                                  \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    (void)mo;                                                                                                     \
    __atomic_store_n((volatile T*)a, v, __ATOMIC_SEQ_CST);                                                        \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_exchange(volatile void* a, T v, int mo) {                                  \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_exchange_n((volatile T*)a, v, order_of(mo));                                                  \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_fetch_add(volatile void* a, T v, int mo) {                                 \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_fetch_add((volatile T*)a, v, order_of(mo));                                                   \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_fetch_sub(volatile void* a, T v, int mo) {                                 \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_fetch_sub((volatile T*)a, v, order_of(mo));                                                   \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_fetch_and(volatile void* a, T v, int mo) {                                 \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_fetch_and((volatile T*)a, v, order_of(mo));                                                   \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_fetch_or(volatile void* a, T v, int mo) {                                  \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_fetch_or((volatile T*)a, v, order_of(mo));                                                    \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_fetch_xor(volatile void* a, T v, int mo) {                                 \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_fetch_xor((volatile T*)a, v, order_of(mo));                                                   \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_fetch_nand(volatile void* a, T v, int mo) {                                \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    return __atomic_fetch_nand((volatile T*)a, v, order_of(mo));                                                  \
  }                                                                                                               \
  DT_SAN_HOOK bool __tsan_atomic##bits##_compare_exchange_strong(volatile void* a, void* c, T v, int mo, int fmo) { \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    (void)mo, (void)fmo;                                                                                          \
    return __atomic_compare_exchange_n((volatile T*)a, (T*)c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
  }                                                                                                               \
  DT_SAN_HOOK bool __tsan_atomic##bits##_compare_exchange_weak(volatile void* a, void* c, T v, int mo, int fmo) {   \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    (void)mo, (void)fmo;                                                                                          \
    return __atomic_compare_exchange_n((volatile T*)a, (T*)c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
  }                                                                                                               \
  DT_SAN_HOOK T __tsan_atomic##bits##_compare_exchange_val(volatile void* a, T c, T v, int mo, int fmo) {         \
    dt_emu_san_access((const void*)a, sizeof(T), kAtomic, DT_SAN_PC);                                             \
    (void)mo, (void)fmo;                                                                                          \
    __atomic_compare_exchange_n((volatile T*)a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                \
    return c;                                                                                                     \
  }
DT_SAN_ATOMICS_(8, uint8_t)
DT_SAN_ATOMICS_(16, uint16_t)
DT_SAN_ATOMICS_(32, uint32_t)
DT_SAN_ATOMICS_(64, uint64_t)
#undef DT_SAN_ATOMICS_

DT_SAN_HOOK void __tsan_atomic_thread_fence(int mo) { __atomic_thread_fence(order_of(mo)); }
DT_SAN_HOOK void __tsan_atomic_signal_fence(int mo) { __atomic_signal_fence(order_of(mo)); }
