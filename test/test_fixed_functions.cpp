// Every elementwise op of the static path exists on the dynamic path with the same values and
// gradients. A table lists them (each Fn, each elementwise method, the operators, where), mostly
// as one expression spelled the same on both paths; each runs on random float inputs through
// fx::eval, fixed::grad and lower(), against the dynamic Tensor method and its autograd on the CPU
// device. The table is checked complete against the Fn enum and ExprBase's declarations.
#include <catch2/catch.hpp>

#include <array>
#include <boost/mp11/algorithm.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fixed_grad_check.hpp"
#include "metagrad/lower.hpp"

using namespace metagrad::test;

namespace {

using T = metagrad::Tensor;
constexpr index_t R = 4, C = 13;
using X = fx::Tensor<float, R, C>;

// got (a static gradient) against the dynamic parameter's (none: the op passes no gradient).
void same_grad(const X& got, const T& p) {
  if (!p.grad) {
    for (index_t i = 0; i < X::size; ++i) REQUIRE(got[i] == 0);
    return;
  }
  same(got, *p.grad, "gradient");
}

// f (static) and d (dynamic) on the same operands: values, lower(f), and the gradients of
// sum(r * f) for random r with respect to every operand.
template <class F, class D, class... A>
void agree(F f, D d, std::mt19937& rng, A&... a) {
  auto e = f(a...);
  using V = typename decltype(e)::value_type;
  auto value = fx::eval(e.template cast<float>());
  std::array<T, sizeof...(A)> p{dyn(a, true)...};
  T dv = std::apply(d, p);
  same(value, dv.cast(metagrad::dtypes::float32), "value");
  same(value, metagrad::lower(e, "CPU").cast(metagrad::dtypes::float32), "lowered value");
  if constexpr (std::is_floating_point_v<V>) {
    auto r = random_tensor<V, R, C>(rng);
    auto g = fx::eval(fx::grad((e * r).sum(), a...));
    (dv * dyn(r)).sum().backward();
    [&]<std::size_t... K>(std::index_sequence<K...>) { (same_grad(std::get<K>(g), p[K]), ...); }
    (std::index_sequence_for<A...>{});
  }
}

struct Case {
  const char* name;
  std::function<void(std::mt19937&)> run;
};

// One expression, spelled alike for both paths (S static, D dynamic), on x (and y) in [lo, hi).
#define UNARY2(name, S, D, lo, hi)                                                  \
  Case {                                                                            \
    name, [](std::mt19937& rng) {                                                   \
      auto x = random_tensor<float, R, C>(rng, lo, hi);                             \
      agree([](const auto& x) { return S; }, [](const T& x) { return D; }, rng, x); \
    }                                                                               \
  }
#define UNARY(name, E, lo, hi) UNARY2(name, E, E, lo, hi)
// y equals x at every third element: ties for maximum, minimum and the comparisons.
#define BINARY2(name, S, D, lo, hi)                                                                        \
  Case {                                                                                                   \
    name, [](std::mt19937& rng) {                                                                          \
      auto x = random_tensor<float, R, C>(rng, lo, hi), y = random_tensor<float, R, C>(rng, lo, hi);       \
      for (index_t i = 0; i < X::size; i += 3) y[i] = x[i];                                                \
      agree([](const auto& x, const auto& y) { return S; }, [](const T& x, const T& y) { return D; }, rng, \
            x, y);                                                                                         \
    }                                                                                                      \
  }
#define BINARY(name, E, lo, hi) BINARY2(name, E, E, lo, hi)

std::vector<Case> cases() {
  return {
      UNARY("neg", -x, -4, 4),
      UNARY("exp", x.exp(), -4, 4),
      UNARY("log", x.log(), 0.3, 4),
      UNARY("sin", x.sin(), -4, 4),
      UNARY("cos", x.cos(), -4, 4),
      UNARY("sqrt", x.sqrt(), 0.3, 4),
      UNARY("relu", x.relu(), -4, 4),
      UNARY("sigmoid", x.sigmoid(), -6, 6),
      UNARY("erf", x.erf(), -4, 4),
      UNARY("tanh", x.tanh(), -4, 4),
      UNARY("gelu", x.gelu(), -4, 4),
      UNARY("asin", x.asin(), -0.95, 0.95),
      UNARY("acos", x.acos(), -0.95, 0.95),
      UNARY("atan", x.atan(), -6, 6),
      UNARY("square", x.square(), -4, 4),
      UNARY("abs", x.abs(), -4, 4),
      UNARY("reciprocal", x.reciprocal(), 0.3, 4),
      UNARY("log2", x.log2(), 0.3, 4),
      UNARY("exp2", x.exp2(), -4, 4),
      UNARY("tan", x.tan(), -1.2, 1.2),
      UNARY("rsqrt", x.rsqrt(), 0.3, 4),
      UNARY("sign", x.sign(), -4, 4),
      UNARY("clip", x.clip(-1.5, 2), -4, 4),
      UNARY("hardtanh", x.hardtanh(), -3, 3),
      UNARY("relu6", x.relu6(), -8, 8),
      UNARY("elu", x.elu(0.5), -4, 4),
      UNARY("leakyrelu", x.leakyrelu(0.2), -4, 4),
      UNARY("swish", x.swish(), -4, 4),
      UNARY("silu", x.silu(), -4, 4),
      UNARY("hardswish", x.hardswish(), -5, 5),
      UNARY("quick_gelu", x.quick_gelu(), -4, 4),
      UNARY("softplus", x.softplus(2), -4, 4),
      UNARY("mish", x.mish(), -4, 4),
      UNARY("softsign", x.softsign(), -4, 4),
      UNARY("floor", x.floor(), -5, 5),
      UNARY("ceil", x.ceil(), -5, 5),
      UNARY("celu", x.celu(0.7), -4, 4),
      UNARY2("cast", (x.template cast<double>() * 3).template cast<float>(),
             (x.cast(metagrad::dtypes::float64) * 3).cast(metagrad::dtypes::float32), -4, 4),
      BINARY("add", x + y, -4, 4),
      BINARY("sub", x - y, -4, 4),
      BINARY("mul", x * y, -4, 4),
      BINARY("div", x / y, 0.5, 4),
      BINARY2("pow", fx::pow(x, y), x.pow(y), 0.5, 2),
      BINARY("maximum", x.maximum(y), -4, 4),
      BINARY("minimum", x.minimum(y), -4, 4),
      BINARY("lt", x < y, -4, 4),
      BINARY("le", x <= y, -4, 4),
      BINARY("gt", x > y, -4, 4),
      BINARY("ge", x >= y, -4, 4),
      BINARY2("eq", x == y, x.eq(y), -4, 4),
      BINARY2("ne", x != y, x.ne(y), -4, 4),
      BINARY2("where", fx::where(x < y, x * 2, y), (x < y).where(x * 2, y), -4, 4),
  };
}
#undef UNARY
#undef UNARY2
#undef BINARY
#undef BINARY2

std::set<std::string> case_names() {
  std::set<std::string> names;
  for (const Case& c : cases()) names.insert(c.name);
  return names;
}

}  // namespace

