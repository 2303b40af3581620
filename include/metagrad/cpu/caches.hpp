#pragma once
// What the GEMM's cache blocking is derived from: the host's data cache sizes, read once at run
// time (Linux's sysfs, else glibc's sysconf, else conservative defaults), so one binary blocks
// for the processor it runs on rather than the one it was tuned on.
#include <cstdint>

#include "metagrad/detail/cpu/caches.hpp"
#include "metagrad/detail/cpu/gemm_plan.h"

namespace metagrad::cpu {

struct CacheSizes {
  std::int64_t l1 = 32 << 10, l2 = 512 << 10, l3 = 8 << 20;  // bytes: L1d and L2 per core, L3 in all
  // Above this many bytes, an operand read once is taken to come from memory: an eighth of the L3,
  // which every core shares, and of at most 64 MiB of it, since a virtual machine shares its host's
  // L3 with other guests (an Emerald Rapids guest reads 300 MiB of it, and a 16 MiB B there is
  // read at memory's speed).
  std::int64_t from_memory() const { return METAGRAD_GEMM_FROM_MEMORY(l3); }
};

// The host's caches, read on first use.
inline const CacheSizes& host_caches() {
  static const CacheSizes c = [] {
    CacheSizes r;
    std::int64_t* sizes[] = {&r.l1, &r.l2, &r.l3};
    for (int level = 1; level <= 3; ++level)
      if (std::int64_t v = detail::cache_size(level)) *sizes[level - 1] = v;
    return r;
  }();
  return c;
}

}  // namespace metagrad::cpu
