#pragma once
// Quantised weights in GGUF's block layouts (ggml's Q8_0 and Q4_0): a matrix's rows cut into
// blocks of 32 values, each block an fp16 scale d and its 32 quantised values. Quantisation,
// dequantisation, and the product with a float32 activation A, C = A W^T for W (n x k) quantised
// row by row, W dequantised a panel at a time (never whole); with one to four rows of A a GEMV
// that reads each weight byte once (decoding: tokens/s are bytes read). Defined in the runtime
// library (runtime/gemm/lowp*.cpp; docs/gemm.md, "Narrow types").
#include <cstddef>
#include <cstdint>

#include "metagrad/cpu/narrow.hpp"

namespace metagrad::cpu {

inline constexpr int kQuantBlock = 32;  // values a block

// x = d * q.
struct BlockQ8_0 {
  std::uint16_t d;  // fp16 bits
  std::int8_t qs[kQuantBlock];
};
// x = d * (q - 8), q in [0, 15]: value i is the low nibble of qs[i] for i < 16, the high nibble of
// qs[i - 16] for i >= 16.
struct BlockQ4_0 {
  std::uint16_t d;  // fp16 bits
  std::uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "GGUF's block sizes");

enum class QuantType : std::uint8_t { q8_0, q4_0 };

// Bytes of one quantised row of k values (k a multiple of 32).
std::size_t quant_row_bytes(QuantType t, std::int64_t k);

// x (rows x k, row stride ldx; k a multiple of 32) quantised row by row into `out`
// (rows * quant_row_bytes(t, k) bytes), as ggml's reference quantisers: Q8_0 d = amax / 127,
// q = round(x / d); Q4_0 d = m / -8 for m the value of largest magnitude, q = min(15, trunc(x / d + 8.5)).
void quantize(QuantType t, std::int64_t rows, std::int64_t k, const float* x, std::int64_t ldx, void* out);
// The inverse: y (rows x k, row stride ldy) = the values the blocks stand for.
void dequantize(QuantType t, std::int64_t rows, std::int64_t k, const void* q, float* y, std::int64_t ldy);

// C (m x n) = A (m x k, f32, row stride lda) W^T, W (n x k) quantised rows (as `quantize` writes
// them). m <= 4 runs gemv_q; more rows a blocked f32 product whose packing dequantises W's panels
// (native), or the f32 GEMM on panels of W dequantised in turn (avx2, generic).
void gemm_q(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, QuantType t,
            const void* w, float* c, std::int64_t ldc, bool accumulate = false,
            LowpPath path = LowpPath::best);
// The same for any m as dot products of A's rows with W's, W read once from memory (a row of W is
// reused from the L1 by every row of A). native: AVX-512; avx2: AVX2, FMA and F16C (plain C++
// where the CPU lacks F16C); generic: plain C++.
void gemv_q(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, QuantType t,
            const void* w, float* c, std::int64_t ldc, bool accumulate = false,
            LowpPath path = LowpPath::best);

}  // namespace metagrad::cpu
