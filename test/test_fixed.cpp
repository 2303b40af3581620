// The static-shape path: fixed::Tensor, expression types and inline evaluation, checked against
// explicit loops over random data and against the dynamic Tensor on the CPU device (the reference).
// Tolerance: float results agree to 1e-5 relative (plus 1e-6 absolute; matmul: 1.6e-5 sqrt(k)) with
// loops computed in double; the static path computes in float, sums in 64 independent lanes, and its float
// exp is a polynomial (~1 ulp), so only rounding differs.
#include <cstdint>
#include <memory>

#include "alloc_count.hpp"
#include "fixed_check.hpp"

using namespace metagrad::test;

// ---- compile time: shapes, views and iteration shapes are constant expressions ----
namespace {
using A23 = fx::Tensor<float, 2, 3>;
using B3 = fx::Tensor<float, 3>;
static_assert(A23::size == 6 && A23::rank == 2);
static_assert(std::is_same_v<decltype(std::declval<A23>() + std::declval<B3>())::shape, fx::Shape<2, 3>>);
static_assert(std::is_same_v<decltype(std::declval<A23>().permute<1, 0>())::shape, fx::Shape<3, 2>>);
static_assert(std::is_same_v<decltype(std::declval<A23>().sum<1>())::shape, fx::Shape<2>>);
static_assert(std::is_same_v<decltype(std::declval<A23>().sum<-1>(fx::keepdim))::shape, fx::Shape<2, 1>>);
static_assert(std::is_same_v<decltype(std::declval<A23>().sum())::shape, fx::Shape<>>);
static_assert(std::is_same_v<decltype(std::declval<A23>().pad<1, 0, 2, 2>())::shape, fx::Shape<3, 7>>);
static_assert(std::is_same_v<decltype(std::declval<A23>().shrink<0, 1, 1, 3>())::shape, fx::Shape<1, 2>>);
static_assert(std::is_same_v<decltype(std::declval<A23>() < 1.0f)::value_type, bool>);
// Broadcasting a (3) against (2, 3) is RESHAPE (1, 3) then EXPAND (2, 3), as on the dynamic path.
using Bcast = std::remove_cvref_t<decltype(fx::child<1>(std::declval<A23>() + std::declval<B3>()))>;
static_assert(Bcast::op_type::kind == metagrad::MovementOps::EXPAND);
static_assert(std::remove_cvref_t<decltype(fx::child<0>(std::declval<Bcast>()))>::op_type::kind ==
              metagrad::MovementOps::RESHAPE);
// A permute's View: strides swapped, computed by the shared View code.
using P = decltype(std::declval<A23>().permute<1, 0>());
static_assert(P::op_type::view<fx::Shape<2, 3>> == metagrad::View({3, 2}, {1, 3}));
static_assert(fx::op::Move<metagrad::MovementOps::PAD, metagrad::Pairs{{1, 1}}>::view<fx::Shape<4>> ==
              metagrad::View({6}, {1}, -1, {{1, 5}}));
// Iteration shapes: contiguous operands collapse to one axis; a broadcast row keeps two; a
// transposed operand keeps both axes.
namespace d = fx::detail;
template <class E>
constexpr metagrad::Dims iter = d::iteration_shape(E::shape::dims, d::plan<boost::mp11::mp_list<>, E>::views);
using Contig = std::remove_cvref_t<decltype((std::declval<A23>() * 2.f + std::declval<A23>()).expr())>;
static_assert(iter<Contig> == metagrad::Dims{6});
static_assert(iter<decltype(std::declval<A23>() + std::declval<B3>())> == metagrad::Dims{2, 3});
static_assert(iter<decltype(std::declval<fx::Tensor<float, 4, 1, 5>>() * 1.f)> == metagrad::Dims{20});
static_assert(iter<decltype(std::declval<fx::Tensor<float, 3, 2>>().permute<1, 0>() + std::declval<A23>())> ==
              metagrad::Dims{2, 3});
}  // namespace

TEST_CASE("fixed::Tensor has value semantics and aligned storage", "[fixed]") {
  fx::Tensor<float, 3, 4> a;  // in the object: 48 bytes, 16-aligned
  for (float x : a) REQUIRE(x == 0);
  REQUIRE(reinterpret_cast<std::uintptr_t>(a.data()) % 16 == 0);
  auto heap = std::make_unique<fx::Tensor<float, 64, 64>>();  // on the heap, a cache line aligned
  REQUIRE(reinterpret_cast<std::uintptr_t>(heap->data()) % 64 == 0);
  for (index_t i = 0; i < a.size; ++i) a[i] = float(i);
  fx::Tensor<float, 3, 4> b = a;  // deep copy
  REQUIRE(b.data() != a.data());
  b(1, 2) = -1;
  REQUIRE(a(1, 2) == 6);
  REQUIRE(b[6] == -1);
  const float* p = heap->data();
  fx::Tensor<float, 64, 64> c = std::move(*heap);  // cheap: the storage moves
  REQUIRE(c.data() == p);
  fx::Tensor<int32_t, 2> i{7, 8};
  REQUIRE((i(0) == 7 && i(1) == 8));
  REQUIRE_THROWS_AS((fx::Tensor<float, 3>{1, 2}), std::invalid_argument);
  auto f = fx::Tensor<double, 2, 2>::full(2.5);
  for (double x : f) REQUIRE(x == 2.5);
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  auto g = A23::from(v.data());
  REQUIRE((g(1, 0) == 4 && g(0, 2) == 3));
}

TEST_CASE("fixed elementwise ops with broadcasting and scalars match loops", "[fixed]") {
  std::mt19937 rng(1);
  for (int rep = 0; rep < 10; ++rep) {
    auto a = random_tensor<float, 4, 3, 5>(rng);
    auto b = random_tensor<float, 3, 1>(rng);
    auto c = random_tensor<float, 5>(rng, 0.5, 3);
    std::array<index_t, 3> sh{4, 3, 5};
    fx::Tensor<float, 4, 3, 5> r = a * b + c;
    check_all(r, [&](index_t i) {
      auto [x, y, z] = unravel(i, sh);
      return double(a(x, y, z)) * b(y, 0) + c(z);
    });
    r = 2 * a - b / c + 1.5;
    check_all(r, [&](index_t i) {
      auto [x, y, z] = unravel(i, sh);
      return 2.0 * a(x, y, z) - double(b(y, 0)) / c(z) + 1.5;
    });
    r = fx::maximum(a, b) - fx::minimum(c, 1) + fx::pow(c, b);
    check_all(r, [&](index_t i) {
      auto [x, y, z] = unravel(i, sh);
      return std::max<double>(a(x, y, z), b(y, 0)) - std::min<double>(c(z), 1) +
             std::pow<double>(c(z), b(y, 0));
    });
    r = fx::where(a < b, a, -c) + (a >= 0).cast<float>() + (a == a).cast<float>();
    check_all(r, [&](index_t i) {
      auto [x, y, z] = unravel(i, sh);
      return (a(x, y, z) < b(y, 0) ? a(x, y, z) : -c(z)) + (a(x, y, z) >= 0) + 1.0;
    });
  }
}

