#pragma once
// CLANG: C source compiled by the system C compiler (`cc`, or env CC) into a shared object and
// loaded with dlopen (the seed's runtime/ops_clang.py). Objects are cached on disk by source hash
// under $METAGRAD_CACHE (default ~/.cache/metagrad), so a second process compiles nothing.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/codegen/lower.hpp"
#include "metagrad/ops.hpp"

namespace metagrad {

// A kernel that runs on the host (CLANG, LLVM): fn(buffer pointers..., int start, int end), which
// TinyJit's replay calls directly through run_host.
class HostProgram : public Program {
 public:
  ~HostProgram() override;  // defined in libmetagrad: one type_info, also for the LLVM plugin's
  void* fn() const { return fn_; }

 protected:
  void* fn_ = nullptr;
};

class ClangProgram : public HostProgram {
 public:
  // Compiles (or finds in the disk cache) `src` and looks up the function `name`. A compile
  // error throws std::runtime_error carrying the source and the compiler's message.
  ClangProgram(std::string name, const std::string& src);
  ~ClangProgram() override;
  // With a global size, the function takes (buffers..., int start, int end) and the range is
  // split across threads; without one (the walkthrough's hand-written `add`), just the buffers.
  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override;
  // Compiles seen by this process (disk-cache hits excluded).
  static inline std::atomic<int> compiles = 0;

 private:
  std::string name_;
  void* lib_ = nullptr;
};

struct ClangCodegen {
  static inline const codegen::CStyleLanguage lang{"", "", " restrict", true, "", false};
};

// Shared by the devices whose kernels run on the host (CLANG, LLVM) and TinyJit's replay of them:
// the buffers' pointers, checked to be host memory (at most 32), and a run of the kernel
// fn(ptrs[0..count)..., int start, int end) over [0, n), split across the thread pool when
// op_estimate is big enough.
std::vector<void*> host_pointers(const char* device, const std::string& name,
                                 const std::vector<RawBuffer*>& bufs);
void* host_pointer(const char* device, RawBuffer* b);
void run_host(void* fn, void* const* ptrs, std::size_t count, std::int64_t n, std::int64_t op_estimate);
// AST -> C-style source in `lang`, through codegen::lower (also used by OPENCL).
ASTRunner lower_to_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype,
                          const codegen::CStyleLanguage& lang,
                          const codegen::Opts& opts = codegen::Opts::host());

// AST -> runner for a host device: a float32 contraction runs the runtime GEMM (its program comes
// with the runner), anything else is rendered by `render` through codegen::lower.
ASTRunner lower_host(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const codegen::Renderer& render,
                     const Compiled::Runtime& compile);

// The directory of the on-disk kernel cache.
std::string kernel_cache_dir();
// A stable 64-bit FNV-1a hash as 16 hex digits (file names of the disk cache).
std::string stable_hash(const std::string& s);

}  // namespace metagrad
