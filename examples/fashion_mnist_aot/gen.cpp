// Generator of the Fashion-MNIST AOT library (run at build time by metagrad_add_aot_library):
//   fmnist_train_step(x, y, lr, w1, b1, w2, b2, loss)  one SGD step on a batch of kTrainBatch
//   fmnist_logits(x, w1, b1, w2, b2, logits)           the forward pass on kEvalBatch images
// The model and its loss are static expressions (shapes are types, checked at compile time),
// lowered to the dynamic graph, differentiated there, and captured as C.
#include <metagrad/aot.hpp>
#include <metagrad/lower.hpp>

#include "model.hpp"

using namespace metagrad;
using namespace fmnist;
namespace fx = metagrad::fixed;

namespace {

// (M, K) @ (K, N): broadcast, multiply, sum over K.
template <fx::index_t M, fx::index_t K, fx::index_t N, class A, class B>
auto matmul(const A& a, const B& b) {
  return (a.template reshape<M, K, 1>().template expand<M, K, N>() *
          b.template reshape<1, K, N>().template expand<M, K, N>())
      .template sum<1>();
}

struct Weights {
  fx::Tensor<float, kPixels, kHidden> w1;
  fx::Tensor<float, kHidden> b1;
  fx::Tensor<float, kHidden, kClasses> w2;
  fx::Tensor<float, kClasses> b2;
};

template <fx::index_t B>
auto logits(const fx::Tensor<float, B, kPixels>& x, const Weights& w) {
  auto h = (matmul<B, kPixels, kHidden>((x - kMean) / kStd, w.w1) + w.b1).relu();
  return matmul<B, kHidden, kClasses>(h, w.w2) + w.b2;
}

// Mean cross-entropy against integer labels, one-hot through a comparison with the class indices.
template <fx::index_t B>
auto loss(const fx::Tensor<float, B, kPixels>& x, const fx::Tensor<std::int32_t, B>& y,
          const fx::Tensor<std::int32_t, kClasses>& classes, const Weights& w) {
  auto one_hot = (y.template reshape<B, 1>().template expand<B, kClasses>() ==
                  classes.template reshape<1, kClasses>().template expand<B, kClasses>())
                     .template cast<float>();
  return -(logits(x, w).template log_softmax<1>() * one_hot).template sum<0, 1>() / static_cast<float>(B);
}

}  // namespace

int main(int argc, char** argv) {
  aot::Generator g("fashion_mnist_mlp");
  Weights w;
  fx::Tensor<float, kEvalBatch, kPixels> xe;
  fx::Tensor<float, kTrainBatch, kPixels> x;
  fx::Tensor<std::int32_t, kTrainBatch> y;
  fx::Tensor<std::int32_t, kClasses> classes;
  for (std::int32_t c = 0; c < kClasses; ++c) classes[c] = c;  // not an input: a constant of the C code

  Lowering L("CLANG");
  std::vector<aot::Arg> weights{
      {"w1", L.leaf(w.w1)}, {"b1", L.leaf(w.b1)}, {"w2", L.leaf(w.w2)}, {"b2", L.leaf(w.b2)}};
  g.function("fmnist_logits", {{"x", L.leaf(xe)}, weights[0], weights[1], weights[2], weights[3]},
             {{"logits", L(logits(xe, w))}});

  for (auto& p : weights) p.tensor.requires_grad_();
  Tensor lr = Tensor::empty({}), l = L(loss(x, y, classes, w));
  l.backward();
  std::vector<aot::Arg> in{{"x", L.leaf(x)}, {"y", L.leaf(y)}, {"lr", lr}}, updates;
  for (const auto& p : weights) {
    in.push_back(p);
    updates.push_back({p.name, p.tensor - lr * *p.tensor.grad});
  }
  g.function("fmnist_train_step", in, {{"loss", l}}, updates);
  return g.main(argc, argv);
}
