// The on-disk kernel cache's directory and file names, shared by the compiled devices.
#include "metagrad/runtime/disk_cache.hpp"

#include <cstdint>
#include <cstdio>

#include "metagrad/helpers.hpp"

namespace metagrad {

std::string stable_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string kernel_cache_dir() {
  std::string dir = getenv("METAGRAD_CACHE");
  if (dir.empty()) dir = getenv("HOME").empty() ? "/tmp/metagrad-cache" : getenv("HOME") + "/.cache/metagrad";
  return dir;
}

}  // namespace metagrad
