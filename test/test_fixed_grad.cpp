// fixed::grad and the type-level mlops (fixed/vjp.hpp): every static op's gradient against central
// finite differences, in double (step 1e-6; agreement to 1e-5 relative plus 1e-6 absolute, where
// the differences' own error is about 1e-9); the static MLP's loss and gradients against the dynamic
// Tensor path on the CPU device, in float (1e-4 relative plus 1e-5 absolute: the paths sum in
// different orders and the static exp is a polynomial); gradient types checked at compile time;
// and a W5-sized SGD step that allocates nothing after its first.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <boost/mp11/algorithm.hpp>

#include "alloc_count.hpp"
#include "fixed_grad_check.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/describe.hpp"
#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/mlp.hpp"
#include "metagrad/fixed/model.hpp"
#include "metagrad/fixed/nn.hpp"
#include "metagrad/fixed/optim.hpp"
#include "metagrad/tensor.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::test::check_fd;
using metagrad::test::close;
using metagrad::test::random_tensor;

namespace {

constexpr int kSeeds = 4;  // random cases per op

// fx::vjp_into(y, g) against fx::grad_into of sum(y * g), parameter by parameter, in double.
template <class Y, class G, class... P>
void check_vjp(const Y& y, const G& g, const P&... params) {
  std::tuple<fx::TensorOf<P>...> got, want;
  std::apply([&](auto&... t) { fx::vjp_into(std::tie(t...), y, g, params...); }, got);
  std::apply([&](auto&... t) { fx::grad_into(std::tie(t...), (y * g).sum(), params...); }, want);
  auto same = [](const auto& a, const auto& b) {
    for (index_t i = 0; i < a.size; ++i) REQUIRE(close(a[i], b[i], 1e-12, 1e-12));
  };
  std::apply([&](const auto&... a) { std::apply([&](const auto&... b) { (same(a, b), ...); }, want); }, got);
}

}  // namespace

TEST_CASE("fixed grad: unary ops against finite differences", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(seed);
    auto x = random_tensor<double, 3, 5>(rng);
    auto pos = random_tensor<double, 3, 5>(rng, 0.5, 2);
    auto r = random_tensor<double, 3, 5>(rng);
    check_fd((-x * r).sum(), x);
    check_fd((x.exp() * r).sum(), x);
    check_fd((pos.log() * r).sum(), pos);
    check_fd((x.sin() * r).sum(), x);
    check_fd((x.cos() * r).sum(), x);
    check_fd((pos.sqrt() * r).sum(), pos);
    check_fd((x.relu() * r).sum(), x);
    check_fd((x.sigmoid() * r).sum(), x);
    check_fd((x.tanh() * r).sum(), x);
    check_fd((x.gelu() * r).sum(), x);
    check_fd((x.square() * r).sum(), x);
    check_fd((x.abs() * r).sum(), x);
    check_fd((pos.reciprocal() * r).sum(), pos);
    check_fd((x.exp().sin().sigmoid() * r).sum(), x);  // a chain fuses into one gradient expression
  }
}

TEST_CASE("fixed grad: binary ops, broadcasting, scalars and where against finite differences", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(100 + seed);
    auto x = random_tensor<double, 3, 4>(rng);
    auto y = random_tensor<double, 3, 4>(rng);
    auto row = random_tensor<double, 4>(rng);
    auto col = random_tensor<double, 3, 1>(rng, 0.5, 2);
    auto pos = random_tensor<double, 3, 4>(rng, 0.5, 2);
    auto r = random_tensor<double, 3, 4>(rng);
    check_fd(((x + y) * r).sum(), x, y);
    check_fd(((x - y) * r).sum(), x, y);
    check_fd((x * y * r).sum(), x, y);
    check_fd((x / col * r).sum(), x, col);
    check_fd((fx::pow(pos, y) * r).sum(), pos, y);
    check_fd((fx::maximum(x, y) * r).sum(), x, y);
    check_fd((fx::minimum(x, row) * r).sum(), x, row);
    check_fd(((x + row) * col * r).sum(), x, row, col);
    check_fd(((2.5 - x) * 3 / col * r).sum(), x, col);
    check_fd((fx::where(x > y, x * 2, y.exp()) * r).sum(), x, y);
    check_fd((fx::where(x > 0, x, 0.5) * r).sum(), x);
  }
}

TEST_CASE("fixed grad: ties of maximum share the gradient, as the dynamic path", "[fixed]") {
  fx::Tensor<double, 4> x{1, 2, 3, 4}, y{1, 0, 3, 5};
  auto [gx, gy] = fx::eval(fx::grad(fx::maximum(x, y).sum(), x, y));
  for (index_t i = 0; i < 4; ++i) {
    double want_x = x[i] > y[i] ? 1 : x[i] == y[i] ? 0.5 : 0;
    REQUIRE(gx[i] == want_x);
    REQUIRE(gy[i] == 1 - want_x);
  }
}

