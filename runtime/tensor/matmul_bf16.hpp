#pragma once
// bf16 x bf16 products on the host devices through cpu::gemm_bf16 (vdpbf16ps where the CPU has it).
#include <optional>

#include "metagrad/tensor.hpp"

namespace metagrad {

// x (..., k) @ w (k, n) as bf16 (f32 sums, rounded once) where both are bf16 on a host device and no
// gradient is wanted: a CUSTOM load running the GEMM on the realized buffers. Else nothing, and the
// caller builds the product from ops. `op` is what errors call the caller (an undefined operand).
std::optional<Tensor> matmul_bf16(const Tensor& x, const Tensor& w, const char* op = __builtin_FUNCTION());

}  // namespace metagrad
