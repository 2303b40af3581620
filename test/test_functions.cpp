// The elementwise functions' shared definitions (metagrad/functions.hpp): erf, their first new user,
// on both paths; the traits' properties (arity and the rest) as the nodes see them.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <utility>
#include <vector>

#include "device_scope.hpp"
#include "fixed_grad_check.hpp"
#include "gradcheck.hpp"
#include "metagrad/functions.hpp"

using namespace metagrad::test;
using metagrad::Tensor;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity(),
                 kNaN = std::numeric_limits<double>::quiet_NaN();

// Every float from -6 to 6 in steps of about 1e-4, and the two sides of the split between erf's
// two polynomials.
std::vector<float> erf_grid() {
  std::vector<float> v;
  for (int i = -60000; i <= 60000; ++i) v.push_back(static_cast<float>(i * 1e-4));
  for (float s : {metagrad::fn::kErfSplit, -metagrad::fn::kErfSplit})
    for (float x = s, k = 0; k < 8; ++k, x = std::nextafter(x, 0.f)) v.push_back(x);
  return v;
}
}  // namespace

TEST_CASE("erf: float32 within 1e-7 of erf on every device, and exact at 0, +-inf, NaN", "[math]") {
  std::vector<float> v = erf_grid();
  std::vector<float> got = Tensor(v, {static_cast<std::int64_t>(v.size())}).erf().to_vector<float>();
  double worst = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    INFO("erf(" << v[i] << ") = " << got[i] << ", want " << std::erf(double(v[i])));
    double err = std::abs(double(got[i]) - std::erf(double(v[i])));
    REQUIRE(err <= 1e-7);  // measured: 6.7e-8 on CPU, CLANG and LLVM (the static path: 5.6e-8)
    REQUIRE(std::signbit(got[i]) == std::signbit(v[i]));
    worst = std::max(worst, err);
  }
  UNSCOPED_INFO("erf: max abs error " << worst);
  std::vector<double> special = {0.0, -0.0, kInf, -kInf, kNaN, 1e30, -1e30, 1e-30, 5, -5};
  std::vector<double> y = Tensor(special, {10}).cast(metagrad::dtypes::float32).erf().to_vector<double>();
  require_close(y, {0, 0, 1, -1, kNaN, 1, -1, 1.1283791670955126e-30, 1, -1}, 0, 1e-6);
  CHECK(std::signbit(y[1]));
  // Integers are promoted as for exp.
  CHECK(Tensor(std::vector<std::int32_t>{0, 3}, {2}).erf().dtype() == metagrad::dtypes::float32);
}

TEST_CASE("erf: gradient against finite differences, and exactly 2/sqrt(pi) exp(-x^2)", "[math]") {
  check_gradients([](const std::vector<Tensor>& x) { return x[0].erf(); },
                  {random_tensor({3, 7}, 11, -3, 3)});
  std::vector<double> v = {-4, -1, -0.5, 0, 0.3, 0.9277, 2, 30, kInf};
  Tensor x(v, {9}, {.requires_grad = true});
  x.erf().sum().backward();
  std::vector<double> want;
  for (double a : v) want.push_back(2 / std::sqrt(std::numbers::pi) * std::exp(-a * a));
  require_close(x.grad->to_vector<double>(), want, 1e-15, 1e-12);
}

TEST_CASE("erf: the static path against the dynamic one and against erf, float and double", "[fixed]") {
  std::vector<float> v = erf_grid();
  constexpr index_t N = 1024;
  fx::Tensor<float, N> xf;
  fx::Tensor<double, N> xd;
  double worst = 0;
  for (std::size_t at = 0; at < v.size(); at += N) {
    for (index_t i = 0; i < N; ++i) xf[i] = xd[i] = v[std::min(v.size() - 1, at + std::size_t(i))];
    fx::Tensor<float, N> yf = xf.erf();
    fx::Tensor<double, N> yd = xd.erf();
    std::vector<float> dyn_y = dyn(xf).erf().to_vector<float>();
    for (index_t i = 0; i < N; ++i) {
      INFO("erf(" << xf[i] << ")");
      double want = std::erf(double(xf[i]));
      worst = std::max(worst, std::abs(yf[i] - want));
      REQUIRE(std::abs(yf[i] - want) <= 1e-7);
      REQUIRE(std::abs(yf[i] - dyn_y[std::size_t(i)]) <= 1.2e-7);
      REQUIRE(yd[i] == want);  // double: libm's erf
    }
  }
  UNSCOPED_INFO("static erf: max abs error " << worst);
  fx::Tensor<float, 6> s;
  for (index_t i = 0; float x : {0.f, -0.f, INFINITY, -INFINITY, NAN, 1e30f}) s[i++] = x;
  fx::Tensor<float, 6> e = s.erf();
  CHECK(e[0] == 0);
  CHECK(std::signbit(e[1]));
  CHECK(e[2] == 1);
  CHECK(e[3] == -1);
  CHECK(std::isnan(e[4]));
  CHECK(e[5] == 1);
  // The static gradient against finite differences (double), and the lowered expression.
  fx::Tensor<double, 2, 5> p;
  for (index_t i = 0; i < 10; ++i) p[i] = -2.5 + 0.55 * double(i);
  check_fd((p.erf() * p).sum(), p);
}

