/* emu_racecheck.h — the shadow state of racecheck (DTRAIN_EMU_RACECHECK=1):
 * for every byte of a block's shared memory, who last wrote it and who read
 * it since, in which barrier interval and after which warp synchronisation.
 *
 * The rules, as on a GPU since Volta (independent thread scheduling, so the
 * lanes of a warp are not in lockstep either): two accesses to one byte by
 * different threads of a block, at least one a write, race unless something
 * orders them:
 * - a block barrier (__syncthreads and its votes) between them orders every
 *   pair of threads of the block;
 * - a warp operation (__syncwarp, a shuffle, a vote) that both threads took
 *   part in (both in its mask) after the first access orders the two lanes.
 * Atomics are not accesses here (the sanitizer build does not instrument them).
 *
 * Readers since the last write are summed up by the last two (and whether
 * there were several, and in how many warps): a write after reads by several
 * lanes of its own warp is checked against one of them, so a race may be
 * missed there, never invented. Not thread-safe: one per block runner
 * (a block runs on one host thread). */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <vector>

namespace dt_emu {

/* What an access raced with. */
struct RaceHit {
  size_t offset;     /* the byte, from the start of the region checked */
  uint32_t other;    /* the other thread (its linear index in the block) */
  bool other_writes; /* the other access was a write (else a read) */
};

class RaceShadow {
 public:
  /* Room for `bytes` of shared memory (the contents are kept when it grows). */
  void reserve(size_t bytes);
  /* A block starts or a block barrier opens: what came before is ordered. */
  void next_interval() { interval_++; }
  /* Lanes `mask` of warp `warp` met in a warp operation. */
  void warp_synced(int warp, uint32_t mask);
  /* Thread `tid` reads or writes bytes [offset, offset + n) of the region;
   * false (with *hit) when it races with an earlier access. */
  bool access(size_t offset, size_t n, bool write, uint32_t tid, RaceHit* hit);

 private:
  struct Cell {
    uint64_t w_interval = 0, r_interval = 0;
    uint32_t w_seq = 0, r_seq = 0; /* the warp-sync count when the access happened */
    uint32_t w_tid = 0, r_tid = 0;
    uint32_t r_alt = 0, r_alt_seq = 0; /* with r_many: a reader other than r_tid, and when it read */
    int32_t r_warp = 0; /* the readers' warp, -1 when they were in several */
    bool r_many = false;
  };
  /* whether an access by `tid` comes after one by `other` at warp-sync count `seq` */
  bool ordered(uint32_t tid, uint32_t other, uint32_t seq) const;

  std::vector<Cell> cells_;
  uint64_t interval_ = 1;
  uint32_t seq_ = 0; /* warp operations so far */
  /* met_[warp][a][b]: the count of the last warp operation lanes a and b both took part in */
  std::vector<uint32_t> met_ = std::vector<uint32_t>(32 * 32 * 32, 0);
};

}  // namespace dt_emu
