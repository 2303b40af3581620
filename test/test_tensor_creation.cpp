// Creation, dtypes, data access and the autograd switches of Tensor: constructors and factories
// against hand-written values, every dtype's round trip, casts and promotion, the random
// generators' ranges and moments, and that buffers are freed once nothing references them.
#include <cmath>
#include <limits>
#include <numeric>

#include "gradcheck.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::require_close;

namespace {
using Shape = std::vector<std::int64_t>;
Shape shape_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end()); }
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

template <class T>
void round_trip(const std::vector<T>& v, const Dims& shape) {
  INFO(dtype_of<T>.name);
  Tensor t(v, shape);
  REQUIRE(t.dtype() == dtype_of<T>);
  REQUIRE(t.shape() == shape);
  REQUIRE(t.to_vector<T>() == v);
  std::vector<double> as_double = t.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(as_double[i] == static_cast<double>(v[i]));
}

struct Moments {
  double mean = 0, std = 0, lo = INFINITY, hi = -INFINITY;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x, m.lo = std::min(m.lo, x), m.hi = std::max(m.hi, x);
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(v.size()));
  return m;
}
}  // namespace

TEST_CASE("construction from nested initializer lists", "[creation]") {
  Tensor a{1, 2, 3};
  REQUIRE(shape_of(a) == Shape{3});
  REQUIRE(a.dtype() == dtypes::float32);
  REQUIRE(a.to_vector<float>() == std::vector<float>{1, 2, 3});
  Tensor b{{1, 2, 3}, {4, 5, 6}};
  REQUIRE(shape_of(b) == Shape{2, 3});
  REQUIRE(b.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor c{{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}, {{9, 10}, {11, 12}}};
  REQUIRE(shape_of(c) == Shape{3, 2, 2});
  REQUIRE(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  REQUIRE(b.to_vector<float>()[4] == 5);  // row-major
  Tensor d({{1.5f, -2}}, {.dtype = dtypes::float64, .requires_grad = true});
  REQUIRE(d.dtype() == dtypes::float64);
  REQUIRE(shape_of(d) == Shape{1, 2});
  REQUIRE(d.requires_grad.get() == true);
  REQUIRE(vals(d) == std::vector<double>{1.5, -2});
  REQUIRE(d.device() == Device::DEFAULT);
  REQUIRE(to_string(b) == "<Tensor shape=(2, 3) dtype=float32 device=" + Device::DEFAULT + ">");
  REQUIRE(to_string(d) == "<Tensor shape=(1, 2) dtype=float64 device=" + Device::DEFAULT + " requires_grad>");
  REQUIRE(Tensor({1}, {.device = "CPU"}).device() == "CPU");
  Tensor i({7.9f, -7.9f}, {.dtype = dtypes::int32});
  REQUIRE(i.to_vector<std::int32_t>() == std::vector<std::int32_t>{7, -7});

  REQUIRE_THROWS_WITH((Tensor{{1, 2, 3}, {4, 5}}), Contains("ragged") && Contains("2") && Contains("3"));
  REQUIRE_THROWS_WITH((Tensor{{{1, 2}, {3, 4}}, {{5, 6}, {7}}}), Contains("ragged"));
}

TEST_CASE("construction from a vector and a shape", "[creation]") {
  Tensor t(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2});
  REQUIRE(shape_of(t) == Shape{3, 2});
  REQUIRE(t.dtype() == dtypes::float64);
  REQUIRE(vals(t) == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor s(std::vector<float>{4}, Dims{});
  REQUIRE(shape_of(s) == Shape{});
  REQUIRE(s.item() == 4.0f);
  Tensor e(std::vector<float>{}, {0, 5});
  REQUIRE(shape_of(e) == Shape{0, 5});
  REQUIRE(e.to_vector<float>().empty());
  Tensor c(std::vector<std::int64_t>{1, 2}, {2}, {.dtype = dtypes::float16});
  REQUIRE(c.dtype() == dtypes::float16);
  REQUIRE(vals(c) == std::vector<double>{1, 2});
  REQUIRE_THROWS_WITH(Tensor(std::vector<float>{1, 2, 3}, {2, 2}),
                      Contains("3 values") && Contains("(2, 2)"));
  REQUIRE_THROWS_WITH(Tensor(std::vector<float>{1}, {0}), Contains("1 values") && Contains("(0,)"));
}

TEST_CASE("every dtype round-trips through to_vector", "[creation]") {
  Dims s{2, 3};
  round_trip<float>({0, -1.5f, 3.25f, 1e30f, -1e-30f, std::numeric_limits<float>::max()}, s);
  round_trip<double>({0, -1.5, 1e300, -1e-300, M_PI, std::numeric_limits<double>::lowest()}, s);
  round_trip<std::int8_t>({0, 1, -1, 127, -128, 42}, s);
  round_trip<std::uint8_t>({0, 1, 255, 128, 7, 200}, s);
  round_trip<std::int32_t>({0, -1, 2147483647, -2147483647 - 1, 123456, -7}, s);
  round_trip<std::int64_t>({0, -1, std::numeric_limits<std::int64_t>::max(),
                            std::numeric_limits<std::int64_t>::min(), (std::int64_t{1} << 53) + 1, -3},
                           s);
  std::vector<half> h = {half(0.f),      half(-1.5f), half(65504.f), half(6.1035156e-05f),
                         half(5.96e-8f), half(0.333f)};
  Tensor th(h, s);
  REQUIRE(th.dtype() == dtypes::float16);
  std::vector<half> back = th.to_vector<half>();
  for (std::size_t i = 0; i < h.size(); ++i) REQUIRE(back[i].bits == h[i].bits);
  // bool: std::vector<bool> has no contiguous storage, so bools come in and out as uint8 or any number
  Tensor tb(std::vector<std::int32_t>{0, 1, 2, -5, 0, 1}, s, {.dtype = dtypes::bool_});
  REQUIRE(tb.dtype() == dtypes::bool_);
  REQUIRE(tb.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 1, 1, 0, 1});
  REQUIRE(tb.to_vector<double>() == std::vector<double>{0, 1, 1, 1, 0, 1});
  for (DType dt : dtypes::all) {
    INFO(dt.name);
    Tensor t({{0, 1, 2}, {3, 4, 5}}, {.dtype = dt});
    REQUIRE(t.dtype() == dt);
    std::vector<double> want = {0, 1, 2, 3, 4, 5};
    if (dt == dtypes::bool_) want = {0, 1, 1, 1, 1, 1};
    REQUIRE(vals(t) == want);
    REQUIRE(vals(Tensor::ones({2}, {.dtype = dt})) == std::vector<double>{1, 1});
  }
}

TEST_CASE("cast between dtypes: truncation toward zero, half rounding, bool", "[creation]") {
  Tensor f(std::vector<double>{-2.7, -0.5, 0.5, 2.7, 100.99, -100.99}, {6});
  REQUIRE(f.cast(dtypes::int32).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{-2, 0, 0, 2, 100, -100});
  REQUIRE(f.cast(dtypes::int64).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{-2, 0, 0, 2, 100, -100});
  REQUIRE(f.cast(dtypes::int8).to_vector<std::int8_t>() == std::vector<std::int8_t>{-2, 0, 0, 2, 100, -100});
  REQUIRE(Tensor({0, -0.f, 3}).cast(dtypes::bool_).to_vector<std::uint8_t>() ==
          std::vector<std::uint8_t>{0, 0, 1});
  REQUIRE(Tensor({250.7f, 0.2f}).cast(dtypes::uint8).to_vector<std::uint8_t>() ==
          std::vector<std::uint8_t>{250, 0});
  // int -> float and bool -> int are exact
  Tensor i(std::vector<std::int32_t>{-3, 0, 16777217}, {3});
  REQUIRE(i.cast(dtypes::float64).to_vector<double>() == std::vector<double>{-3, 0, 16777217});
  REQUIRE(i.cast(dtypes::float32).to_vector<double>() ==
          std::vector<double>{-3, 0, 16777216});  // float32 rounds
  Tensor b({1, 0, 1}, {.dtype = dtypes::bool_});
  REQUIRE(b.cast(dtypes::int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0, 1});
  REQUIRE(b.cast(dtypes::float32).to_vector<float>() == std::vector<float>{1, 0, 1});
  // float -> float16 rounds to nearest, ties to even; overflow to inf; tiny values to subnormals or 0
  const float ulp = std::ldexp(1.f, -10);  // spacing of float16 in [1, 2)
  Tensor h = Tensor({1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 4, 1 + 3 * ulp / 4, 65504, 65519, 65520, -70000,
                     1e-8f, 3e-8f, std::ldexp(1.f, -24) * 3})
                 .cast(dtypes::float16);
  REQUIRE(h.dtype() == dtypes::float16);
  std::vector<float> got = h.to_vector<float>();
  std::vector<float> want = {1,
                             1 + 2 * ulp,
                             1,
                             1 + ulp,
                             65504,
                             65504,
                             INFINITY,
                             -INFINITY,
                             0,
                             std::ldexp(1.f, -24),
                             std::ldexp(1.f, -24) * 3};
  REQUIRE(got == want);
  // float16 -> float32 -> float16 is lossless
  REQUIRE(h.cast(dtypes::float32).cast(dtypes::float16).to_vector<float>() == want);
  // casting to the same dtype is the tensor itself
  REQUIRE(f.cast(dtypes::float64).lazydata.get() == f.lazydata.get());
}

TEST_CASE("cast to bool is x != 0, fractions and NaN included (numpy, PyTorch)", "[creation]") {
  Tensor f(std::vector<double>{-2.7, -0.5, 0.5, 1e-30, 0, -0.0, NAN, -INFINITY}, {8});
  CHECK(f.cast(dtypes::bool_).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 1, 1, 1, 0, 0, 1, 1});
  Tensor h = Tensor({0.25f, 0}, {.dtype = dtypes::float16});
  CHECK(h.cast(dtypes::bool_).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 0});
  CHECK(Tensor({0.5f, 0}, {.dtype = dtypes::bool_}).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{1, 0});
}

