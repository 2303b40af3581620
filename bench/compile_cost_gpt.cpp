// Compile-cost reference (bench/compile_cost_gpt.sh): fx::grad over a model of GPT_BLOCKS GPT blocks
// (fx::layernorm, 4-head causal fx::scaled_dot_product_attention, residual, fx::layernorm, GELU MLP,
// residual; batch 4, context 64, width 128), cut by fx::cut where values are read more than once,
// in one translation unit, run on random data so nothing is optimised away. GPT_CUTS=0 leaves the
// cuts out: each model is then one expression, a tree exponential in the number of blocks.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "metagrad/fixed.hpp"

#ifndef GPT_BLOCKS
#define GPT_BLOCKS 1
#endif
#ifndef GPT_CUTS
#define GPT_CUTS 1
#endif

namespace fx = metagrad::fixed;
using fx::index_t;
constexpr index_t B = 4, S = 64, C = 128, H = 4, D = C / H;

// (Not named cut: fx::cut, found by argument-dependent lookup and more constrained, would be chosen.)
template <class E>
auto maybe_cut(const E& e) {
  if constexpr (GPT_CUTS)
    return fx::cut(e);
  else
    return e.expr();
}

struct Block {
  fx::Tensor<float, C> g1, b1, g2, b2, c2;
  fx::Tensor<float, C, C> wq, wk, wv, wo;
  fx::Tensor<float, C, 4 * C> w1;
  fx::Tensor<float, 4 * C> c1;
  fx::Tensor<float, 4 * C, C> w2;
};

template <class X>
auto block(const X& x, const Block& p) {
  auto h = maybe_cut(fx::layernorm(x, p.g1, p.b1));
  auto heads = [&](const auto& w) {
    return fx::matmul(h, w).template reshape<B, S, H, D>().template permute<0, 2, 1, 3>();
  };
  auto o = fx::scaled_dot_product_attention<true>(heads(p.wq), heads(p.wk), heads(p.wv))
               .template permute<0, 2, 1, 3>()
               .template reshape<B, S, C>();
  auto x2 = maybe_cut(x + fx::matmul(o, p.wo));
  auto h2 = maybe_cut(fx::layernorm(x2, p.g2, p.b2));
  return maybe_cut(x2 + (fx::matmul((fx::matmul(h2, p.w1) + p.c1).gelu(), p.w2) + p.c2));
}

template <int N, class X>
auto model(const X& x, const Block* p) {
  if constexpr (N == 0)
    return x.expr();
  else
    return block(model<N - 1>(x, p), p[N - 1]);
}

template <std::size_t... I>
auto params(Block* p, std::index_sequence<I...>) {
  return std::tuple_cat(std::tie(p[I].g1, p[I].b1, p[I].g2, p[I].b2, p[I].c2, p[I].wq, p[I].wk, p[I].wv,
                                 p[I].wo, p[I].w1, p[I].c1, p[I].w2)...);
}

int main() {
  auto blocks = std::make_unique<Block[]>(GPT_BLOCKS);
  fx::Tensor<float, B, S, C> x, y;
  std::mt19937 rng(0);
  std::normal_distribution<float> n(0, 0.05f);
  for (float& v : x) v = n(rng);
  for (float& v : y) v = n(rng);
  for (int b = 0; b < GPT_BLOCKS; ++b) {
    Block& p = blocks[b];
    for (auto* t : {&p.g1, &p.g2}) *t = fx::Tensor<float, C>::full(1);
    for (auto* t : {&p.wq, &p.wk, &p.wv, &p.wo})
      for (float& v : *t) v = n(rng);
    for (float& v : p.w1) v = n(rng);
    for (float& v : p.w2) v = n(rng);
  }
  fx::Tape tape;
  auto out = model<GPT_BLOCKS>(x, blocks.get());
  auto loss = ((out - y) * (out - y)).mean();
  std::apply(
      [&](const auto&... p) {
        auto g = fx::grad(loss, p...);
        fx::Tensor<float, C, C> gq = get<5>(g);
        std::printf("loss %f, |grad wq| %f\n", g.loss(), std::sqrt((gq * gq).sum().eval()[0]));
      },
      params(blocks.get(), std::make_index_sequence<GPT_BLOCKS>{}));
}