TEST_CASE("every static elementwise op matches the dynamic path in values and gradients", "[fixed]") {
  for (const Case& c : cases()) {
    for (int seed = 0; seed < 2; ++seed) {
      INFO(c.name << ", seed " << seed);
      std::mt19937 rng(900 + seed);
      c.run(rng);
    }
  }
}

namespace {
// Every movement and reduce rule (metagrad/shape_rules.hpp) on both paths, on inputs with ties,
// NaN and infinities and incoming gradients with infinities and NaN. Inputs and gradients are small
// dyadic numbers, so every sum is exact in any order: values and gradients must then be equal
// (both NaN counts as equal; 0 and -0 too).
template <class Tn>
Tn special_values(std::mt19937& rng, std::initializer_list<float> finite, std::initializer_list<float> rare) {
  std::uniform_int_distribution<std::size_t> f(0, finite.size() - 1), s(0, rare.size() - 1), one_in(0, 7);
  Tn t;
  for (float& v : t) v = one_in(rng) ? finite.begin()[f(rng)] : rare.begin()[s(rng)];
  return t;
}
template <class Tn>
void equal(const Tn& got, const T& want, const char* what) {
  std::vector<float> w = want.to_vector<float>();
  REQUIRE(w.size() == static_cast<std::size_t>(Tn::size));
  for (index_t i = 0; i < Tn::size; ++i) {
    float a = got[i], b = w[std::size_t(i)];
    INFO(what << ", flat index " << i << ": static " << a << ", dynamic " << b);
    REQUIRE((a == b || (std::isnan(a) && std::isnan(b))));
  }
}
template <class S, class D>
void rule_agrees(S s, D d, std::mt19937& rng) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto x = special_values<X>(rng, {-2, -1, 0.5, 1, 3}, {inf, -inf, nan});
  for (index_t c = 0; c < C; ++c) x[2 * C + c] = -inf;  // a row whose max is -inf, reached by all
  auto e = s(x);
  auto r = special_values<fx::TensorOf<decltype(e)>>(rng, {-2, -1, -0.5, 0.25, 1, 3}, {inf, -inf, nan});
  T p = dyn(x, true), out = d(p);
  equal(fx::eval(e), out, "value");
  auto g = fx::eval(fx::grad((e * r).sum(), x));
  (out * dyn(r)).sum().backward();
  REQUIRE(p.grad);
  equal(std::get<0>(g), *p.grad, "gradient");
}
#define RULE(name, S, D)                                                               \
  Case {                                                                               \
    name, [](std::mt19937& rng) {                                                      \
      rule_agrees([](const auto& x) { return S; }, [](const T& x) { return D; }, rng); \
    }                                                                                  \
  }
