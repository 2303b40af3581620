#pragma once
// The on-disk kernel cache every compiled device shares: one directory (env METAGRAD_CACHE, default
// ~/.cache/metagrad, or /tmp/metagrad-cache-<uid> without HOME) where each device keeps its compiled
// objects under a subdirectory, named by a stable hash of what made them, so a second process
// compiles nothing. What is loaded is verified: each object has a sidecar `<object>.sum` with its
// size and the hash of its name (its key) and bytes, and one that does not match (truncated,
// corrupted, sidecar missing, or a pair moved under another kernel's name) is removed and rebuilt
// rather than loaded.
#include <filesystem>
#include <optional>
#include <string>

namespace metagrad {

// The directory of the on-disk kernel cache. Without METAGRAD_CACHE and HOME, a per-user directory
// under /tmp, created 0700; one there owned by another user, or not a directory, throws.
std::string kernel_cache_dir();
// A stable 64-bit FNV-1a hash as 16 hex digits (file names of the disk cache).
std::string stable_hash(const std::string& s);

// The whole file, or nullopt when it cannot be read.
std::optional<std::string> read_file_bytes(const std::filesystem::path& path);
// Writes `path`'s sidecar (`path`.sum: size and hash of `bytes`, the object's contents) to a private
// name, then renames it in place. Call after the object itself was renamed to `path`.
void write_sidecar(const std::filesystem::path& path, const std::string& bytes);
// The file's bytes when they match its sidecar; otherwise (a missing, truncated or corrupted object,
// a missing or corrupt sidecar) removes both and returns nullopt: the caller rebuilds.
std::optional<std::string> load_verified(const std::filesystem::path& path);
// Writes `bytes` to `path` (a private name, then rename) and then its sidecar. A cache that cannot be
// written is not an error: it only costs a rebuild.
void store_verified(const std::filesystem::path& path, const std::string& bytes);

}  // namespace metagrad
