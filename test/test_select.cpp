// where is a select (TernaryOps::WHERE) and float -> int casts have one defined result, on the
// device under test (DEVICE; ctest runs the [math] suite on every device). Each rule is written
// here and checked as a property over random inputs with inf and NaN inserted, and against the CPU
// interpreter; gradients against finite differences and against PyTorch's rules where an inf or a
// NaN sits on the path not taken.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gradcheck.hpp"
#include "reference.hpp"

using namespace metagrad;
using namespace metagrad::test;
using i64 = std::int64_t;

namespace {

Tensor make(const std::vector<double>& v, DType dt, const std::string& device = "") {
  return Tensor(v, {static_cast<i64>(v.size())}, {.device = device, .dtype = dt});
}

// The rule, as PyTorch's where: x where c is true, y elsewhere, whatever the other holds.
std::vector<double> select(const std::vector<bool>& c, const std::vector<double>& x,
                           const std::vector<double>& y) {
  std::vector<double> out;
  for (std::size_t i = 0; i < c.size(); ++i) out.push_back(c[i] ? x[i] : y[i]);
  return out;
}

// Exact equality, NaN equal to NaN.
void require_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  require_close(got, want, 0, 0, what);
}

// The defined float -> integer cast: truncate toward zero, saturate to the dtype's range, NaN -> 0.
i64 saturating_cast(double v, DType to) {
  if (std::isnan(v)) return 0;
  double lo = dtypes::min_value(to), hi = to == dtypes::uint8 ? 256 : -lo;
  if (v <= lo) return static_cast<i64>(lo);
  if (v >= hi) return to == dtypes::int64 ? std::numeric_limits<i64>::max() : static_cast<i64>(hi) - 1;
  return static_cast<i64>(std::trunc(v));
}

}  // namespace

TEST_CASE("where: the example from issue 13 gives PyTorch's answer", "[math]") {
  Tensor c = make({1, 0}, dtypes::bool_), x = make({1, kInf}, dtypes::float32),
         y = make({2, 3}, dtypes::float32);
  require_same(c.where(x, y).to_vector<double>(), {1, 3}, "where([1,0], [1,inf], [2,3])");
  require_same(
      c.where(make({kNaN, 5}, dtypes::float32), make({2, kNaN}, dtypes::float32)).to_vector<double>(),
      {kNaN, kNaN}, "a NaN in the branch taken passes");
}

TEST_CASE("where: inf and NaN in the branch not taken never reach the result (property)", "[math]") {
  std::mt19937 gen(1313);
  const double specials[] = {kInf, -kInf, kNaN};
  Sampler sample;
  for (int trial = 0; trial < 60; ++trial) {
    if (!sample()) continue;
    DType dt = std::vector<DType>{dtypes::float32, dtypes::float64, dtypes::float16}[trial % 3];
    // Five lengths (tails of every vector width): the 15 dtype-length pairs' kernels serve all trials.
    std::size_t n = std::array<std::size_t, 5>{1, 5, 17, 64, 70}[trial % 5];
    std::vector<bool> c(n);
    std::vector<double> cv(n), x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) {
      c[i] = gen() % 2, cv[i] = c[i];
      x[i] = static_cast<double>(static_cast<int>(gen() % 200) - 100) / 4;  // exact in float16
      y[i] = static_cast<double>(static_cast<int>(gen() % 200) - 100) / 4;
      if (gen() % 2) (c[i] ? y[i] : x[i]) = specials[gen() % 3];  // the branch not taken
    }
    INFO("trial " << trial << ", " << dt.name << ", " << n << " elements");
    std::vector<double> want = select(c, x, y);
    Tensor got = make(cv, dtypes::bool_).where(make(x, dt), make(y, dt));
    REQUIRE(got.dtype() == dt);
    require_same(got.to_vector<double>(), want, "where");
    require_same(
        make(cv, dtypes::bool_, "CPU").where(make(x, dt, "CPU"), make(y, dt, "CPU")).to_vector<double>(),
        want, "where on CPU");
    // Fused into arithmetic and a reduction: the sum sees only the values taken.
    double sum = 0;
    for (double v : want) sum += 2 * v + 1;
    Tensor fused =
        (make(cv, dtypes::bool_).where(make(x, dtypes::float64), make(y, dtypes::float64)) * 2 + 1).sum();
    require_close({fused.item<double>()}, {sum}, 1e-9, 1e-12, "fused where-sum");
    // A float condition is true where it is non-zero, NaN included; -0.0 is false.
    std::vector<double> fc(n);
    for (std::size_t i = 0; i < n; ++i) fc[i] = c[i] ? (i % 2 ? kNaN : -2.5) : (i % 2 ? -0.0 : 0.0);
    require_same(make(fc, dtypes::float32).where(make(x, dt), make(y, dt)).to_vector<double>(), want,
                 "float condition");
  }
}

