// fx::cut and fx::Tape (fixed/cut.hpp): gradients through cuts against central finite differences
// (double; each difference runs the forward again on a fresh tape, as cuts hold their values), the
// three ways in (fx::grad, grad_into, vjp_into) against each other, a GPT block (layernorm, causal
// 2-head attention, residuals, GELU MLP) cut as a user would against the dynamic path's gradients
// (float, 1e-4), the errors, and a cut training step that allocates nothing after its first.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "alloc_count.hpp"
#include "fixed_grad_check.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/cut.hpp"
#include "metagrad/fixed/transformer.hpp"
#include "metagrad/tensor.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::test::close;
using metagrad::test::random_tensor;

namespace {

// The gradient of the loss `model()` builds (on a fresh tape each time) against central differences.
template <class Model, class... P>
void check_fd_cut(const Model& model, P&... params) {
  std::tuple<fx::TensorOf<P>...> got;
  {
    fx::Tape tape;
    auto g = fx::grad(model(), params...);
    got = fx::eval(g);
  }
  auto value = [&] {
    fx::Tape tape;
    return double(fx::eval(model())[0]);
  };
  metagrad::test::require_fd(value, got, params...);
}

}  // namespace

TEST_CASE("fixed cut: gradients through cuts read many times against finite differences", "[fixed][cut]") {
  for (int seed = 0; seed < 3; ++seed) {
    std::mt19937 rng(seed);
    auto x = random_tensor<double, 3, 4>(rng);
    auto w = random_tensor<double, 4, 4>(rng, -1, 1);
    auto b = random_tensor<double, 4>(rng, -1, 1);
    auto r = random_tensor<double, 3, 4>(rng);
    // h read four times, k (which reads h) twice, and a parameter read both inside and past the cuts
    auto model = [&] {
      auto h = fx::cut((fx::matmul(x, w) + b).tanh());
      auto k = fx::cut(h * h + w.sum<0>(fx::keepdim));
      return ((h + k).sin() * r + h.exp() * k).sum() + (b * b).sum();
    };
    check_fd_cut(model, w, b);
    check_fd_cut(model, b, w, x);  // any order; an input as a parameter too
  }
}

// A cut that its user's gradient reaches unchanged (a residual) takes that buffer rather than a copy:
// the taker later added into by an older cut, a second taker of the same buffer (a copy), one cut
// reached twice, and one reached by other terms too.
TEST_CASE("fixed cut: gradients handed on unchanged through residuals against finite differences",
          "[fixed][cut]") {
  for (int seed = 0; seed < 3; ++seed) {
    std::mt19937 rng(seed + 10);
    auto x = random_tensor<double, 3, 4>(rng);
    auto w = random_tensor<double, 4, 4>(rng, -1, 1);
    auto b = random_tensor<double, 4>(rng, -1, 1);
    auto r = random_tensor<double, 3, 4>(rng);
    auto taken_then_added = [&] {
      auto a = fx::cut((fx::matmul(x, w) + b).tanh());
      auto c = fx::cut(a * a + b);  // adds into a's gradient after y's backward has handed it y's
      auto y = fx::cut(a + c);      // a takes y's gradient buffer, c gets a copy
      return (y.sin() * r).sum();
    };
    check_fd_cut(taken_then_added, w, b);
    auto reached_twice = [&] {
      auto a = fx::cut((fx::matmul(x, w) + b).tanh());
      auto y = fx::cut(a * b);
      auto z = fx::cut(y + y + a);          // y takes z's gradient, then adds it again; a copies
      auto u = fx::cut(z + (z * r).sin());  // z: the sine's term first, then u's gradient added
      return (u * r).sum() + (y * y).sum();
    };
    check_fd_cut(reached_twice, w, b, x);
    // cuts whose root is a function whose gradient reads its value (exp, sigmoid, sqrt, relu): the
    // cut's value stands for it
    auto roots = [&] {
      auto a = fx::cut((fx::matmul(x, w) + b).tanh());
      auto e = fx::cut((a * 0.5).exp());
      auto s = fx::cut((a + e).sigmoid());
      auto q = fx::cut((e + 1.0).sqrt());
      auto r2 = fx::cut((a - 0.1).relu());
      return ((e + s) * r).sum() + (q * s).sum() + (r2 * r2).sum();
    };
    check_fd_cut(roots, w, b, x);
  }
}