std::vector<Case> rule_cases() {
  return {
      RULE("reshape", (x.template reshape<C, R>()), x.reshape({C, R})),
      RULE("permute", (x.template reshape<2, 2, C>().template permute<2, 0, 1>()),
           x.reshape({2, 2, C}).permute({2, 0, 1})),
      RULE("transpose", x.transpose(), x.transpose()),
      RULE("expand", (x.template reshape<R, 1, C>().template expand<R, 3, C>()),
           x.reshape({R, 1, C}).expand({R, 3, C})),
      RULE("pad", (x.template pad<1, 2, 0, 3>()), x.pad({{1, 2}, {0, 3}})),
      RULE("shrink", (x.template shrink<1, 3, 2, 9>()), x.shrink({{1, 3}, {2, 9}})),
      RULE("flip", x.template flip<1>(), x.flip(1)),
      RULE("flip both", (x.template flip<0, 1>()), x.flip({0, 1})),
      RULE("sum rows", x.template sum<1>(), x.sum(1)),
      RULE("sum columns", x.template sum<0>(fx::keepdim), x.sum(0, true)),
      RULE("sum all", (x.template sum<0, 1>()), x.sum({0, 1})),
      RULE("max rows", x.template max<1>(), x.max(1)),
      RULE("max columns", x.template max<0>(fx::keepdim), x.max(0, true)),
      RULE("max all", (x.template max<0, 1>()), x.max({0, 1})),
  };
}
#undef RULE
}  // namespace

TEST_CASE("every movement and reduce rule agrees on both paths on ties, NaN and infinities",
          "[fixed][rules]") {
  for (const Case& c : rule_cases())
    for (int seed = 0; seed < 3; ++seed) {
      INFO(c.name << ", seed " << seed);
      std::mt19937 rng(700 + seed);
      c.run(rng);
    }
}

TEST_CASE("the elementwise table lists every Fn and every elementwise method", "[fixed]") {
  std::set<std::string> names = case_names();
  boost::mp11::mp_for_each<boost::mp11::mp_iota_c<metagrad::fn::kFnCount>>([&](auto i) {
    const char* name = fx::FnTraits<fx::Fn(decltype(i)::value)>::name;
    INFO("Fn " << name);
    CHECK(names.count(name));
  });
  // ExprBase's elementwise methods: its declarations from the first one to reshape's.
  std::ifstream in(METAGRAD_SOURCE_DIR "/include/metagrad/fixed/expr.hpp");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  std::size_t from = s.find("struct ExprBase {"), to = s.find("auto reshape() const;", from);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  std::string block = s.substr(from, to - from);
  std::regex method(R"(auto (\w+)\()");
  int count = 0;
  for (auto it = std::sregex_iterator(block.begin(), block.end(), method); it != std::sregex_iterator();
       ++it) {
    INFO("ExprBase::" << (*it)[1]);
    CHECK(names.count((*it)[1]));
    ++count;
  }
  REQUIRE(count > 30);
}

TEST_CASE("static and dynamic hlops reject the same arguments with the same message", "[fixed]") {
  X x{};
  T d = dyn(x);
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) { return e.what(); }
    return "no exception";
  };
  std::string s = message([&] { (void)x.softplus(0); }), dm = message([&] { (void)d.softplus(0); });
  CHECK(s == dm);
  CHECK(s.find("softplus: beta must not be 0") != std::string::npos);
  s = message([&] { (void)x.celu(0); }), dm = message([&] { (void)d.celu(0); });
  CHECK(s == dm);
  CHECK(s.find("celu: alpha must not be 0") != std::string::npos);
}

