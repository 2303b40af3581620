#pragma once
// C-style rendering of a linearized kernel. C (CLANG) and OpenCL C differ only in this table of
// prefixes and in how the threaded loop's range arrives (tinygrad's renderer/cstyle.py).
#include <string>

#include "metagrad/codegen/linearizer.hpp"

namespace metagrad::codegen {

struct CStyleLanguage {
  std::string kernel_prefix;    // before `void` ("__kernel" for OpenCL)
  std::string buffer_prefix;    // before each buffer's type ("__global ")
  std::string buffer_suffix;    // after the `*` (" restrict")
  bool range_arguments = true;  // C: (int64 start, int64 end) select the threaded loop's range
  std::string global_id;        // OpenCL: the expression for the threaded loop's index
  bool half_native = false;     // the language has a `half` type
  // CUDA C (cuda_language()): its own types, literals and prelude, `__shared__` memory, and a thread
  // index that covers every global loop (one index over their product, split back into the loops'
  // variables; threads past the product return), since a GPU launches a thread per output.
  bool cuda = false;
};

// CUDA C as NVRTC compiles it (runtime/codegen/cstyle_cuda.cpp, docs/cuda.md), and its prelude.
const CStyleLanguage& cuda_language();
const std::string& cuda_prelude();
// The threads the CUDA dialect launches for k (times its local size, when it has groups): the
// product of the extents of the global loops its thread index covers.
std::int64_t flat_global_size(const LinearizedKernel& k);

// The source of one kernel function named k.name: c_prelude(lang), then render_cstyle_function.
std::string render_cstyle(const LinearizedKernel& k, const CStyleLanguage& lang);
// What every kernel in `lang` starts with: its helper functions and macros (mg_exp2f, mg_max...).
const std::string& c_prelude(const CStyleLanguage& lang);
// The kernel function alone: `void NAME(...) {...}`, gcc attributes before `void` where it has them.
std::string render_cstyle_function(const LinearizedKernel& k, const CStyleLanguage& lang);
// The type a buffer of `d` is stored as in C (OpenCL C when `opencl`): the kernels' parameter types.
std::string c_storage_type(DType d, bool opencl = false);
// A symbolic index in C: floor division and modulo stay Python's where a numerator can be negative.
std::string render_c_index(const symbolic::Node& n);

}  // namespace metagrad::codegen
