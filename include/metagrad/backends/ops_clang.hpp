#pragma once
// CLANG: C source compiled by the system C compiler (`cc`, or env CC) into a shared object and
// loaded with dlopen (the seed's runtime/ops_clang.py). Objects are cached on disk by source hash
// under $METAGRAD_CACHE (default ~/.cache/metagrad), so a second process compiles nothing; one is
// loaded only when it matches its size-and-hash sidecar (disk_cache.hpp). The compiler runs as an
// argument vector (env CC split into words), never through a shell.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/backends/host_program.hpp"

namespace metagrad {

class ClangProgram : public HostProgram {
 public:
  // Compiles (or finds in the disk cache) `src` and looks up the function `name`. A compile
  // error throws std::runtime_error carrying the source and the compiler's message. Inside
  // build_together, only notes the source: it loads at its first use.
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
  // Runs `generate` (a realize's code generation, which makes ClangPrograms: its kernels, a GEMM's
  // epilogue), then compiles every program it made that the disk cache lacks, in groups
  // (compile_together) over the cores: one compiler run costs about what a small kernel does.
  static void build_together(const std::function<void()>& generate);
  void* host_function() const override;  // loads the program (at its first use)
  // Compiles seen by this process (disk-cache hits excluded).
  static inline std::atomic<int> compiles = 0;

 private:
  void load();
  std::string name_, src_;
  void* lib_ = nullptr;
  mutable std::once_flag loaded_;
};

struct ClangCodegen {
  static inline const codegen::CStyleLanguage& lang = codegen::c_language();
};

}  // namespace metagrad
