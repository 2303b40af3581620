#pragma once
// The small MLP the AOT tests compile (gen_mlp.cpp) and check (test_aot_mlp.cpp): a static model
// (the generator lowers it) and the same model written on the dynamic path (the reference).
#include <metagrad/fixed.hpp>
#include <metagrad/tensor.hpp>

namespace aot_mlp {

namespace fx = metagrad::fixed;
inline constexpr fx::index_t kBatch = 8, kIn = 12, kHidden = 16, kOut = 5;

// (M, K) @ (K, N): broadcast, multiply, sum over K.
template <fx::index_t M, fx::index_t K, fx::index_t N, class A, class B>
auto matmul(const A& a, const B& b) {
  return (a.template reshape<M, K, 1>().template expand<M, K, N>() *
          b.template reshape<1, K, N>().template expand<M, K, N>())
      .template sum<1>();
}

struct Weights {
  fx::Tensor<float, kIn, kHidden> w1;
  fx::Tensor<float, kHidden> b1;
  fx::Tensor<float, kHidden, kOut> w2;
  fx::Tensor<float, kOut> b2;
};

inline auto forward(const fx::Tensor<float, kBatch, kIn>& x, const Weights& w) {
  return matmul<kBatch, kHidden, kOut>((matmul<kBatch, kIn, kHidden>(x, w.w1) + w.b1).relu(), w.w2) + w.b2;
}

inline metagrad::Tensor forward(const metagrad::Tensor& x, const metagrad::Tensor& w1,
                                const metagrad::Tensor& b1, const metagrad::Tensor& w2,
                                const metagrad::Tensor& b2) {
  return (x.matmul(w1) + b1).relu().matmul(w2) + b2;
}

}  // namespace aot_mlp
