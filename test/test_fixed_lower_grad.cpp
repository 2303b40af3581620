// Lowering::grad (metagrad/lower.hpp): fixed::grad's backward rules lowered to Tensors, as an AOT
// training step uses them. For random weights and several models (matmul, relu, softmax and
// cross-entropy, layernorm, max, where, a shared subexpression, batched products, a GPT block cut
// with Lowering::cut), the lowered gradients and loss equal both fixed::grad evaluated inline and
// the dynamic path's backward through the lowered loss (float: 1e-4 relative plus 1e-5 absolute,
// the paths sum in different orders).
#include <catch2/catch.hpp>

#include <random>
#include <tuple>
#include <vector>

#include "fixed_check.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/cut.hpp"
#include "metagrad/fixed/transformer.hpp"
#include "metagrad/lower.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::Lowering;
using metagrad::Tensor;
using metagrad::test::close;
using metagrad::test::random_tensor;

namespace {

void same(const std::vector<float>& got, const std::vector<float>& want, const char* what, int param) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << ", parameter " << param << ", flat index " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(close(got[i], want[i], 1e-4, 1e-5));
  }
}

// model(cut) builds the loss, cutting with the function it is given. Its gradients three ways:
// fixed::grad inline (fx::cut on a tape), Lowering::grad (Lowering::cut) realized on CPU, and the
// dynamic backward of the loss lowered with the parameters bound to Tensors that require grad.
template <class Model, class... P>
void check(const Model& model, P&... params) {
  std::tuple<fx::TensorOf<P>...> inline_grads;
  double inline_loss = 0;
  {
    fx::Tape tape;
    auto fx_cut = [](const auto& e) { return fx::cut(e); };
    inline_loss = std::apply(
        [&](auto&... g) { return fx::grad_into(std::tie(g...), model(fx_cut), params...); }, inline_grads);
  }

  Lowering L("CPU");
  auto l_cut = [&](const auto& e) { return L.cut(e); };
  Lowering::Gradients lowered = L.grad(model(l_cut), params...);

  Lowering D("CPU");
  std::vector<Tensor> dyn;
  auto bind = [&](const auto& p) {
    Tensor t = metagrad::test::dynamic(p);
    t.requires_grad_(true);
    D.bind(p, t);
    dyn.push_back(t);
  };
  (bind(params), ...);
  auto d_cut = [&](const auto& e) { return D.cut(e); };
  Tensor dyn_loss = D(model(d_cut));
  dyn_loss.backward();

  const double l = lowered.loss.to_vector<float>()[0];
  INFO("loss: lowered " << l << ", inline " << inline_loss << ", dynamic " << dyn_loss.item<float>());
  REQUIRE(close(l, inline_loss, 1e-5, 1e-6));
  REQUIRE(close(l, dyn_loss.item<float>(), 1e-5, 1e-6));
  REQUIRE(lowered.grads.size() == sizeof...(P));
  int k = 0;
  std::apply(
      [&](const auto&... g) {
        auto one = [&](const auto& want) {
          std::vector<float> got = lowered.grads[std::size_t(k)].template to_vector<float>();
          same(got, std::vector<float>(want.begin(), want.end()), "lowered vs inline fixed::grad", k);
          same(got, dyn[std::size_t(k)].grad->template to_vector<float>(), "lowered vs dynamic backward", k);
          ++k;
        };
        (one(g), ...);
      },
      inline_grads);
}

// A two-layer MLP with softmax cross-entropy, batch B, sizes In -> Hid -> Out.
template <index_t B, index_t In, index_t Hid, index_t Out>
void mlp_case(std::mt19937& rng) {
  auto x = random_tensor<float, B, In>(rng);
  auto w1 = random_tensor<float, In, Hid>(rng, -0.5, 0.5);
  auto w2 = random_tensor<float, Hid, Out>(rng, -0.5, 0.5);
  auto b1 = random_tensor<float, Hid>(rng);
  auto b2 = random_tensor<float, Out>(rng);
  fx::Tensor<std::int32_t, B> y;
  std::uniform_int_distribution<int> label(0, Out - 1);
  for (auto& v : y) v = label(rng);
  check(
      [&](auto) {
        return fx::sparse_categorical_crossentropy(fx::linear(fx::linear(x, w1, b1).relu(), w2, b2), y);
      },
      w1, b1, w2, b2);
}

}  // namespace

TEST_CASE("Lowering::grad: an MLP's cross-entropy, several shapes", "[fixed][lower][lowergrad]") {
  std::mt19937 rng(1);
  for (int seed = 0; seed < 2; ++seed) {
    mlp_case<8, 12, 16, 5>(rng);
    mlp_case<3, 7, 9, 4>(rng);
  }
}