TEST_CASE("fixed grad: cast passes the gradient back in the source type", "[fixed]") {
  std::mt19937 rng(7);
  auto x = random_tensor<double, 2, 6>(rng);
  auto r = random_tensor<float, 2, 6>(rng);
  auto [g] = fx::eval(fx::grad((x.cast<float>() * r).sum().cast<double>(), x));
  static_assert(std::is_same_v<decltype(g), fx::Tensor<double, 2, 6>>);
  for (index_t i = 0; i < 12; ++i) REQUIRE(g[i] == double(r[i]));
}

TEST_CASE("fixed grad: detach is its child's value, and no gradient passes through it", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(150 + seed);
    auto x = random_tensor<double, 3, 5>(rng);
    auto r = random_tensor<double, 3, 5>(rng);
    fx::Tensor<double, 3, 5> v = (x.detach() * r).exp();
    for (index_t i = 0; i < 15; ++i) REQUIRE(v[i] == std::exp(x[i] * r[i]));
    // d/dx sum(x * detach(x) * r) = detach(x) * r: the detached factor is a constant, not 2 x r.
    auto [g] = fx::eval(fx::grad((x * x.detach() * r).sum(), x));
    for (index_t i = 0; i < 15; ++i) REQUIRE(g[i] == x[i] * r[i]);
    auto [z] = fx::eval(fx::grad((x.detach() * r).sum() + x.sum() * 0.0, x));
    for (index_t i = 0; i < 15; ++i) REQUIRE(z[i] == 0.0);
    // Through a view and a reduction below it.
    auto [h] = fx::eval(fx::grad((x * x.max<1>(fx::keepdim).detach().expand<3, 5>()).sum(), x));
    fx::Tensor<double, 3, 1> m = x.max<1>(fx::keepdim);
    for (index_t i = 0; i < 15; ++i) REQUIRE(h[i] == m[i / 5]);
  }
  // softmax and log_softmax shift by a detached max: their gradients compare nothing with it (a
  // max's own gradient is a mask of x == max).
  std::mt19937 rng(9);
  auto x = random_tensor<double, 2, 3, 4>(rng);
  auto r = random_tensor<double, 2, 3, 4>(rng);
  REQUIRE(fx::describe(fx::grad((x.max<1>(fx::keepdim).expand<2, 3, 4>() * r).sum(), x)).find("Map eq") !=
          std::string::npos);
  REQUIRE(fx::describe(fx::grad((x.softmax<1>() * r).sum(), x)).find("Map eq") == std::string::npos);
  REQUIRE(fx::describe(fx::grad((x.log_softmax<2>() * r).sum(), x)).find("Map eq") == std::string::npos);
}

TEST_CASE("fixed grad: reductions, softmax and log_softmax against finite differences", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(200 + seed);
    auto x = random_tensor<double, 2, 3, 4>(rng);
    check_fd((x.sum<1>() * random_tensor<double, 2, 4>(rng)).sum(), x);
    check_fd((x.sum<0, 2>() * random_tensor<double, 3>(rng)).sum(), x);
    check_fd((x.sum<2>(fx::keepdim) * random_tensor<double, 2, 3, 1>(rng)).sum(), x);
    check_fd((x.max<1>() * random_tensor<double, 2, 4>(rng)).sum(), x);
    check_fd((x.max<0, 2>() * random_tensor<double, 3>(rng)).sum(), x);
    check_fd((x.min<2>() * random_tensor<double, 2, 3>(rng)).sum(), x);
    check_fd((x.mean<0>() * random_tensor<double, 3, 4>(rng)).sum(), x);
    check_fd(x.max(), x);
    check_fd((x.softmax<1>() * random_tensor<double, 2, 3, 4>(rng)).sum(), x);
    check_fd((x.log_softmax<2>() * random_tensor<double, 2, 3, 4>(rng)).sum(), x);
  }
}

TEST_CASE("fixed grad: max reduce shares the gradient among equal maxima", "[fixed]") {
  fx::Tensor<double, 2, 3> x{1, 5, 5, 2, 0, -1};
  auto [g] = fx::eval(fx::grad(x.max<1>().sum(), x));
  const double want[] = {0, 0.5, 0.5, 1, 0, 0};
  for (index_t i = 0; i < 6; ++i) REQUIRE(g[i] == want[i]);
}

