// Generator of the static GPT's C library (run at build time by metagrad_add_aot_library):
//   gpt_forward(tokens, weights, logits)   tokens (B, T) int32, weights the flat array of config.h,
//                                          logits (B, T, V)
// The model is static expressions (model.hpp), cut with Lowering::cut: each cut expression is
// lowered once, and the generator stays a few small types per block.
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>

#include <metagrad/aot.hpp>
#include <metagrad/lower.hpp>

#include "model.hpp"

using namespace gpt_aot;

int main(int argc, char** argv) {
  metagrad::aot::Generator g("gpt_forward");
  metagrad::Lowering L("CLANG");
  auto m = std::make_unique<Model>();
  fx::Tensor<std::int32_t, B, T> tokens;
  // One input for every weight: each fixed tensor stands for its slice of it.
  metagrad::Tensor weights = metagrad::Tensor::empty({GPT_WEIGHTS});
  std::int64_t at = 0;
  std::apply(
      [&](auto&... p) {
        auto bind = [&](const auto& t) {
          using W = std::remove_cvref_t<decltype(t)>;
          constexpr auto dims = W::shape::dims;
          L.bind(t, weights.shrink({{at, at + W::size}}).reshape({dims.begin(), dims.end()}));
          at += W::size;
        };
        (bind(p), ...);
      },
      params(*m));
  if (at != GPT_WEIGHTS) return 1;  // config.h's count disagrees with the model
  auto cut = [&](const auto& e) { return L.cut(e); };
  g.function("gpt_forward", {{"tokens", L.leaf(tokens)}, {"weights", weights}},
             {{"logits", L(logits(*m, tokens, cut))}});
  return g.main(argc, argv);
}
