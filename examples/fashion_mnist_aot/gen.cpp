// Generator of the Fashion-MNIST AOT library (run at build time by metagrad_add_aot_library):
//   fmnist_train_step(x, y, lr, w1, b1, w2, b2, loss)  one SGD step on a batch of kTrainBatch
//   fmnist_logits(x, w1, b1, w2, b2, logits)           the forward pass on kEvalBatch images
// The model and its loss are static expressions (shapes are types, checked at compile time); the
// forward and the gradients fixed::grad's rules give (Lowering::grad) are lowered to the dynamic
// graph and captured as C.
#include <metagrad/aot.hpp>
#include <metagrad/lower.hpp>

#include "model.hpp"

using namespace metagrad;
using namespace fmnist;
namespace fx = metagrad::fixed;

namespace {

struct Weights {
  fx::Tensor<float, kPixels, kHidden> w1;
  fx::Tensor<float, kHidden> b1;
  fx::Tensor<float, kHidden, kClasses> w2;
  fx::Tensor<float, kClasses> b2;
};

template <fx::index_t B>
auto logits(const fx::Tensor<float, B, kPixels>& x, const Weights& w) {
  return fx::linear(fx::linear((x - kMean) / kStd, w.w1, w.b1).relu(), w.w2, w.b2);
}

}  // namespace

int main(int argc, char** argv) {
  aot::Generator g("fashion_mnist_mlp");
  Weights w;
  fx::Tensor<float, kEvalBatch, kPixels> xe;
  fx::Tensor<float, kTrainBatch, kPixels> x;
  fx::Tensor<std::int32_t, kTrainBatch> y;

  Lowering L("CLANG");
  std::vector<aot::Arg> weights{
      {"w1", L.leaf(w.w1)}, {"b1", L.leaf(w.b1)}, {"w2", L.leaf(w.w2)}, {"b2", L.leaf(w.b2)}};
  g.function("fmnist_logits", {{"x", L.leaf(xe)}, weights[0], weights[1], weights[2], weights[3]},
             {{"logits", L(logits(xe, w))}});

  Tensor lr = Tensor::empty({});
  auto grads = L.grad(fx::sparse_categorical_crossentropy(logits(x, w), y), w.w1, w.b1, w.w2, w.b2);
  std::vector<aot::Arg> in{{"x", L.leaf(x)}, {"y", L.leaf(y)}, {"lr", lr}}, updates;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    in.push_back(weights[i]);
    updates.push_back({weights[i].name, weights[i].tensor - lr * grads.grads[i]});
  }
  g.function("fmnist_train_step", in, {{"loss", grads.loss}}, updates);
  return g.main(argc, argv);
}
