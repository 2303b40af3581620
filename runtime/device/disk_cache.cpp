// The on-disk kernel cache's directory and file names, shared by the compiled devices, and the
// verification of what is loaded from it.
#include "metagrad/device/disk_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "metagrad/helpers.hpp"

namespace metagrad {

namespace fs = std::filesystem;

std::string stable_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

namespace {

// /tmp/metagrad-cache-<uid>: ours alone. A shared /tmp lets anyone create the name first, so what
// is there must be a real directory (not a link) owned by this user; it is made private.
std::string private_tmp_dir() {
  uid_t uid = ::getuid();
  std::string dir = "/tmp/metagrad-cache-" + std::to_string(uid);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("kernel cache: cannot create " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error("kernel cache: " + dir + " is not a directory (set METAGRAD_CACHE)");
  if (st.st_uid != uid)
    throw std::runtime_error("kernel cache: " + dir + " belongs to another user (uid " +
                             std::to_string(st.st_uid) + "); set METAGRAD_CACHE or HOME");
  if ((st.st_mode & 077) != 0) ::chmod(dir.c_str(), 0700);
  return dir;
}

// A name no other process or thread writes at the same time.
std::string private_name(const fs::path& path) {
  static std::atomic<unsigned> counter{0};
  return path.string() + "." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ".tmp";
}

// The object's size and the hash of its name and bytes: the name is its key (a hash of what it was
// built from), so an object and sidecar moved under another key's name (two kernels' pairs swapped)
// do not verify, and the wrong code is never loaded.
std::string sum_of(const fs::path& path, const std::string& bytes) {
  return std::to_string(bytes.size()) + " " + stable_hash(path.filename().string() + "\n" + bytes) + "\n";
}

bool write_atomically(const fs::path& path, const std::string& bytes) {
  std::string tmp = private_name(path);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

}  // namespace

std::string kernel_cache_dir() {
  std::string dir = getenv("METAGRAD_CACHE");
  if (!dir.empty()) return dir;
  if (!getenv("HOME").empty()) return getenv("HOME") + "/.cache/metagrad";
  return private_tmp_dir();
}

std::optional<std::string> read_file_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return ss.str();
}

void write_sidecar(const fs::path& path, const std::string& bytes) {
  write_atomically(path.string() + ".sum", sum_of(path, bytes));
}

std::optional<std::string> load_verified(const fs::path& path) {
  std::error_code ec;
  fs::path sum = path.string() + ".sum";
  if (!fs::exists(path, ec) && !fs::exists(sum, ec)) return std::nullopt;
  std::optional<std::string> bytes = read_file_bytes(path), want = read_file_bytes(sum);
  if (bytes && want && *want == sum_of(path, *bytes)) return bytes;
  fs::remove(path, ec);
  fs::remove(sum, ec);
  return std::nullopt;
}

void store_verified(const fs::path& path, const std::string& bytes) {
  if (write_atomically(path, bytes)) write_sidecar(path, bytes);
}

}  // namespace metagrad
