#pragma once
// The small MLP the AOT tests compile (gen_mlp.cpp) and check (test_aot_mlp.cpp): a static model
// (the generator lowers it) and the same model written on the dynamic path (the reference).
#include <metagrad/fixed.hpp>
#include <metagrad/tensor.hpp>

namespace aot_mlp {

namespace fx = metagrad::fixed;
inline constexpr fx::index_t kBatch = 8, kIn = 12, kHidden = 16, kOut = 5;

struct Weights {
  fx::Tensor<float, kIn, kHidden> w1;
  fx::Tensor<float, kHidden> b1;
  fx::Tensor<float, kHidden, kOut> w2;
  fx::Tensor<float, kOut> b2;
};

inline auto forward(const fx::Tensor<float, kBatch, kIn>& x, const Weights& w) {
  return fx::linear(fx::linear(x, w.w1, w.b1).relu(), w.w2, w.b2);
}

inline metagrad::Tensor forward(const metagrad::Tensor& x, const metagrad::Tensor& w1,
                                const metagrad::Tensor& b1, const metagrad::Tensor& w2,
                                const metagrad::Tensor& b2) {
  return (x.matmul(w1) + b1).relu().matmul(w2) + b2;
}

}  // namespace aot_mlp
