#pragma once
// Narrow element types on the host: bulk conversions between float32 and the 16-bit floats
// (IEEE half, bfloat16), both rounding to nearest even, and the choice of kernel that the
// low-precision products take (cpu/gemm_lowp.hpp, cpu/quant.hpp; docs/gemm.md, "Narrow types").
// Storage is raw bits (std::uint16_t), as metagrad::half and metagrad::bf16 (helpers.hpp) hold them:
// this layer includes no other. Defined in the runtime library (metagrad::metagrad).
#include <cstdint>

namespace metagrad::cpu {

// Which kernel a low-precision product runs. `best`: the native one where the CPU has it (AVX-512
// BF16 for bf16, AVX-512 VNNI for int8, AVX-512 for the quantised GEMV) and the runtime GEMM's ISA
// (gemm::isa(), METAGRAD_ISA) is AVX-512, else `avx2` where it is at least AVX2, else `generic`.
// Naming a path the CPU cannot run throws std::runtime_error; naming a narrower one forces it
// (tests run the fallbacks on AVX-512 machines this way).
enum class LowpPath : std::uint8_t { best, native, avx2, generic };
// The path `best` resolves to for each kind of product.
LowpPath best_bf16_path();
LowpPath best_f16_path();  // native: AVX-512 (the f32 GEMM over widened halves)
LowpPath best_s8_path();
LowpPath best_quant_path();

// n values converted; round to nearest even, NaN stays NaN, overflow to a half gives inf,
// subnormals kept (no flush to zero).
void f32_to_bf16(const float* x, std::uint16_t* y, std::int64_t n);
void bf16_to_f32(const std::uint16_t* x, float* y, std::int64_t n);
void f32_to_f16(const float* x, std::uint16_t* y, std::int64_t n);
void f16_to_f32(const std::uint16_t* x, float* y, std::int64_t n);

}  // namespace metagrad::cpu