TEST_CASE("promote_types: the PyTorch table", "[creation]") {
  STATIC_REQUIRE(promote_types(dtypes::int32, dtypes::float32) == dtypes::float32);
  STATIC_REQUIRE(promote_types(dtypes::bool_, dtypes::int32) == dtypes::int32);
  STATIC_REQUIRE(promote_types(dtypes::int8, dtypes::uint8) == dtypes::int16);
  STATIC_REQUIRE(promote_types(dtypes::uint8, dtypes::int8) == dtypes::int16);
  STATIC_REQUIRE(promote_types(dtypes::int64, dtypes::float16) == dtypes::float16);
  STATIC_REQUIRE(promote_types(dtypes::float16, dtypes::float64) == dtypes::float64);
  STATIC_REQUIRE(promote_types(dtypes::bool_, dtypes::bool_) == dtypes::bool_);
  // the whole table against the rule: floats beat ints beat bool; within a kind the wider wins;
  // a signed and an unsigned integer meet in the narrowest signed one holding both (numpy's rule),
  // uint64 and a signed one in float32 (tinygrad's), float16 and bfloat16 in float32
  auto rank = [](DType d) { return d.kind == 'b' ? 0 : d.kind == 'f' ? 2 : 1; };
  for (DType a : dtypes::all)
    for (DType b : dtypes::all) {
      INFO(a.name << " + " << b.name);
      DType want = rank(a) != rank(b) ? (rank(a) > rank(b) ? a : b) : (a.itemsize >= b.itemsize ? a : b);
      if (rank(a) == 1 && rank(b) == 1 && a.kind != b.kind) {
        DType sg = a.kind == 'i' ? a : b, un = a.kind == 'u' ? a : b;
        want = sg.itemsize > un.itemsize ? sg
               : un.itemsize == 1        ? dtypes::int16
               : un.itemsize == 2        ? dtypes::int32
               : un.itemsize == 4        ? dtypes::int64
                                         : dtypes::float32;  // uint64: no signed integer holds it (tinygrad)
      }
      if (rank(a) == 2 && rank(b) == 2 && a.itemsize == 2 && b.itemsize == 2 && !(a == b)) want = dtypes::float32;
      REQUIRE(promote_types(a, b) == want);
      REQUIRE(promote_types(a, b) == promote_types(b, a));
      Tensor x = Tensor::ones({2}, {.dtype = a}), y = Tensor::ones({2}, {.dtype = b});
      Tensor s = x + y;
      REQUIRE(s.dtype() == want);
      REQUIRE(vals(s) == std::vector<double>(2, want == dtypes::bool_ ? 1 : 2));
    }
}

