#pragma once
// The character GPT's parameters as fixed:: tensors (PyTorch's layout, as examples/gpt_model.hpp:
// a Linear's weight is (out, in), y = x W^T + b), for any width C, context T, vocabulary V and N
// blocks, and their values from the dynamic model's state dict by name. Shared by
// bench/bench_static_gpt and examples/gpt_aot.
#include <algorithm>
#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <metagrad/fixed.hpp>

namespace examples::static_gpt {

namespace fx = metagrad::fixed;
using fx::index_t;

template <index_t Out, index_t In>
struct Linear {
  fx::Tensor<float, Out, In> w;
  fx::Tensor<float, Out> b;
};

template <index_t C>
struct Block {
  fx::Tensor<float, C> ln1_w, ln1_b, ln2_w, ln2_b;
  // MultiheadAttention's in_proj (q, k and v's rows, one product: one GEMM forward, one for the
  // input's gradient and one for the weight's, as the dynamic path) and its out_proj
  Linear<3 * C, C> qkv;
  Linear<C, C> out;
  Linear<4 * C, C> fc;
  Linear<C, 4 * C> proj;
};

template <index_t C, index_t T, index_t V, index_t N>
struct Model {
  fx::Tensor<float, V, C> wte;
  fx::Tensor<float, T, C> wpe;
  Block<C> blocks[N];
  fx::Tensor<float, C> lnf_w, lnf_b;
  fx::Tensor<float, V, C> head;
};

template <class X, index_t Out, index_t In>
auto linear(const X& x, const Linear<Out, In>& l) {
  return fx::matmul(x, l.w.template permute<1, 0>()) + l.b;
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
  auto take = [&](const std::string& name, auto& dst, std::size_t offset = 0) {
    auto it = sd.find(name);
    auto n = static_cast<std::size_t>(std::remove_cvref_t<decltype(dst)>::size);
    if (it == sd.end() || offset + n > it->second.size())
      throw std::runtime_error("static GPT: no weight " + name + " of " + std::to_string(offset + n) +
                               " values");
    std::copy_n(it->second.begin() + static_cast<std::ptrdiff_t>(offset), n, dst.begin());
  };
  take("wte.weight", m.wte), take("wpe.weight", m.wpe);
  for (index_t i = 0; i < N; ++i) {
    std::string p = "blocks." + std::to_string(i) + ".";
    Block<C>& b = m.blocks[i];
    take(p + "ln1.weight", b.ln1_w), take(p + "ln1.bias", b.ln1_b), take(p + "ln2.weight", b.ln2_w);
    take(p + "ln2.bias", b.ln2_b);
    take(p + "attn.in_proj_weight", b.qkv.w), take(p + "attn.in_proj_bias", b.qkv.b);
    take(p + "attn.out_proj.weight", b.out.w), take(p + "attn.out_proj.bias", b.out.b);
    take(p + "fc.weight", b.fc.w), take(p + "fc.bias", b.fc.b);
    take(p + "proj.weight", b.proj.w), take(p + "proj.bias", b.proj.b);
  }
  take("ln_f.weight", m.lnf_w), take("ln_f.bias", m.lnf_b), take("head.weight", m.head);
}

}  // namespace examples::static_gpt