TEST_CASE("static bitcast reads each element's bits as the dynamic one does", "[fixed]") {
  std::vector<float> v{1.0f,     -0.0f,
                       -2.0f,    std::numeric_limits<float>::infinity(),
                       3.5e-42f, -std::numeric_limits<float>::quiet_NaN()};
  fx::Tensor<float, 2, 3> f = fx::Tensor<float, 2, 3>::from(v.data());
  auto u = fx::bitcast<std::uint32_t>(f);
  STATIC_REQUIRE(std::is_same_v<decltype(u), fx::Tensor<std::uint32_t, 2, 3>>);
  T dyn = T(v, {2, 3}, {.dtype = metagrad::dtypes::float32}).bitcast(metagrad::dtypes::uint32);
  CHECK(std::vector<std::uint32_t>(u.begin(), u.end()) == dyn.to_vector<std::uint32_t>());
  auto back = fx::bitcast<float>(u);
  CHECK(std::memcmp(back.data(), f.data(), sizeof(float) * 6) == 0);
  // an expression is evaluated first
  auto twice = fx::bitcast<std::int32_t>(f.shrink<0, 1, 0, 3>() * 2.0f);
  CHECK(std::vector<std::int32_t>(twice.begin(), twice.end()) ==
        std::vector<std::int32_t>{0x40000000, std::int32_t(0x80000000u), std::int32_t(0xc0800000u)});
  fx::Tensor<std::int16_t, 4> s{-1, 0, 32767, -32768};
  auto h = fx::bitcast<std::uint16_t>(s);
  CHECK(std::vector<std::uint16_t>(h.begin(), h.end()) == std::vector<std::uint16_t>{65535, 0, 32767, 32768});
  fx::Tensor<double, 2> d{1.0, -2.5};
  auto l = fx::bitcast<std::int64_t>(d);
  CHECK(std::vector<std::int64_t>(l.begin(), l.end()) ==
        T(std::vector<double>{1.0, -2.5}, {2}, {.dtype = metagrad::dtypes::float64})
            .bitcast(metagrad::dtypes::int64)
            .to_vector<std::int64_t>());
}

TEST_CASE("static where is a select: the branch not taken never reaches value or gradient", "[fixed]") {
  std::mt19937 rng(77);
  auto x = random_tensor<float, R, C>(rng, -4, 4);
  for (index_t i = 0; i < X::size; i += 5) x[i] = 0;
  // log(x) is NaN below 0 and -inf at 0, 1 / x inf at 0: both only where not taken
  auto e = fx::where(x > 0, x.log(), 1 / x) + fx::where(x <= 0, x * 0, x.log());
  auto v = fx::eval(fx::where(x != 0, e, 0));
  // the gradient too (away from 0, where log's rule divides the zero it is given by 0)
  auto y = random_tensor<float, R, C>(rng, -4, 4);
  auto [g] = fx::eval(fx::grad(fx::where(y > 0, y.log(), y).sum(), y));
  for (index_t i = 0; i < X::size; ++i) {
    INFO("x = " << x[i] << ", y = " << y[i]);
    double want = x[i] > 0 ? 2 * std::log(double(x[i])) : x[i] < 0 ? 1 / double(x[i]) : 0;
    REQUIRE(close(v[i], want, 1e-5, 1e-5));
    REQUIRE(close(g[i], y[i] > 0 ? 1 / double(y[i]) : 1, 1e-5, 1e-6));
  }
}

// eval.hpp's vector loops: the contiguous 1-D loop and, for loops of higher rank, each row when every
// leaf reads along it at stride 1 or 0 (a bias down the rows, a column broadcast along them). Both
// agree with the scalar form lane by lane, tails included, in every rank.
TEST_CASE("static vector loops over rows with broadcast operands agree with the scalar form", "[fixed]") {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-6.f, 6.f);
  auto fill = [&](auto& t) {
    for (float& v : t) v = u(rng);
  };
  auto check = [](const auto& got, const auto& want_at, const char* what) {
    for (index_t i = 0; i < std::remove_cvref_t<decltype(got)>::size; ++i) {
      float want = want_at(i);
      INFO(what << " at " << i << ": " << got[i] << " vs " << want);
      REQUIRE(std::abs(got[i] - want) <= 1e-6f * std::max(1.f, std::abs(want)));
    }
  };
  fx::Tensor<float, 7, 37> x;
  fx::Tensor<float, 37> bias;
  fx::Tensor<float, 7, 1> col;
  fill(x), fill(bias), fill(col);
  auto f = [](float v) { return std::exp2(v) / (1 + std::exp2(-v)) + std::exp(v * 0.5f); };
  fx::Tensor<float, 7, 37> rows =
      (x + bias).exp2() / (1.f + (-(x + bias)).exp2()) + ((x + bias) * 0.5f).exp();
  check(
      rows, [&](index_t i) { return f(x[i] + bias[i % 37]); }, "rows with a bias");
  fx::Tensor<float, 7, 37> cols = (x * col).sigmoid() + (col - x).exp2();
  check(
      cols,
      [&](index_t i) {
        float a = x[i] * col[i / 37], b = col[i / 37] - x[i];
        return 1 / (1 + std::exp(-a)) + std::exp2(b);
      },
      "a column broadcast along the rows");
  fx::Tensor<float, 3, 5, 40> x3;
  fx::Tensor<float, 40> b3;
  fill(x3), fill(b3);
  fx::Tensor<float, 3, 5, 40> r3 = (x3 + b3).exp2();
  check(
      r3, [&](index_t i) { return std::exp2(x3[i] + b3[i % 40]); }, "rank 3");
  // Selects on bool tensors read along the row (a causal mask's rows; a mask per row broadcast).
  fx::Tensor<bool, 7, 37> mask;
  fx::Tensor<bool, 7, 1> row_mask;
  for (index_t i = 0; i < mask.size; ++i) mask[i] = rng() % 2;
  for (index_t i = 0; i < row_mask.size; ++i) row_mask[i] = rng() % 2;
  fx::Tensor<float, 7, 37> sel =
      fx::where(mask, (x + bias).exp(), -(x * 0.25f).exp2()) + fx::where(row_mask, x.sigmoid(), 1.f);
  check(
      sel,
      [&](index_t i) {
        float a = mask[i] ? std::exp(x[i] + bias[i % 37]) : -std::exp2(x[i] * 0.25f);
        return a + (row_mask[i / 37] ? 1 / (1 + std::exp(-x[i])) : 1.f);
      },
      "selects on bool masks");
  // 2^n exactly at every integer n whose power a float holds, NaN and infinities as std::exp2.
  fx::Tensor<float, 300> n;
  for (index_t i = 0; i < 300; ++i) n[i] = static_cast<float>(i - 160);
  n[0] = std::numeric_limits<float>::quiet_NaN(), n[1] = std::numeric_limits<float>::infinity();
  n[2] = -std::numeric_limits<float>::infinity();
  fx::Tensor<float, 300> p = n.exp2();
  for (index_t i = 0; i < 300; ++i) {
    INFO("exp2(" << n[i] << ") = " << p[i]);
    if (std::isnan(n[i]))
      REQUIRE(std::isnan(p[i]));
    else
      REQUIRE(p[i] == std::exp2(n[i]));
  }
}

