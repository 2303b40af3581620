// The device registry: each backend is built on first use; DEFAULT comes from the environment.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "metagrad/ops.hpp"

namespace metagrad {

std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_clang_backend();
#ifdef METAGRAD_HAS_LLVM
// The LLVM device is a plugin module beside this library, loaded RTLD_LOCAL (runtime/llvm_plugin.cpp).
// Not named make_llvm_backend: that is the plugin's own factory, which this must not shadow.
std::unique_ptr<Backend> load_llvm_plugin() {
  Dl_info self{};
  ::dladdr(reinterpret_cast<void*>(&make_cpu_backend), &self);
  std::string dir = self.dli_fname ? std::string(self.dli_fname) : "";
  dir = dir.substr(0, dir.find_last_of('/') + 1);
  std::string path = dir + "libmetagrad_llvm.so";
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(detail::cat("cannot load ", path, ": ", ::dlerror()));
  auto make = reinterpret_cast<Backend* (*)()>(::dlsym(lib, "metagrad_make_llvm_backend"));
  if (!make) throw std::runtime_error(detail::cat(path, " has no metagrad_make_llvm_backend"));
  return std::unique_ptr<Backend>(make());
}
#endif
#ifdef METAGRAD_HAS_OPENCL
std::unique_ptr<Backend> make_opencl_backend();
#endif

namespace {

using Factory = std::unique_ptr<Backend> (*)();

// Preference order for the default device: fastest first. Later backends register here.
const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> table = {
      {"CLANG", make_clang_backend},
#ifdef METAGRAD_HAS_LLVM
      {"LLVM", load_llvm_plugin},
#endif
#ifdef METAGRAD_HAS_OPENCL
      {"OPENCL", make_opencl_backend},
#endif
      {"CPU", make_cpu_backend},
  };
  return table;
}

std::string default_device() {
  if (std::string d = getenv("DEVICE"); !d.empty()) return Device::canonicalize(d);
  for (const auto& [name, make] : factories())
    if (getenv_int(name.c_str()) == 1) return name;
  // The first available in preference order: probing stops there, so start-up builds one device.
  for (const auto& [name, make] : factories()) {
    try {
      Device::get(name);
      return name;
    } catch (const std::exception&) {}
  }
  return "CPU";
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
  // Every tensor op asks: the last device this thread got needs no lock, map or canonical name.
  thread_local std::string last_name;
  thread_local Backend* last = nullptr;
  if (last && name == last_name) return *last;
  Backend& b = get_slow(name);
  last_name = name, last = &b;
  return b;
}

Backend& Device::get_slow(const std::string& name) {
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
