#pragma once
// What the devices whose kernels run on the host (CLANG, LLVM) share, and TinyJit's replay of them:
// HostProgram (a kernel function in this process), the launch of such a function over a range split
// across the thread pool, and the runners that render an AST as C-style source (also used by OPENCL).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/codegen/kernel.hpp"
#include "metagrad/codegen/pipeline.hpp"
#include "metagrad/device.hpp"

namespace metagrad {

// A kernel that runs on the host: fn(buffer pointers..., int64 start, int64 end).
class HostProgram : public Program {
 public:
  ~HostProgram() override;  // defined in libmetagrad: one type_info, also for the LLVM plugin's
  void* fn() const { return fn_; }
  void* host_function() const override { return fn_; }

 protected:
  void* fn_ = nullptr;
};

// The buffers' pointers, checked to be host memory. A rendered kernel with more than kMaxHostArgs
// buffers takes them as one array (codegen::kMaxBufferArguments); run_host passes them so.
constexpr std::size_t kMaxHostArgs = codegen::kMaxBufferArguments;
std::vector<void*> host_pointers(const char* device, const std::vector<RawBuffer*>& bufs);
void* host_pointer(const char* device, RawBuffer* b);
// A run of the kernel fn(ptrs[0..count)..., int64 start, int64 end) over [0, n), split across the thread
// pool when op_estimate is big enough. Allocates nothing.
void run_host(void* fn, void* const* ptrs, std::size_t count, std::int64_t n, std::int64_t op_estimate);
// One call of fn(ptrs[0..count)..., start, end) on this thread.
void call_host_range(void* fn, void* const* ptrs, std::size_t count, std::int64_t start, std::int64_t end);
// A call of fn(ptrs[0..count)...) without a range (hand-written kernels, at most kMaxHostArgs buffers).
void call_host(void* fn, void* const* ptrs, std::size_t count);
// AST -> runner for a host device: a float32 contraction runs the runtime GEMM (device/gemm.hpp;
// its program comes with the runner, `compile` builds its epilogue, `scratch` allocates its
// temporaries on the device), anything else is rendered by `render` through the codegen pipeline.
ASTRunner host_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const codegen::Renderer& render,
                      const Compiled::Runtime& compile, const Compiled::BufferFactory& scratch,
                      const codegen::Opts& opts = codegen::Opts::host());
// AST -> C-style source in `lang`, through the codegen pipeline (codegen/pipeline.hpp).
ASTRunner cstyle_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype,
                        const codegen::CStyleLanguage& lang,
                        const codegen::Opts& opts = codegen::Opts::host());

}  // namespace metagrad