TEST_CASE("fixed unary ops and hlops match libm", "[fixed]") {
  std::mt19937 rng(2);
  auto a = random_tensor<float, 7, 33>(rng, -6, 6);
  auto pos = random_tensor<float, 7, 33>(rng, 0.01, 20);
  auto check = [&](const auto& expr, auto f, const auto& in, double rel = 1e-5) {
    fx::Tensor<float, 7, 33> r = expr;
    check_all(
        r, [&](index_t i) { return f(double(in[i])); }, rel);
  };
  check(
      a.exp(), [](double x) { return std::exp(x); }, a);
  check(
      pos.log(), [](double x) { return std::log(x); }, pos);
  check(
      pos.sqrt(), [](double x) { return std::sqrt(x); }, pos);
  check(
      a.sin(), [](double x) { return std::sin(x); }, a);
  check(
      a.cos(), [](double x) { return std::cos(x); }, a, 1e-4);
  check(
      a.relu(), [](double x) { return x > 0 ? x : 0; }, a);
  check(
      a.sigmoid(), [](double x) { return 1 / (1 + std::exp(-x)); }, a);
  check(
      a.tanh(), [](double x) { return std::tanh(x); }, a, 1e-4);
  check(
      -a, [](double x) { return -x; }, a);
  check(
      a.abs(), [](double x) { return std::abs(x); }, a);
  check(
      a.square(), [](double x) { return x * x; }, a);
  check(
      pos.reciprocal(), [](double x) { return 1 / x; }, pos);
  check(
      a.gelu(),
      [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }, a,
      1e-4);
  // float exp over its whole range, edges included
  fx::Tensor<float, 8> e{-100.f, -87.f, -20.f, 0.f, 1e-8f, 20.f, 88.f, 100.f};
  fx::Tensor<float, 8> r = e.exp();
  check_all(
      r, [&](index_t i) { return double(std::exp(e[i])); }, 1e-6);
  REQUIRE(std::isnan(fx::Tensor<float, 1>(fx::Tensor<float, 1>{NAN}.exp())[0]));
}

TEST_CASE("fixed elementwise loops over outputs larger than the caches match loops", "[fixed]") {
  // 8 MiB outputs take the streaming-store loop; an odd length leaves a scalar tail.
  constexpr index_t n = (index_t{1} << 21) + 5;
  std::mt19937 rng(15);
  auto a = std::make_unique<fx::Tensor<float, n>>(random_tensor<float, n>(rng));
  auto b = std::make_unique<fx::Tensor<float, n>>(random_tensor<float, n>(rng));
  auto r = std::make_unique<fx::Tensor<float, n>>();
  *r = *a * *b + 1.5f;
  check_all(*r, [&](index_t i) { return double((*a)[i]) * (*b)[i] + 1.5; });
  *r = (-*a).sigmoid() - fx::maximum(*a, *b) / 2;
  check_all(
      *r, [&](index_t i) { return 1 / (1 + std::exp(double((*a)[i]))) - std::max((*a)[i], (*b)[i]) / 2.0; });
}

TEST_CASE("fixed movement ops of leaves and of expressions match loops", "[fixed]") {
  std::mt19937 rng(3);
  auto a = random_tensor<float, 2, 3, 4>(rng);
  auto b = random_tensor<float, 2, 3, 4>(rng);
  std::array<index_t, 3> s234{2, 3, 4};
  fx::Tensor<float, 4, 2, 3> p = a.permute<2, 0, 1>();
  check_all(p, [&](index_t i) {
    auto [x, y, z] = unravel(i, std::array<index_t, 3>{4, 2, 3});
    return a(y, z, x);
  });
  p = (a * b + 1).permute<2, 0, 1>().exp();
  check_all(p, [&](index_t i) {
    auto [x, y, z] = unravel(i, std::array<index_t, 3>{4, 2, 3});
    return std::exp(double(a(y, z, x)) * b(y, z, x) + 1);
  });
  // a reshape after a permute no single View expresses: the permuted operand is materialised
  fx::Tensor<float, 6, 4> rs = (a.permute<1, 0, 2>() * 2).reshape<6, 4>();
  check_all(rs, [&](index_t i) {
    index_t r = i / 4, col = i % 4;  // row r = (y, x) with y in 3, x in 2
    return 2.0 * a(r % 2, r / 2, col);
  });
  fx::Tensor<float, 2, 5, 4> ex = a.shrink<0, 2, 1, 2, 0, 4>().expand<2, 5, 4>() + 0;
  check_all(ex, [&](index_t i) {
    auto [x, y, z] = unravel(i, std::array<index_t, 3>{2, 5, 4});
    (void)y;
    return a(x, 1, z);
  });
  // pad: zeros outside, also under a function with f(0) != 0, which is applied after the pad
  fx::Tensor<float, 4, 3, 7> pd = (a.exp() + 1).pad<1, 1, 0, 0, 2, 1>();
  check_all(pd, [&](index_t i) {
    auto [x, y, z] = unravel(i, std::array<index_t, 3>{4, 3, 7});
    bool in = x >= 1 && x < 3 && z >= 2 && z < 6;
    return in ? std::exp(double(a(x - 1, y, z - 2))) + 1 : 0.0;
  });
  pd = a.pad<1, 1, 0, 0, 2, 1>().exp();
  check_all(pd, [&](index_t i) {
    auto [x, y, z] = unravel(i, std::array<index_t, 3>{4, 3, 7});
    bool in = x >= 1 && x < 3 && z >= 2 && z < 6;
    return std::exp(in ? double(a(x - 1, y, z - 2)) : 0.0);
  });
  fx::Tensor<float, 2, 3, 4> fl = (a - b).flip<0, 2>();
  check_all(fl, [&](index_t i) {
    auto [x, y, z] = unravel(i, s234);
    return double(a(1 - x, y, 3 - z)) - b(1 - x, y, 3 - z);
  });
  fx::Tensor<float, 2, 4, 3> tr = a.transpose();
  check_all(tr, [&](index_t i) {
    auto [x, y, z] = unravel(i, std::array<index_t, 3>{2, 4, 3});
    return a(x, z, y);
  });
}