TEST_CASE("where: integer and bool branches, and broadcasting of all three", "[math]") {
  std::mt19937 gen(77);
  for (DType dt : {dtypes::int8, dtypes::uint8, dtypes::int32, dtypes::int64, dtypes::bool_}) {
    std::vector<bool> c(40);
    std::vector<double> cv(40), x(40), y(40);
    for (std::size_t i = 0; i < 40; ++i) {
      c[i] = gen() % 2, cv[i] = c[i];
      x[i] = dt == dtypes::bool_ ? gen() % 2 : gen() % 100,
      y[i] = dt == dtypes::bool_ ? gen() % 2 : gen() % 100;
    }
    INFO(dt.name);
    Tensor got = make(cv, dtypes::bool_).where(make(x, dt), make(y, dt));
    REQUIRE(got.dtype() == dt);
    require_same(got.to_vector<double>(), select(c, x, y), "where");
  }
  // c (3, 1), x (1, 4) with inf, y a scalar: the result (3, 4) takes x's columns where c holds.
  Tensor c = Tensor(std::vector<double>{1, 0, 1}, {3, 1}, {.dtype = dtypes::bool_});
  Tensor x = Tensor(std::vector<double>{kInf, 1, kNaN, -kInf}, {1, 4});
  Tensor w = c.where(x, Tensor(std::vector<double>{7}, {1}));
  REQUIRE(w.shape() == Dims{3, 4});
  require_same(w.to_vector<double>(), {kInf, 1, kNaN, -kInf, 7, 7, 7, 7, kInf, 1, kNaN, -kInf}, "broadcast");
  CHECK_THROWS_WITH(c.where(Tensor::ones({2, 4}), Tensor::ones({4})), Catch::Matchers::Contains("where"));
}

TEST_CASE("where: gradients go to the branch taken, none to the condition", "[math]") {
  Tensor c = random_tensor({3, 4}, 41) > 0;
  check_gradients([&](const std::vector<Tensor>& x) { return c.where(x[0] * x[1], x[1].exp()); },
                  {random_tensor({3, 4}, 42), random_tensor({3, 4}, 43)});
  check_gradients([&](const std::vector<Tensor>& x) { return c.where(x[0], x[1]); },
                  {random_tensor({1, 4}, 44), random_tensor({3, 1}, 45)});
  // An inf gradient arriving where the branch was not taken gives 0 there, not 0 * inf = NaN.
  Tensor x = Tensor(std::vector<double>{1, 2, 3}, {3}, {.requires_grad = true});
  Tensor m = make({1, 0, 1}, dtypes::bool_);
  (m.where(x, Tensor::zeros({3})) * Tensor(std::vector<double>{1, kInf, 2}, {3})).sum().backward();
  require_same(x.grad->to_vector<double>(), {1, 0, 2}, "grad of x");
  // A condition that requires grad gets none through where (only through x here: 2 where true).
  Tensor cond = Tensor(std::vector<double>{1, 0}, {2}, {.requires_grad = true});
  cond.where(cond * 2, Tensor::zeros({2})).sum().backward();
  require_same(cond.grad->to_vector<double>(), {2, 0}, "grad of the condition");
}

