// Generator of the Fashion-MNIST AOT library (run at build time by metagrad_add_aot_library):
//   fmnist_train_step(x, y, lr, w1, b1, w2, b2, loss)  one SGD step on a batch of kTrainBatch
//   fmnist_logits(x, w1, b1, w2, b2, logits)           the forward pass on kEvalBatch images
#include <metagrad/aot.hpp>

#include "model.hpp"

using namespace metagrad;
using namespace fmnist;

namespace {
Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  return (((x - kMean) / kStd).matmul(w1) + b1).relu().matmul(w2) + b2;
}
}  // namespace

int main(int argc, char** argv) {
  aot::Generator g("fashion_mnist_mlp");
  Tensor w1 = Tensor::empty({kPixels, kHidden}), b1 = Tensor::empty({kHidden}),
         w2 = Tensor::empty({kHidden, kClasses}), b2 = Tensor::empty({kClasses});
  std::vector<aot::Arg> weights{{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};

  Tensor xe = Tensor::empty({kEvalBatch, kPixels});
  std::vector<aot::Arg> eval_in{{"x", xe}};
  eval_in.insert(eval_in.end(), weights.begin(), weights.end());
  g.function("fmnist_logits", eval_in, {{"logits", mlp(xe, w1, b1, w2, b2)}});

  Tensor x = Tensor::empty({kTrainBatch, kPixels}), lr = Tensor::empty({}),
         y = Tensor::zeros({kTrainBatch}, {.dtype = dtypes::int32}).contiguous().realize();
  for (auto& w : weights) w.tensor.requires_grad_();
  Tensor loss = mlp(x, w1, b1, w2, b2).sparse_categorical_crossentropy(y);
  loss.backward();
  std::vector<aot::Arg> in{{"x", x}, {"y", y}, {"lr", lr}}, updates;
  for (const auto& w : weights) {
    in.push_back(w);
    updates.push_back({w.name, w.tensor - lr * *w.tensor.grad});
  }
  g.function("fmnist_train_step", in, {{"loss", loss}}, updates);
  return g.main(argc, argv);
}
