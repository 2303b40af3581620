#pragma once
// The static GPT of the AOT example: the character GPT of examples/gpt (examples/gpt_model.hpp,
// PyTorch's layout: a Linear's weight is (out, in)) as fixed:: expressions, written over a cut
// function -- fixed::cut to evaluate it inline, Lowering::cut to lower it (gen.cpp) -- at the
// values read more than once, so each block is a few small expression types however deep the model.
// Its weights (static_gpt.hpp's Model) are one flat array in fx::for_each_param's order (config.h).
#include <metagrad/fixed.hpp>

#include "../static_gpt.hpp"
#include "config.h"

namespace gpt_aot {

namespace fx = metagrad::fixed;
using fx::index_t;
inline constexpr index_t B = GPT_BATCH, T = GPT_CONTEXT, C = GPT_WIDTH, H = GPT_HEADS, D = C / H,
                         N = GPT_BLOCKS, V = GPT_VOCAB;

using Block = examples::static_gpt::Block<C>;
using Model = examples::static_gpt::Model<C, T, V, N>;
using examples::static_gpt::in_proj;
using examples::static_gpt::layernorm;
using examples::static_gpt::linear;

template <class X, class Cut>
auto block(const X& x, const Block& p, Cut cut) {
  auto h = cut(layernorm(x, p.ln1));
  auto qkv = cut(in_proj(h, p.attn));  // one packed product; the heads are views of it
  using examples::static_gpt::head;
  auto o = fx::scaled_dot_product_attention<true>(head<0, H>(qkv), head<1, H>(qkv), head<2, H>(qkv))
               .template permute<0, 2, 1, 3>()
               .template reshape<B, T, C>();
  auto x2 = cut(x + linear(o, p.attn.out_proj));
  auto h2 = cut(layernorm(x2, p.ln2));
  return cut(x2 + linear(linear(h2, p.fc).gelu(), p.proj));
}

// idx (B, T) token ids: the logits (B, T, V) of each next token.
template <class Idx, class Cut>
auto logits(const Model& m, const Idx& idx, Cut cut) {
  auto x = cut(fx::embedding(m.wte.weight, idx) + m.wpe.weight);
  for (const Block& b : m.blocks) x = block(x, b, cut);  // a cut: the same leaf type as x
  return fx::matmul(layernorm(x, m.ln_f), m.head.weight.template permute<1, 0>());
}

}  // namespace gpt_aot
