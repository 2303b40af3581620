#pragma once
// A two-layer static MLP (In -> Hidden relu -> Out, log-softmax + NLL on one-hot labels) and its
// SGD training step: forward, fixed::grad and the update, all on tensors the model owns, so a step
// allocates nothing once the arena has grown (the first step). Its parameters are a reflected struct
// (MLPParams), its gradients another of that type. W5 of docs/benchmarks.md is
// MLP<float, 128, 784, 512, 10>; examples/fashion_mnist_static trains one.
#include <cmath>
#include <random>

#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/optim.hpp"

namespace metagrad::fixed {

// The MLP's parameters, declared once: a static model (fixed/model.hpp) that fx::grad, fx::sgd,
// fx::AdamW and fx::save take whole (w1, b1, w2, b2).
template <class T, index_t In, index_t Hidden, index_t Out>
struct MLPParams {
  using W1 = Tensor<T, In, Hidden>;
  using B1 = Tensor<T, Hidden>;
  using W2 = Tensor<T, Hidden, Out>;
  using B2 = Tensor<T, Out>;
  BOOST_HANA_DEFINE_STRUCT(MLPParams, (W1, w1), (B1, b1), (W2, w2), (B2, b2));
};

template <class T, index_t Batch, index_t In, index_t Hidden, index_t Out>
struct MLP : MLPParams<T, In, Hidden, Out> {
  using Params = MLPParams<T, In, Hidden, Out>;
  using Params::b1, Params::b2, Params::w1, Params::w2;
  Params grads;  // the last step's gradients

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
  Params& params() { return *this; }
  const Params& params() const { return *this; }

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
    T l = grad_into(grads, loss(x, y), params());
    sgd(params(), grads, lr);
    return l;
  }
};

}  // namespace metagrad::fixed