TEST_CASE("empty, zeros, ones, full and the _like factories", "[creation]") {
  Tensor e = Tensor::empty({2, 3});
  REQUIRE(shape_of(e) == Shape{2, 3});
  REQUIRE(e.dtype() == dtypes::float32);
  REQUIRE(e.to_vector<float>().size() == 6);
  REQUIRE(Tensor::empty({4}, {.dtype = dtypes::int8}).dtype() == dtypes::int8);
  REQUIRE(vals(Tensor::zeros({2, 2})) == std::vector<double>(4, 0));
  REQUIRE(vals(Tensor::ones({3})) == std::vector<double>(3, 1));
  REQUIRE(vals(Tensor::full({2, 1}, -2.5)) == std::vector<double>(2, -2.5));
  REQUIRE(Tensor::full({}, 7).item() == 7.0f);
  REQUIRE(shape_of(Tensor::zeros({3, 0})) == Shape{3, 0});
  Tensor z = Tensor::zeros({2}, {.dtype = dtypes::int64, .requires_grad = true});
  REQUIRE(z.dtype() == dtypes::int64);
  REQUIRE(z.requires_grad.get() == true);
  REQUIRE(Tensor::full({1}, 0.1, {.dtype = dtypes::float64}).item<double>() == 0.1);
  REQUIRE(Tensor::full({1}, 0.1).item<double>() == static_cast<double>(0.1f));
  REQUIRE(Tensor::full({1}, 3.9, {.dtype = dtypes::int32}).item<std::int32_t>() == 3);

  Tensor like(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {3, 2});
  for (auto [t, v] : std::vector<std::pair<Tensor, double>>{
           {Tensor::zeros_like(like), 0}, {Tensor::ones_like(like), 1}, {Tensor::full_like(like, 9), 9}}) {
    REQUIRE(shape_of(t) == Shape{3, 2});
    REQUIRE(t.dtype() == dtypes::int32);
    REQUIRE(t.device() == like.device());
    REQUIRE(vals(t) == std::vector<double>(6, v));
  }
  Tensor lf = Tensor::full_like(like, 0.5, {.dtype = dtypes::float16});
  REQUIRE(lf.dtype() == dtypes::float16);
  REQUIRE(vals(lf) == std::vector<double>(6, 0.5));
  // a permuted view: _like takes its shape
  REQUIRE(shape_of(Tensor::ones_like(like.permute({1, 0}))) == Shape{2, 3});
}

