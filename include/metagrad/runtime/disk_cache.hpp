#pragma once
// The on-disk kernel cache every compiled device shares: one directory (env METAGRAD_CACHE, default
// ~/.cache/metagrad) where each device keeps its compiled objects under a subdirectory, named by a
// stable hash of what made them, so a second process compiles nothing.
#include <string>

namespace metagrad {

// The directory of the on-disk kernel cache.
std::string kernel_cache_dir();
// A stable 64-bit FNV-1a hash as 16 hex digits (file names of the disk cache).
std::string stable_hash(const std::string& s);

}  // namespace metagrad
