// The device registry: each backend is built on first use; DEFAULT comes from the environment.
#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "metagrad/ops.hpp"

namespace metagrad {

std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_clang_backend();
#ifdef METAGRAD_HAS_LLVM
std::unique_ptr<Backend> make_llvm_backend();
#endif
#ifdef METAGRAD_HAS_OPENCL
std::unique_ptr<Backend> make_opencl_backend();
#endif

namespace {

using Factory = std::unique_ptr<Backend> (*)();

// Preference order for the default device: fastest first. Later backends register here.
const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> table = {
      {"CPU", make_cpu_backend},
      {"CLANG", make_clang_backend},
#ifdef METAGRAD_HAS_LLVM
      {"LLVM", make_llvm_backend},
#endif
#ifdef METAGRAD_HAS_OPENCL
      {"OPENCL", make_opencl_backend},
#endif
  };
  return table;
}

std::string default_device() {
  if (std::string d = getenv("DEVICE"); !d.empty()) return Device::canonicalize(d);
  for (const auto& [name, make] : factories())
    if (getenv_int(name.c_str()) == 1) return name;
  auto avail = Device::available();
  return avail.empty() ? "CPU" : avail.front();
}

}  // namespace

std::string Device::DEFAULT = default_device();

std::string Device::canonicalize(const std::string& name) {
  std::string out = name;
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

std::vector<std::string> Device::available() {
  std::vector<std::string> out;
  for (const auto& [name, make] : factories()) {
    try {
      get(name);
      out.push_back(name);
    } catch (const std::exception&) {}
  }
  return out;
}

Backend& Device::get(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Backend>> built;
  static std::map<std::string, std::string> failed;
  std::string key = canonicalize(name);
  std::lock_guard lock(mu);
  if (auto it = built.find(key); it != built.end()) return *it->second;
  if (auto it = failed.find(key); it != failed.end()) throw std::runtime_error(it->second);
  auto f =
      std::find_if(factories().begin(), factories().end(), [&](const auto& e) { return e.first == key; });
  if (f == factories().end()) {
    std::string known;
    for (const auto& [n, make] : factories()) known += detail::cat(known.empty() ? "" : ", ", n);
    throw std::runtime_error(
        detail::cat("Device \"", name, "\" is not a metagrad device (built: ", known, ")"));
  }
  try {
    return *(built[key] = f->second());
  } catch (const std::exception& e) {
    failed[key] = detail::cat("Device ", key, " is not available: ", e.what());
    throw std::runtime_error(failed[key]);
  }
}

}  // namespace metagrad