TEST_CASE("fixed reductions, mean, softmax and log_softmax match loops", "[fixed]") {
  std::mt19937 rng(4);
  for (int rep = 0; rep < 5; ++rep) {
    auto a = random_tensor<float, 5, 6, 70>(rng);
    fx::Tensor<float, 5, 70> s1 = a.sum<1>();
    check_all(s1, [&](index_t i) {
      double t = 0;
      for (index_t y = 0; y < 6; ++y) t += a(i / 70, y, i % 70);
      return t;
    });
    fx::Tensor<float, 6> s02 = (a * a).sum<0, 2>();
    check_all(
        s02,
        [&](index_t i) {
          double t = 0;
          for (index_t x = 0; x < 5; ++x)
            for (index_t z = 0; z < 70; ++z) t += double(a(x, i, z)) * a(x, i, z);
          return t;
        },
        1e-4);
    fx::Tensor<float, 5, 6, 1> mx = a.max<-1>(fx::keepdim);
    check_all(mx, [&](index_t i) {
      double m = -1e30;
      for (index_t z = 0; z < 70; ++z) m = std::max<double>(m, a(i / 6, i % 6, z));
      return m;
    });
    fx::Tensor<float, 70> mn = a.min<0, 1>();
    check_all(mn, [&](index_t i) {
      double m = 1e30;
      for (index_t x = 0; x < 5; ++x)
        for (index_t y = 0; y < 6; ++y) m = std::min<double>(m, a(x, y, i));
      return m;
    });
    fx::Tensor<float> all = a.mean();
    double t = 0;
    for (float x : a) t += x;
    REQUIRE(close(all[0], t / a.size, 1e-4));
    // a reduction consumed by a broadcasting op, and a reduction of a moved expression
    fx::Tensor<float, 5, 6, 70> sm = a.softmax<2>();
    fx::Tensor<float, 5, 6, 70> lsm = a.log_softmax<-1>();
    for (index_t x = 0; x < 5; ++x)
      for (index_t y = 0; y < 6; ++y) {
        double m = -1e30, z = 0;
        for (index_t k = 0; k < 70; ++k) m = std::max<double>(m, a(x, y, k));
        for (index_t k = 0; k < 70; ++k) z += std::exp(a(x, y, k) - m);
        for (index_t k = 0; k < 70; ++k) {
          REQUIRE(close(sm(x, y, k), std::exp(a(x, y, k) - m) / z));
          REQUIRE(close(lsm(x, y, k), a(x, y, k) - m - std::log(z)));
        }
      }
    fx::Tensor<float, 70, 1, 1> pr = a.permute<2, 0, 1>().sum<1, 2>(fx::keepdim);
    check_all(pr, [&](index_t i) {
      double u = 0;
      for (index_t x = 0; x < 5; ++x)
        for (index_t y = 0; y < 6; ++y) u += a(x, y, i);
      return u;
    });
  }
}

TEST_CASE("fixed assignment is safe when the destination is read through another view", "[fixed]") {
  std::mt19937 rng(5);
  auto x = random_tensor<float, 16, 16>(rng);
  auto x0 = x;
  x = x.permute<1, 0>() + x;
  check_all(x, [&](index_t i) { return double(x0(i % 16, i / 16)) + x0(i / 16, i % 16); });
  x0 = x;
  x = x.flip<1>() * 2 - x;  // in place, read reversed
  check_all(x, [&](index_t i) { return 2.0 * x0(i / 16, 15 - i % 16) - x0(i / 16, i % 16); });
  x0 = x;
  x *= 3;  // in place, same view: no temporary needed, still correct
  check_all(x, [&](index_t i) { return 3.0 * x0[i]; });
  x0 = x;
  x = x - x.mean<1>(fx::keepdim);  // read by a reduction before the loop
  check_all(
      x,
      [&](index_t i) {
        double m = 0;
        for (index_t k = 0; k < 16; ++k) m += x0(i / 16, k);
        return x0[i] - m / 16;
      },
      1e-4);
}

TEST_CASE("fixed and dynamic paths agree on the CPU device", "[fixed]") {
  std::mt19937 rng(6);
  auto a = random_tensor<float, 8, 9>(rng);
  auto b = random_tensor<float, 9>(rng, 0.5, 2);
  metagrad::Tensor da = dynamic(a), db = dynamic(b);
  auto same = [](const auto& fixed_result, const metagrad::Tensor& dyn) {
    auto r = fx::eval(fixed_result);
    REQUIRE(dyn.shape() == decltype(r)::shape::dims);
    std::vector<float> want = dyn.to_vector<float>();
    check_all(
        r, [&](index_t i) { return double(want[i]); }, 1e-5);
  };
  same(a * b + 1, da * db + 1);
  same((a / b).exp().sum<1>(), (da / db).exp().sum(1));
  same(a.max<0>(), da.max(0));
  same(a.softmax<1>(), da.softmax(1));
  same(a.log_softmax<0>(), da.log_softmax(0));
  same(a.permute<1, 0>().pad<1, 0, 0, 2>().sigmoid(), da.permute({1, 0}).pad({{1, 0}, {0, 2}}).sigmoid());
  same(a.gelu().mean<0>(fx::keepdim), da.gelu().mean(0, true));
  same(fx::where(a > 0, a, b * 2), (da > 0).where(da, db * 2));
  same(a.flip<0>().shrink<1, 5, 2, 9>().relu(), da.flip(0).shrink({{1, 5}, {2, 9}}).relu());
}

namespace {
// C = A B by the textbook triple loop in double, A (m x k) and B (k x n) read through accessors.
template <class Fa, class Fb>
std::vector<double> reference_matmul(index_t m, index_t k, index_t n, Fa a, Fb b) {
  std::vector<double> c(static_cast<std::size_t>(m * n));
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double s = 0;
      for (index_t p = 0; p < k; ++p) s += a(i, p) * b(p, j);
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}
template <index_t M, index_t K, index_t N, class T = float>
void check_matmul(std::mt19937& rng) {
  auto a = random_tensor<T, M, K>(rng);
  auto b = random_tensor<T, K, N>(rng);
  fx::Tensor<T, M, N> c = fx::matmul(a, b);
  auto want = reference_matmul(
      M, K, N, [&](index_t i, index_t p) { return double(a(i, p)); },
      [&](index_t p, index_t j) { return double(b(p, j)); });
  INFO("matmul " << M << "x" << K << " @ " << K << "x" << N);
  // float sums of K products of values in [-2, 2]: rounding grows like sqrt(K)
  check_all(
      c, [&](index_t i) { return want[static_cast<std::size_t>(i)]; }, 1e-5, 4e-6 * std::sqrt(double(K)) * 4);
}
}  // namespace

