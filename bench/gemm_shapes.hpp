#pragma once
// The products bench_gemm times (W4 and the shapes around it), shared with the generator of their
// AOT library (gemm_aot_gen.cpp): C[batch] (m x n) = A[batch] (m x k) B[batch] (k x n).
#include <cstdint>

namespace metagrad::bench {

struct GemmShape {
  const char* key;
  std::int64_t batch, m, k, n;
  // W4's sizes that the GEMM issue holds to OpenBLAS (static 1.0x, dynamic 0.9x); every other row,
  // odd sizes and small or skinny shapes, to 0.8x: no cliff
  bool w4;
};

inline constexpr GemmShape kGemmShapes[] = {
    {"64", 1, 64, 64, 64, false},
    {"127", 1, 127, 127, 127, false},
    {"256", 1, 256, 256, 256, false},
    {"512", 1, 512, 512, 512, true},
    {"1000", 1, 1000, 1000, 1000, false},
    {"1024", 1, 1024, 1024, 1024, true},
    {"2048", 1, 2048, 2048, 2048, true},
    {"8x256", 8, 256, 256, 256, false},
    {"6x25x36864", 1, 6, 25, 36864, false},    // LeNet conv1 as a GEMM, batch 64
    {"16x150x4096", 1, 16, 150, 4096, false},  // conv2
    {"128x784x512", 1, 128, 784, 512, false},  // W5's first layer
    {"1x1024x1024", 1, 1, 1024, 1024, false},  // batch 1: a vector times a matrix
    {"8x4096x1024", 1, 8, 4096, 1024, false},  // a small batch through a wide layer: B from memory
};

}  // namespace metagrad::bench
