#pragma once
// The quantised GEMV with its activations quantised too, as ggml's decoders run it: each block of
// 32 values of A to int8 with a float scale (d = amax / 127, q = x / d rounded to nearest even),
// each block's product with W's block in int8 (vpdpbusd; vpmaddubsw and vpmaddwd on AVX2), then scaled. Each
// value of A moves by at most d / 2; in exchange a Q4_0 block costs a fraction of the f32 product's
// instructions, so the product keeps up with the memory where gemv_q's widening to f32 cannot. Defined in the
// runtime library (runtime/gemm/lowp*.cpp; docs/decoding.md).
#include <cstdint>

#include "metagrad/cpu/quant.hpp"

namespace metagrad::cpu {

// C (m x n) = A (m x k, f32, row stride lda, quantised per block) W^T for W (n x k) quantised rows.
// native needs AVX-512 VNNI and VBMI; avx2 AVX2, FMA and F16C (plain C++ where the CPU lacks
// F16C); generic is plain C++ with the same integer sums.
// cpu::gemm_q's products of up to 4 rows run it when env METAGRAD_QUANT_ACT=int8.
void gemv_q_int8(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                 QuantType t, const void* w, float* c, std::int64_t ldc, bool accumulate = false,
                 LowpPath path = LowpPath::best);

}  // namespace metagrad::cpu
