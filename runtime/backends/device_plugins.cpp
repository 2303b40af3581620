// Registers the devices that live in plugin modules beside this library, each loaded RTLD_LOCAL on
// first use: LLVM (libmetagrad_llvm.so, runtime/backends/llvm_plugin.cpp), so LLVM 16 never enters the
// process's global symbol namespace, and OPENCL (libmetagrad_opencl.so, runtime/backends/ops_opencl.cpp), so
// libmetagrad loads on a machine without the ICD loader. Each registrar is built only with its plugin.
#if defined(METAGRAD_HAS_LLVM) || defined(METAGRAD_HAS_OPENCL)
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "metagrad/detail/cat.hpp"
#include "metagrad/device.hpp"

namespace metagrad {

namespace {

// The backend made by `entry` in the module `file`, found in this library's directory.
std::unique_ptr<Backend> load_plugin(const char* file, const char* entry) {
  Dl_info self{};
  ::dladdr(reinterpret_cast<void*>(&load_plugin), &self);
  std::string dir = self.dli_fname ? std::string(self.dli_fname) : "";
  std::string path = dir.substr(0, dir.find_last_of('/') + 1) + file;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(detail::cat("cannot load ", path, ": ", ::dlerror()));
  auto make = reinterpret_cast<Backend* (*)()>(::dlsym(lib, entry));
  if (!make) throw std::runtime_error(detail::cat(path, " has no ", entry));
  return std::unique_ptr<Backend>(make());
}

#ifdef METAGRAD_HAS_LLVM
[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kLlvm{
    "LLVM", 20, [] { return load_plugin("libmetagrad_llvm.so", "metagrad_make_llvm_backend"); }};
#endif
#ifdef METAGRAD_HAS_OPENCL
[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kOpenCL{
    "OPENCL", 30, [] { return load_plugin("libmetagrad_opencl.so", "metagrad_make_opencl_backend"); }};
#endif

}  // namespace

}  // namespace metagrad
#endif
