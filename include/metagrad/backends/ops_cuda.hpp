#pragma once
// CUDA: the C-style renderer's CUDA C dialect, compiled by NVRTC and run through the CUDA driver API
// (the seed's runtime/ops_cuda.py). Both libraries are loaded with dlopen when the device starts
// (libcuda.so.1; libnvrtc.so under several sonames, or $METAGRAD_NVRTC), so nothing CUDA is needed
// to build metagrad and the device is listed only where a driver and a GPU are found. Compiled
// modules (cubin, or PTX where NVRTC does not know the GPU) are cached on disk by source, GPU
// architecture and NVRTC version. Launches are asynchronous on the context's default stream; copies
// to the host wait for them. See docs/cuda.md.
//
// This header needs no CUDA headers and is usable where no GPU is: cuda_runner renders a kernel and
// nvrtc_compile compiles one (with NVRTC alone), which is how the tests check the dialect on a CPU
// machine.
#include <memory>
#include <string>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/device.hpp"

namespace metagrad {

struct CudaCodegen {
  static inline const codegen::CStyleLanguage& lang = codegen::cuda_language();
  // Launch and tiling choices for a GPU: many threads with small register tiles, no cache blocking
  // (a blocked reduce carries partial sums through the output, which needs one thread per output),
  // reduces with few outputs shared by a block of threads through shared memory, along any axis.
  static codegen::Opts opts() {
    codegen::Opts o{4, 4, 0, 4, 0, 128};
    o.any_axis_groups = true;
    return o;
  }
};

// AST -> CUDA C source with its launch size (global: threads in all, local: threads per block when
// the kernel uses a block-wide reduce), without a GPU. The program is not built.
ASTRunner cuda_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype);
[[deprecated("renamed cuda_runner")]] inline ASTRunner lower_cuda(const std::shared_ptr<LazyOp>& ast,
                                                                  DType out_dtype) {
  return cuda_runner(ast, out_dtype);
}

// A module image NVRTC made: a cubin for the GPU's own architecture, or PTX for the newest virtual
// architecture NVRTC knows at or below it (the driver compiles that when it loads it).
struct CudaImage {
  std::string bytes;
  bool ptx = false;
  std::string target;  // "sm_80", "compute_90"
};
// Compiles CUDA C source for compute capability `arch` (major * 10 + minor) with NVRTC, loaded on
// first use. Throws std::runtime_error when NVRTC cannot be loaded, and one carrying NVRTC's log and
// the source when the kernel does not compile.
CudaImage nvrtc_compile(const std::string& name, const std::string& src, int arch);
// "NVRTC 12.4", or throws as nvrtc_compile does when NVRTC cannot be loaded.
std::string nvrtc_version();

// The CUDA device as Device::get returns it, with what it offers beyond Backend.
class CUDABackend : public Compiled {
 public:
  using Compiled::Compiled;
  virtual std::string device_name() const = 0;  // "NVIDIA H100 80GB HBM3 (sm_90, driver 12.4)"
  virtual int arch() const = 0;                 // compute capability, major * 10 + minor
  // A program from hand-written CUDA C (an `extern "C" __global__` function named `name`), built as
  // the device builds generated kernels.
  virtual std::shared_ptr<Program> compile(const std::string& name, const std::string& src) = 0;
  // Waits for every launched kernel; an error a kernel raised is thrown here, naming it.
  virtual void synchronize() = 0;
  // Programs built from source by this process (disk-cache hits excluded).
  virtual int compiles() const = 0;
};

}  // namespace metagrad