TEST_CASE("fixed matmul matches the triple loop on shapes around the kernel's tiles", "[fixed]") {
  std::mt19937 rng(7);
  check_matmul<1, 1, 1>(rng);
  check_matmul<3, 5, 2>(rng);
  check_matmul<14, 32, 32>(rng);
  check_matmul<37, 53, 29>(rng);
  check_matmul<161, 300, 67>(rng);  // several row blocks and a second K block
  check_matmul<20, 7, 2100>(rng);   // a second column block
  check_matmul<4, 0, 3>(rng);       // empty inner dimension: zeros
  // one row and two (batch 1): B's rows summed, past a run of 4 KiB and a step of 4 k
  check_matmul<1, 9, 1030>(rng);
  check_matmul<2, 6, 1030>(rng);
  check_matmul<2, 11, 517, double>(rng);
}

TEST_CASE("fixed matmul reads moved tensors in place and evaluates expressions first", "[fixed]") {
  std::mt19937 rng(8);
  auto x = random_tensor<float, 23, 17>(rng);
  auto w = random_tensor<float, 31, 23>(rng);
  auto v = random_tensor<float, 17, 31>(rng);
  // x^T (17 x 23) @ w^T (23 x 31): both operands strided views of leaves
  fx::Tensor<float, 17, 31> c = fx::matmul(x.transpose(), w.permute<1, 0>());
  auto want = reference_matmul(
      17, 23, 31, [&](index_t i, index_t p) { return double(x(p, i)); },
      [&](index_t p, index_t j) { return double(w(j, p)); });
  check_all(
      c, [&](index_t i) { return want[static_cast<std::size_t>(i)]; }, 1e-4);
  // an expression operand, a matmul inside an elementwise expression, and linear with a bias
  auto bias = random_tensor<float, 31>(rng);
  fx::Tensor<float, 23, 31> y = fx::linear((x * 2).relu(), v, bias).sigmoid() + fx::matmul(x, v);
  auto h = reference_matmul(
      23, 17, 31, [&](index_t i, index_t p) { return std::max(0.0, 2.0 * x(i, p)); },
      [&](index_t p, index_t j) { return double(v(p, j)); });
  auto g = reference_matmul(
      23, 17, 31, [&](index_t i, index_t p) { return double(x(i, p)); },
      [&](index_t p, index_t j) { return double(v(p, j)); });
  check_all(
      y,
      [&](index_t i) {
        std::size_t u = static_cast<std::size_t>(i);
        return 1 / (1 + std::exp(-(h[u] + bias[i % 31]))) + g[u];
      },
      1e-4);
  // batched: (2, 3, 5, 4) @ (4, 6) and @ (2, 3, 4, 6)
  auto a = random_tensor<float, 2, 3, 5, 4>(rng);
  auto b2 = random_tensor<float, 4, 6>(rng);
  auto b4 = random_tensor<float, 2, 3, 4, 6>(rng);
  fx::Tensor<float, 2, 3, 5, 6> r2 = fx::matmul(a, b2), r4 = fx::matmul(a, b4);
  for (index_t i = 0; i < r2.size; ++i) {
    auto [p, q, m, n] = unravel(i, std::array<index_t, 4>{2, 3, 5, 6});
    double s2 = 0, s4 = 0;
    for (index_t k = 0; k < 4; ++k) {
      s2 += double(a(p, q, m, k)) * b2(k, n);
      s4 += double(a(p, q, m, k)) * b4(p, q, k, n);
    }
    REQUIRE(close(r2[i], s2, 1e-4));
    REQUIRE(close(r4[i], s4, 1e-4));
  }
}

// A sum of a product and something else is evaluated as the other addend written first, then the
// product added in the GEMM's stores (eval.hpp's assign_big): a bias, the destination itself (a
// gradient added to), another product, and a product that reads the destination (then the usual
// way, through a temporary), batched and not, on one thread and two.
TEST_CASE("fixed matmul added to a bias, to the destination or to another product", "[fixed]") {
  std::mt19937 rng(12);
  auto x = random_tensor<float, 37, 53>(rng);
  auto w = random_tensor<float, 53, 61>(rng);
  auto v = random_tensor<float, 37, 29>(rng);
  auto u = random_tensor<float, 29, 61>(rng);
  auto b = random_tensor<float, 61>(rng);
  auto xw = reference_matmul(
      37, 53, 61, [&](index_t i, index_t p) { return double(x(i, p)); },
      [&](index_t p, index_t j) { return double(w(p, j)); });
  auto vu = reference_matmul(
      37, 29, 61, [&](index_t i, index_t p) { return double(v(i, p)); },
      [&](index_t p, index_t j) { return double(u(p, j)); });
  auto at = [](const std::vector<double>& r, index_t i) { return r[static_cast<std::size_t>(i)]; };
  const int before = fx::threads();
  for (int threads : {1, 2}) {
    fx::set_threads(threads);
    INFO(threads << " threads");
    fx::Tensor<float, 37, 61> y = fx::matmul(x, w) + b;
    check_all(
        y, [&](index_t i) { return at(xw, i) + b[i % 61]; }, 1e-4, 1e-4);
    y = b + fx::matmul(x, w) * 1.f;  // (a product under a map: the usual way)
    check_all(
        y, [&](index_t i) { return at(xw, i) + b[i % 61]; }, 1e-4, 1e-4);
    auto y0 = y;
    y = y + fx::matmul(v, u);  // added to what y holds
    check_all(
        y, [&](index_t i) { return double(y0[i]) + at(vu, i); }, 1e-4, 1e-4);
    auto c = random_tensor<float, 37, 61>(rng);
    y = c + fx::matmul(v, u);  // a whole tensor added: copied into y, then the product added
    check_all(
        y, [&](index_t i) { return double(c[i]) + at(vu, i); }, 1e-4, 1e-4);
    y = fx::matmul(x, w) + fx::matmul(v, u);
    check_all(
        y, [&](index_t i) { return at(xw, i) + at(vu, i); }, 1e-4, 1e-4);
    y0 = y;
    y = y.transpose().transpose() * 2.f + fx::matmul(v, u);  // the destination read by the other addend
    check_all(
        y, [&](index_t i) { return 2.0 * y0[i] + at(vu, i); }, 1e-4, 1e-4);
    // a product reading the destination: y = y @ s + y, s square
    auto s = random_tensor<float, 61, 61>(rng);
    y0 = y;
    y = fx::matmul(y, s) + y;
    auto ys = reference_matmul(
        37, 61, 61, [&](index_t i, index_t p) { return double(y0(i, p)); },
        [&](index_t p, index_t j) { return double(s(p, j)); });
    check_all(
        y, [&](index_t i) { return at(ys, i) + y0[i]; }, 1e-3, 1e-3);
    // batched: (3, 20, 33) @ (33, 40) plus a (40) bias, and plus a batched product
    auto a3 = random_tensor<float, 3, 20, 33>(rng);
    auto w3 = random_tensor<float, 33, 40>(rng);
    auto q3 = random_tensor<float, 3, 33, 40>(rng);
    auto b3 = random_tensor<float, 40>(rng);
    fx::Tensor<float, 3, 20, 40> z = fx::matmul(a3, w3) + b3, z2 = fx::matmul(a3, q3) + fx::matmul(a3, w3);
    for (index_t i = 0; i < z.size; ++i) {
      auto [p, m, n] = unravel(i, std::array<index_t, 3>{3, 20, 40});
      double s1 = b3[n], s2 = 0;
      for (index_t k = 0; k < 33; ++k) {
        s1 += double(a3(p, m, k)) * w3(k, n);
        s2 += double(a3(p, m, k)) * (q3(p, k, n) + double(w3(k, n)));
      }
      REQUIRE(close(z[i], s1, 1e-4, 1e-4));
      REQUIRE(close(z2[i], s2, 1e-4, 1e-4));
    }
  }
  fx::set_threads(before);
}