TEST_CASE("arange with integer, negative and fractional steps; eye", "[creation]") {
  REQUIRE(vals(Tensor::arange(5)) == std::vector<double>{0, 1, 2, 3, 4});
  REQUIRE(Tensor::arange(5).dtype() == dtypes::int32);  // integer arguments, as tinygrad's
  REQUIRE(Tensor::arange(5.0).dtype() == dtypes::float32);
  REQUIRE(vals(Tensor::arange(2, 9, 3)) == std::vector<double>{2, 5, 8});
  REQUIRE(vals(Tensor::arange(5, 0, -1)) == std::vector<double>{5, 4, 3, 2, 1});
  REQUIRE(vals(Tensor::arange(3, -4, -2.5)) == std::vector<double>{3, 0.5, -2});
  REQUIRE(vals(Tensor::arange(0, 1, 0.25)) == std::vector<double>{0, 0.25, 0.5, 0.75});
  REQUIRE(vals(Tensor::arange(-1, 1.1, 0.5, {.dtype = dtypes::float64})) ==
          std::vector<double>{-1, -0.5, 0, 0.5, 1});
  require_close(vals(Tensor::arange(0, 0.35, 0.1, {.dtype = dtypes::float64})), {0, 0.1, 0.2, 0.3}, 1e-15);
  REQUIRE(shape_of(Tensor::arange(3, 3)) == Shape{0});
  REQUIRE(shape_of(Tensor::arange(0, -3)) == Shape{0});
  REQUIRE(shape_of(Tensor::arange(0, 3, -1)) == Shape{0});
  Tensor ai = Tensor::arange(0, 10, 3, {.dtype = dtypes::int32});
  REQUIRE(ai.dtype() == dtypes::int32);
  REQUIRE(ai.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 3, 6, 9});
  REQUIRE_THROWS_WITH(Tensor::arange(0, 5, 0), Contains("arange") && Contains("step"));

  Tensor i3 = Tensor::eye(3);
  REQUIRE(shape_of(i3) == Shape{3, 3});
  REQUIRE(vals(i3) == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  REQUIRE(shape_of(Tensor::eye(0)) == Shape{0, 0});
  REQUIRE(vals(Tensor::eye(1)) == std::vector<double>{1});
  REQUIRE(Tensor::eye(2, {.dtype = dtypes::int64}).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{1, 0, 0, 1});
  REQUIRE_THROWS_WITH(Tensor::eye(-1), Contains("eye") && Contains("-1"));
}

