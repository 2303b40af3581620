#pragma once
// What the GEMM's cache blocking is derived from: the host's data cache sizes, read once at run
// time (glibc's sysconf, else Linux's sysfs, else conservative defaults), so one binary blocks
// for the processor it runs on rather than the one it was tuned on.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

namespace metagrad::fixed {

struct CacheSizes {
  std::int64_t l1 = 32 << 10, l2 = 512 << 10, l3 = 8 << 20;  // bytes: L1d and L2 per core, L3 in all
};

namespace detail {
// sysfs: /sys/devices/system/cpu/cpu0/cache/indexN/{level,type,size} ("48K", "1024K", "32M").
inline std::int64_t sysfs_cache(int level) {
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size)) break;
    if (l != level || type == "Instruction" || size.empty()) continue;
    char* end = nullptr;  // (strtoll, not stoll: an odd sysfs string reads as no cache, not a throw)
    std::int64_t v = std::strtoll(size.c_str(), &end, 10);
    char unit = *end;
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
  }
  return 0;
}
inline CacheSizes read_cache_sizes() {
  CacheSizes c;
  // sysfs first: under a hypervisor, the CPUID leaves sysconf reads may report the host's caches
  // (a 2-vCPU guest saw a 384 MiB L3 where sysfs had 32 MiB).
  auto pick = [](std::int64_t& out, long conf, int level) {
    std::int64_t v = sysfs_cache(level);
    if (v < 4096) v = conf;
    if (v >= 4096) out = v;
  };
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  pick(c.l1, sysconf(_SC_LEVEL1_DCACHE_SIZE), 1);
  pick(c.l2, sysconf(_SC_LEVEL2_CACHE_SIZE), 2);
  pick(c.l3, sysconf(_SC_LEVEL3_CACHE_SIZE), 3);
#else
  pick(c.l1, 0, 1), pick(c.l2, 0, 2), pick(c.l3, 0, 3);
#endif
  return c;
}
}  // namespace detail

// The host's caches, read on first use.
inline const CacheSizes& host_caches() {
  static const CacheSizes c = detail::read_cache_sizes();
  return c;
}

}  // namespace metagrad::fixed