TEST_CASE("fixed matmul and linear agree with the dynamic path on the CPU device", "[fixed]") {
  std::mt19937 rng(9);
  auto x = random_tensor<float, 12, 20>(rng);
  auto w = random_tensor<float, 20, 7>(rng);
  auto b = random_tensor<float, 7>(rng);
  fx::Tensor<float, 12, 7> s = fx::linear(x, w, b).log_softmax<1>();
  std::vector<float> d = dynamic(x).linear(dynamic(w), dynamic(b)).log_softmax(1).to_vector<float>();
  check_all(
      s, [&](index_t i) { return double(d[static_cast<std::size_t>(i)]); }, 1e-4);
}

TEST_CASE("fixed evaluation allocates nothing once its arena has grown", "[fixed]") {
  std::mt19937 rng(10);
  auto x = random_tensor<float, 64, 48>(rng);
  auto w = random_tensor<float, 48, 32>(rng);
  auto b = random_tensor<float, 32>(rng);
  fx::Tensor<float, 64, 32> y;
  fx::Tensor<float, 32, 32> g;
  auto step = [&] {
    y = fx::linear(x, w, b).relu().softmax<1>();  // matmul, reductions: arena temporaries
    g = fx::matmul(y.transpose(), y - y.mean<0>(fx::keepdim));
    w = w - 0.01f * fx::matmul(x.transpose(), y);
    y = y.permute<1, 0>().reshape<64, 32>() + y;  // aliased: a temporary
  };
  step();  // the first round grows the arena to its high-water mark
  std::uint64_t before = metagrad::test::allocations();
  for (int i = 0; i < 5; ++i) step();
  REQUIRE(metagrad::test::allocations() == before);
}

// Tensors up to detail::kInlineBytes hold their values in the object (as Eigen's fixed-size
// matrices), bigger ones on the heap: sizes, where the values are, and what a move does.
static_assert(sizeof(fx::Tensor<float, 3, 3>) == 9 * sizeof(float));  // as Eigen::Matrix3f
static_assert(sizeof(fx::Tensor<float, 4, 4>) == 64 && alignof(fx::Tensor<float, 4, 4>) == 64);
static_assert(fx::Tensor<float, 32, 32>::in_object && !fx::Tensor<float, 32, 33>::in_object);
static_assert(fx::Tensor<double, 32, 16>::in_object && !fx::Tensor<double, 32, 17>::in_object);
static_assert(sizeof(fx::Tensor<float, 32, 33>) == sizeof(float*));

TEST_CASE("fixed small tensors: in the object, copied on move; big ones on the heap, moved by pointer",
          "[fixed][small]") {
  std::mt19937 rng(21);
  auto a = random_tensor<float, 3, 3>(rng);
  REQUIRE(static_cast<const void*>(a.data()) == static_cast<const void*>(&a));  // the values are the object
  fx::Tensor<float, 3, 3> moved = std::move(a), copy = moved;
  REQUIRE(moved.data() != a.data());
  copy[0] += 1;
  for (index_t i = 0; i < 9; ++i) REQUIRE(moved[i] == a[i]);  // a move of an in-object tensor copies
  REQUIRE(copy[0] == moved[0] + 1);
  auto big = random_tensor<float, 40, 40>(rng);
  const float* p = big.data();
  fx::Tensor<float, 40, 40> taken = std::move(big);
  REQUIRE(taken.data() == p);  // the heap buffer changes hands
  fx::Tensor<float, 2, 2> zeros;
  for (float x : zeros) REQUIRE(x == 0);
}