TEST_CASE("fixed grad: movement ops against finite differences", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(300 + seed);
    auto x = random_tensor<double, 2, 3, 4>(rng);
    check_fd((x.reshape<4, 6>() * random_tensor<double, 4, 6>(rng)).sum(), x);
    check_fd((x.permute<2, 0, 1>() * random_tensor<double, 4, 2, 3>(rng)).sum(), x);
    check_fd((x.transpose() * random_tensor<double, 2, 4, 3>(rng)).sum(), x);
    check_fd((x.reshape<2, 1, 3, 4>().expand<2, 5, 3, 4>() * random_tensor<double, 2, 5, 3, 4>(rng)).sum(),
             x);
    check_fd((x.pad<1, 0, 0, 2, 1, 1>().exp() * random_tensor<double, 3, 5, 6>(rng)).sum(), x);
    check_fd((x.shrink<0, 2, 1, 3, 1, 4>() * random_tensor<double, 2, 2, 3>(rng)).sum(), x);
    check_fd((x.flip<0, 2>() * random_tensor<double, 2, 3, 4>(rng)).sum(), x);
    check_fd((x.permute<1, 0, 2>().reshape<3, 8>().shrink<1, 3, 2, 7>().flip<1>() *
              random_tensor<double, 2, 5>(rng))
                 .sum(),
             x);
  }
}

TEST_CASE("fixed grad: matmul (composed and the kernel, 2-D and batched) and the MLP loss", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(400 + seed);
    auto a = random_tensor<double, 3, 4>(rng);
    auto b = random_tensor<double, 4, 5>(rng);
    auto r = random_tensor<double, 3, 5>(rng);
    auto dot = (a.reshape<3, 4, 1>().expand<3, 4, 5>() * b.reshape<1, 4, 5>().expand<3, 4, 5>()).sum<1>();
    check_fd((dot * r).sum(), a, b);
    check_fd((fx::matmul(a, b) * r).sum(), a, b);
    check_fd((fx::matmul(a.transpose(), r) * random_tensor<double, 4, 5>(rng)).sum(), a, r);
    auto batched = random_tensor<double, 2, 3, 4>(rng);
    check_fd((fx::matmul(batched, b) * random_tensor<double, 2, 3, 5>(rng)).sum(), batched, b);
    // a transposed product's gradient written as the product of the transposes (vjp.hpp): a
    // linear layer's (out, in) weight read as w.transpose(), 2-D and with the batch folded, and a
    // batched product of equal ranks (attention's q k^T)
    auto w = random_tensor<double, 5, 4>(rng);
    check_fd((fx::matmul(a, w.transpose()) * r).sum(), a, w);
    check_fd((fx::matmul(batched, w.transpose()) * random_tensor<double, 2, 3, 5>(rng)).sum(), batched, w);
    auto k = random_tensor<double, 2, 6, 4>(rng);
    check_fd((fx::matmul(batched, k.transpose()) * random_tensor<double, 2, 3, 6>(rng)).sum(), batched, k);

    fx::MLP<double, 6, 5, 7, 3> m(seed);
    for (double& v : m.b1) v = std::uniform_real_distribution<double>(-0.5, 0.5)(rng);
    auto x = random_tensor<double, 6, 5>(rng);
    fx::Tensor<double, 6, 3> y;
    for (index_t i = 0; i < 6; ++i) y(i, rng() % 3) = 1;
    check_fd(m.loss(x, y), m.w1, m.b1, m.w2, m.b2, x);
  }
}

TEST_CASE("fixed grad: shared subtrees and parameters used twice accumulate", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(500 + seed);
    auto a = random_tensor<double, 3, 4>(rng);
    auto b = random_tensor<double, 3, 4>(rng);
    auto r = random_tensor<double, 3, 4>(rng);
    check_fd((a * a * r).sum(), a);
    auto s = (a * b).sin();
    check_fd((s * s.exp() + s * r).sum(), a, b);  // three equal copies of s: differentiated once
    check_fd(((a + b).sum<1>(fx::keepdim) * a + (a + b).sum<1>(fx::keepdim) * r).sum(), a, b);
    // two tensors of one shape are two parameters: identity, not type
    auto [ga, gb] = fx::eval(fx::grad((a * r + b * b).sum(), a, b));
    for (index_t i = 0; i < 12; ++i) {
      REQUIRE(close(ga[i], r[i], 1e-12, 0));
      REQUIRE(close(gb[i], 2 * b[i], 1e-12, 0));
    }
  }
}

