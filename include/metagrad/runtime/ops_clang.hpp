#pragma once
// CLANG: C source compiled by the system C compiler (`cc`, or env CC) into a shared object and
// loaded with dlopen (the seed's runtime/ops_clang.py). Objects are cached on disk by source hash
// under $METAGRAD_CACHE (default ~/.cache/metagrad), so a second process compiles nothing; one is
// loaded only when it matches its size-and-hash sidecar (disk_cache.hpp). The compiler runs as an
// argument vector (env CC split into words), never through a shell.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/runtime/host_program.hpp"

namespace metagrad {

class ClangProgram : public HostProgram {
 public:
  // Compiles (or finds in the disk cache) `src` and looks up the function `name`. A compile
  // error throws std::runtime_error carrying the source and the compiler's message.
  ClangProgram(std::string name, const std::string& src);
  ~ClangProgram() override;
  // With a global size, the function takes (buffers..., int64 start, int64 end) and the range is
  // split across threads; without one (the walkthrough's hand-written `add`), just the buffers.
  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override;
  // Compiles these kernels (name, source) in one compiler run into the disk cache, where the
  // constructor then finds each; any already there, or not made of the C prelude and a function,
  // are left out. Best effort: a failure leaves the kernels to be compiled one by one.
  static void compile_together(const std::vector<std::pair<std::string, std::string>>& kernels);
  // Compiles seen by this process (disk-cache hits excluded).
  static inline std::atomic<int> compiles = 0;

 private:
  std::string name_;
  void* lib_ = nullptr;
};

struct ClangCodegen {
  static inline const codegen::CStyleLanguage& lang = codegen::c_language();
};

}  // namespace metagrad