// 2x2 to 8x8 products, sums and elementwise chains allocate nothing (the in-object storage, and the
// small evaluation path: no arena, no threads, no GEMM packing), counted by the replaced global
// operator new (test_alloc_count.cpp); their values checked against loops.
template <index_t N>
void small_no_alloc() {
  std::mt19937 rng(30 + N);
  auto a = random_tensor<float, N, N>(rng), b = random_tensor<float, N, N>(rng),
       c = random_tensor<float, N, N>(rng);
  auto x = random_tensor<float, 2, N, N>(rng);
  std::uint64_t before = metagrad::test::allocations();
  fx::Tensor<float, N, N> prod = fx::matmul(a, b);
  fx::Tensor<float, N, N> sum = a + b;
  fx::Tensor<float> total = a.sum();
  fx::Tensor<float, N> rows = a.template sum<1>();
  fx::Tensor<float, N, N> chain = ((a * b + c) * 0.5f - a).relu();
  fx::Tensor<float, N, N> mixed =
      fx::matmul(a + b, c.transpose()) + a.template max<0>(fx::keepdim);  // operand evaluated
  fx::Tensor<float, 2, N, N> batched = fx::matmul(x, b);
  fx::Tensor<float, N, N> inplace = a;
  inplace = fx::matmul(inplace, b);  // reads its destination: evaluated first, then copied
  fx::Tensor<float, N, N> alias = a;
  alias = alias.transpose() + alias;  // reads it through another view
  REQUIRE(metagrad::test::allocations() == before);

  auto at = [](const auto& t, index_t i, index_t j) { return double(t[i * N + j]); };
  for (index_t i = 0; i < N; ++i) {
    double rs = 0;
    for (index_t j = 0; j < N; ++j) {
      double p = 0, m = 0, bp0 = 0, bp1 = 0, colmax = -1e30;
      for (index_t k = 0; k < N; ++k) {
        p += at(a, i, k) * at(b, k, j);
        m += (at(a, i, k) + at(b, i, k)) * at(c, j, k);
        bp0 += double(x[i * N + k]) * at(b, k, j);
        bp1 += double(x[N * N + i * N + k]) * at(b, k, j);
        colmax = std::max(colmax, at(a, k, j));
      }
      double tol = 1e-5 * (1 + std::abs(p)) * N;
      REQUIRE(at(prod, i, j) == Approx(p).margin(tol));
      REQUIRE(at(inplace, i, j) == Approx(p).margin(tol));
      REQUIRE(at(mixed, i, j) == Approx(m + colmax).margin(1e-5 * N * 8));
      REQUIRE(double(batched[i * N + j]) == Approx(bp0).margin(1e-5 * N * 8));
      REQUIRE(double(batched[N * N + i * N + j]) == Approx(bp1).margin(1e-5 * N * 8));
      REQUIRE(at(sum, i, j) == float(at(a, i, j) + at(b, i, j)));
      REQUIRE(at(alias, i, j) == float(at(a, j, i) + at(a, i, j)));
      REQUIRE(
          at(chain, i, j) ==
          Approx(std::max(0.0, (at(a, i, j) * at(b, i, j) + at(c, i, j)) * 0.5 - at(a, i, j))).margin(1e-6));
      rs += at(a, i, j);
    }
    REQUIRE(double(rows[i]) == Approx(rs).margin(1e-5));
  }
  double all = 0;
  for (float v : a) all += v;
  REQUIRE(double(total[0]) == Approx(all).margin(1e-4));
}
TEST_CASE("fixed small products, sums and elementwise chains allocate nothing (2x2 to 8x8)",
          "[fixed][small]") {
  small_no_alloc<2>();
  small_no_alloc<3>();
  small_no_alloc<4>();
  small_no_alloc<8>();
}

// fx::assign(std::tie(a, b, c), ea, eb, ec) is a = ea; b = eb; c = ec; in that order, as one pass:
// each expression reads the earlier destinations' new values and the later ones' old values, at
// every length (a vector's lanes and a remainder, chunks of the pass, threads' parts). An AdamW-like
// triple, checked against the three assignments computed in double by loops.
template <index_t N>
void check_fused_adamw(std::mt19937& rng) {
  auto w = std::make_unique<fx::Tensor<float, N>>(random_tensor<float, N>(rng));
  auto m = std::make_unique<fx::Tensor<float, N>>(random_tensor<float, N>(rng));
  auto v = std::make_unique<fx::Tensor<float, N>>(random_tensor<float, N>(rng, 0, 1));
  auto g = std::make_unique<fx::Tensor<float, N>>(random_tensor<float, N>(rng));
  auto w0 = *w, m0 = *m, v0 = *v;
  fx::assign(std::tie(*m, *v, *w), *m * 0.9f + *g * 0.1f, *v * 0.99f + *g * *g * 0.01f,
             *w - (*m / ((*v).sqrt() + 1e-3f) + *w * 0.1f) * 0.5f);
  auto m1 = [&](index_t i) { return 0.9 * m0[i] + 0.1 * (*g)[i]; };
  auto v1 = [&](index_t i) { return 0.99 * v0[i] + 0.01 * double((*g)[i]) * (*g)[i]; };
  check_all(*m, m1);
  check_all(*v, v1);
  check_all(*w, [&](index_t i) { return w0[i] - (m1(i) / (std::sqrt(v1(i)) + 1e-3) + 0.1 * w0[i]) * 0.5; });
}

TEST_CASE("fixed assign: several assignments in one pass equal them one after another", "[fixed]") {
  std::mt19937 rng(11);
  check_fused_adamw<1>(rng);
  check_fused_adamw<7>(rng);
  check_fused_adamw<33>(rng);
  check_fused_adamw<2049>(rng);   // past one chunk
  check_fused_adamw<70001>(rng);  // split over threads where there are several, odd
  {
    const int before = fx::threads();
    fx::set_threads(2);
    check_fused_adamw<131075>(rng);
    fx::set_threads(before);
  }
  // A later expression reading an earlier destination through another view, or by a reduction
  // computed before the loop: the assignments one after another (the new values).
  auto a = random_tensor<float, 9, 9>(rng), b = random_tensor<float, 9, 9>(rng);
  auto a0 = a, b0 = b;
  fx::assign(std::tie(a, b), a * 2.f, b + a.permute<1, 0>());
  check_all(a, [&](index_t i) { return 2.0 * a0[i]; });
  check_all(b, [&](index_t i) { return b0[i] + 2.0 * a0((i % 9), (i / 9)); });
  a0 = a, b0 = b;
  fx::assign(std::tie(a, b), a + 1.f, b * a.sum());
  double s = 0;
  for (index_t i = 0; i < 81; ++i) s += a0[i] + 1.0;
  check_all(a, [&](index_t i) { return a0[i] + 1.0; });
  check_all(
      b, [&](index_t i) { return b0[i] * s; }, 1e-4);
  // A later destination read by an earlier expression: its old value.
  a0 = a, b0 = b;
  fx::assign(std::tie(a, b), a + b, b - 1.f);
  check_all(a, [&](index_t i) { return double(a0[i]) + b0[i]; });
  check_all(b, [&](index_t i) { return b0[i] - 1.0; });
}

// ---- a subtree read several times, evaluated once per element (eval.hpp's let) ----
namespace {
template <class E>
using bound_t = decltype(d::bind<boost::mp11::mp_list<>>(std::declval<const E&>(), std::declval<d::Ctx&>()));
using V1 = fx::Tensor<float, 1500>;
using Sig = decltype(1.f / (1.f + (std::declval<V1>() * 2.f).exp()));  // an expensive subtree
using Twice = decltype(std::declval<Sig>() * std::declval<V1>() + std::declval<Sig>());
using Cheap = decltype(std::declval<V1>() * 2.f * std::declval<V1>() + std::declval<V1>() * 2.f);
// The largest repeated expensive subtree is found (not its exp alone); cheap repeats are left.
static_assert(std::is_same_v<d::shared_subtree<bound_t<Twice>>::type, bound_t<Sig>>);
static_assert(std::is_void_v<d::shared_subtree<bound_t<Cheap>>::type>);
static_assert(std::is_void_v<d::shared_subtree<bound_t<Sig>>::type>);

// Whether with_shared runs e's bound tree as a let (its copies read the same values).
template <class E>
bool runs_as_let(const E& e) {
  d::Ctx ctx;
  auto b = d::bind<boost::mp11::mp_list<>>(e.expr(), ctx);
  bool let = false;
  d::with_shared(
      b, [&](const auto& bb) { let = !std::is_same_v<std::remove_cvref_t<decltype(bb)>, decltype(b)>; });
  return let;
}
}  // namespace

