// Generator of the AOT test library: the MLP's forward pass and its SGD training step.
#include <metagrad/aot.hpp>

#include "mlp_model.hpp"

using namespace metagrad;
using namespace aot_mlp;

int main(int argc, char** argv) {
  aot::Generator g("aot_mlp");
  Tensor x = Tensor::empty({kBatch, kIn}),
         y = Tensor::zeros({kBatch}, {.dtype = dtypes::int32}).contiguous().realize();
  Tensor w1 = Tensor::empty({kIn, kHidden}), b1 = Tensor::empty({kHidden}),
         w2 = Tensor::empty({kHidden, kOut}), b2 = Tensor::empty({kOut}), lr = Tensor::empty({});
  g.function("aot_mlp_forward", {{"x", x}, {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}},
             {{"out", forward(x, w1, b1, w2, b2)}});

  std::vector<Tensor> params{w1, b1, w2, b2};
  for (Tensor& p : params) p.requires_grad_();
  Tensor loss = forward(x, w1, b1, w2, b2).sparse_categorical_crossentropy(y);
  loss.backward();
  std::vector<aot::Arg> updates;
  const char* names[] = {"w1", "b1", "w2", "b2"};
  for (std::size_t i = 0; i < params.size(); ++i)
    updates.push_back({names[i], params[i] - lr * *params[i].grad});
  g.function("aot_mlp_step", {{"x", x}, {"y", y}, {"lr", lr}, {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}},
             {{"loss", loss}}, updates);
  return g.main(argc, argv);
}