// reduce.hpp's row reductions per vector (every leaf read along the row, every function with a vector
// form): each lane takes the same terms in the same order as the scalar form, so a sum of exact terms
// is bitwise the scalar form's (rows up to 64 pairwise by powers of two, longer ones in lanes of 64 and
// levels of 16 blocks), a max is exact and keeps NaN, and a sum of exps is within rounding of a double sum.
// Rows of every length class: below a vector, a vector's tail, exactly 64, lanes with a tail, past the first
// level.
namespace {
// The scalar form's order for a row of n <= 64: its largest power-of-two part pairwise, then the rest
// the same way.
float pairwise_sum(const float* v, index_t n) {
  index_t p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  std::vector<float> acc(v, v + p2);
  for (index_t w = p2 / 2; w > 0; w /= 2)
    for (index_t l = 0; l < w; ++l) acc[l] += acc[l + w];
  return p2 == n ? acc[0] : acc[0] + pairwise_sum(v + p2, n - p2);
}
// ... and for longer rows: 64 lanes, each summing 16 blocks at a time into levels, then pairwise.
float lane_sum(const float* v, index_t n) {
  constexpr index_t lanes = 64, fan = 16;
  std::vector<std::vector<float>> level(1, std::vector<float>(lanes, 0.f));
  std::vector<int> count(1, 0);
  auto push = [&](const std::vector<float>& block) {
    for (index_t l = 0; l < lanes; ++l) level[0][l] += block[l];
    for (std::size_t k = 0; ++count[k] == fan; ++k) {
      if (k + 1 == level.size())
        level.push_back(level[k]), count.push_back(0);
      else
        for (index_t l = 0; l < lanes; ++l) level[k + 1][l] += level[k][l];
      std::fill(level[k].begin(), level[k].end(), 0.f);
      count[k] = 0;
    }
  };
  index_t j = 0;
  std::vector<float> acc(lanes);
  for (; j + lanes * fan <= n; j += lanes * fan) {
    std::fill(acc.begin(), acc.end(), 0.f);
    for (index_t t = j; t < j + lanes * fan; t += lanes)
      for (index_t l = 0; l < lanes; ++l) acc[l] += v[t + l];
    push(acc);
  }
  std::fill(acc.begin(), acc.end(), 0.f);
  for (; j + lanes <= n; j += lanes)
    for (index_t l = 0; l < lanes; ++l) acc[l] += v[j + l];
  for (index_t l = 0; j + l < n; ++l) acc[l] += v[j + l];
  push(acc);
  std::vector<float> out = level[0];
  for (std::size_t k = 1; k < level.size(); ++k)
    for (index_t l = 0; l < lanes; ++l) out[l] += level[k][l];
  for (index_t w = lanes / 2; w > 0; w /= 2)
    for (index_t l = 0; l < w; ++l) out[l] += out[l + w];
  return out[0];
}

template <index_t Rows, index_t N>
void check_row_reductions(std::mt19937& rng) {
  INFO("rows of " << N);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  fx::Tensor<float, Rows, N> x, y;
  fx::Tensor<float, N> bias;
  fx::Tensor<bool, Rows, N> mask;
  for (float& v : x) v = u(rng);
  for (float& v : y) v = u(rng);
  for (float& v : bias) v = u(rng);
  for (index_t i = 0; i < mask.size; ++i) mask[i] = rng() % 4 != 0;
  // exact terms (a product of floats is the same in a vector): the scalar form's sum, bitwise
  fx::Tensor<float, Rows> s = (x * y).template sum<1>();
  // a max over a select with a broadcast bias: exact
  fx::Tensor<float, Rows> m = fx::where(mask, x + bias, -INFINITY).template max<1>();
  // a sum of exps (the vector exp): close to a double sum
  fx::Tensor<float, Rows> e = (x * 0.5f).exp().template sum<1>();
  std::vector<float> terms(N);
  for (index_t r = 0; r < Rows; ++r) {
    double want_e = 0;
    float want_m = -INFINITY;
    for (index_t j = 0; j < N; ++j) {
      index_t i = r * N + j;
      terms[j] = x[i] * y[i];
      want_e += std::exp(double(x[i]) * 0.5);
      if (mask[i]) want_m = std::max(want_m, x[i] + bias[j]);
    }
    INFO("row " << r);
    REQUIRE(s[r] == (N <= 64 ? pairwise_sum(terms.data(), N) : lane_sum(terms.data(), N)));
    REQUIRE(m[r] == want_m);
    REQUIRE(std::abs(e[r] - want_e) <= 4e-6 * want_e);
  }
  // NaN wins a max, wherever it is in the row
  x[(Rows - 1) * N + N / 2] = std::numeric_limits<float>::quiet_NaN();
  fx::Tensor<float, Rows> mn = (x + bias).template max<1>();
  REQUIRE(std::isnan(mn[Rows - 1]));
}
}  // namespace

