#pragma once
// C-style rendering of a linearized kernel (tinygrad's renderer/cstyle.py). One renderer serves
// every C-like language: what differs between them (C for CLANG, OpenCL C) is data in a
// CStyleLanguage, the dialect description, plus the few rows of the op table a dialect spells its
// own way. A new C-like language is a new CStyleLanguage, not a new renderer.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "metagrad/codegen/linearizer.hpp"

namespace metagrad::codegen {

struct CStyleLanguage;

// What an op table row renders from: the operands' C expressions, the dtype the op reads (the
// first operand's; WHERE's is its value operands') and the dtype it produces.
struct AluArgs {
  const std::vector<std::string>& v;
  DType in, out;
  const CStyleLanguage& lang;
};
using AluRender = std::string (*)(const AluArgs&);
using OpTable = std::vector<std::pair<Op, AluRender>>;

struct CStyleLanguage {
  std::string name;  // "C", "OpenCL C": in error messages
  // ---- the kernel function ----
  std::string kernel_prefix;     // before `void` ("__kernel")
  std::string buffer_prefix;     // before each buffer's type ("__global ")
  std::string buffer_suffix;     // after the `*` (" restrict")
  std::string reduce_attribute;  // before a kernel with a reduce loop (gcc's loop-vectorizer switch)
  // Before a kernel whose sum may be reassociated (Kernel::reassociate), in place of reduce_attribute.
  std::string reassociate_attribute;
  // In such a kernel, before each innermost loop that sums into accumulators declared outside it
  // ({0}: their names, comma-separated): the sum alone may be reordered (OpenMP's simd reduction).
  std::string sum_pragma;
  std::string prelude;  // what every kernel source starts with: helpers (mg_max...), pragmas
  // ---- how the threaded loop's index arrives ----
  bool range_arguments = true;  // C: (long long start, long long end) bound the threaded loop
  std::string global_id;        // else: the threaded loop's index ("get_global_id(0)")
  std::string group_id;         // with work-groups: the group's index ("get_group_id(0)")
  std::string local_id;         // and the item's index in its group ("get_local_id(0)")
  std::string local_prefix;     // before local (group-shared) memory ("__local ")
  std::string barrier;          // a work-group barrier over local memory, as a statement
  bool wide_counters = true;    // loop counters are 64-bit; else 32-bit where the extent fits
  // The thread index covers every global loop (one index over their product, split back into the
  // loops' variables): a GPU launches a thread per output position. The launch may overshoot the
  // product (whole blocks): threads past it return.
  bool flat_global = false;
  // ---- types and literals ----
  std::array<std::string, 13> types;  // a buffer's element type, per dtype in dtypes::all's order
  std::string bool_compute;           // the type bools compute in, where it is not their storage type
  std::string int64_suffix;           // of an int64 literal ("LL")
  std::string inf32, inf64, nan32, nan64;
  // A float math function: math_prefix + name + (math_f32_suffix for float32 and float16).
  std::string math_prefix, math_f32_suffix;
  // float16 storage: a load ({0} the buffer, {1} the index) and a store ({2} the value); a float
  // rounded to float16's precision ({0}), what a cast to float16 computes. bfloat16 converts with
  // the prelude's mg_bf2f and mg_f2bf in every dialect.
  std::string half_load, half_store, half_round;
  // ---- ops ----
  OpTable code_for_op;  // rows that replace the common table's (cstyle.cpp)

  std::string type(DType d) const;     // storage type of d
  std::string compute(DType d) const;  // the type values of d compute in (half, bfloat16 in float)
  std::string literal(double v, DType d) const;
  std::string math(const char* fn, DType d) const;  // math("exp2", float32): "__builtin_exp2f" in C
  // The row for op: the dialect's own, else the common table's; throws naming the op if neither.
  AluRender row(Op op) const;
};

// The dialects: C as the CLANG device compiles it (gcc or clang) and OpenCL C 1.2.
const CStyleLanguage& c_language();
const CStyleLanguage& opencl_language();
// CUDA C as NVRTC compiles it (runtime/codegen/cstyle_cuda.cpp, docs/cuda.md).
const CStyleLanguage& cuda_language();
// The threads a flat_global dialect launches for k (times its local size, when it has groups): the
// product of the extents of the global loops its thread index covers.
std::int64_t flat_global_size(const LinearizedKernel& k);

// "{0}" .. "{9}" in pattern replaced by args[0] .. args[9]: how dialect strings name their parts.
std::string format(const std::string& pattern, const std::vector<std::string>& args);

// The source of one kernel function named k.name: c_prelude(lang), then render_cstyle_function.
std::string render_cstyle(const LinearizedKernel& k, const CStyleLanguage& lang);
// What every kernel in `lang` starts with: its helper functions and macros (mg_exp2f, mg_max...).
const std::string& c_prelude(const CStyleLanguage& lang);
// The kernel function alone: `void NAME(...) {...}`, attributes before `void` where it has them.
std::string render_cstyle_function(const LinearizedKernel& k, const CStyleLanguage& lang);
// The type a buffer of `d` is stored as in `lang`: the kernels' parameter types.
std::string c_storage_type(DType d, const CStyleLanguage& lang = c_language());
// A symbolic index in C: floor division and modulo stay Python's where a numerator can be negative.
std::string render_c_index(const symbolic::Node& n);

}  // namespace metagrad::codegen
