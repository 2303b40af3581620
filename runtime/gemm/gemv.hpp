#pragma once
// Products of few rows against a weight read in place (decoding: one token's activations times a
// weight), as dot products that read each weight once: the blocked GEMM would pack the whole weight
// for 1-4 rows of work. Internal to the runtime library (gemv.cpp).
#include <cstdint>

#include "metagrad/device/gemm.hpp"

namespace metagrad::gemm {

// Whether sgemm hands p to gemv: m <= 4, B's columns contiguous (brs == 1, a weight W (n x k) used as
// W^T, as Linear's is, or a head's keys) and at least 1024 weights.
bool gemv_fits(const Problem& p);
void gemv(const Problem& p, Isa isa = gemm::isa());
// y (m x n, f32) = x (m x k, f32) W^T for W (n x k) bf16 rows (widened as they are read).
void gemv_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const std::uint16_t* w,
               float* y, Isa isa = gemm::isa());

// Columns [j0, j1) of C (m x n, row stride ldc) = A (m x k, contiguous) W^T, W's rows ldw apart:
// the AVX2 and FMA copy (gemv_avx2.cpp, compiled with those flags; called where CPUID has them).
namespace avx {
void gemv_columns(std::int64_t m, std::int64_t k, const float* a, const float* w, std::int64_t ldw, float* c,
                  std::int64_t ldc, std::int64_t j0, std::int64_t j1);
void gemv_columns(std::int64_t m, std::int64_t k, const float* a, const std::uint16_t* w, std::int64_t ldw,
                  float* c, std::int64_t ldc, std::int64_t j0, std::int64_t j1);
}  // namespace avx

}  // namespace metagrad::gemm
