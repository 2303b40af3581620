#pragma once
// bf16 x bf16 and f16 x f16 products on the host devices through cpu::gemm_bf16 (vdpbf16ps where
// the CPU has it) and cpu::gemm_f16.
#include <optional>

#include "metagrad/tensor.hpp"

namespace metagrad {

// x (..., k) @ w (k, n) as bf16 or f16 (f32 sums, rounded once) where both have that dtype and lie
// on a host device: a CUSTOM load running the GEMM on the realized buffers, differentiable (its
// backward's products run the same GEMM). Else nothing, and the caller builds the product from ops.
// `op` is what errors call the caller (an undefined operand).
std::optional<Tensor> matmul_bf16(const Tensor& x, const Tensor& w, const char* op = __builtin_FUNCTION());

}  // namespace metagrad
