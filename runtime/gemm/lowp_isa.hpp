#pragma once
// What lowp.cpp hands to the ISA copies of the low-precision kernels (lowp_avx512.cpp,
// lowp_avx2.cpp), each compiled with its ISA's flags and called only where CPUID allows.
#include <cstdint>

#include "metagrad/cpu/gemm_lowp.hpp"
#include "metagrad/cpu/quant.hpp"

namespace metagrad::cpu::lowp {

template <class TA, class TB, class TC>
struct GemmArgs {
  std::int64_t m, n, k;
  const TA* a;
  std::int64_t lda;
  const TB* b;
  std::int64_t ldb;
  TC* c;
  std::int64_t ldc;
  bool accumulate;
};
using Bf16Args = GemmArgs<std::uint16_t, std::uint16_t, float>;
using S8Args = GemmArgs<std::int8_t, std::int8_t, std::int32_t>;
using QArgs = GemmArgs<float, void, float>;  // B = W^T: W's quantised rows, ldb = k

// Rows [n0, n1) of W (columns of C) for every row of A.
struct GemvArgs {
  std::int64_t m, n0, n1, k;
  const float* a;
  std::int64_t lda;
  const void* w;
  float* c;
  std::int64_t ldc;
  bool accumulate;
};

// gemv_q_int8's A: each row quantised a block of 32 at a time to int8 with a float scale, laid out
// for a pair of blocks a step: `qa` 64 bytes, `init` 16 int32 (minus the offset that makes W's
// values unsigned times each block's sum of qa, in lanes 0 and 8), `da` 16 floats (each block's scale
// in its 8 lanes); an odd count ends with a zero block. Rows `pairs` steps apart.
struct GemvInt8Args {
  std::int64_t m, n0, n1, k, pairs;
  const std::int8_t* qa;
  const std::int32_t* init;
  const float* da;
  const void* w;
  float* c;
  std::int64_t ldc;
  bool accumulate;
};

#if defined(__x86_64__)
namespace avx512 {
// Needs VNNI and VBMI (vpermb): lowp.cpp checks.
void gemv_q_int8(QuantType t, const GemvInt8Args& g);
void gemm_bf16(const Bf16Args& p);
// bias: -128 times B's column sums (A is offset by 128), added once.
void gemm_s8(const S8Args& p, const std::int32_t* bias);
void gemv_q(QuantType t, const GemvArgs& g);
// W dequantised as it is packed.
void gemm_q(QuantType t, const QArgs& p);
}  // namespace avx512
namespace avx {
void gemm_s8(const S8Args& p);
void gemm_bf16(const Bf16Args& p);
// Need F16C besides AVX2 and FMA: lowp.cpp checks.
void gemv_q(QuantType t, const GemvArgs& g);
void gemv_q_int8(QuantType t, const GemvInt8Args& g);
}  // namespace avx
#else  // (never called: CPUID finds neither; lowp.cpp resolves every path to generic)
namespace avx512 {
inline void gemm_bf16(const Bf16Args&) {}
inline void gemm_s8(const S8Args&, const std::int32_t*) {}
inline void gemv_q(QuantType, const GemvArgs&) {}
inline void gemv_q_int8(QuantType, const GemvInt8Args&) {}
inline void gemm_q(QuantType, const QArgs&) {}
}  // namespace avx512
namespace avx {
inline void gemm_s8(const S8Args&) {}
inline void gemm_bf16(const Bf16Args&) {}
inline void gemv_q(QuantType, const GemvArgs&) {}
inline void gemv_q_int8(QuantType, const GemvInt8Args&) {}
}  // namespace avx
#endif

}  // namespace metagrad::cpu::lowp