TEST_CASE("static row reductions per vector agree with the scalar form, tails included", "[fixed]") {
  std::mt19937 rng(35);
  check_row_reductions<3, 5>(rng);
  check_row_reductions<3, 16>(rng);
  check_row_reductions<4, 23>(rng);
  check_row_reductions<5, 32>(rng);
  check_row_reductions<3, 48>(rng);
  check_row_reductions<64, 64>(rng);  // a softmax's rows (big enough for the arena's path)
  check_row_reductions<3, 100>(rng);
  check_row_reductions<300, 128>(rng);  // a layernorm's rows, split over threads
  check_row_reductions<2, 1100>(rng);   // past one level of 16 blocks of 64
  check_row_reductions<2, 2500>(rng);
}

// matmul.hpp's batched products: one GEMM of batch x m rows where A's rows run on across the batch
// and B is shared (rank 2, or its batch axes expanded), else one per batch index; every case against
// a double sum, tails included (rows not a multiple of the tile's).
TEST_CASE("static batched products, folded into one GEMM or not, agree with a double reference", "[fixed]") {
  std::mt19937 rng(36);
  constexpr index_t Bt = 3, M = 37, K = 29, N = 45;
  auto a = random_tensor<float, Bt, M, K>(rng);
  auto b = random_tensor<float, K, N>(rng);
  auto b3 = random_tensor<float, Bt, K, N>(rng);
  auto at = random_tensor<float, Bt, K, M>(rng);
  auto check = [&](const auto& got, auto a_at, auto b_at, const char* what) {
    for (index_t i = 0; i < Bt * M * N; ++i) {
      index_t bi = i / (M * N), r = i / N % M, c = i % N;
      double want = 0;
      for (index_t p = 0; p < K; ++p) want += double(a_at(bi, r, p)) * b_at(bi, p, c);
      INFO(what << " at " << i);
      REQUIRE(std::abs(got[i] - want) <= 1e-5 * (1 + std::abs(want)));
    }
  };
  auto A = [&](index_t bi, index_t r, index_t p) { return a[(bi * M + r) * K + p]; };
  auto At = [&](index_t bi, index_t r, index_t p) { return at[(bi * K + p) * M + r]; };
  auto Bs = [&](index_t, index_t p, index_t c) { return b[p * N + c]; };
  auto B3 = [&](index_t bi, index_t p, index_t c) { return b3[(bi * K + p) * N + c]; };
  fx::Tensor<float, Bt, M, N> c1 = fx::matmul(a, b);  // folded: B rank 2
  check(c1, A, Bs, "B of rank 2");
  fx::Tensor<float, Bt, M, N> c2 = fx::matmul(a, b.reshape<1, K, N>().expand<Bt, K, N>());  // folded
  check(c2, A, Bs, "B expanded over the batch");
  fx::Tensor<float, Bt, M, N> c3 = fx::matmul(a, b3);  // one product per batch index
  check(c3, A, B3, "B per batch index");
  fx::Tensor<float, Bt, M, N> c4 = fx::matmul(at.transpose(), b);  // A's rows not contiguous: not folded
  check(c4, At, Bs, "A transposed");
  fx::Tensor<float, Bt, M, N> c5 = fx::matmul(a * 2.f, b.transpose().transpose());  // A evaluated first
  check(
      c5, [&](index_t bi, index_t r, index_t p) { return 2 * A(bi, r, p); }, Bs, "A evaluated");
}

