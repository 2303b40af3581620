#pragma once
// A two-layer static MLP (In -> Hidden relu -> Out, log-softmax + NLL on one-hot labels) and its
// SGD training step: forward, fixed::grad and the update, all on tensors the model owns, so a step
// allocates nothing once the arena has grown (the first step). W5 of docs/benchmarks.md is
// MLP<float, 128, 784, 512, 10>; examples/fashion_mnist_static trains one.
#include <cmath>
#include <random>

#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/matmul.hpp"

namespace metagrad::fixed {

template <class T, index_t Batch, index_t In, index_t Hidden, index_t Out>
struct MLP {
  Tensor<T, In, Hidden> w1;
  Tensor<T, Hidden> b1;
  Tensor<T, Hidden, Out> w2;
  Tensor<T, Out> b2;
  Tensor<T, In, Hidden> gw1;  // the last step's gradients
  Tensor<T, Hidden> gb1;
  Tensor<T, Hidden, Out> gw2;
  Tensor<T, Out> gb2;

  // Weights uniform in +-1/sqrt(fan_in), biases 0 (as nn::Linear's default).
  explicit MLP(std::uint32_t seed = 0) {
    std::mt19937 rng(seed);
    auto init = [&](auto& w, double fan_in) {
      std::uniform_real_distribution<double> u(-1 / std::sqrt(fan_in), 1 / std::sqrt(fan_in));
      for (T& v : w) v = static_cast<T>(u(rng));
    };
    init(w1, In);
    init(w2, Hidden);
  }

  template <class X>
  auto logits(const X& x) const {
    return matmul((matmul(x, w1) + b1).relu(), w2) + b2;
  }
  // Mean negative log-likelihood of the one-hot labels y.
  template <class X, class Y>
  auto loss(const X& x, const Y& y) const {
    return -(logits(x).template log_softmax<1>() * y).sum() * (T(1) / T(Batch));
  }
  // One SGD step on the batch (x, y); returns the loss before the step.
  T step(const Tensor<T, Batch, In>& x, const Tensor<T, Batch, Out>& y, T lr) {
    T l = grad_into(std::tie(gw1, gb1, gw2, gb2), loss(x, y), w1, b1, w2, b2);
    w1 -= lr * gw1;
    b1 -= lr * gb1;
    w2 -= lr * gw2;
    b2 -= lr * gb2;
    return l;
  }
};

}  // namespace metagrad::fixed
