// The expensive functions' vector forms (detail/cpu/simd.hpp, detail/fixed/vec_form.hpp) at the ISA
// this unit is compiled for, against double references: e^x, 2^x, the sigmoid and GELU on random
// inputs over each function's whole range (overflow, denormal results, zero) and on NaN and the
// infinities; 2^n exact at every integer. Then the static path's contiguous loop over each (whole
// vectors and a tail) against the same references, and over doubles. The suite's own programs are
// built for the baseline ISA, where these forms do not exist; vector_math_main.cpp runs this only
// where the CPU has the ISA.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "metagrad/detail/fixed/vec_form.hpp"
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/tensor.hpp"

#if !defined(METAGRAD_CPU_VECTOR_MATH)
#error \
    "vector_math.cpp: compile with the flags of an ISA that has the vector forms (AVX2 and FMA, or AVX-512)"
#endif

namespace fx = metagrad::fixed;
namespace fd = metagrad::fixed::detail;
using metagrad::fn::Fn;
using metagrad::fn::FnTraits;

extern const char* const kVectorMathIsa = METAGRAD_VECTOR_MATH_ISA;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int W = fd::simd<float>::W;
int failures = 0;

// Distance in units in the last place (floats of one sign are ordered as their bits).
std::int64_t ulps(float a, float b) {
  auto key = [](float x) {
    auto i = std::bit_cast<std::int32_t>(x);
    return i < 0 ? std::int64_t(std::numeric_limits<std::int32_t>::min()) - i : std::int64_t(i);
  };
  return std::abs(key(a) - key(b));
}

// got against want (a double reference rounded to float): NaN for NaN, else within max_ulps, or
// within floor where want is below it (results the function defines as 0 there).
void expect(const char* what, float x, float got, double reference, std::int64_t max_ulps, double floor = 0) {
  const float want = static_cast<float>(reference);
  bool ok = std::isnan(want)
                ? std::isnan(got)
                : ulps(got, want) <= max_ulps || (std::abs(reference) < floor && std::abs(got) < floor);
  if (!ok && ++failures <= 20)
    std::printf("%s(%.9g): got %.9g, want %.9g (%lld ulps)\n", what, x, got, want,
                (long long)ulps(got, want));
}

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
// GELU against its scalar float form, the same formula: from 2u on, float rounding alone moves the
// result by up to |2u| ulps (200 at x = -10) on either form, so a double reference would test floats.
double gelu_ref(double x) { return FnTraits<Fn::GELU>::scalar(static_cast<float>(x)); }

// Inputs for a function whose interesting range is [lo, hi]: uniform over it and a little past both
// ends, dense near 0, and the special values.
std::vector<float> inputs(float lo, float hi, std::mt19937& rng) {
  std::vector<float> v = {0.f,
                          -0.f,
                          kNaN,
                          kInf,
                          -kInf,
                          lo,
                          hi,
                          std::nextafter(lo, 0.f),
                          std::nextafter(hi, 0.f),
                          std::numeric_limits<float>::min(),
                          -std::numeric_limits<float>::denorm_min()};
  std::uniform_real_distribution<float> wide(lo - 8, hi + 8), near(-4, 4);
  for (int i = 0; i < 200000; ++i) v.push_back(i % 2 ? wide(rng) : near(rng));
  while (v.size() % W) v.push_back(1.f);
  return v;
}

// f per vector over xs, each lane against ref.
template <class F, class R>
void check_vector(const char* what, const std::vector<float>& xs, F f, R ref, std::int64_t max_ulps,
                  double floor = 0) {
  for (std::size_t i = 0; i < xs.size(); i += W) {
    fd::FV v = fd::simd<float>::load(xs.data() + i), y = f(v);
    for (int l = 0; l < W; ++l) expect(what, xs[i + l], y[l], ref(double(xs[i + l])), max_ulps, floor);
  }
}

// The static path's loop over 1003 elements (whole vectors, then a tail in the scalar form).
template <class E, class R>
void check_loop(const char* what, const fx::Tensor<float, 1003>& x, const E& e, R ref, std::int64_t max_ulps,
                double floor = 0) {
  fx::Tensor<float, 1003> y = e;
  for (fx::index_t i = 0; i < 1003; ++i) expect(what, x[i], y[i], ref(double(x[i])), max_ulps, floor);
}
}  // namespace

int vector_math_check() {
  std::mt19937 rng(2026);
  // e^x: 0 below -104 (past the smallest denormal), inf past ln(FLT_MAX); denormal results included.
  check_vector(
      "exp", inputs(-104.f, 89.f, rng), fd::vexp, [](double x) { return std::exp(x); }, 2);
  check_vector(
      "exp2", inputs(-152.f, 129.f, rng), fd::vexp2, [](double x) { return std::exp2(x); }, 2);
  std::vector<float> n;
  for (int i = -170; i < 150; ++i) n.push_back(float(i));
  check_vector(
      "exp2 at integers", n, fd::vexp2, [](double x) { return std::exp2(x); }, 0);
  // The sigmoid: 0 where e^-x overflows a float (x below -88.38, true values under 4e-39).
  auto sig = [](double x) { return x < -double(metagrad::fixed::math::kExpHi) ? 0.0 : sigmoid_ref(x); };
  check_vector("sigmoid", inputs(-100.f, 100.f, rng), fd::vsigmoid, sig, 3);
  // GELU (tanh form), x sigmoid(2u): 0 where sigmoid(2u) is (below x = -10; |true value| < 1e-36).
  check_vector("gelu", inputs(-20.f, 20.f, rng), fd::vgelu, gelu_ref, 4, 1e-36);

  fx::Tensor<float, 1003> x;
  std::uniform_real_distribution<float> u(-12.f, 12.f);
  for (float& v : x) v = u(rng);
  check_loop(
      "loop exp", x, x.exp(), [](double v) { return std::exp(v); }, 2);
  check_loop(
      "loop exp2", x, (x * 8.f).exp2(), [](double v) { return std::exp2(double(float(v * 8))); }, 2);
  check_loop("loop sigmoid", x, x.sigmoid(), sigmoid_ref, 3);
  check_loop("loop gelu", x, x.gelu(), gelu_ref, 4, 1e-36);
  // Doubles take each function's scalar form lane by lane: libm's values, within a few ulps of double.
  fx::Tensor<double, 1003> xd;
  for (fx::index_t i = 0; i < 1003; ++i) xd[i] = x[i];
  fx::Tensor<double, 1003> ed = xd.exp(), sd = xd.sigmoid(), gd = xd.gelu(), pd = (xd * 8.0).exp2();
  for (fx::index_t i = 0; i < 1003; ++i) {
    const double v = xd[i],
                 want[] = {std::exp(v), sigmoid_ref(v), FnTraits<Fn::GELU>::scalar(v), std::exp2(v * 8)},
                 got[] = {ed[i], sd[i], gd[i], pd[i]};
    for (int f = 0; f < 4; ++f)
      if (!(std::abs(got[f] - want[f]) <= 1e-14 * std::abs(want[f])) && ++failures <= 20)
        std::printf("double form %d at %.17g: got %.17g, want %.17g\n", f, v, got[f], want[f]);
  }
  if (failures) std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
