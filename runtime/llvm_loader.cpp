// Registers the LLVM device, which lives in a plugin module beside this library
// (libmetagrad_llvm.so, runtime/llvm_plugin.cpp) loaded RTLD_LOCAL on first use, so LLVM 16 never
// enters the process's global symbol namespace. Built into libmetagrad only with the plugin.
#ifdef METAGRAD_HAS_LLVM
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "metagrad/device.hpp"

namespace metagrad {

namespace {

std::unique_ptr<Backend> load_llvm_plugin() {
  Dl_info self{};
  ::dladdr(reinterpret_cast<void*>(&load_llvm_plugin), &self);
  std::string dir = self.dli_fname ? std::string(self.dli_fname) : "";
  dir = dir.substr(0, dir.find_last_of('/') + 1);
  std::string path = dir + "libmetagrad_llvm.so";
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(detail::cat("cannot load ", path, ": ", ::dlerror()));
  auto make = reinterpret_cast<Backend* (*)()>(::dlsym(lib, "metagrad_make_llvm_backend"));
  if (!make) throw std::runtime_error(detail::cat(path, " has no metagrad_make_llvm_backend"));
  return std::unique_ptr<Backend>(make());
}

[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kLlvm{"LLVM", 20,
                                                                                    load_llvm_plugin};

}  // namespace

}  // namespace metagrad
#endif
