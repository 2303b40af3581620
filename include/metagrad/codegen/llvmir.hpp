#pragma once
// LLVM IR rendering of a linearized kernel, built with llvm::IRBuilder (the seed's
// renderer/llvmir.py). This header names LLVM types only by forward declaration, so it compiles
// without LLVM's headers; the functions live in the LLVM device's plugin module (ops_llvm.hpp).
//
// The kernel is one function named k.name:
//   void @name(ptr noalias data0, ptr noalias readonly data1, ..., i32 %start, i32 %end)
// data0 is the output; the threaded loop runs over [start, end). Indices compute in i64 with
// Python's floor division and modulo where a numerator can be negative (as render_c_index does);
// a load whose validity is not constant is a branch, so an invalid index is never read. float16
// is stored as `half` and computes in float; fast-math flags are off, contraction to FMA included.
#include <memory>
#include <string>

#include "metagrad/codegen/linearizer.hpp"

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
}  // namespace llvm

namespace metagrad::codegen {

// The kernel as a new module in ctx. A module that fails llvm::verifyFunction throws
// std::runtime_error carrying the verifier's message and the IR.
std::unique_ptr<llvm::Module> render_llvm_module(const LinearizedKernel& k, llvm::LLVMContext& ctx);
// The same module as textual IR: what the LLVM device's ASTRunner::prg holds (DEBUG=4).
std::string render_llvm(const LinearizedKernel& k);
// The standard O2 pipeline (PassBuilder) for tm's CPU and features: loops vectorize for the host.
// Sets the module's triple and data layout from tm.
void optimize_llvm_module(llvm::Module& m, llvm::TargetMachine& tm);

}  // namespace metagrad::codegen
