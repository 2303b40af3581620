#pragma once
// The static GPT of the AOT example: the character GPT of examples/gpt (examples/gpt_model.hpp,
// PyTorch's layout: a Linear's weight is (out, in)) as fixed:: expressions, written over a cut
// function -- fixed::cut to evaluate it inline, Lowering::cut to lower it (gen.cpp) -- at the
// values read more than once, so each block is a few small expression types however deep the model.
#include <cstddef>
#include <tuple>
#include <utility>

#include <metagrad/fixed.hpp>

#include "../static_gpt.hpp"
#include "config.h"

namespace gpt_aot {

namespace fx = metagrad::fixed;
using fx::index_t;
inline constexpr index_t B = GPT_BATCH, T = GPT_CONTEXT, C = GPT_WIDTH, H = GPT_HEADS, D = C / H,
                         N = GPT_BLOCKS, V = GPT_VOCAB;

template <index_t Out, index_t In>
using Linear = examples::static_gpt::Linear<Out, In>;
using Block = examples::static_gpt::Block<C>;
using Model = examples::static_gpt::Model<C, T, V, N>;
using examples::static_gpt::linear;

template <class X, class Cut>
auto block(const X& x, const Block& p, Cut cut) {
  auto h = cut(fx::layernorm(x, p.ln1_w, p.ln1_b));
  auto qkv = cut(linear(h, p.qkv));  // one packed product; the heads are views of it
  using examples::static_gpt::head;
  auto o = fx::scaled_dot_product_attention<true>(head<0, H>(qkv), head<1, H>(qkv), head<2, H>(qkv))
               .template permute<0, 2, 1, 3>()
               .template reshape<B, T, C>();
  auto x2 = cut(x + linear(o, p.out));
  auto h2 = cut(fx::layernorm(x2, p.ln2_w, p.ln2_b));
  return cut(x2 + linear(linear(h2, p.fc).gelu(), p.proj));
}

// idx (B, T) token ids: the logits (B, T, V) of each next token.
template <class Idx, class Cut>
auto logits(const Model& m, const Idx& idx, Cut cut) {
  auto x = cut(fx::embedding(m.wte, idx) + m.wpe);
  for (const Block& b : m.blocks) x = block(x, b, cut);  // a cut: the same leaf type as x
  return fx::matmul(fx::layernorm(x, m.lnf_w, m.lnf_b), m.head.template permute<1, 0>());
}

// Every weight, in the order of the flat weights array (config.h).
inline auto params(Model& m) {
  auto blk = [](Block& b) {
    return std::tie(b.ln1_w, b.ln1_b, b.qkv.w, b.qkv.b, b.out.w, b.out.b, b.ln2_w, b.ln2_b, b.fc.w, b.fc.b,
                    b.proj.w, b.proj.b);
  };
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple_cat(std::tie(m.wte, m.wpe), blk(m.blocks[I])..., std::tie(m.lnf_w, m.lnf_b, m.head));
  }
  (std::make_index_sequence<N>{});
}

}  // namespace gpt_aot