TEST_CASE(
    "fixed evaluation computes a subtree read several times once, where its copies read the same values",
    "[fixed]") {
  std::mt19937 rng(35);
  auto x = random_tensor<float, 1500>(rng, -3, 3), y = random_tensor<float, 1500>(rng, -3, 3);
  auto sig = [](const auto& t, float k) { return 1.f / (1.f + (t * k).exp()); };
  // the same leaf and constants in each copy: one evaluation per element
  REQUIRE(runs_as_let(sig(x, 2.f) * y + sig(x, 2.f)));
  // same types, other values: each copy its own
  REQUIRE_FALSE(runs_as_let(sig(x, 2.f) * y + sig(y, 2.f)));
  REQUIRE_FALSE(runs_as_let(sig(x, 2.f) * y + sig(x, 3.f)));
  REQUIRE_FALSE(runs_as_let(sig(x, 0.f).reciprocal() * y + sig(x, -0.f).reciprocal()));  // 0 and -0 differ

  // Values, against loops in double, over shapes taking each loop: the 1-D vector loop with a
  // scalar tail, rows of a broadcast (by vector rows), a transposed read (the scalar loop).
  auto want_sig = [](double t, double k) { return 1 / (1 + std::exp(t * k)); };
  fx::Tensor<float, 1500> r1 = sig(x, 2.f) * y + sig(x, 2.f) * sig(x, 2.f);
  check_all(r1, [&](index_t i) {
    double s = want_sig(x[i], 2);
    return s * y[i] + s * s;
  });
  r1 = sig(x, 2.f) * y + sig(y, 2.f);  // not shared: both values still right
  check_all(r1, [&](index_t i) { return want_sig(x[i], 2) * y[i] + want_sig(y[i], 2); });
  auto m = random_tensor<float, 37, 48>(rng, -3, 3);
  auto row = random_tensor<float, 48>(rng, -3, 3);
  fx::Tensor<float, 37, 48> r2 = sig(m + row, -1.f) * (1.f - sig(m + row, -1.f)) + row;
  check_all(r2, [&](index_t i) {
    double s = want_sig(double(m[i]) + row[i % 48], -1);
    return s * (1 - s) + row[i % 48];
  });
  auto mt = random_tensor<float, 48, 37>(rng, -3, 3);
  r2 = sig(mt.permute<1, 0>(), 1.f) * m - sig(mt.permute<1, 0>(), 1.f);
  check_all(r2, [&](index_t i) {
    double s = want_sig(mt(i % 48, i / 48), 1);
    return s * m[i] - s;
  });
  // in place: the destination one of the shared subtree's leaves
  auto z = random_tensor<float, 37, 48>(rng, -3, 3), z0 = z;
  z = sig(z, 1.5f) * z + sig(z, 1.5f);
  check_all(z, [&](index_t i) {
    double s = want_sig(z0[i], 1.5);
    return s * z0[i] + s;
  });
  // GELU's backward (sigmoid(2u) three times) through fx::grad, against its derivative in double
  auto w = random_tensor<float, 64, 40>(rng, -4, 4), u = random_tensor<float, 64, 40>(rng);
  auto g = fx::grad((w.gelu() * u).sum(), w);
  fx::Tensor<float, 64, 40> gw = get<0>(g);
  check_all(
      gw,
      [&](index_t i) {
        const double k = 0.7978845608028654, c = 0.044715, v = w[i];
        double t = std::tanh(k * (v + c * v * v * v));
        return u[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v));
      },
      1e-4, 1e-5);
}

// Rows of kLanes to kLanes * kFanIn elements (65 to 1023 floats) take reduce.hpp's short path: sums,
// maxima of rows read per vector, of a masked row (a where on a bool tensor, widened per vector),
// and of a transposed read (element by element), against loops in double.
template <index_t N>
void check_rows(std::mt19937& rng) {
  auto a = random_tensor<float, 6, N>(rng, -3, 3);
  auto t = random_tensor<float, N, 6>(rng, -3, 3);
  fx::Tensor<bool, 6, N> mask;
  for (index_t i = 0; i < mask.size; ++i) mask[i] = rng() % 3 == 0;
  fx::Tensor<float, 6> s = a.template sum<1>(), m = a.template max<1>(),
                       st = t.template permute<1, 0>().template sum<1>();
  fx::Tensor<float, 6> sm = fx::where(mask, a.exp(), a * 2.f).template sum<1>();
  fx::Tensor<float, 6> mm = fx::masked_fill(a, mask, -INFINITY).template max<1>();
  for (index_t r = 0; r < 6; ++r) {
    double ws = 0, wm = -1e30, wt = 0, wsm = 0, wmm = -1e30;
    for (index_t k = 0; k < N; ++k) {
      ws += a(r, k), wm = std::max<double>(wm, a(r, k)), wt += t(k, r);
      wsm += mask(r, k) ? std::exp(double(a(r, k))) : 2.0 * a(r, k);
      if (!mask(r, k)) wmm = std::max<double>(wmm, a(r, k));
    }
    INFO("row length " << N << ", row " << r);
    REQUIRE(close(s[r], ws, 1e-5, 1e-5));
    REQUIRE(m[r] == float(wm));
    REQUIRE(close(st[r], wt, 1e-5, 1e-5));
    REQUIRE(close(sm[r], wsm, 1e-5, 1e-5));
    REQUIRE(mm[r] == float(wmm));
  }
}

TEST_CASE("fixed row reductions of 65 to 1023 elements, plain, masked and transposed, match loops",
          "[fixed]") {
  std::mt19937 rng(36);
  check_rows<65>(rng), check_rows<100>(rng), check_rows<128>(rng), check_rows<200>(rng);
  check_rows<512>(rng), check_rows<1000>(rng), check_rows<1023>(rng), check_rows<1024>(rng);
}