TEST_CASE("fixed grad: an off Gate gives zeros without evaluating its child; an on Gate is its child",
          "[fixed]") {
  using Dangling = fx::Expr<fx::op::Leaf<float, fx::Shape<64, 8>>>;  // reading it would crash
  auto bad = (Dangling(fx::op::Leaf<float, fx::Shape<64, 8>>{nullptr}).exp().sum<0>() + 1.f).sqrt();
  using B = decltype(bad);
  fx::Tensor<float, 8> out = fx::Tensor<float, 8>::full(3);
  out = fx::Expr<fx::op::Gate, B>(fx::op::Gate{false}, bad) * 2.f + 1.f;
  for (float v : out) REQUIRE(v == 1.f);
  std::mt19937 rng(5);
  auto x = random_tensor<float, 64, 8>(rng);
  auto good = (x.exp().sum<0>() + 1.f).sqrt();
  fx::Tensor<float, 8> want = good * 2.f + 1.f;
  out = fx::Expr<fx::op::Gate, decltype(good)>(fx::op::Gate{true}, good) * 2.f + 1.f;
  for (index_t i = 0; i < 8; ++i) REQUIRE(close(out[i], want[i], 1e-6, 0));
}

TEST_CASE("fixed grad: a parameter the loss does not read gets zeros; the loss value is returned",
          "[fixed]") {
  std::mt19937 rng(9);
  auto a = random_tensor<double, 2, 2>(rng);
  auto unused = random_tensor<double, 3>(rng);
  fx::Tensor<double, 2, 2> ga;
  fx::Tensor<double, 3> gu = fx::Tensor<double, 3>::full(7);
  double loss = fx::grad_into(std::tie(ga, gu), (a * a).sum(), a, unused);
  double want = 0;
  for (double v : a) want += v * v;
  REQUIRE(close(loss, want, 1e-12, 0));
  for (double v : gu) REQUIRE(v == 0);
  for (index_t i = 0; i < 4; ++i) REQUIRE(ga[i] == 2 * a[i]);
}

// Gradient types are the parameters' tensor types, and each rule's type is the mirror op.
namespace {
using G34 = fx::Expr<fx::op::Leaf<float, fx::Shape<3, 4>>>;
struct PermuteNode {
  template <std::size_t>
  using child_t = fx::Expr<fx::op::Leaf<float, fx::Shape<4, 3>>>;
};
struct ExpandNode {
  template <std::size_t>
  using child_t = fx::Expr<fx::op::Leaf<float, fx::Shape<1, 4>>>;
};
using PermuteVjp =
    decltype(fx::Vjp<fx::op::Move<metagrad::MovementOps::PERMUTE, metagrad::Dims{1, 0}>>::grad<0>(
        std::declval<PermuteNode>(), std::declval<G34>()));
using ExpandVjp =
    decltype(fx::Vjp<fx::op::Move<metagrad::MovementOps::EXPAND, metagrad::Dims{3, 4}>>::grad<0>(
        std::declval<ExpandNode>(), std::declval<G34>()));
static_assert(
    std::is_same_v<PermuteVjp::op_type, fx::op::Move<metagrad::MovementOps::PERMUTE, metagrad::Dims{1, 0}>>);
static_assert(PermuteVjp::shape::dims == metagrad::Dims{4, 3});
static_assert(
    std::is_same_v<ExpandVjp::op_type, fx::op::Reduce<metagrad::ReduceOps::SUM, metagrad::Dims{0}>>);
static_assert(ExpandVjp::shape::dims == metagrad::Dims{1, 4});
using Model = fx::MLP<float, 8, 6, 5, 3>;
using Grads = decltype(fx::grad(std::declval<Model&>().loss(std::declval<fx::Tensor<float, 8, 6>&>(),
                                                            std::declval<fx::Tensor<float, 8, 3>&>()),
                                std::declval<Model&>().w1, std::declval<Model&>().b1,
                                std::declval<Model&>().w2, std::declval<Model&>().b2));
// Each gradient is an expression of its parameter's shape: a sum of terms, each gated by whether
// the leaf it reached is that parameter (log_softmax reads the logits four times: four terms, the
// copies switched off at run time). The terms are the mirror ops of the forward pass.
template <class G>
struct first_term;
template <class C>
struct first_term<fx::Expr<fx::op::Gate, C>> {
  using type = C;
};
template <class A, class B>
struct first_term<fx::Expr<fx::op::Map<fx::Fn::ADD>, A, B>> : first_term<A> {};
template <std::size_t K>
using Term = typename first_term<std::remove_cv_t<std::tuple_element_t<K, Grads>>>::type;
template <std::size_t K>
using TermOp = typename Term<K>::op_type;
static_assert(std::tuple_size_v<Grads> == 4);
static_assert(std::tuple_element_t<0, Grads>::shape::dims == metagrad::Dims{6, 5});
static_assert(std::tuple_element_t<3, Grads>::shape::dims == metagrad::Dims{3});
static_assert(std::is_same_v<TermOp<0>, fx::op::MatMul>);  // x^T @ (relu' * g)
static_assert(std::is_same_v<TermOp<2>, fx::op::MatMul>);  // relu(h)^T @ g
// b1 and b2 were broadcast over the batch (reshape, expand): their gradients sum over it
static_assert(std::is_same_v<TermOp<1>, fx::op::Move<metagrad::MovementOps::RESHAPE, metagrad::Dims{5}>>);
static_assert(std::is_same_v<typename boost::mp11::mp_front<typename Term<3>::children_types>::op_type,
                             fx::op::Reduce<metagrad::ReduceOps::SUM, metagrad::Dims{0}>>);
// An elementwise chain's gradient is elementwise too: one fused loop, nothing materialised.
template <class E>
struct all_fused;
template <class Op, class... C>
struct all_fused<fx::Expr<Op, C...>>
    : std::bool_constant<!fx::detail::materialised<fx::Expr<Op, C...>> && (all_fused<C>::value && ...)> {};
using ChainGrad =
    std::tuple_element_t<0,
                         decltype(fx::grad((std::declval<fx::Tensor<double, 3, 5>&>().exp().sin().sigmoid() *
                                            std::declval<fx::Tensor<double, 3, 5>&>())
                                               .sum(),
                                           std::declval<fx::Tensor<double, 3, 5>&>()))>;
static_assert(all_fused<std::remove_cv_t<ChainGrad>>::value);
}  // namespace