TEST_CASE("function traits: arity and comparison are properties of each entry, not of the enum order",
          "[fixed]") {
  using metagrad::fn::Fn;
  STATIC_REQUIRE(metagrad::fn::arity(Fn::ERF) == 1);
  STATIC_REQUIRE(metagrad::fn::arity(Fn::ADD) == 2);
  STATIC_REQUIRE(metagrad::fn::arity(Fn::WHERE) == 3);
  STATIC_REQUIRE(metagrad::fn::is_comparison(Fn::CMPNE));
  STATIC_REQUIRE(!metagrad::fn::is_comparison(Fn::MAX));
  int unary = 0, binary = 0, ternary = 0;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((metagrad::fn::FnTraits<Fn(I)>::arity == 1   ? ++unary
      : metagrad::fn::FnTraits<Fn(I)>::arity == 2 ? ++binary
                                                  : ++ternary),
     ...);
  }
  (std::make_integer_sequence<int, metagrad::fn::kFnCount>{});
  CHECK(unary == 13);
  CHECK(binary == 11);
  CHECK(ternary == 1);
}

// Issue 38: NaN, infinities, signed zeros and denormals give the same on both paths (PyTorch's
// answers): each function of the static path against the dynamic one on the CPU device.
TEST_CASE("NaN, +-inf, +-0 and denormals: the static path agrees with the dynamic one", "[fixed]") {
  const float dn = std::numeric_limits<float>::denorm_min(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {std::numeric_limits<float>::quiet_NaN(),
                                inf,
                                -inf,
                                0.f,
                                -0.f,
                                dn,
                                -dn,
                                1e-39f,
                                -1e-39f,
                                3.f,
                                -3.f,
                                100.f,
                                -100.f,
                                1e30f,
                                -1e30f,
                                0.5f};
  constexpr index_t N = 16;
  fx::Tensor<float, N> x;
  for (index_t i = 0; i < N; ++i) x[i] = v[std::size_t(i)];
  const Tensor d = dyn(x);
  auto agree = [&](const char* name, const auto& s, const Tensor& want) {
    fx::Tensor<float, N> got = s;
    std::vector<float> w = want.to_vector<float>();
    for (index_t i = 0; i < N; ++i) {
      INFO(name << "(" << x[i] << "): static " << got[i] << ", dynamic " << w[std::size_t(i)]);
      if (std::isnan(w[std::size_t(i)]))
        CHECK(std::isnan(got[i]));
      else
        CHECK(close(got[i], w[std::size_t(i)], 1e-5, 1e-30));
    }
  };
  agree("relu", x.relu(), d.relu());
  agree("relu6", x.relu6(), d.relu6());
  agree("leakyrelu", x.leakyrelu(0.1), d.leakyrelu(0.1));
  agree("abs", x.abs(), d.abs());
  agree("sign", x.sign(), d.sign());
  agree("clip", x.clip(-1, 2), d.clip(-1, 2));
  agree("hardtanh", x.hardtanh(), d.hardtanh());
  agree("sigmoid", x.sigmoid(), d.sigmoid());
  agree("silu", x.silu(), d.silu());
  agree("swish", x.swish(), d.swish());
  agree("quick_gelu", x.quick_gelu(), d.quick_gelu());
  agree("gelu", x.gelu(), d.gelu());
  agree("tanh", x.tanh(), d.tanh());
  agree("elu", x.elu(), d.elu());
  agree("softplus", x.softplus(), d.softplus());
  agree("softsign", x.softsign(), d.softsign());
  agree("exp", x.exp(), d.exp());
  agree("erf", x.erf(), d.erf());
  agree("asin", x.asin(), d.asin());
  agree("acos", x.acos(), d.acos());
  agree("atan", x.atan(), d.atan());
  agree("neg", -x, -d);
  fx::Tensor<float, N> nan;
  for (index_t i = 0; i < N; ++i) nan[i] = std::numeric_limits<float>::quiet_NaN();
  agree("maximum(x, NaN)", fx::maximum(x, nan), d.maximum(dyn(nan)));
  agree("maximum(NaN, x)", fx::maximum(nan, x), dyn(nan).maximum(d));
  agree("minimum(x, NaN)", fx::minimum(x, nan), d.minimum(dyn(nan)));
  agree("minimum(NaN, x)", fx::minimum(nan, x), dyn(nan).minimum(d));
  agree("maximum(x, 0)", x.maximum(0), d.maximum(0));
  // Reductions: a NaN anywhere gives NaN, wherever it sits among the lanes.
  for (index_t at = 0; at < 64; at += 7) {
    fx::Tensor<float, 4, 64> r;
    for (index_t i = 0; i < r.size; ++i) r[i] = float(i % 13) - 6;
    r[64 + at] = std::numeric_limits<float>::quiet_NaN();
    fx::Tensor<float, 4> mx = r.max<1>(), mn = r.min<1>();
    fx::Tensor<float, 1, 1> all = r.max<0, 1>(fx::keepdim);
    INFO("NaN at " << at);
    CHECK(std::isnan(mx[1]));
    CHECK(std::isnan(mn[1]));
    CHECK(std::isnan(all[0]));
    CHECK(mx[0] == 6);
    CHECK(mn[2] == -6);
  }
}

TEST_CASE("gelu: one function, near the float64 tanh form on every host device, in few kernels", "[math]") {
  // x sigmoid(2u) equals 0.5 x (1 + tanh(u)) exactly; in float32 it keeps its digits where
  // 1 + tanh(u) cancels (x < -5), so the error bound is relative to |gelu(x)| (a few ulps: exp2 and
  // the cubic round) plus a little absolute.
  std::vector<float> v;
  for (int i = -12000; i <= 12000; ++i) v.push_back(static_cast<float>(i * 1e-3));
  auto want = [](double x) {
    return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  };
  for (const char* dev : {"CPU", "CLANG", "LLVM"}) {
    if (!metagrad::test::available(dev)) continue;  // (sanitizer builds have no LLVM)
    Tensor x = Tensor(v, {static_cast<std::int64_t>(v.size())}).to(dev);
    x.realize();
    std::int64_t before = metagrad::GlobalCounters::kernel_count;
    Tensor y = x.gelu();
    y.realize();
    if (std::string(dev) != "CPU") CHECK(metagrad::GlobalCounters::kernel_count - before == 1);
    std::vector<float> got = y.to_vector<float>();
    for (std::size_t i = 0; i < v.size(); ++i) {
      INFO(dev << ": gelu(" << v[i] << ") = " << got[i] << ", want " << want(v[i]));
      REQUIRE(std::abs(got[i] - want(v[i])) <= 2e-6 * std::abs(want(v[i])) + 1e-12);
    }
    // The backward: sigmoid(2u) (read three times) and then the gradient over x and the incoming one.
    Tensor xg = Tensor(v, {static_cast<std::int64_t>(v.size())}, {.device = dev, .requires_grad = true});
    xg.realize();
    Tensor r = Tensor::rand({static_cast<std::int64_t>(v.size())}, {.device = dev}).realize();
    (xg.gelu() * r).sum().backward();
    before = metagrad::GlobalCounters::kernel_count;
    xg.grad->realize();
    if (std::string(dev) != "CPU") CHECK(metagrad::GlobalCounters::kernel_count - before <= 2);
  }
  std::vector<double> special = {0.0, -0.0, kInf, -kInf, kNaN};
  std::vector<double> y = Tensor(special, {5}).cast(metagrad::dtypes::float32).gelu().to_vector<double>();
  CHECK(y[0] == 0);
  CHECK(std::signbit(y[1]));
  CHECK(y[2] == kInf);
  CHECK(std::isnan(y[3]));  // -inf (1 + tanh(-inf)) = -inf * 0, as PyTorch
  CHECK(std::isnan(y[4]));
  check_gradients([](const std::vector<Tensor>& x) { return x[0].gelu(); },
                  {random_tensor({3, 7}, 12, -4, 4)});
}

namespace {
// float32 results against the float64 function, in units in the last place of the float answer.
double ulps(float got, double want) {
  float w = static_cast<float>(want);
  double ulp = double(std::nextafter(std::abs(w), std::numeric_limits<float>::infinity())) - std::abs(w);
  return std::abs(double(got) - want) / ulp;
}
}  // namespace

TEST_CASE("asin, acos, atan: float32 within 4 ulps over their domain on every device, NaN outside",
          "[math]") {
  // [-1, 1] every 1e-4 and the last 64 floats below 1 and above -1 (asin's steepest), atan from 1e-30
  // to 1e30 on a log scale, both signs.
  std::vector<float> unit, line;
  for (int i = -10000; i <= 10000; ++i) unit.push_back(static_cast<float>(i * 1e-4));
  for (float x = 1, k = 0; k < 64; ++k, x = std::nextafter(x, 0.f)) unit.push_back(x), unit.push_back(-x);
  for (double e = -30; e <= 30; e += 0.01)
    for (double s : {1.0, -1.0}) line.push_back(static_cast<float>(s * std::pow(10, e)));
  struct F {
    const char* name;
    Tensor (Tensor::*op)() const;
    double (*ref)(double);
    const std::vector<float>& x;
  };
  for (const F& f : {F{"asin", &Tensor::asin, [](double x) { return std::asin(x); }, unit},
                     F{"acos", &Tensor::acos, [](double x) { return std::acos(x); }, unit},
                     F{"atan", &Tensor::atan, [](double x) { return std::atan(x); }, line},
                     F{"atan", &Tensor::atan, [](double x) { return std::atan(x); }, unit}}) {
    std::vector<float> got = (Tensor(f.x, {std::int64_t(f.x.size())}).*f.op)().to_vector<float>();
    double worst = 0;
    for (std::size_t i = 0; i < f.x.size(); ++i) {
      double want = f.ref(f.x[i]), u = ulps(got[i], want);
      INFO(f.name << "(" << f.x[i] << ") = " << got[i] << ", want " << want << ": " << u << " ulps");
      REQUIRE(u <= 4);  // measured: asin 2.8, acos 1.7, atan 1.0 on CPU, CLANG and LLVM
      worst = std::max(worst, u);
    }
    UNSCOPED_INFO(f.name << ": max error " << worst << " ulps");
  }
  std::vector<double> special = {1, -1, 0, kInf, -kInf, kNaN, 1.0000001, -1.0000001, 2, -1e30};
  Tensor s = Tensor(special, {10}).cast(metagrad::dtypes::float32);
  const double pi = std::numbers::pi, n = kNaN;
  require_close(s.asin().to_vector<double>(), {pi / 2, -pi / 2, 0, n, n, n, n, n, n, n}, 0, 1e-7);
  require_close(s.acos().to_vector<double>(), {0, pi, pi / 2, n, n, n, n, n, n, n}, 0, 1e-7);
  require_close(s.atan().to_vector<double>(),
                {pi / 4, -pi / 4, 0, pi / 2, -pi / 2, n, std::atan(1.0000001), -std::atan(1.0000001),
                 std::atan(2), -pi / 2},
                0, 1e-7);
  // float64 keeps float64's digits; integers compute in float32, as exp does.
  std::vector<double> d = {-0.999999, -0.3, 0.7, 0.99999999};
  std::vector<double> a = Tensor(d, {4}).asin().to_vector<double>(),
                      c = Tensor(d, {4}).acos().to_vector<double>();
  for (std::size_t i = 0; i < d.size(); ++i) {
    CHECK(std::abs(a[i] - std::asin(d[i])) <= 4e-16 * std::abs(std::asin(d[i])));
    CHECK(std::abs(c[i] - std::acos(d[i])) <= 4e-16 * std::abs(std::acos(d[i])));
  }
  CHECK(Tensor(std::vector<std::int32_t>{0, 3}, {2}).atan().dtype() == metagrad::dtypes::float32);
}

TEST_CASE("asin, acos, atan: gradients, finite differences and the exact derivative", "[math]") {
  for (auto op : {&Tensor::asin, &Tensor::acos, &Tensor::atan})
    check_gradients([op](const std::vector<Tensor>& x) { return (x[0].*op)(); },
                    {random_tensor({3, 5}, 21, -0.97, 0.97)});
  check_gradients([](const std::vector<Tensor>& x) { return x[0].atan(); },
                  {random_tensor({3, 5}, 22, -40, 40)});
  std::vector<double> v = {-1, -0.999, -0.5, 0, 0.25, 0.9999, 1, 2};
  auto grad = [&](Tensor (Tensor::*op)() const) {
    Tensor x(v, {8}, {.requires_grad = true});
    (x.*op)().sum().backward();
    return x.grad->to_vector<double>();
  };
  std::vector<double> ga = grad(&Tensor::asin), gc = grad(&Tensor::acos), gt = grad(&Tensor::atan);
  for (std::size_t i = 0; i < v.size(); ++i) {
    double x = v[i], want = 1 / std::sqrt((1 - x) * (1 + x));
    INFO("x = " << x);
    if (std::abs(x) > 1) {
      CHECK(std::isnan(ga[i]));
      CHECK(std::isnan(gc[i]));
    } else {
      CHECK(ga[i] == Approx(want).epsilon(1e-12));  // +inf at +-1, as PyTorch
      CHECK(gc[i] == Approx(-want).epsilon(1e-12));
    }
    CHECK(gt[i] == Approx(1 / (1 + x * x)).epsilon(1e-12));
  }
}
