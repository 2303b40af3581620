#pragma once
// The internals of fixed/cpu.hpp: where a cache's size is read from.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

namespace metagrad::fixed::detail {

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

// The size in bytes of the level-1 (data), 2 or 3 cache, 0 when neither source knows it. sysfs
// first: under a hypervisor, the CPUID leaves sysconf reads may report the host's caches (a 2-vCPU
// guest saw a 384 MiB L3 where sysfs had 32 MiB).
inline std::int64_t cache_size(int level) {
  std::int64_t v = sysfs_cache(level);
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  if (v < 4096)
    v = sysconf(level == 1   ? _SC_LEVEL1_DCACHE_SIZE
                : level == 2 ? _SC_LEVEL2_CACHE_SIZE
                             : _SC_LEVEL3_CACHE_SIZE);
#endif
  return v >= 4096 ? v : 0;
}

}  // namespace metagrad::fixed::detail
