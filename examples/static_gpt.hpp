#pragma once
// The character GPT's parameters as a static model (fixed/model.hpp): reflected structs of fixed::
// tensors named and laid out as examples/gpt_model.hpp's modules (PyTorch's layout: a Linear's weight
// is (out, in), y = x W^T + b), for any width C, context T, vocabulary V and N blocks. Declared once
// here: fx::for_each_named walks them as blocks.0.attn.in_proj_weight, ..., the dynamic model's state
// dict names, so its weights copy over by name and fx::save writes a file the dynamic GPT loads.
// Shared by bench/bench_static_gpt and examples/gpt_aot.
#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <metagrad/fixed.hpp>
#include <metagrad/fixed/model.hpp>

namespace examples::static_gpt {

namespace fx = metagrad::fixed;
using fx::index_t;

// (BOOST_HANA_DEFINE_STRUCT takes a member's type as one macro argument: types with a comma get an
// alias.)
template <index_t N>
using Vec = fx::Tensor<float, N>;

template <index_t Out, index_t In>
struct Linear {
  using W = fx::Tensor<float, Out, In>;
  BOOST_HANA_DEFINE_STRUCT(Linear, (W, weight), (Vec<Out>, bias));
};
template <index_t C>
struct LayerNorm {
  BOOST_HANA_DEFINE_STRUCT(LayerNorm, (Vec<C>, weight), (Vec<C>, bias));
};
template <index_t Rows, index_t C>  // an embedding table, or the unbiased head
struct Weight {
  using W = fx::Tensor<float, Rows, C>;
  BOOST_HANA_DEFINE_STRUCT(Weight, (W, weight));
};
// MultiheadAttention's in_proj (q, k and v's rows, one product: one GEMM forward, one for the input's
// gradient and one for the weight's, as the dynamic path) and its out_proj.
template <index_t C>
struct Attention {
  using W = fx::Tensor<float, 3 * C, C>;
  using Out = Linear<C, C>;
  BOOST_HANA_DEFINE_STRUCT(Attention, (W, in_proj_weight), (Vec<3 * C>, in_proj_bias), (Out, out_proj));
};

template <index_t C>
struct Block {
  using Fc = Linear<4 * C, C>;
  using Proj = Linear<C, 4 * C>;
  BOOST_HANA_DEFINE_STRUCT(Block, (LayerNorm<C>, ln1), (Attention<C>, attn), (LayerNorm<C>, ln2), (Fc, fc),
                           (Proj, proj));
};

template <index_t C, index_t T, index_t V, index_t N>
struct Model {
  using Vocab = Weight<V, C>;
  using Positions = Weight<T, C>;
  using Blocks = std::array<Block<C>, N>;
  BOOST_HANA_DEFINE_STRUCT(Model, (Vocab, wte), (Positions, wpe), (Blocks, blocks), (LayerNorm<C>, ln_f),
                           (Vocab, head));
};

template <class X, index_t Out, index_t In>
auto linear(const X& x, const Linear<Out, In>& l) {
  return fx::linear(x, l.weight.template permute<1, 0>(), l.bias);
}
// q, k and v packed: (..., 3 C)
template <class X, index_t C>
auto in_proj(const X& x, const Attention<C>& a) {
  return fx::linear(x, a.in_proj_weight.template permute<1, 0>(), a.in_proj_bias);
}
template <class X, index_t C>
auto layernorm(const X& x, const LayerNorm<C>& l) {
  return fx::layernorm(x, l.weight, l.bias);
}

// Head I (0: q, 1: k, 2: v) of a packed (B, T, 3 C) projection, as (B, H, T, C / H): a view, which a
// matmul reads in place when qkv is a tensor (a cut).
template <index_t I, index_t H, class QKV>
auto head(const QKV& qkv) {
  using S = typename fx::expr_t<QKV>::shape;
  constexpr index_t B = S::dims[0], T = S::dims[1], C = S::dims[2] / 3;
  return qkv.template reshape<B, T, 3, H, C / H>()
      .template shrink<0, B, 0, T, I, I + 1, 0, H, 0, C / H>()
      .template reshape<B, T, H, C / H>()
      .template permute<0, 2, 1, 3>();
}

// Values by the dynamic model's names (its weights, or their gradients) into m's tensors.
template <index_t C, index_t T, index_t V, index_t N>
void copy_weights(const std::map<std::string, std::vector<float>>& sd, Model<C, T, V, N>& m) {
  fx::for_each_named(
      [&](const std::string& name, auto& dst) {
        auto it = sd.find(name);
        auto n = static_cast<std::size_t>(std::remove_cvref_t<decltype(dst)>::size);
        if (it == sd.end() || n != it->second.size())
          throw std::runtime_error("static GPT: no weight " + name + " of " + std::to_string(n) + " values");
        std::copy_n(it->second.begin(), n, dst.begin());
      },
      m);
}

}  // namespace examples::static_gpt
