// Entry point of the LLVM device's plugin module (libmetagrad_llvm.so). The device lives in its own
// module, loaded with RTLD_LOCAL on first use, so LLVM 16 never enters the process's global symbol
// namespace: PoCL (the OPENCL device here) brings its own LLVM, and two in one namespace crash.
#include <memory>

#include "metagrad/device.hpp"

namespace metagrad {
std::unique_ptr<Backend> make_llvm_backend();
}

extern "C" metagrad::Backend* metagrad_make_llvm_backend() { return metagrad::make_llvm_backend().release(); }
