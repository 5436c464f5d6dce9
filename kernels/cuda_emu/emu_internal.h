/* emu_internal.h — what the two halves of the emulated CUDA runtime share:
 * a queued kernel launch, and the device's limits. emu_runtime.cpp owns
 * devices, memory, streams and events; emu_device.cpp runs a launch's blocks
 * as fibers on the calling host thread. Not exported. */
#pragma once
#include <string>
#include "cuda_emu.h"

namespace dt_emu {

/* The emulated GPU's limits, as a Hopper GPU's (H100/H200). */
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridY = 65535, kMaxGridZ = 65535;
constexpr size_t kDefaultSharedPerBlock = 48 << 10; /* without cudaFuncSetAttribute */
constexpr size_t kMaxSharedPerBlockOptin = 227 << 10;

/* One kernel launch, as queued on a stream. */
struct Launch {
  const char* kernel;
  const char* file;
  int line;
  dim3 grid, block;
  size_t smem;
  void (*invoke)(void*);
  void* closure;
  void (*destroy)(void*);
};

/* Runs every block of `l` on the calling host thread (in an order that is not
 * the blocks' index order, as a GPU gives none). Returns false with *error
 * set when the kernel broke CUDA's rules (a barrier or warp operation that
 * not every thread it names reaches, a mask that leaves out the caller, ...). */
bool run_grid(const Launch& l, std::string* error);

/* The sanitizers (docs/GPU.md), read once from the environment: racecheck
 * (DTRAIN_EMU_RACECHECK=1; DTRAIN_EMU_RACECHECK_SEED picks the order in
 * which a block's threads run between barriers) and memcheck
 * (DTRAIN_EMU_MEMCHECK=1). Both need the kernels built with the sanitizer's
 * instrumentation (libdtrain_cuda_emu_sanitize.so), which reports every load
 * and store to dt_emu_san_access. */
struct Sanitizers {
  bool race = false, mem = false;
  uint64_t seed = 1;
};
const Sanitizers& sanitizers();

/* memcheck: each device allocation lies between red zones of this many bytes. */
constexpr size_t kRedZoneBytes = 1024;
/* memcheck: whether [p, p + n) reaches into a device allocation's red zone;
 * *why then says which allocation and how far outside it. */
bool memcheck_red_zone(const void* p, size_t n, std::string* why);

}  // namespace dt_emu
