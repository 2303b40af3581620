#pragma once
// CLANG: C source compiled by the system C compiler (`cc`, or env CC) into a shared object and
// loaded with dlopen (the seed's runtime/ops_clang.py). Objects are cached on disk by source hash
// under $METAGRAD_CACHE (default ~/.cache/metagrad), so a second process compiles nothing.
#include <functional>
#include <memory>
#include <string>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/ops.hpp"

namespace metagrad {

class ClangProgram : public Program {
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
  void* fn_ = nullptr;
};

struct ClangCodegen {
  static inline const codegen::CStyleLanguage lang{"", "", " restrict", true, "", false};
};

// Shared by the devices whose kernels run on the host (CLANG, LLVM): the buffers' pointers, checked
// to be host memory, and a run of f over [0, n) split across the thread pool when it is big enough.
std::vector<void*> host_pointers(const char* device, const std::string& name,
                                 const std::vector<RawBuffer*>& bufs);
void run_split(std::int64_t n, std::int64_t op_estimate,
               const std::function<void(std::int64_t, std::int64_t)>& f);
// AST -> C-style source in `lang`, through codegen::lower (also used by OPENCL).
ASTRunner lower_to_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype,
                          const codegen::CStyleLanguage& lang,
                          const codegen::Opts& opts = codegen::Opts::host());

// The directory of the on-disk kernel cache.
std::string kernel_cache_dir();
// A stable 64-bit FNV-1a hash as 16 hex digits (file names of the disk cache).
std::string stable_hash(const std::string& s);

}  // namespace metagrad
