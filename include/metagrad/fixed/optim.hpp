#pragma once
// Optimizers over a static model (fixed/model.hpp), as the dynamic path's nn::optim: their state is
// models of the model's type (AdamW's moments m and v), and a step is one walk over the parameters,
// the gradients and the state together, each parameter's update one fused pass (fx::assign).
//
//   auto [g, loss] = fx::grad(model.loss(x, y), model.params);
//   fx::sgd(model.params, g, 0.1f);                  // p -= lr * g
//   fx::AdamW<Params> opt({.lr = 1e-3});  opt.step(model.params, g);
#include <cmath>
#include <memory>
#include <tuple>

#include "metagrad/fixed/assign.hpp"
#include "metagrad/fixed/model.hpp"

namespace metagrad::fixed {

// Plain SGD: p -= lr * g for every parameter.
template <ReflectedModel M, class T>
void sgd(M& model, const M& grads, T lr) {
  for_each_param(
      [&](auto& p, const auto& g) {
        p -= static_cast<typename std::remove_cvref_t<decltype(p)>::value_type>(lr) * g;
      },
      model, grads);
}

// The global 2-norm of all the gradients (in double): what gradient clipping scales by.
template <ReflectedModel M>
double global_norm(const M& grads) {
  double sq = 0;
  for_each_param([&](const auto& g) { sq += static_cast<double>((g * g).sum().eval()[0]); }, grads);
  return std::sqrt(sq);
}

// AdamW's hyperparameters (PyTorch's defaults). decay_vectors = false decays only tensors of 2 or
// more axes (matmul and embedding weights), as nn::optim::decay_groups; true decays every one.
struct AdamWOptions {
  double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  bool decay_vectors = true;
};

// Adam with decoupled weight decay, as nn::optim::AdamW (Adam: weight_decay 0):
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd
// p). The moments are two models of M's type, zeros at first (on the heap: a model's tensors may live inside
// it).
template <ReflectedModel M>
class AdamW {
 public:
  explicit AdamW(AdamWOptions o = {}) : opt(o), m_(std::make_unique<M>()), v_(std::make_unique<M>()) {}

  // One step with the gradients scaled by grad_scale (gradient clipping's coefficient: fused into the
  // update, no scaled copy).
  void step(M& model, const M& grads, double grad_scale = 1) {
    ++t_;
    const double inv1 = 1 / (1 - std::pow(opt.b1, double(t_))), inv2 = 1 / (1 - std::pow(opt.b2, double(t_)));
    for_each_param(
        [&](auto& w, const auto& grad, auto& m, auto& v) {
          using W = std::remove_cvref_t<decltype(w)>;
          using T = typename W::value_type;
          const T wd = W::shape::rank >= 2 || opt.decay_vectors ? T(opt.weight_decay) : T(0);
          auto g = grad * T(grad_scale);
          // m, v, then w from the new m and v, in one pass over the four tensors
          fixed::assign(std::tie(m, v, w), m * T(opt.b1) + g * T(1 - opt.b1),
                        v * T(opt.b2) + g * g * T(1 - opt.b2),
                        w - ((m * T(inv1)) / ((v * T(inv2)).sqrt() + T(opt.eps)) + w * wd) * T(opt.lr));
        },
        model, grads, *m_, *v_);
  }
  long steps() const { return t_; }
  const M& m() const { return *m_; }  // the moments
  const M& v() const { return *v_; }

  AdamWOptions opt;

 private:
  std::unique_ptr<M> m_, v_;
  long t_ = 0;
};

}  // namespace metagrad::fixed
