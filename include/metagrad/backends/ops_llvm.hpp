#pragma once
// LLVM: kernels rendered as LLVM IR (codegen/llvmir.hpp), optimised at O2 and compiled to an object
// in-process by the host's target machine (JITTargetMachineBuilder::detectHost: the host CPU and
// its features), then linked and run by ORC's LLJIT (the seed's runtime/ops_llvm.py). Objects are
// cached on disk by hash of IR, LLVM version and host under $METAGRAD_CACHE/llvm, so a second
// process parses, optimises and compiles nothing. DEBUG=2 prints each compile's time, DEBUG=4 the
// IR, DEBUG=6 the optimised IR. All of it lives in the plugin module libmetagrad_llvm.so, built
// when LLVM 16 is found (see LLVMApi below); this header needs no LLVM header.
#include <atomic>
#include <memory>
#include <string>

#include "metagrad/backends/host_program.hpp"

namespace metagrad {

namespace codegen {
struct LinearizedKernel;
}

class LLVMProgram : public HostProgram {
 public:
  // Parses textual IR `src`, verifies it, optimises it and JIT-links the function `name` (whose
  // signature is render_llvm's). Bad IR throws std::runtime_error with the message and the IR.
  LLVMProgram(std::string name, const std::string& src);
  ~LLVMProgram() override;
  // (buffers..., int64 start, int64 end): the global range is split across threads when large.
  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override;
  // Compiles seen by this process (disk-cache hits excluded).
  static inline std::atomic<int> compiles = 0;

 private:
  struct Linked;  // the JIT state this program holds
  std::string name_;
  std::unique_ptr<Linked> linked_;
};

// The LLVM device's halves (Compiled's Codegen and Runtime): an AST becomes an ASTRunner whose
// prg is the kernel's textual IR; (name, IR) becomes an LLVMProgram.
ASTRunner llvm_codegen(const std::shared_ptr<LazyOp>& ast, DType out_dtype);
std::shared_ptr<Program> llvm_runtime(const std::string& name, const std::string& src);

// The device lives in a plugin module loaded RTLD_LOCAL (runtime/backends/llvm_plugin.cpp), so its C++
// names are not visible to the process. Tools and tests reach them through this table:
// `dlsym(dlopen(".../libmetagrad_llvm.so", RTLD_NOW | RTLD_NOLOAD), "metagrad_llvm_api")`.
struct LLVMApi {
  std::shared_ptr<Program> (*runtime)(const std::string& name, const std::string& src);
  std::string (*render)(const codegen::LinearizedKernel& k);  // codegen::render_llvm
  const std::atomic<int>* compiles;                           // LLVMProgram::compiles
};

}  // namespace metagrad

extern "C" const metagrad::LLVMApi* metagrad_llvm_api();