// The vector sqrt (AdamW's update) is the correctly rounded one: the same as std::sqrt, bitwise.
TEST_CASE("static vector sqrt equals std::sqrt bitwise", "[fixed]") {
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> u(0.f, 100.f);
  fx::Tensor<float, 1000> x;
  for (float& v : x) v = u(rng);
  x[0] = 0, x[1] = -1, x[2] = INFINITY, x[3] = 1e-40f;
  fx::Tensor<float, 1000> y = (x * 1.5f).sqrt() + 1.f;
  for (index_t i = 0; i < 1000; ++i) {
    float want = std::sqrt(x[i] * 1.5f) + 1.f;
    INFO(x[i]);
    if (std::isnan(want))
      REQUIRE(std::isnan(y[i]));
    else
      REQUIRE(y[i] == want);
  }
}

// Small products and sums in whole vectors (matmul.hpp's vector_product: C, A and B each one
// register; reduce.hpp's reduce_vector: a row's lanes paired by halves of the register): bitwise the
// scalar forms' results (the multiply-adds in p order, fused where the ISA has FMA; the pairwise
// tree), operands read in place, evaluated, transposed (the scalar loop) and batched.
namespace {
template <class T>
T fused(T a, T b, T c) {
#if defined(__FMA__) || defined(__AVX512F__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}
template <class T, index_t M, index_t K, index_t N, class A, class B>
void check_small_product(const fx::Tensor<T, M, N>& got, A a_at, B b_at) {
  for (index_t i = 0; i < M; ++i)
    for (index_t j = 0; j < N; ++j) {
      T want = a_at(i, 0) * b_at(0, j);
      for (index_t p = 1; p < K; ++p) want = fused(a_at(i, p), b_at(p, j), want);
      INFO(M << "x" << K << " @ " << K << "x" << N << " at " << i << "," << j);
      REQUIRE(got[i * N + j] == want);
    }
}
template <class T, index_t M, index_t K, index_t N>
void small_products(std::mt19937& rng) {
  auto a = random_tensor<T, M, K>(rng);
  auto b = random_tensor<T, K, N>(rng);
  auto bt = random_tensor<T, N, K>(rng);
  auto A = [&](index_t i, index_t p) { return a[i * K + p]; };
  auto Bm = [&](index_t p, index_t j) { return b[p * N + j]; };
  fx::Tensor<T, M, N> c = fx::matmul(a, b);
  check_small_product<T, M, K, N>(c, A, Bm);
  fx::Tensor<T, M, N> c2 = fx::matmul(a * T(2), b);  // A evaluated into a local array
  check_small_product<T, M, K, N>(
      c2, [&](index_t i, index_t p) { return T(2) * a[i * K + p]; }, Bm);
  fx::Tensor<T, M, N> c3 = fx::matmul(a, bt.transpose());  // B read across its rows: the scalar loop
  check_small_product<T, M, K, N>(c3, A, [&](index_t p, index_t j) { return bt[j * K + p]; });
  auto a3 = random_tensor<T, 3, M, K>(rng);
  fx::Tensor<T, 3, M, N> c4 = fx::matmul(a3, b);  // batched, B shared
  for (index_t bi = 0; bi < 3; ++bi) {
    fx::Tensor<T, M, N> slice;
    for (index_t i = 0; i < M * N; ++i) slice[i] = c4[bi * M * N + i];
    check_small_product<T, M, K, N>(
        slice, [&](index_t i, index_t p) { return a3[(bi * M + i) * K + p]; }, Bm);
  }
}
template <index_t R, index_t C>
void small_sums(std::mt19937& rng) {
  auto x = random_tensor<float, R, C>(rng);
  fx::Tensor<float> s = x.sum();
  fx::Tensor<float> m = x.max();
  fx::Tensor<float, R> rows = x.template sum<1>();
  INFO(R << "x" << C);
  REQUIRE(s[0] == pairwise_sum(x.data(), R * C));
  REQUIRE(m[0] == *std::max_element(x.begin(), x.end()));
  for (index_t r = 0; r < R; ++r) REQUIRE(rows[r] == pairwise_sum(x.data() + r * C, C));
}
}  // namespace

TEST_CASE("static small products and sums in whole vectors equal the scalar forms bitwise", "[fixed]") {
  std::mt19937 rng(38);
  small_products<float, 2, 2, 2>(rng);
  small_products<float, 2, 4, 2>(rng);
  small_products<float, 2, 2, 4>(rng);
  small_products<float, 4, 4, 4>(rng);
  small_products<float, 4, 2, 4>(rng);
  small_products<float, 2, 8, 8>(rng);
  small_products<float, 3, 3, 3>(rng);
  small_products<float, 8, 8, 8>(rng);
  small_products<double, 2, 2, 2>(rng);
  small_products<double, 4, 4, 4>(rng);
  small_sums<2, 2>(rng);
  small_sums<3, 3>(rng);
  small_sums<4, 4>(rng);
  small_sums<4, 8>(rng);
  small_sums<8, 8>(rng);
  small_sums<2, 32>(rng);
}

// Every product of sizes 1 to 8 (those past a power of two: one padded vector, or B's rows as padded
// vectors, matmul.hpp's product_lanes), square and not, bitwise the scalar forms'.
TEST_CASE("static small products of sizes 1 to 8 equal the scalar forms bitwise", "[fixed]") {
  std::mt19937 rng(39);
  [&]<index_t... I>(std::integer_sequence<index_t, I...>) {
    (small_products<float, I + 1, I + 1, I + 1>(rng), ...);
  }
  (std::make_integer_sequence<index_t, 8>{});
  small_products<float, 2, 3, 4>(rng);
  small_products<float, 3, 2, 5>(rng);
  small_products<float, 3, 5, 3>(rng);
  small_products<float, 4, 3, 2>(rng);
  small_products<float, 5, 3, 7>(rng);
  small_products<float, 7, 2, 5>(rng);
  small_products<float, 6, 4, 3>(rng);
  small_products<float, 1, 3, 5>(rng);
  small_products<float, 5, 4, 1>(rng);
  small_products<float, 3, 7, 6>(rng);
  small_products<float, 8, 3, 5>(rng);
  small_products<double, 3, 3, 3>(rng);
  small_products<double, 2, 3, 4>(rng);
  small_products<double, 5, 5, 5>(rng);
  small_products<double, 7, 7, 7>(rng);
  small_sums<2, 3>(rng);
  small_sums<3, 5>(rng);
  small_sums<5, 5>(rng);
  small_sums<6, 6>(rng);
  small_sums<7, 7>(rng);
  small_sums<7, 3>(rng);
  small_sums<1, 12>(rng);
}

// Small elementwise loops written out as vectors of the widths their length needs (eval.hpp's
// vector_loop): every element, in place where the destination is read at its own position, and
// through a local array where it is read transposed.
namespace {
template <index_t R, index_t C>
void small_elementwise(std::mt19937& rng) {
  auto a = random_tensor<float, R, C>(rng), b = random_tensor<float, R, C>(rng);
  auto c = random_tensor<float, R, C>(rng);
  fx::Tensor<float, R, C> sum = a + b, chain = ((a - b) * 0.5f + c).relu(), in_place = a;
  in_place = in_place * 2.f - b;
  fx::Tensor<float, R, C> bias = a + c.template sum<0>().template reshape<1, C>().template expand<R, C>();
  INFO(R << "x" << C);
  for (index_t i = 0; i < R * C; ++i) {
    REQUIRE(sum[i] == a[i] + b[i]);
    float d = (a[i] - b[i]) * 0.5f + c[i];
    REQUIRE(std::abs(chain[i] - (d > 0 ? d : 0.f)) <= 1e-6f * (1 + std::abs(d)));  // fused or not
    REQUIRE(in_place[i] == a[i] * 2.f - b[i]);
    float col = 0;
    for (index_t r = 0; r < R; ++r) col += c[r * C + i % C];
    REQUIRE(std::abs(bias[i] - (a[i] + col)) <= 1e-5f * (1 + std::abs(a[i] + col)));
  }
  if constexpr (R == C) {
    fx::Tensor<float, R, C> t = a;
    t = t.transpose() + b;
    for (index_t i = 0; i < R; ++i)
      for (index_t j = 0; j < C; ++j) REQUIRE(t[i * C + j] == a[j * C + i] + b[i * C + j]);
  }
}
}  // namespace

TEST_CASE("static small elementwise loops of sizes 1 to 8 write every element", "[fixed]") {
  std::mt19937 rng(40);
  [&]<index_t... I>(std::integer_sequence<index_t, I...>) { (small_elementwise<I + 1, I + 1>(rng), ...); }
  (std::make_integer_sequence<index_t, 8>{});
  small_elementwise<1, 3>(rng);
  small_elementwise<3, 7>(rng);
  small_elementwise<5, 2>(rng);
  small_elementwise<8, 17>(rng);
  small_elementwise<16, 16>(rng);
}
