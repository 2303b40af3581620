// Generator of the AOT test library: the static MLP's forward pass, lowered, and its SGD step
// (the loss and backward pass on the dynamic side of the lowered graph).
#include <metagrad/aot.hpp>
#include <metagrad/lower.hpp>

#include "mlp_model.hpp"

using namespace metagrad;
using namespace aot_mlp;

int main(int argc, char** argv) {
  aot::Generator g("aot_mlp");
  fx::Tensor<float, kBatch, kIn> x;
  Weights w;
  Lowering L("CLANG");
  std::vector<aot::Arg> weights{
      {"w1", L.leaf(w.w1)}, {"b1", L.leaf(w.b1)}, {"w2", L.leaf(w.w2)}, {"b2", L.leaf(w.b2)}};
  std::vector<aot::Arg> in{{"x", L.leaf(x)}};
  in.insert(in.end(), weights.begin(), weights.end());
  g.function("aot_mlp_forward", in, {{"out", L(forward(x, w))}});

  for (auto& p : weights) p.tensor.requires_grad_();
  Tensor y = Tensor::zeros({kBatch}, {.dtype = dtypes::int32}).contiguous().realize(), lr = Tensor::empty({});
  Tensor loss = L(forward(x, w)).sparse_categorical_crossentropy(y);
  loss.backward();
  std::vector<aot::Arg> updates;
  for (const auto& p : weights) updates.push_back({p.name, p.tensor - lr * *p.tensor.grad});
  in.insert(in.begin() + 1, {{"y", y}, {"lr", lr}});
  g.function("aot_mlp_step", in, {{"loss", loss}}, updates);
  return g.main(argc, argv);
}