TEST_CASE("fixed grad: the static MLP matches the dynamic path on CPU: loss and gradients", "[fixed]") {
  constexpr index_t B = 16, In = 20, H = 32, Out = 5;
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(600 + seed);
    fx::MLP<float, B, In, H, Out> m(seed);
    for (float& v : m.b1) v = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
    for (float& v : m.b2) v = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
    auto x = random_tensor<float, B, In>(rng, 0, 1);
    fx::Tensor<float, B, Out> y;
    for (index_t i = 0; i < B; ++i) y(i, rng() % Out) = 1;
    float loss = fx::grad_into(std::tie(m.grads.w1, m.grads.b1, m.grads.w2, m.grads.b2), m.loss(x, y), m.w1,
                               m.b1, m.w2, m.b2);

    auto dyn = [](const auto& t, bool param) {
      std::vector<float> v(t.begin(), t.end());
      return metagrad::Tensor(v, std::remove_cvref_t<decltype(t)>::shape::dims,
                              {.device = "CPU", .requires_grad = param});
    };
    metagrad::Tensor w1 = dyn(m.w1, true), b1 = dyn(m.b1, true), w2 = dyn(m.w2, true), b2 = dyn(m.b2, true);
    metagrad::Tensor dl =
        -(((dyn(x, false).matmul(w1) + b1).relu().matmul(w2) + b2).log_softmax(1) * dyn(y, false)).sum() /
        float(B);
    dl.backward();
    REQUIRE(close(loss, dl.item<float>(), 1e-4, 1e-5));
    auto same = [](const auto& got, const metagrad::Tensor& want) {
      std::vector<float> w = want.grad->to_vector<float>();
      REQUIRE(w.size() == std::size_t(std::remove_cvref_t<decltype(got)>::size));
      for (std::size_t i = 0; i < w.size(); ++i) {
        INFO("flat index " << i << ": static " << got[i] << ", dynamic " << w[i]);
        REQUIRE(close(got[i], w[i], 1e-4, 1e-5));
      }
    };
    same(m.grads.w1, w1);
    same(m.grads.b1, b1);
    same(m.grads.w2, w2);
    same(m.grads.b2, b2);
  }
}

TEST_CASE("fixed grad: a W5 SGD step allocates nothing after the first and lowers the loss", "[fixed]") {
  constexpr index_t B = 128, In = 784, H = 512, Out = 10;
  std::mt19937 rng(1);
  auto m = std::make_unique<fx::MLP<float, B, In, H, Out>>(1);
  auto x = random_tensor<float, B, In>(rng, 0, 1);
  fx::Tensor<float, B, Out> y;
  for (index_t i = 0; i < B; ++i) y(i, rng() % Out) = 1;
  float first = m->step(x, y, 0.1f);  // warm-up: the arena grows to the step's high-water mark
  std::uint64_t before = metagrad::test::allocations();
  float last = 0;
  for (int s = 0; s < 3; ++s) last = m->step(x, y, 0.1f);
  REQUIRE(metagrad::test::allocations() - before == 0);
  REQUIRE(std::isfinite(last));
  REQUIRE(last < first);
}