TEST_CASE("manual_seed makes rand and randn repeatable", "[creation]") {
  Tensor::manual_seed(42);
  std::vector<float> a = Tensor::rand({50}).to_vector<float>(), an = Tensor::randn({50}).to_vector<float>();
  Tensor::manual_seed(42);
  std::vector<float> b = Tensor::rand({50}).to_vector<float>(), bn = Tensor::randn({50}).to_vector<float>();
  REQUIRE(a == b);
  REQUIRE(an == bn);
  // the generator moves on, and another seed gives other numbers
  std::vector<float> c = Tensor::rand({50}).to_vector<float>();
  REQUIRE(c != a);
  Tensor::manual_seed(43);
  REQUIRE(Tensor::rand({50}).to_vector<float>() != a);
  // every random factory follows the seed
  for (auto make : std::vector<std::function<Tensor()>>{[] { return Tensor::uniform({20}, -2, 3); },
                                                        [] {
                                                          return Tensor::scaled_uniform({4, 5});
                                                        },
                                                        [] {
                                                          return Tensor::glorot_uniform({4, 5});
                                                        },
                                                        [] {
                                                          return Tensor::kaiming_uniform({4, 5});
                                                        }}) {
    Tensor::manual_seed(7);
    std::vector<float> x = make().to_vector<float>();
    Tensor::manual_seed(7);
    REQUIRE(make().to_vector<float>() == x);
  }
}