TEST_CASE("fixed cut: grad, grad_into and vjp_into agree, and a cut nothing reaches gets none",
          "[fixed][cut]") {
  std::mt19937 rng(7);
  auto x = random_tensor<double, 2, 3>(rng);
  auto w = random_tensor<double, 3, 3>(rng);
  auto u = random_tensor<double, 3, 3>(rng);  // unused: zeros
  auto seed = random_tensor<double, 2, 3>(rng);
  fx::Tape tape;
  auto h = fx::cut(fx::matmul(x, w).relu());
  auto unused = fx::cut(fx::matmul(x, u));  // made after h, read by nothing
  (void)unused;
  auto y = fx::cut(h * w.sum<0>(fx::keepdim)) + h;
  fx::Tensor<double, 3, 3> gw, gu, vw, vu;
  fx::grad_into(std::tie(gw, gu), (y * seed).sum(), w, u);
  fx::vjp_into(std::tie(vw, vu), y, seed, w, u);
  auto g = fx::grad((y * seed).sum(), w, u);
  fx::Tensor<double, 3, 3> lazy = get<0>(g);
  for (index_t i = 0; i < 9; ++i) {
    REQUIRE(gu[i] == 0);
    REQUIRE(vu[i] == 0);
    REQUIRE(close(vw[i], gw[i], 1e-12, 1e-12));
    REQUIRE(close(lazy[i], gw[i], 1e-12, 1e-12));
  }
  REQUIRE(g.loss() == Approx(fx::eval((y * seed).sum())[0]));
}

TEST_CASE("fixed cut: errors", "[fixed][cut]") {
  fx::Tensor<float, 2> x{1, 2};
  REQUIRE_THROWS_WITH(fx::cut(x * 2), Catch::Contains("fixed::cut: no fx::Tape"));
  {  // a nested tape's cuts may read the outer's; the inner one restores the outer's newest cut
    fx::Tape outer;
    auto a = fx::cut(x * 2);
    fx::Tensor<float, 2> g;
    {
      fx::Tape inner;
      auto b = fx::cut(a * a);
      fx::grad_into(std::tie(g), b.sum(), x);
      REQUIRE(g[0] == Approx(8));  // d (2x)^2 / dx = 8x
      REQUIRE(g[1] == Approx(16));
    }
    fx::grad_into(std::tie(g), (a * 3).sum(), x);
    REQUIRE(g[1] == Approx(6));
  }
}

namespace {
constexpr index_t B = 2, S = 8, C = 16, H = 2, D = C / H;
struct Block {
  fx::Tensor<float, C> g1, b1, g2, b2, c2;
  fx::Tensor<float, C, C> wq, wk, wv, wo;
  fx::Tensor<float, C, 4 * C> w1;
  fx::Tensor<float, 4 * C> c1;
  fx::Tensor<float, 4 * C, C> w2;
  auto params() { return std::tie(g1, b1, g2, b2, c2, wq, wk, wv, wo, w1, c1, w2); }
};
// One GPT block, cut where its values are read more than once.
template <class X>
auto block(const X& x, const Block& p) {
  auto h = fx::cut(fx::layernorm(x, p.g1, p.b1));
  auto heads = [&](const auto& w) {
    return fx::matmul(h, w).template reshape<B, S, H, D>().template permute<0, 2, 1, 3>();
  };
  auto o = fx::cut(fx::scaled_dot_product_attention<true>(heads(p.wq), heads(p.wk), heads(p.wv))
                       .template permute<0, 2, 1, 3>()
                       .template reshape<B, S, C>());
  auto x2 = fx::cut(x + fx::matmul(o, p.wo));
  auto h2 = fx::cut(fx::layernorm(x2, p.g2, p.b2));
  return fx::cut(x2 + fx::matmul((fx::matmul(h2, p.w1) + p.c1).gelu(), p.w2) + p.c2);
}
metagrad::Tensor dynamic_block(const metagrad::Tensor& x, const std::vector<metagrad::Tensor>& p) {
  const auto &g1 = p[0], &b1 = p[1], &g2 = p[2], &b2 = p[3], &c2 = p[4], &wq = p[5], &wk = p[6], &wv = p[7],
             &wo = p[8], &w1 = p[9], &c1 = p[10], &w2 = p[11];
  metagrad::Tensor h = x.layernorm() * g1 + b1;
  auto heads = [&](const metagrad::Tensor& w) {
    return h.matmul(w).reshape({B, S, H, D}).permute({0, 2, 1, 3});
  };
  metagrad::Tensor o = heads(wq)
                           .scaled_dot_product_attention(heads(wk), heads(wv), {}, 0, true)
                           .permute({0, 2, 1, 3})
                           .reshape({B, S, C});
  metagrad::Tensor x2 = x + o.matmul(wo);
  metagrad::Tensor h2 = x2.layernorm() * g2 + b2;
  return x2 + (h2.matmul(w1) + c1).gelu().matmul(w2) + c2;
}
}  // namespace

