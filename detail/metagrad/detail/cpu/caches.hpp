#pragma once
// The internals of cpu/caches.hpp: where a cache's size is read from.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace metagrad::cpu::detail {

// The first word of a small text file (at most n - 1 characters), empty if it cannot be read.
// (<cstdio>, not <fstream>: this is compiled into every static translation unit.)
inline bool read_word(const char* path, char* out, int n) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char fmt[16];
  std::snprintf(fmt, sizeof fmt, "%%%ds", n - 1);
  bool ok = std::fscanf(f, fmt, out) == 1;
  std::fclose(f);
  return ok;
}

// sysfs: /sys/devices/system/cpu/cpu0/cache/indexN/{level,type,size} ("48K", "1024K", "32M").
inline std::int64_t sysfs_cache(int level) {
  for (int i = 0; i < 8; ++i) {
    char path[64], lv[16], type[32], size[32];
    auto at = [&](const char* name) {
      std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, name);
      return path;
    };
    if (!read_word(at("level"), lv, sizeof lv) || !read_word(at("type"), type, sizeof type) ||
        !read_word(at("size"), size, sizeof size))
      break;
    char* end = nullptr;  // (strtoll, not stoll: an odd sysfs string reads as no cache, not a throw)
    if (std::strtoll(lv, &end, 10) != level || *end || !std::strcmp(type, "Instruction")) continue;
    std::int64_t v = std::strtoll(size, &end, 10);
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

}  // namespace metagrad::cpu::detail
