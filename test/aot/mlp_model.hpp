#pragma once
// The small MLP the AOT tests compile (gen_mlp.cpp) and check against (test_aot_mlp.cpp).
#include <metagrad/tensor.hpp>

namespace aot_mlp {

inline constexpr std::int64_t kBatch = 8, kIn = 12, kHidden = 16, kOut = 5;

inline metagrad::Tensor forward(const metagrad::Tensor& x, const metagrad::Tensor& w1,
                                const metagrad::Tensor& b1, const metagrad::Tensor& w2,
                                const metagrad::Tensor& b2) {
  return (x.matmul(w1) + b1).relu().matmul(w2) + b2;
}

}  // namespace aot_mlp