TEST_CASE(
    "fixed grad: gradient expressions fuse into each parameter's update, allocating nothing after the "
    "first step",
    "[fixed]") {
  constexpr index_t B = 64, In = 32, Out = 8;
  std::mt19937 rng(11);
  auto x = random_tensor<float, B, In>(rng);
  auto y = random_tensor<float, B, Out>(rng);
  auto w = random_tensor<float, In, Out>(rng, -0.3, 0.3);
  auto b = random_tensor<float, Out>(rng, -0.3, 0.3);
  fx::Tensor<float, In, Out> w_ref = w, gw;
  fx::Tensor<float, Out> b_ref = b, gb;
  auto loss = [&](const auto& w_, const auto& b_) {
    return (fx::matmul(x, w_) + b_ - y).square().sum() * (1.f / float(B));
  };
  const float lr = 0.05f;
  float first = 0, last = 0;
  std::uint64_t before = 0;
  for (int step = 0; step < 8; ++step) {
    if (step == 1) before = metagrad::test::allocations();
    float want = fx::grad_into(std::tie(gw, gb), loss(w_ref, b_ref), w_ref, b_ref);
    w_ref -= lr * gw;
    b_ref -= lr * gb;
    // Neither gradient reads w or b (the gradient at the sum is materialised for the matmul), so
    // the updates may run one after the other straight from the expressions.
    auto g = fx::grad(loss(w, b), w, b);
    REQUIRE(g.loss() == want);
    w -= lr * get<0>(g);
    b -= lr * get<1>(g);
    (step == 0 ? first : last) = want;
  }
  REQUIRE(metagrad::test::allocations() - before == 0);
  REQUIRE(last < first);
  metagrad::test::check_all(
      w, [&](index_t i) { return w_ref[i]; }, 1e-6, 1e-7);
  metagrad::test::check_all(
      b, [&](index_t i) { return b_ref[i]; }, 1e-6, 1e-7);
}

TEST_CASE("fixed grad: vjp_into is grad_into of sum(y * g), and leaves y unevaluated", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(800 + seed);
    auto x = random_tensor<double, 3, 4>(rng);
    auto w = random_tensor<double, 4, 5>(rng);
    auto g = random_tensor<double, 3, 5>(rng);
    check_vjp(fx::matmul(x.sin(), w).tanh() * w.sum<0>().reshape<1, 5>().expand<3, 5>(), g, x, w);
    auto xc = random_tensor<double, 2, 3, 6, 6>(rng);
    auto wc = random_tensor<double, 4, 3, 3, 3>(rng);
    check_vjp(fx::conv2d(xc, wc), random_tensor<double, 2, 4, 4, 4>(rng), xc, wc);
  }
  // y reads a dangling leaf that no rule needs: evaluating y would crash; its gradient is g spread
  using Dangling = fx::Expr<fx::op::Leaf<double, fx::Shape<3, 4>>>;
  std::mt19937 rng(9);
  auto x = random_tensor<double, 3, 4>(rng);
  auto g = random_tensor<double, 3>(rng);
  fx::Tensor<double, 3, 4> dx;
  fx::vjp_into(std::tie(dx), (x + Dangling(fx::op::Leaf<double, fx::Shape<3, 4>>{nullptr}).exp()).sum<1>(), g,
               x);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) REQUIRE(dx(i, j) == g[i]);
}

TEST_CASE("fixed grad: a small CNN against finite differences and the dynamic path on CPU", "[fixed]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(700 + seed);
    auto x = random_tensor<double, 2, 2, 6, 6>(rng);
    auto w = random_tensor<double, 3, 2, 3, 3>(rng, -0.5, 0.5);
    auto cb = random_tensor<double, 3>(rng, -0.1, 0.1);
    auto w2 = random_tensor<double, 27, 4>(rng, -0.5, 0.5);
    auto b2 = random_tensor<double, 4>(rng);
    fx::Tensor<double, 2, 4> y;
    for (index_t i = 0; i < 2; ++i) y(i, rng() % 4) = 1;
    // conv (stride 1, padding 1), relu, 2x2 max pool, linear, log-softmax + NLL
    auto features = fx::max_pool2d<2>(fx::conv2d<1, 1>(x, w, cb).relu()).reshape<2, 27>();
    auto loss = -((fx::matmul(features, w2) + b2).log_softmax<1>() * y).sum();
    check_fd(loss, x, w, cb, w2, b2);
    auto w3 = random_tensor<double, 3, 2, 2, 2>(rng);  // stride 2, no padding
    check_fd((fx::conv2d<2, 0>(x, w3).sigmoid() * random_tensor<double, 2, 3, 3, 3>(rng)).sum(), x, w3);

    // the same network in float on both paths
    auto f = [](const auto& t) { return fx::eval(t.template cast<float>()); };
    auto xf = f(x);
    auto wf = f(w);
    auto cbf = f(cb);
    auto w2f = f(w2);
    auto b2f = f(b2);
    auto yf = f(y);
    auto lossf =
        -((fx::matmul(fx::max_pool2d<2>(fx::conv2d<1, 1>(xf, wf, cbf).relu()).reshape<2, 27>(), w2f) + b2f)
              .log_softmax<1>() *
          yf)
             .sum();
    auto [gw, gcb, gw2] = fx::eval(fx::grad(lossf, wf, cbf, w2f));
    auto dyn = [](const auto& t, bool param) {
      std::vector<float> v(t.begin(), t.end());
      return metagrad::Tensor(v, std::remove_cvref_t<decltype(t)>::shape::dims,
                              {.device = "CPU", .requires_grad = param});
    };
    metagrad::Tensor dw = dyn(wf, true), dcb = dyn(cbf, true), dw2 = dyn(w2f, true);
    metagrad::Tensor dl =
        -((dyn(xf, false).conv2d(dw, dcb, 1, {1}, {1}, {1}).relu().max_pool2d().reshape({2, 27}).matmul(dw2) +
           dyn(b2f, false))
              .log_softmax(1) *
          dyn(yf, false))
             .sum();
    dl.backward();
    REQUIRE(close(fx::eval(lossf)[0], dl.item<float>(), 1e-4, 1e-5));
    auto same = [](const auto& got, const metagrad::Tensor& want) {
      std::vector<float> wv = want.grad->to_vector<float>();
      for (std::size_t i = 0; i < wv.size(); ++i) {
        INFO("flat index " << i << ": static " << got[i] << ", dynamic " << wv[i]);
        REQUIRE(close(got[i], wv[i], 1e-4, 1e-5));
      }
    };
    same(gw, dw);
    same(gcb, dcb);
    same(gw2, dw2);
  }
}

