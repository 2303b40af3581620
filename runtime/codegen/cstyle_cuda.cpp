// CUDA C, as NVRTC compiles it for the CUDA device (runtime/backends/ops_cuda.cpp, docs/cuda.md): C with
// `extern "C" __global__` kernels, thread and block indices, `__shared__` memory for block-wide
// reductions, and float16 stored as `half` (16 bits) and converted by the GPU's own instructions.
#include "metagrad/codegen/cstyle.hpp"

#include <string>

#include "prelude.hpp"

namespace metagrad::codegen {

namespace {

// NVRTC declares the math functions (exp2f, log2f, sinf, powf and their double versions) and the
// index variables itself; the rest is here. Integer helpers are C's (64-bit, Python's floor
// division); half converts with cvt, rounding to nearest even, except NaN: cvt makes every NaN
// canonical, the host keeps its sign and payload (quieted), both ways.
// After the half typedef, kMaxMacro, MG_D and the integer helpers (prelude.hpp), in cuda_language():
// a string built here at static initialisation could be read before it is built (CudaCodegen::lang).
const char* kPreludeCUDA =
    R"(MG_D float mg_h2f(half h) { if ((h & 0x7fffu) > 0x7c00u) return __uint_as_float(((unsigned)(h & 0x8000u) << 16) | 0x7fc00000u | ((unsigned)(h & 0x3ffu) << 13)); float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
MG_D half mg_f2h(float f) { unsigned x = __float_as_uint(f); if ((x & 0x7fffffffu) > 0x7f800000u) return (half)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu)); half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
MG_D float mg_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
MG_D unsigned short mg_f2bf(float f) { unsigned x = __float_as_uint(f); return (unsigned short)((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16); }
)";

}  // namespace

const CStyleLanguage& cuda_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage l;
    l.name = "CUDA C";
    l.kernel_prefix = "extern \"C\" __global__ ";
    l.buffer_suffix = " __restrict__";
    l.prelude = std::string("typedef unsigned short half;\n") + kMaxMacro +
                "#define MG_D static __device__ __forceinline__\n" +
                integer_helpers("MG_D ", "long long", "long long", "unsigned long long", "0ULL") +
                kPreludeCUDA;
    l.range_arguments = false;
    // 64-bit: a grid of 2^31 blocks of 256 threads counts past 2^32.
    l.global_id = "(blockIdx.x*(long long)blockDim.x+threadIdx.x)";
    l.group_id = "blockIdx.x", l.local_id = "threadIdx.x";
    l.local_prefix = "__shared__ ", l.barrier = "__syncthreads();";
    l.flat_global = true;
    l.wide_counters = false;
    l.types = {"bool",
               "signed char",
               "unsigned char",
               "int",
               "long long",
               "half",
               "unsigned short",
               "float",
               "double",
               "short",
               "unsigned short",
               "unsigned int",
               "unsigned long long"};
    l.int64_suffix = "LL";
    l.inf32 = "__int_as_float(0x7f800000)", l.inf64 = "__longlong_as_double(0x7ff0000000000000LL)";
    l.nan32 = "__int_as_float(0x7fc00000)", l.nan64 = "__longlong_as_double(0x7ff8000000000000LL)";
    l.math_f32_suffix = "f";
    l.half_load = "mg_h2f({0}[{1}])", l.half_store = "{0}[{1}] = mg_f2h({2});";
    l.half_round = "mg_h2f(mg_f2h({0}))";
    return l;
  }();
  return lang;
}

}  // namespace metagrad::codegen