TEST_CASE("fixed cut: two GPT blocks' fx::grad against the dynamic path", "[fixed][cut]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0, 0.3f);
  Block blocks[2];
  for (Block& p : blocks) {
    std::apply([&](auto&... t) { ((std::generate(t.begin(), t.end(), [&] { return n(rng); })), ...); },
               p.params());
    for (auto* g : {&p.g1, &p.g2})
      for (float& v : *g) v += 1;
  }
  fx::Tensor<float, B, S, C> x, y;
  std::generate(x.begin(), x.end(), [&] { return n(rng); });
  std::generate(y.begin(), y.end(), [&] { return n(rng); });

  std::vector<metagrad::Tensor> dp[2];
  for (int k = 0; k < 2; ++k)
    std::apply([&](const auto&... t) { (dp[k].push_back(metagrad::test::dyn(t, true)), ...); },
               blocks[k].params());
  metagrad::Tensor dout = dynamic_block(dynamic_block(metagrad::test::dyn(x), dp[0]), dp[1]);
  metagrad::Tensor dl = ((dout - metagrad::test::dyn(y)) * (dout - metagrad::test::dyn(y))).mean();
  dl.backward();

  fx::Tape tape;
  auto out = block(block(x, blocks[0]), blocks[1]);  // the second block's walks are the first's
  auto loss = ((out - y) * (out - y)).mean();
  std::apply(
      [&](auto&... p0) {
        std::apply(
            [&](auto&... p1) {
              auto g = fx::grad(loss, p0..., p1...);
              REQUIRE(close(g.loss(), dl.item<float>(), 1e-4, 1e-6));
              auto got = fx::eval(g);
              std::apply(
                  [&](const auto&... t) {
                    std::size_t k = 0;
                    ((metagrad::test::same(t, *dp[k / 12][k % 12].grad, "gradient"), ++k), ...);
                  },
                  got);
            },
            blocks[1].params());
      },
      blocks[0].params());
}

TEST_CASE("fixed cut: a cut training step allocates nothing after its first", "[fixed][cut]") {
  std::mt19937 rng(5);
  auto x = random_tensor<float, 16, 32>(rng);
  auto w = random_tensor<float, 32, 32>(rng, -0.2, 0.2);
  fx::Tensor<float, 32, 32> gw;
  std::uint64_t before = 0;
  float first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    if (step == 1) before = metagrad::test::allocations();
    fx::Tape tape;
    auto h = fx::cut(fx::layernorm(fx::matmul(x, w)));
    last = fx::grad_into(std::tie(gw), (h * h * h + h).sum() * 0.01f, w);
    if (step == 0) first = last;
    w -= 0.1f * gw;
  }
  REQUIRE(metagrad::test::allocations() - before == 0);
  REQUIRE(last < first);
}