TEST_CASE("fixed where on a bool tensor read per vector (a causal mask) matches loops", "[fixed]") {
  std::mt19937 rng(37);
  auto x = random_tensor<float, 8, 40, 48>(rng, -3, 3);
  fx::Tensor<bool, 40, 48> causal;
  for (index_t i = 0; i < 40; ++i)
    for (index_t j = 0; j < 48; ++j) causal(i, j) = j > i;
  fx::Tensor<bool, 40, 1> rows;
  for (index_t i = 0; i < 40; ++i) rows(i, 0) = i % 3 == 1;
  // rows long enough for vectors and a scalar tail (48 = 3 x 16), the mask broadcast over the
  // batch, then a mask broadcast along the row (stride 0); exp makes each a loop of vectors
  fx::Tensor<float, 8, 40, 48> r = fx::where(causal, -x, x * 0.5f).exp();
  check_all(r, [&](index_t i) {
    const index_t b = i / (40 * 48), q = i / 48 % 40, k = i % 48;
    return std::exp(k > q ? -double(x(b, q, k)) : 0.5 * x(b, q, k));
  });
  r = fx::where(rows, x.exp(), x);
  check_all(r, [&](index_t i) {
    const index_t q = i / 48 % 40;
    return q % 3 == 1 ? std::exp(double(x[i])) : double(x[i]);
  });
  // and a permuted copy in rows of 32 (a head's): vectors, not a call per row
  auto h = random_tensor<float, 4, 64, 4, 32>(rng);
  fx::Tensor<float, 4, 4, 64, 32> p = h.permute<0, 2, 1, 3>();
  check_all(p, [&](index_t i) {
    const index_t b = i / (4 * 64 * 32), hh = i / (64 * 32) % 4, t = i / 32 % 64, d = i % 32;
    return double(h(b, t, hh, d));
  });
  // the same under a reshape at the root: evaluated straight into the destination
  fx::Tensor<float, 4, 4, 2048> o = (h.permute<0, 2, 1, 3>() * 2.f).reshape<4, 4, 2048>();
  check_all(o, [&](index_t i) { return 2.0 * p[i]; });
}

// d::assign_view: an expression written, then added, into a region of a larger buffer (a view with
// strides and an offset), the rest left as it was; against loops.
namespace {
constexpr metagrad::View kRegion({4, 2, 10}, {60, 10, 1}, 20);  // axis 1's [2, 4) of (4, 6, 10)
constexpr metagrad::View kColumns({4, 6, 3}, {60, 10, 1}, 5);   // axis 2's [5, 8): short rows
constexpr metagrad::View kTransposed({10, 4}, {1, 60}, 30);     // a transposed region
}  // namespace
TEST_CASE("fixed assign_view writes and adds an expression into a region of a buffer", "[fixed]") {
  std::mt19937 rng(38);
  auto a = random_tensor<float, 4, 2, 10>(rng);
  auto c = random_tensor<float, 4, 6, 3>(rng);
  auto t = random_tensor<float, 4, 10>(rng);
  auto buf = random_tensor<float, 4, 6, 10>(rng), before = buf;
  auto in = [](const metagrad::View& v, index_t i, index_t& at) {
    // is flat index i of (4, 6, 10) inside view v's region, and where in v's shape
    for (index_t k = 0; k < v.shape[0] * v.shape[1] * (v.shape.size() > 2 ? v.shape[2] : 1); ++k) {
      index_t rest = k, off = v.offset;
      for (std::size_t d = v.shape.size(); d-- > 0;)
        off += rest % v.shape[d] * v.strides[d], rest /= v.shape[d];
      if (off == i) return at = k, true;
    }
    return false;
  };
  d::assign_view<kRegion>(buf.data(), (a.exp() * 2.f).expr(), false);
  d::assign_view<kRegion>(buf.data(), (a + 1.f).expr(), true);
  d::assign_view<kColumns>(buf.data(), (c * c).expr(), true);
  d::assign_view<kTransposed>(buf.data(), t.permute<1, 0>().expr(), false);
  check_all(buf, [&](index_t i) {
    index_t k = 0;
    if (in(kTransposed, i, k)) return double(t(k % 4, k / 4));
    double v = before[i];
    if (in(kRegion, i, k)) v = 2 * std::exp(double(a[k])) + a[k] + 1;
    if (in(kColumns, i, k)) v += double(c[k]) * c[k];
    return v;
  });
}

// A function under a broadcast (a LayerNorm's 1 / sqrt of its variance, a log-softmax's log of the
// sum) is evaluated once per element of its own shape, before the loop (hoisted), not per output.
namespace {
using X3 = fx::Tensor<float, 8, 40, 48>;
using R3 = fx::Tensor<float, 8, 40, 1>;
using Norm = decltype(std::declval<X3>() / std::declval<R3>().sqrt());
using Bcast3 = std::remove_cvref_t<decltype(fx::child<1>(std::declval<Norm>()))>;
static_assert(Bcast3::op_type::kind == metagrad::MovementOps::EXPAND);
using Root3 = std::remove_cvref_t<decltype(fx::child<0>(std::declval<Bcast3>()))>;
static_assert(d::hoisted<boost::mp11::mp_list<typename Bcast3::op_type>, Root3>);
static_assert(!d::hoisted<boost::mp11::mp_list<>, Root3>);  // not under a broadcast: in the loop
using Cheap3 = decltype(std::declval<R3>() * 2.f);
static_assert(!d::hoisted<boost::mp11::mp_list<typename Bcast3::op_type>, Cheap3>);  // cheap: re-read
}  // namespace
TEST_CASE("fixed functions under a broadcast are evaluated once per element of their shape", "[fixed]") {
  std::mt19937 rng(39);
  auto x = random_tensor<float, 8, 40, 48>(rng, -2, 2);
  auto r = random_tensor<float, 8, 40, 1>(rng, 0.1, 3);
  fx::Tensor<float, 8, 40, 48> y = x / (r + 1e-5f).sqrt();
  check_all(y, [&](index_t i) { return x[i] / std::sqrt(double(r[i / 48]) + 1e-5); });
  y = x - x.exp().sum<-1>(fx::keepdim).log() + (r * 0.5f).exp();  // two hoisted, one of a reduction
  check_all(
      y,
      [&](index_t i) {
        double s = 0;
        for (index_t k = 0; k < 48; ++k) s += std::exp(double(x[i / 48 * 48 + k]));
        return x[i] - std::log(s) + std::exp(0.5 * r[i / 48]);
      },
      1e-5, 1e-5);
  // small (inline) too: values inside the bound tree
  auto xs = random_tensor<float, 3, 5>(rng, -2, 2);
  auto rs = random_tensor<float, 3, 1>(rng, 0.1, 3);
  fx::Tensor<float, 3, 5> ys = xs * rs.log();
  check_all(ys, [&](index_t i) { return xs[i] * std::log(double(rs[i / 5])); });
}
