#pragma once
// OPENCL: OpenCL C kernels through the ICD loader (the seed's runtime/ops_gpu.py): one context and
// one in-order queue on the chosen device (env OPENCL_DEVICE=index, else the first GPU, else any
// device, such as PoCL's CPU device). Programs are cached on disk as device binaries by source hash
// under $METAGRAD_CACHE, so a second process builds nothing.
//
// The device lives in a plugin module beside the library (libmetagrad_opencl.so), loaded on first
// use, so libmetagrad itself needs no ICD loader: a machine without libOpenCL.so.1 runs every other
// device. This header needs no OpenCL headers (handles are the opaque `_cl_*` pointers cl.h
// typedefs), and `OpenCLBackend` has no out-of-line members, so code can reach the device as
// `dynamic_cast<OpenCLBackend*>(&Device::get("OPENCL"))` and link without OpenCL.
#include <memory>
#include <mutex>
#include <string>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/device.hpp"

struct _cl_mem;
struct _cl_program;
struct _cl_kernel;

namespace metagrad {

struct CLContext;  // platform, device, context and queue (runtime/backends/ops_opencl.cpp)

// Device memory: a cl_mem of nbytes(). copyin/copyout are blocking.
class RawOpenCLBuffer : public RawBuffer {
 public:
  RawOpenCLBuffer(std::shared_ptr<CLContext> ctx, std::size_t size, DType dtype);
  ~RawOpenCLBuffer() override;
  void copyin(const void* host) override;
  void copyout(void* host) const override;
  _cl_mem* mem() const { return mem_; }

 private:
  std::shared_ptr<CLContext> ctx_;
  _cl_mem* mem_ = nullptr;
};

// One kernel built from OpenCL C source (or the disk cache). A build error throws
// std::runtime_error carrying the build log and the source.
class CLProgram : public Program {
 public:
  CLProgram(std::shared_ptr<CLContext> ctx, std::string name, const std::string& src);
  ~CLProgram() override;
  // Enqueues global_size[0] work items (local_size[0] per group when given) on the buffers (output
  // first) and waits, so timings are real.
  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override;

 private:
  std::shared_ptr<CLContext> ctx_;
  std::string name_;
  _cl_program* program_ = nullptr;
  _cl_kernel* kernel_ = nullptr;
  std::mutex mu_;  // kernel arguments are per cl_kernel: one launch at a time
};

struct OpenCLCodegen {
  static inline const codegen::CStyleLanguage& lang = codegen::opencl_language();
};

// The OPENCL device as Device::get returns it, with what it offers beyond Backend.
class OpenCLBackend : public Compiled {
 public:
  using Compiled::Compiled;
  virtual std::string device_name() const = 0;  // "pthread-skylake (Portable Computing Language)"
  virtual bool has_fp64() const = 0;            // cl_khr_fp64: float64 kernels build only with it
  // A program from hand-written source, as the device's runtime builds generated kernels.
  virtual std::shared_ptr<Program> compile(const std::string& name, const std::string& src) = 0;
  // Builds from source seen by this process (disk-cache hits excluded).
  virtual int compiles() const = 0;
};

}  // namespace metagrad