namespace {
// Slice [B, E) of axis A of a (4, 5, 6) operand.
template <int A, index_t B, index_t E, class X>
auto slice(const X& x) {
  if constexpr (A == 0)
    return x.template shrink<B, E, 0, 5, 0, 6>();
  else if constexpr (A == 1)
    return x.template shrink<0, 4, B, E, 0, 6>();
  else
    return x.template shrink<0, 4, 0, 5, B, E>();
}
// loss = sum(s1 a) + sum(s2^2 b) + sum(s3) over slices [1, 2), [2, 3), [3, 4) of axis A of h = p c,
// h a cut (its gradient a sink the slices' terms add into), or the subtree p c read four times (a
// shared node, its gradient summed in the walk), or p itself (a parameter's sink): d loss / d p is
// (a, 2 h b, 1) c in the slices and 0 around them (before the first; after the last but on axis 0).
template <int A, int How>
void check_slices(std::mt19937& rng) {
  auto p = random_tensor<double, 4, 5, 6>(rng), c = random_tensor<double, 4, 5, 6>(rng, 0.5, 1.5);
  using Sl = fx::TensorOf<decltype(slice<A, 1, 2>(p))>;
  Sl a, b;
  std::uniform_real_distribution<double> u(-2, 2);
  for (index_t i = 0; i < Sl::size; ++i) a[i] = u(rng), b[i] = u(rng);
  fx::Tape tape;
  auto loss = [&](const auto& h) {
    return (slice<A, 1, 2>(h) * a).sum() + (slice<A, 2, 3>(h) * slice<A, 2, 3>(h) * b).sum() +
           slice<A, 3, 4>(h).sum();
  };
  fx::Tensor<double, 4, 5, 6> got;
  if constexpr (How == 0)
    got = get<0>(fx::grad(loss(fx::cut(p * c)), p));
  else if constexpr (How == 1)
    got = get<0>(fx::grad(loss(p * c), p));
  else
    c = fx::Tensor<double, 4, 5, 6>::full(1), got = get<0>(fx::grad(loss(p), p));
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 5; ++j)
      for (index_t k = 0; k < 6; ++k) {
        const index_t at[] = {i, j, k}, s = at[A];
        const index_t r[] = {i - (A == 0 ? s : 0), j - (A == 1 ? s : 0), k - (A == 2 ? s : 0)};
        double want = 0;
        if (s == 1) want = a(r[0], r[1], r[2]);
        if (s == 2) want = 2 * p(i, j, k) * c(i, j, k) * b(r[0], r[1], r[2]);
        if (s == 3) want = 1;
        INFO("axis " << A << " way " << How << " at " << i << "," << j << "," << k);
        REQUIRE(close(got(i, j, k), want * c(i, j, k), 1e-12, 1e-12));
      }
}
}  // namespace

// Slices' gradients into a cut's gradient as slabs (copied alone, the rest zeroed when something else
// comes): overlapping slices, a slice then the whole, slices of two axes, and slices with gaps
// between them, against finite differences.
TEST_CASE("fixed cut: slabs of a cut's gradient, overlapping, mixed and with gaps", "[fixed][cut]") {
  std::mt19937 rng(12);
  auto p = random_tensor<double, 4, 5, 6>(rng), c = random_tensor<double, 4, 5, 6>(rng, 0.5, 1.5);
  auto r = random_tensor<double, 4, 5, 6>(rng);
  auto overlapping = [&] {
    auto h = fx::cut(p * c);
    return (slice<1, 1, 3>(h) * slice<1, 1, 3>(r)).sum() + (slice<1, 2, 4>(h) * slice<1, 2, 4>(h)).sum();
  };
  check_fd_cut(overlapping, p);
  auto then_whole = [&] {
    auto h = fx::cut(p * c);
    auto k = fx::cut(slice<2, 0, 2>(h).sin() + 1.0);  // its slab reaches h after the loss's terms
    return (slice<2, 4, 6>(h) * slice<2, 4, 6>(r)).sum() + (h * r).sum() + k.sum();
  };
  check_fd_cut(then_whole, p, c);
  auto two_axes_and_gaps = [&] {
    auto h = fx::cut(p * c);
    return slice<0, 1, 2>(h).exp().sum() + (slice<0, 3, 4>(h) * slice<0, 3, 4>(r)).sum() +
           (slice<2, 1, 2>(h) * slice<2, 1, 2>(h)).sum();
  };
  check_fd_cut(two_axes_and_gaps, p, c);
}

TEST_CASE("fixed cut: slices' gradients go into their regions (a packed q, k, v's heads)", "[fixed][cut]") {
  std::mt19937 rng(3);
  check_slices<0, 0>(rng), check_slices<1, 0>(rng), check_slices<2, 0>(rng);
  check_slices<0, 1>(rng), check_slices<1, 1>(rng), check_slices<2, 1>(rng);
  check_slices<0, 2>(rng), check_slices<1, 2>(rng), check_slices<2, 2>(rng);
}
