#pragma once
// Quantised weights on the dynamic path: a matrix W (rows x cols) in GGUF's Q8_0 or Q4_0 blocks
// (cpu/quant.hpp), held as a uint8 Tensor of its raw bytes on a host device (CPU, CLANG, LLVM), and
// its product with float32 activations through cpu::gemm_q (cpu::gemv_q for up to 4 rows), which
// dequantises W a panel at a time, never whole. Inference only: no gradient flows through it.
#include <cstdint>
#include <optional>

#include "metagrad/cpu/quant.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::nn {

struct QuantizedTensor {
  Tensor blocks;  // uint8 (rows, cpu::quant_row_bytes(type, cols)), realized
  cpu::QuantType type{};
  std::int64_t rows = 0, cols = 0;

  Dims shape() const { return {rows, cols}; }
  std::string device() const { return blocks.device(); }
  Tensor dequantize() const;  // float32 (rows, cols): the values the blocks stand for
};

// w (rows, cols), cols a multiple of 32, quantised row by row (Tensor::quantize).
QuantizedTensor quantize(const Tensor& w, cpu::QuantType type);

// x (..., cols) W^T (+ bias): float32 (..., rows), as Tensor::linear with weight W^T. x is cast to
// float32 and must be on W's device and need no gradient.
Tensor linear(const Tensor& x, const QuantizedTensor& w, const std::optional<Tensor>& bias = {});

std::string quant_name(cpu::QuantType t);  // "q8_0", "q4_0"

}  // namespace metagrad::nn