TEST_CASE("fixed grad: 0 and -0 are different constants; x * -0 is -0 in every lane", "[fixed]") {
  // x * -0 evaluated by the vector loop (a constant splat into lanes: 0 + -0 made it +0) and by the
  // scalar one; then two subtrees that differ only in the sign of a zero, which the gradient's plan
  // took for one (its forward value shared): d/dy2 of y2 / max(x * -0) is 1 / -0 = -inf.
  fx::Tensor<float, 32> xf = fx::Tensor<float, 32>::full(2);
  fx::Tensor<float, 32> zf = xf * -0.f;
  fx::Tensor<double, 1> one = fx::Tensor<double, 1>::full(3);
  fx::Tensor<double, 1> zd = one * -0.0;
  for (float v : zf) REQUIRE((v == 0 && std::signbit(v)));
  REQUIRE((zd[0] == 0 && std::signbit(zd[0])));
  fx::Tensor<double, 4> x, y1 = fx::Tensor<double, 4>::full(1), y2 = fx::Tensor<double, 4>::full(1);
  for (index_t i = 0; i < 4; ++i) x[i] = 1.0 + static_cast<double>(i);
  auto loss = (y1 / (x * 0.0).max() + y2 / (x * -0.0).max()).sum();
  auto [g1, g2] = fx::eval(fx::grad(loss, y1, y2));
  for (index_t i = 0; i < 4; ++i) {
    REQUIRE(g1[i] == std::numeric_limits<double>::infinity());
    REQUIRE(g2[i] == -std::numeric_limits<double>::infinity());
  }
}

// ---- static models as reflected structs (fixed/model.hpp, fixed/optim.hpp) ----
namespace reflected {
// Nested structs, a std::array of blocks, a C array and a plain value, as a user's model would be.
using W = fx::Tensor<double, 4, 4>;
using Bv = fx::Tensor<double, 4>;
using Head = fx::Tensor<double, 4, 3>;
struct Layer {
  BOOST_HANA_DEFINE_STRUCT(Layer, (W, w), (Bv, b));
};
struct Net {
  using Layers = std::array<Layer, 2>;
  using Scales = Bv[2];
  BOOST_HANA_DEFINE_STRUCT(Net, (Layers, layers), (int, width), (Scales, scale), (Head, head));
};
template <class X>
auto forward(const Net& n, const X& x) {
  auto h = ((fx::matmul(x, n.layers[0].w) + n.layers[0].b) * n.scale[0]).sigmoid();
  auto h2 = ((fx::matmul(h, n.layers[1].w) + n.layers[1].b) * n.scale[1]).sigmoid();
  return fx::matmul(h2, n.head);
}
}  // namespace reflected

TEST_CASE("fixed model: a reflected struct's parameters, walked in declaration order with dotted names",
          "[fixed][model]") {
  using reflected::Net;
  Net n{};
  std::vector<std::string> names;
  std::vector<const void*> at;
  fx::for_each_named(
      [&](const std::string& name, const auto& t) {
        names.push_back(name);
        at.push_back(t.data());
      },
      std::as_const(n));
  REQUIRE(names == std::vector<std::string>{"layers.0.w", "layers.0.b", "layers.1.w", "layers.1.b", "scale.0",
                                            "scale.1", "head"});
  REQUIRE(at == std::vector<const void*>{n.layers[0].w.data(), n.layers[0].b.data(), n.layers[1].w.data(),
                                         n.layers[1].b.data(), n.scale[0].data(), n.scale[1].data(),
                                         n.head.data()});
  static_assert(boost::mp11::mp_size<fx::params_t<Net>>::value == 7);
  static_assert(std::is_same_v<boost::mp11::mp_at_c<fx::params_t<Net>, 6>, reflected::Head>);
  REQUIRE(&std::get<6>(fx::parameters(n)) == &n.head);
}

