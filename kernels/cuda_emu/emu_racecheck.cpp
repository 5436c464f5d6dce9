/* emu_racecheck.cpp — racecheck's shadow of shared memory (emu_racecheck.h). */
#include "emu_racecheck.h"

namespace dt_emu {

void RaceShadow::reserve(size_t bytes) {
  if (cells_.size() < bytes) cells_.resize(bytes);
}

void RaceShadow::warp_synced(int warp, uint32_t mask) {
  uint32_t s = ++seq_;
  uint32_t* m = &met_[(size_t)warp * 32 * 32];
  for (int a = 0; a < 32; a++) {
    if (!(mask >> a & 1)) continue;
    for (int b = 0; b < 32; b++)
      if (mask >> b & 1) m[a * 32 + b] = s;
  }
}

bool RaceShadow::ordered(uint32_t tid, uint32_t other, uint32_t seq) const {
  if (tid >> 5 != other >> 5) return false; /* other warps: only a barrier orders them */
  return met_[(size_t)(tid >> 5) * 32 * 32 + (tid & 31) * 32 + (other & 31)] > seq;
}

bool RaceShadow::access(size_t offset, size_t n, bool write, uint32_t tid, RaceHit* hit) {
  const uint64_t now = interval_;
  const int32_t warp = (int32_t)(tid >> 5);
  for (size_t i = 0; i < n; i++) {
    Cell& c = cells_[offset + i];
    if (c.w_interval == now && c.w_tid != tid && !ordered(tid, c.w_tid, c.w_seq)) {
      *hit = {offset + i, c.w_tid, true};
      return false;
    }
    if (write) {
      if (c.r_interval == now) {
        /* the reader to check: the last one, or the one before when the last was this thread */
        const bool last_is_self = c.r_tid == tid;
        const uint32_t other = last_is_self ? c.r_alt : c.r_tid, other_seq = last_is_self ? c.r_alt_seq : c.r_seq;
        bool races;
        if (!c.r_many) races = !last_is_self && !ordered(tid, c.r_tid, c.r_seq);
        else if (c.r_warp != warp) races = true; /* a reader in another warp */
        else races = !ordered(tid, other, other_seq);
        if (races) {
          *hit = {offset + i, other, false};
          return false;
        }
      }
      c.w_interval = now;
      c.w_tid = tid;
      c.w_seq = seq_;
      c.r_interval = 0; /* earlier reads are ordered before this write, or were reported */
    } else {
      if (c.r_interval == now) {
        if (c.r_tid != tid) {
          c.r_many = true;
          c.r_alt = c.r_tid;
          c.r_alt_seq = c.r_seq;
          if ((int32_t)(c.r_tid >> 5) != warp) c.r_warp = -1;
        }
      } else {
        c.r_interval = now;
        c.r_many = false;
        c.r_warp = warp;
      }
      c.r_tid = tid;
      c.r_seq = seq_;
    }
  }
  return true;
}

}  // namespace dt_emu
