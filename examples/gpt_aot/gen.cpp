// Generator of the static GPT's C library (run at build time by metagrad_add_aot_library):
//   gpt_forward(tokens, weights, logits)   tokens (B, T) int32, weights the flat array of config.h,
//                                          logits (B, T, V)
//   gpt_train_step(tokens, labels, lr, weights, loss)
//                                          one SGD step on the mean cross-entropy of the next
//                                          tokens `labels` (B, T); weights updated in place
// The model is static expressions (model.hpp), cut with Lowering::cut: each cut expression is
// lowered once, and the generator stays a few small types per block.
#include <cstdint>
#include <memory>
#include <vector>

#include <metagrad/aot.hpp>
#include <metagrad/lower.hpp>

#include "model.hpp"

using namespace gpt_aot;

int main(int argc, char** argv) {
  metagrad::aot::Generator g("gpt_forward");
  auto m = std::make_unique<Model>();
  fx::Tensor<std::int32_t, B, T> tokens, labels;
  // One input for every weight: each fixed tensor stands for its slice of it.
  metagrad::Tensor weights = metagrad::Tensor::empty({GPT_WEIGHTS});
  metagrad::Lowering L("CLANG");
  L.bind(*m, weights);  // throws where config.h's count disagrees with the model
  auto cut = [&](const auto& e) { return L.cut(e); };
  g.function("gpt_forward", {{"tokens", L.leaf(tokens)}, {"weights", weights}},
             {{"logits", L(logits(*m, tokens, cut))}});

  // The training step: the mean cross-entropy of the next tokens `labels` and an SGD step on the
  // weights, the gradients from fixed::grad's rules (Lowering::grad, through the cuts).
  metagrad::Lowering Lt("CLANG");
  Lt.bind(*m, weights);
  auto cut_t = [&](const auto& e) { return Lt.cut(e); };
  auto loss = fx::sparse_categorical_crossentropy(logits(*m, tokens, cut_t), labels);
  auto grads = Lt.grad(loss, *m);
  std::vector<metagrad::Tensor> flat;
  for (const metagrad::Tensor& t : grads.grads) flat.push_back(t.reshape({-1}));
  metagrad::Tensor lr = metagrad::Tensor::empty({});
  metagrad::Tensor step = weights - lr * flat[0].cat({flat.begin() + 1, flat.end()});
  g.function("gpt_train_step",
             {{"tokens", Lt.leaf(tokens)}, {"labels", Lt.leaf(labels)}, {"lr", lr}, {"weights", weights}},
             {{"loss", grads.loss}}, {{"weights", step}});
  return g.main(argc, argv);
}