TEST_CASE("rand is uniform on 0..1 (1 excluded), randn standard normal", "[creation]") {
  Tensor::manual_seed(1);
  Moments r = moments(Tensor::rand({100000}).to_vector<double>());
  REQUIRE(r.lo >= 0);
  REQUIRE(r.hi < 1);
  REQUIRE(r.lo < 1e-3);
  REQUIRE(r.hi > 1 - 1e-3);
  REQUIRE(std::abs(r.mean - 0.5) < 0.005);
  REQUIRE(std::abs(r.std - std::sqrt(1.0 / 12)) < 0.005);
  Tensor rd = Tensor::rand({10, 10}, {.dtype = dtypes::float64, .requires_grad = true});
  REQUIRE(rd.dtype() == dtypes::float64);
  REQUIRE(rd.requires_grad.get() == true);
  REQUIRE(shape_of(rd) == Shape{10, 10});

  Moments n = moments(Tensor::randn({100000}).to_vector<double>());
  REQUIRE(std::abs(n.mean) < 0.015);
  REQUIRE(std::abs(n.std - 1) < 0.015);
  REQUIRE(n.lo < -3.5);
  REQUIRE(n.hi > 3.5);
  REQUIRE(Tensor::randn({3}, {.dtype = dtypes::float16}).dtype() == dtypes::float16);
}

TEST_CASE("uniform and the initializers stay within their bounds", "[creation]") {
  Tensor::manual_seed(3);
  auto within = [](const Tensor& t, double lo, double hi) {
    Moments m = moments(t.to_vector<double>());
    REQUIRE(m.lo >= lo);
    REQUIRE(m.hi < hi);
    // 10^4 samples reach close to both ends and average the middle
    REQUIRE(m.lo < lo + (hi - lo) * 0.01);
    REQUIRE(m.hi > hi - (hi - lo) * 0.01);
    REQUIRE(std::abs(m.mean - (lo + hi) / 2) < (hi - lo) * 0.02);
  };
  within(Tensor::uniform({100, 100}, -3, 5), -3, 5);
  within(Tensor::uniform({10000}), -1, 1);
  double s = 1 / std::sqrt(10000.0);
  within(Tensor::scaled_uniform({100, 100}), -s, s);
  double g = std::sqrt(6.0 / (50 + 200));  // fan_in + fan_out of a (50, 200) weight
  within(Tensor::glorot_uniform({50, 200}), -g, g);
  double k = std::sqrt(3.0) * std::sqrt(2.0 / (1 + 0.01 * 0.01)) / std::sqrt(200.0);
  within(Tensor::kaiming_uniform({50, 200}), -k, k);
  double k5 = std::sqrt(3.0) * std::sqrt(2.0 / (1 + 25.0)) / std::sqrt(4.0 * 5 * 5);
  within(Tensor::kaiming_uniform({100, 4, 5, 5}, 5), -k5, k5);
  Tensor u = Tensor::uniform({4}, 0, 1, {.dtype = dtypes::float64, .requires_grad = true});
  REQUIRE(u.dtype() == dtypes::float64);
  REQUIRE(u.requires_grad.get() == true);
  REQUIRE_FALSE(static_cast<bool>(u._ctx));  // a leaf, whatever built it
}