TEST_CASE("Lowering::grad: layernorm, softmax, max, where and a shared subexpression",
          "[fixed][lower][lowergrad]") {
  std::mt19937 rng(2);
  for (int seed = 0; seed < 3; ++seed) {
    auto x = random_tensor<float, 2, 3, 6>(rng);
    auto w = random_tensor<float, 6, 5>(rng, -1, 1);
    auto t = random_tensor<float, 2, 3, 5>(rng, 0, 1);
    auto g = random_tensor<float, 5>(rng, 0.5, 1.5), b = random_tensor<float, 5>(rng);
    check(  // softmax of a layernorm of a batched product (cut: the softmax reads it three times)
        [&](auto cut) {
          return (cut(fx::layernorm(fx::matmul(x, w), g, b)).template softmax<-1>() * t).sum();
        },
        w, g, b);
    check(  // one value read five times (a shared subexpression), max and where
        [&](auto) {
          auto h = fx::matmul(x, w) + b;
          return (h * h + h.tanh()).mean() + fx::where(h > 0, h, h * 0.1f).sum() +
                 h.template max<2>(fx::keepdim).sum();
        },
        w, b);
  }
}

namespace {
constexpr index_t B = 2, S = 4, C = 8, H = 2, D = C / H;
struct Block {
  fx::Tensor<float, C> g1, b1, g2, b2, c2;
  fx::Tensor<float, C, C> wq, wk, wv, wo;
  fx::Tensor<float, C, 2 * C> w1;
  fx::Tensor<float, 2 * C> c1;
  fx::Tensor<float, 2 * C, C> w2;
};
// A GPT block over a cut function (fx::cut inline, Lowering::cut lowered).
template <class X, class Cut>
auto block(const X& x, const Block& p, Cut cut) {
  auto h = cut(fx::layernorm(x, p.g1, p.b1));
  auto heads = [&](const auto& w) {
    return fx::matmul(h, w).template reshape<B, S, H, D>().template permute<0, 2, 1, 3>();
  };
  auto o = cut(fx::scaled_dot_product_attention<true>(heads(p.wq), heads(p.wk), heads(p.wv))
                   .template permute<0, 2, 1, 3>()
                   .template reshape<B, S, C>());
  auto x2 = cut(x + fx::matmul(o, p.wo));
  auto h2 = cut(fx::layernorm(x2, p.g2, p.b2));
  return cut(x2 + fx::matmul((fx::matmul(h2, p.w1) + p.c1).gelu(), p.w2) + p.c2);
}
}  // namespace

TEST_CASE("Lowering::grad: two GPT blocks through Lowering::cut", "[fixed][lower][lowergrad]") {
  std::mt19937 rng(3);
  Block p[2];
  for (Block& b : p) {
    for (auto* t : {&b.g1, &b.b1, &b.g2, &b.b2, &b.c2}) *t = random_tensor<float, C>(rng, -1, 1);
    for (auto* t : {&b.wq, &b.wk, &b.wv, &b.wo}) *t = random_tensor<float, C, C>(rng, -0.4, 0.4);
    b.w1 = random_tensor<float, C, 2 * C>(rng, -0.4, 0.4);
    b.c1 = random_tensor<float, 2 * C>(rng, -0.4, 0.4);
    b.w2 = random_tensor<float, 2 * C, C>(rng, -0.4, 0.4);
  }
  auto x = random_tensor<float, B, S, C>(rng), t = random_tensor<float, B, S, C>(rng);
  check([&](auto cut) { return (block(block(x, p[0], cut), p[1], cut) * t).sum(); }, p[0].g1, p[0].wq,
        p[0].wk, p[0].w1, p[0].c2, p[1].b1, p[1].wv, p[1].wo, p[1].w2);
}

TEST_CASE("Lowering::grad: parameters the loss does not read get zeros", "[fixed][lower][lowergrad]") {
  std::mt19937 rng(4);
  auto x = random_tensor<float, 3, 4>(rng);
  auto w = random_tensor<float, 4, 2>(rng);
  auto unused = random_tensor<float, 5>(rng);
  Lowering L("CPU");
  auto g = L.grad(fx::matmul(x, w).sum(), w, unused);
  REQUIRE(g.grads[1].to_vector<float>() == std::vector<float>(5, 0.f));
  std::vector<float> gw = g.grads[0].to_vector<float>();
  for (index_t k = 0; k < 4; ++k)
    for (index_t j = 0; j < 2; ++j)  // d sum(x w) / d w[k][j] = sum_i x[i][k]
      REQUIRE(close(gw[std::size_t(k * 2 + j)], x[k] + x[4 + k] + x[8 + k], 1e-5, 1e-6));
}
