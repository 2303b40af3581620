// The fused attention's exponentials compiled with AVX2 and FMA (flags set in CMakeLists.txt), eight
// lanes a step where attention.cpp's baseline copy has four; called only where CPUID reports AVX2.
#include <bit>
#include <cstdint>

namespace metagrad::attention::avx {

using i64 = std::int64_t;
#include "attention_exp.inc"

}  // namespace metagrad::attention::avx