TEST_CASE("item, detach, assign, requires_grad_ and shared handles", "[creation]") {
  REQUIRE(Tensor({2.5f}).item() == 2.5f);
  REQUIRE(Tensor(std::vector<float>{-4}, {1, 1}).item<double>() == -4);
  REQUIRE(Tensor(std::vector<std::int64_t>{9}, Dims{}).item<std::int64_t>() == 9);
  REQUIRE_THROWS_WITH(Tensor::zeros({2, 3}).item(), Contains("item") && Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(Tensor::zeros({0}).item(), Contains("item") && Contains("(0,)"));

  Tensor w({1, 2, 3}, {.requires_grad = true});
  Tensor d = w.detach();
  REQUIRE(d.requires_grad.get() == false);
  REQUIRE(d.lazydata.get() == w.lazydata.get());  // same data, no copy
  (w * w.detach()).sum().backward();              // the detached factor is a constant
  REQUIRE(w.grad->to_vector<float>() == std::vector<float>{1, 2, 3});
  REQUIRE(!d.grad);

  // assign replaces the data of every handle to the tensor
  Tensor a = Tensor::zeros({2});
  Tensor alias = a;
  a.assign(Tensor({5, 6}));
  REQUIRE(alias.to_vector<float>() == std::vector<float>{5, 6});
  REQUIRE_THROWS_WITH(a.assign(Tensor::zeros({3})),
                      Contains("assign") && Contains("(3,)") && Contains("(2,)"));
  REQUIRE_THROWS_WITH(a.assign(Tensor::zeros({2}, {.dtype = dtypes::float64})),
                      Contains("assign") && Contains("float64") && Contains("float32"));

  Tensor r = Tensor::ones({2});
  REQUIRE(!r.requires_grad.get().has_value());
  Tensor& same = r.requires_grad_();
  REQUIRE(&same == &r);
  REQUIRE(r.requires_grad.get() == true);
  Tensor copy = r;
  copy.requires_grad_(false);
  REQUIRE(r.requires_grad.get() == false);  // copies share one state
  r.requires_grad_(true);
  (r * 3).sum().backward();
  REQUIRE(copy.grad->to_vector<float>() == std::vector<float>{3, 3});
  REQUIRE_THROWS_WITH(Tensor::ones({2}).sum().backward(), Contains("backward") && Contains("require"));
  REQUIRE_THROWS_WITH((r * 2).backward(), Contains("backward") && Contains("(2,)"));
}

TEST_CASE("Tensor::no_grad builds no graph", "[creation]") {
  Tensor w({1, 2}, {.requires_grad = true});
  REQUIRE(!Tensor::no_grad);
  {
    Tensor::NoGradGuard g;
    REQUIRE(Tensor::no_grad);
    Tensor y = (w * 2).sum();
    REQUIRE_FALSE(static_cast<bool>(y._ctx));
    try {
      y.backward();  // nothing to walk back through
    } catch (const std::invalid_argument&) {}
    REQUIRE_FALSE(static_cast<bool>(w.grad));
    { Tensor::NoGradGuard nested; }
    REQUIRE(Tensor::no_grad);  // a nested guard restores, not clears
  }
  REQUIRE(!Tensor::no_grad);
  Tensor y = (w * 2).sum();
  REQUIRE(static_cast<bool>(y._ctx));
  y.backward();
  REQUIRE(w.grad->to_vector<float>() == std::vector<float>{2, 2});
  // the graph is used once and freed
  REQUIRE_FALSE(static_cast<bool>(y._ctx));
}

TEST_CASE("live buffer counts return to their start when tensors go out of scope", "[creation]") {
  auto work = [] {
    Tensor::manual_seed(5);
    Tensor w = Tensor::randn({8, 4}, {.requires_grad = true});
    Tensor x = Tensor::rand({3, 8});
    Tensor y = (x.reshape({3, 8, 1}).expand({3, 8, 4}) * w.reshape({1, 8, 4})).sum(1).relu();
    Tensor loss = (y[{Slice{{}, {}, 2}}].cat({y.flip(0)}) - Tensor::arange(4)).pow(2).mean();
    loss.backward();
    (void)w.grad->to_vector<float>();
    Tensor z =
        Tensor::eye(5).triu(1).pad({{1, 1}, {0, 2}}, 3) + Tensor::full({7, 7}, 2, {.dtype = dtypes::int32});
    z.realize();
    return loss.item();
  };
  float first = work();  // caches fill once
  std::int64_t lazy = LazyBuffer::live_count, raw = RawBuffer::live_count;
  for (int i = 0; i < 5; ++i) REQUIRE(work() == first);
  REQUIRE(LazyBuffer::live_count == lazy);
  REQUIRE(RawBuffer::live_count == raw);
  {
    Tensor held = Tensor(std::vector<float>{1, 2, 3, 4}, {4}).realize();
    REQUIRE(RawBuffer::live_count > raw);
    REQUIRE(LazyBuffer::live_count > lazy);
  }
  REQUIRE(LazyBuffer::live_count == lazy);
  REQUIRE(RawBuffer::live_count == raw);
}
