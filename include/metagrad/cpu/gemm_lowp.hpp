#pragma once
// Low-precision matrix products beside the float32 GEMM (cpu/gemm.hpp): bf16 x bf16 and f16 x f16 -> f32 and
// int8 x int8 -> int32, blocked for the caches as it is, with the dequantising epilogue of int8
// products and the symmetric int8 quantisation that feeds them. Row-major operands with leading
// dimensions; `accumulate` adds the product to what C holds. Defined in the runtime library
// (runtime/gemm/lowp*.cpp, a copy per ISA chosen by CPUID; docs/gemm.md, "Narrow types").
// Bad shapes or strides throw std::invalid_argument naming the function and the shapes.
#include <cstdint>

#include "metagrad/cpu/narrow.hpp"

namespace metagrad::cpu {

// C (m x n, f32) = A (m x k, bf16 bits) B (k x n, bf16 bits). native: vdpbf16ps on k in pairs;
// avx2: A and B widened to f32 as they are packed, an f32 FMA tile; generic: bf16 widened to f32
// panel by panel and the portable f32 GEMM. Every product of two bf16 values is exact in f32, so
// only the f32 sums round.
void gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
               const std::uint16_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate = false,
               LowpPath path = LowpPath::best);

// C (m x n, f32) = A (m x k, f16 bits) B (k x n, f16 bits): f16 widened to f32 panel by panel and
// the f32 GEMM of the path's ISA (native: AVX-512; no x86 CPU here has a product of halves short of
// AVX-512 FP16). Every product of two halves is exact in f32, so only the f32 sums round.
void gemm_f16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
              const std::uint16_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate = false,
              LowpPath path = LowpPath::best);

// C (m x n, int32) = A (m x k, int8) B (k x n, int8), exact (wrapping past int32's range, which
// needs k > 2^17). native: vpdpbusd on k in fours, A offset by 128 to unsigned and 128 times B's
// column sums taken off; avx2: vpmaddwd on k in pairs widened to int16; generic: plain C++.
void gemm_s8(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
             const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc,
             bool accumulate = false, LowpPath path = LowpPath::best);

// The epilogue of a quantised product: y[i][j] = scale_row[i] * scale_col[j] * c[i][j] (a null
// scale counts as all ones).
void dequantize_s32(std::int64_t m, std::int64_t n, const std::int32_t* c, std::int64_t ldc,
                    const float* scale_row, const float* scale_col, float* y, std::int64_t ldy);

// Symmetric int8 quantisation of x (rows x cols, row stride ldx), one scale per row (per_column
// false) or per column: scale = amax / 127, q = round(x / scale) saturated to [-127, 127] (a zero
// row or column gets scale 0 and zeros).
void quantize_s8(std::int64_t rows, std::int64_t cols, const float* x, std::int64_t ldx, std::int8_t* q,
                 std::int64_t ldq, float* scale, bool per_column = false);

}  // namespace metagrad::cpu
