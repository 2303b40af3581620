#pragma once
// The sources of the kernels a realize runs, recorded through GlobalCounters::cache.
#include <string>
#include <utility>
#include <vector>

#include "metagrad/metagrad.hpp"

namespace metagrad::test {

inline std::vector<std::string> kernel_sources(Tensor t) {
  GlobalCounters::cache.emplace();
  t.realize();
  std::vector<CacheEntry> ran = std::move(*GlobalCounters::cache);
  GlobalCounters::cache.reset();
  std::vector<std::string> out;
  for (const CacheEntry& e : ran) out.push_back(e.prg.prg);
  return out;
}

}  // namespace metagrad::test
