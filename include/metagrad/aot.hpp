#pragma once
// Ahead-of-time compilation (Halide's generators): a small program builds a model's graph with
// Tensors (or lowered fixed:: expressions: a static model's gradients through Lowering::grad, so
// its training step is fixed::grad's rules), and an aot::Generator turns each function of it into
// plain C -- the CLANG device's kernels, a blocked GEMM for the contractions (docs/gemm.md), and the
// call sequence -- that needs neither metagrad, nor a compiler, nor LLVM at run time (only libc and
// libm). CMake's metagrad_add_aot_library
// (cmake/MetagradAOT.cmake) builds and runs the generator and compiles what it writes.
//
//   int main(int argc, char** argv) {
//     metagrad::aot::Generator g("mlp");                 // CLANG becomes Device::DEFAULT
//     Tensor x = Tensor::empty({64, 784}), w = ..., lr = Tensor::empty({});
//     Tensor loss = ...;  loss.backward();
//     g.function("mlp_step", {{"x", x}, {"lr", lr}, {"w", w}}, {{"loss", loss}}, {{"w", w - lr * *w.grad}});
//     return g.main(argc, argv);                         // -o DIR writes DIR/mlp.c and DIR/mlp.h
//   }
//
// How a function is captured: the inputs are realized, then the outputs and updates are realized
// on CLANG with GlobalCounters::cache recording every kernel that runs and the buffers it ran on.
// Each buffer of that record is an input (a parameter), an output (the caller's array), a
// buffer a kernel writes (scratch, in one static arena per library, reused once dead), or a
// buffer nothing in the record writes (a constant, emitted as a static array of its values).
// So the kernels must not depend on data beyond their buffers -- true of every kernel metagrad
// generates -- and whatever the graph computes outside kernels (random numbers, LoadOps::CUSTOM
// fills but the indexed loads, copies from other devices) is frozen at its generation-time value.
//
// The emitted C function takes, in order: each input (`const T*`; an updated input is `T*`,
// written in place after everything else is computed; a 0-d input is passed by value), then each
// output (`T*`, row-major), and returns int: 0, or 1 where an index it reads from its inputs is out
// of range (an indexed load: runtime/aot/indexed_load.hpp, an ONNX Gather of token ids), which stops
// the call before any wild read, its outputs unspecified. Outputs must not overlap inputs. The scratch arena
// makes functions of one library non-reentrant: call them from one thread at a time. `NAME_set_threads(n)`
// (NAME.h) lets each matrix product of a call split its work over up to n threads, started for the product
// and joined before it returns; by default a call starts none.
#include <memory>
#include <string>
#include <vector>

#include "metagrad/tensor.hpp"

namespace metagrad::aot {

struct Arg {
  std::string name;  // a C identifier
  Tensor tensor;
};

class Generator {
 public:
  // `name` prefixes the files and internal symbols (NAME.c, NAME.h); also sets Device::DEFAULT to
  // CLANG, so that the tensors made after it are where their kernels can be captured.
  explicit Generator(std::string name);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Captures the C function `fn`. Each update names an input and the value it takes after the
  // call. Throws std::invalid_argument for bad names, shapes or devices.
  void function(const std::string& fn, const std::vector<Arg>& inputs, const std::vector<Arg>& outputs,
                const std::vector<Arg>& updates = {});

  std::string header() const;  // NAME.h: the entry points, extern "C"-safe
  std::string source() const;  // NAME.c: kernels, constants, arena and the call sequences
  void write(const std::string& dir) const;
  // A generator's command line: [-o DIR] [-n NAME] (other arguments are the generator's own);
  // writes DIR/NAME.c and DIR/NAME.h and returns main's status (errors are printed, returning 1).
  int main(int argc, char** argv);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace metagrad::aot
