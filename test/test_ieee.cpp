// IEEE floats on every device: no fold on the way from a Tensor to machine code may turn a NaN or
// an inf into a number, or a -0 into +0, where float arithmetic keeps it. x * 0, x - x, x / x and
// 0 / x are NaN for an inf or NaN x; (a + b) - a is NaN for an inf a; a product that overflows
// stays inf. Each case runs on the default device (the device suites run [math] on every one)
// and is checked against float64 loops here; the sums are long enough (rows of 16 and more along
// memory) to be the kernels whose additions a device may reorder (Kernel::reassociate).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "metagrad/tensor.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Equal as IEEE values are told apart: NaN matches NaN, and the sign of a zero counts when `signed_zero`.
bool same(double got, double want, bool signed_zero) {
  if (std::isnan(want)) return std::isnan(got);
  if (want == 0 && signed_zero) return got == 0 && std::signbit(got) == std::signbit(want);
  return got == want || std::abs(got - want) <= 1e-6 * std::abs(want);
}

void require_same(const Tensor& t, const std::vector<double>& want, const std::string& what,
                  bool signed_zero = true) {
  std::vector<float> got = t.to_vector<float>();
  INFO(what << " on " << t.device());
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(same(got[i], want[i], signed_zero));
  }
}

// Rows of 16 (two rows): one of special values, one of ordinary ones and 1e10, whose product with
// 1e30 overflows.
std::vector<float> specials() {
  std::vector<float> v = {kInf, -kInf, kNaN, 0.f, -0.f, 1e-45f, -1e-45f, 3e38f,
                          1.f,  -2.f,  0.5f, 7.f, -3.f, 1e30f,  -1e30f,  2.f};
  for (int i = 0; i < 15; ++i) v.push_back(static_cast<float>(i % 5) - 2.25f);
  v.push_back(1e10f);
  return v;
}

float f32(double x) { return static_cast<float>(x); }

// Row sums of f (which rounds as float32 does) over each element, in float64: these rows hold no
// value whose rounding the order of a sum changes.
std::vector<double> row_sums(const std::vector<float>& v, const std::function<float(float)>& f) {
  std::vector<double> out(2, 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) out[i / 16] += f(v[i]);
  return out;
}

}  // namespace

TEST_CASE("IEEE: the issue's program, -inf times 0 summed, is NaN", "[math][ieee]") {
  Tensor y = Tensor(std::vector<float>{-0.11f, 1.65f, -2.98f, -1.74f, -0.29f, 1.72f, 1.12f, 0.02f, 1.57f,
                                       -1.64f, -0.05f, -0.17f, -2.04f, -kInf, 0.f, -0.56f},
                    {1, 1, 4, 4});
  y = y.min(Axes{1});
  y = y * 0.f;
  y = y.sum(Axes{1, 2}, true);
  require_same(y, {std::nan("")}, "sum(min(y) * 0)");
}

TEST_CASE("IEEE: folds in a sum keep NaN and inf (x * 0, (a + b) - a, overflow)", "[math][ieee]") {
  std::vector<float> v = specials();
  Tensor x(v, {2, 16});
  // Each summed along rows: a multiply-accumulate or a sum of elementwise work.
  require_same((x * 0.f).sum(-1), row_sums(v, [](float a) { return a * 0.f; }), "sum(x * 0)");
  require_same((x * -0.f).sum(-1), row_sums(v, [](float a) { return a * -0.f; }), "sum(x * -0)");
  require_same((x * 0.f + 1.f).sum(-1), row_sums(v, [](float a) { return a * 0.f + 1.f; }), "sum(x * 0 + 1)");
  require_same((x - x).sum(-1), row_sums(v, [](float a) { return a - a; }), "sum(x - x)");
  require_same((x / x).sum(-1), row_sums(v, [](float a) { return a / a; }), "sum(x / x)");
  Tensor ones = Tensor::ones({2, 16});
  require_same(((x + ones) - x).sum(-1), row_sums(v, [](float a) { return f32(a + 1.f) - a; }),
               "sum((x + 1) - x), 1 a buffer");
  // A product whose first factor overflows float32 stays inf (reassociated, x * (1e30 * 1e-30) is x).
  require_same((x * 1e30f * 1e-30f).sum(-1), row_sums(v, [](float a) { return f32(a * 1e30f) * 1e-30f; }),
               "sum(x * 1e30 * 1e-30)");
}

TEST_CASE("IEEE: elementwise folds keep NaN, inf and the sign of zero", "[math][ieee]") {
  std::vector<float> v = specials();
  Tensor x(v, {2, 16});
  auto each = [&](const std::function<float(float)>& f) {
    std::vector<double> out;
    for (float a : v) out.push_back(f(a));
    return out;
  };
  require_same(x * 0.f, each([](float a) { return a * 0.f; }), "x * 0");
  require_same(x * -0.f, each([](float a) { return a * -0.f; }), "x * -0");
  require_same(x * 1.f, each([](float a) { return a; }), "x * 1");
  require_same(x - x, each([](float a) { return a - a; }), "x - x");
  require_same(x / x, each([](float a) { return a / a; }), "x / x");
  require_same(0.f / x, each([](float a) { return 0.f / a; }), "0 / x");
  require_same(x + 0.f, each([](float a) { return a + 0.f; }), "x + 0 (-0 + 0 is +0)");
  require_same(x - 0.f, each([](float a) { return a - 0.f; }), "x - 0 (-0 - 0 is -0)");
  // Functions of a NaN the compiler can see (a constant): NaN, not the buffer's old contents.
  Tensor nan = x + kNaN;
  std::vector<double> nans(v.size(), std::nan(""));
  require_same(nan.exp2(), nans, "exp2(x + NaN)");
  require_same(nan.log2(), nans, "log2(x + NaN)");
  require_same(nan.sin(), nans, "sin(x + NaN)");
  require_same(nan.sqrt(), nans, "sqrt(x + NaN)");
  require_same((x * 0.f).exp2(), each([](float a) { return std::exp2(a * 0.f); }), "exp2(x * 0)");
  // The same beside a sum that may be reordered (one kernel: a row's sum read back over the row).
  Tensor s = x.sum(-1, true);
  std::vector<double> rows = row_sums(v, [](double a) { return a; });
  std::vector<double> want;
  for (std::size_t i = 0; i < v.size(); ++i) want.push_back(v[i] * 0.f + f32(rows[i / 16]) * 0.f);
  require_same(x * 0.f + s * 0.f, want, "x * 0 + sum(x) * 0");
}