TEST_CASE("masked gradients: inf and NaN on the path not taken, as PyTorch", "[math]") {
  SECTION("relu: an inf gradient where the input is not positive gives 0") {
    Tensor x = Tensor(std::vector<double>{-1, 2, 0}, {3}, {.requires_grad = true});
    (x.relu() * Tensor(std::vector<double>{kInf, 1, kInf}, {3})).sum().backward();
    require_same(x.grad->to_vector<double>(), {0, 1, 0}, "relu");
  }
  SECTION("maximum: the losing side gets 0, ties half, NaN on either side both the gradient") {
    Tensor x = Tensor(std::vector<double>{1, 3, kNaN, 2, 5}, {5}, {.requires_grad = true});
    Tensor y = Tensor(std::vector<double>{2, 3, 1, kNaN, -kInf}, {5}, {.requires_grad = true});
    (x.maximum(y) * Tensor(std::vector<double>{kInf, 1, 1, 1, 1}, {5})).sum().backward();
    require_same(x.grad->to_vector<double>(), {0, 0.5, 1, 1, 1}, "d/dx");
    require_same(y.grad->to_vector<double>(), {kInf, 0.5, 1, 1, 0}, "d/dy");
  }
  SECTION("max: a NaN row's gradient goes to its NaNs, ties share") {
    Tensor x = Tensor(std::vector<double>{1, kNaN, 3, 2, 2, 1}, {2, 3}, {.requires_grad = true});
    x.max(1).sum().backward();
    require_same(x.grad->to_vector<double>(), {0, 1, 0, 0.5, 0.5, 0}, "max");
  }
  SECTION("pow: 0 where y = 0 (d/dx) and where x = 0, y >= 0 (d/dy)") {
    Tensor x = Tensor(std::vector<double>{0, 0, 2, 0}, {4}, {.requires_grad = true});
    Tensor y = Tensor(std::vector<double>{0, 2, 3, -1}, {4}, {.requires_grad = true});
    x.pow(y).sum().backward();
    require_same(x.grad->to_vector<double>(), {0, 0, 12, -kInf}, "d/dx");
    std::vector<double> dy = y.grad->to_vector<double>();
    require_same({dy[0], dy[1], dy[3]}, {0, 0, -kInf}, "d/dy");  // 0^-1 * ln 0 at (0, -1)
    require_close({dy[2]}, {8 * std::log(2.0)}, 1e-12, 1e-12);
  }
  SECTION("cross-entropy: a -inf logit in another class leaves the loss and gradient finite") {
    Tensor z = Tensor(std::vector<double>{0, -kInf, 1}, {1, 3}, {.requires_grad = true});
    Tensor loss = z.sparse_categorical_crossentropy(Tensor(std::vector<double>{0}, {1}));
    double e = std::exp(1.0);
    require_close({loss.item<double>()}, {std::log(1 + e)}, 1e-12, 1e-12, "loss");
    loss.backward();
    require_close(z.grad->to_vector<double>(), {1 / (1 + e) - 1, 0, e / (1 + e)}, 1e-12, 1e-12, "gradient");
  }
}

TEST_CASE("float -> int casts: truncate, saturate, NaN -> 0, on every device (property)", "[math]") {
  std::mt19937_64 gen(808);
  std::vector<double> edge = {kNaN,
                              kInf,
                              -kInf,
                              1e30,
                              -1e30,
                              3e9,
                              -3e9,
                              1e19,
                              -1e19,
                              127.5,
                              128,
                              -128.9,
                              -129,
                              255.9,
                              256,
                              -0.5,
                              0.99,
                              2147483647.0,
                              2147483648.0,
                              -2147483649.0,
                              9.2233720368547758e18,
                              -9.2233720368547758e18,
                              65504,
                              -65504,
                              -0.0};
  std::uniform_real_distribution<double> wide(-400, 400);
  for (DType from : {dtypes::float16, dtypes::float32, dtypes::float64}) {
    std::vector<double> v = edge;
    for (int i = 0; i < 200; ++i)
      v.push_back(i % 4 ? wide(gen) : std::ldexp(wide(gen), static_cast<int>(gen() % 70)));
    Tensor src = make(v, from);
    std::vector<double> stored = src.to_vector<double>();  // as the dtype rounds them
    for (DType to : {dtypes::int8, dtypes::uint8, dtypes::int32, dtypes::int64}) {
      INFO(from.name << " -> " << to.name);
      std::vector<i64> want;
      for (double x : stored) want.push_back(saturating_cast(x, to));
      std::vector<i64> got = src.cast(to).to_vector<i64>();
      std::vector<i64> fused = (src * 1).cast(to).to_vector<i64>();
      std::vector<i64> cpu = make(v, from, "CPU").cast(to).to_vector<i64>();
      for (std::size_t i = 0; i < v.size(); ++i) {
        INFO("value " << stored[i]);
        REQUIRE(got[i] == want[i]);
        REQUIRE(fused[i] == want[i]);
        REQUIRE(cpu[i] == want[i]);
      }
    }
  }
}