TEST_CASE("fixed model: grad of a reflected model equals each parameter's grad", "[fixed][model]") {
  using reflected::Net;
  for (int seed = 0; seed < kSeeds; ++seed) {
    std::mt19937 rng(900 + seed);
    Net n{};
    fx::for_each_param(
        [&](auto& t) {
          for (double& v : t) v = std::uniform_real_distribution<double>(-1, 1)(rng);
        },
        n);
    auto x = random_tensor<double, 5, 4>(rng, -1, 1);
    auto y = random_tensor<double, 5, 3>(rng, -1, 1);
    auto loss = ((reflected::forward(n, x) - y) * (reflected::forward(n, x) - y)).sum();
    auto [g, l] = fx::grad(loss, n);
    Net want{};
    double lw = fx::grad_into(std::tie(want.layers[0].w, want.layers[0].b, want.layers[1].w, want.layers[1].b,
                                       want.scale[0], want.scale[1], want.head),
                              loss, n.layers[0].w, n.layers[0].b, n.layers[1].w, n.layers[1].b, n.scale[0],
                              n.scale[1], n.head);
    REQUIRE(l == lw);
    fx::for_each_named(
        [&](const std::string& name, const auto& got, const auto& expect) {
          INFO(name);
          for (index_t i = 0; i < got.size; ++i) REQUIRE(got[i] == expect[i]);
        },
        g, want);
    // and against central differences (what the walk hands each parameter is its own gradient)
    fx::for_each_param(
        [&](auto& p, const auto& gp) {
          metagrad::test::require_fd([&] { return double(fx::eval(loss)[0]); }, std::tie(gp), p);
        },
        n, g);
  }
}

TEST_CASE("fixed model: fx::sgd and fx::AdamW steps equal the hand-written updates", "[fixed][model]") {
  using reflected::Net;
  std::mt19937 rng(950);
  Net n{}, grads{};
  auto fill = [&](Net& m) {
    fx::for_each_param(
        [&](auto& t) {
          for (double& v : t) v = std::uniform_real_distribution<double>(-1, 1)(rng);
        },
        m);
  };
  fill(n);
  // Flat copies, updated element by element as PyTorch's documentation writes the rules.
  auto flat = [](const Net& m) {
    std::vector<std::vector<double>> out;
    fx::for_each_param([&](const auto& t) { out.emplace_back(t.begin(), t.end()); }, m);
    return out;
  };
  auto w = flat(n), m1 = w, v1 = w;
  for (auto& t : m1) std::fill(t.begin(), t.end(), 0.0);
  v1 = m1;
  std::vector<std::size_t> rank;
  fx::for_each_param([&](const auto& t) { rank.push_back(std::remove_cvref_t<decltype(t)>::rank); }, n);

  fill(grads);
  fx::sgd(n, grads, 0.1);
  auto g = flat(grads);
  for (std::size_t k = 0; k < w.size(); ++k)
    for (std::size_t i = 0; i < w[k].size(); ++i) w[k][i] -= 0.1 * g[k][i];
  REQUIRE(flat(n) == w);

  const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.1, scale = 0.5;
  fx::AdamW<Net> opt({.lr = lr, .b1 = b1, .b2 = b2, .eps = eps, .weight_decay = wd, .decay_vectors = false});
  for (int t = 1; t <= 3; ++t) {
    fill(grads);
    g = flat(grads);
    opt.step(n, grads, scale);
    for (std::size_t k = 0; k < w.size(); ++k)
      for (std::size_t i = 0; i < w[k].size(); ++i) {
        double gi = g[k][i] * scale;
        m1[k][i] = b1 * m1[k][i] + (1 - b1) * gi;
        v1[k][i] = b2 * v1[k][i] + (1 - b2) * gi * gi;
        double up = m1[k][i] / (1 - std::pow(b1, t)) / (std::sqrt(v1[k][i] / (1 - std::pow(b2, t))) + eps);
        w[k][i] -= lr * (up + (rank[k] >= 2 ? wd : 0.0) * w[k][i]);
      }
    auto got = flat(n);
    for (std::size_t k = 0; k < w.size(); ++k)
      for (std::size_t i = 0; i < w[k].size(); ++i) {
        INFO("step " << t << ", parameter " << k << ", element " << i);
        REQUIRE(close(got[k][i], w[k][i], 1e-12, 1e-14));
      }
  }
  REQUIRE(opt.steps() == 3);
}
