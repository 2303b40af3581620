// Issue 13 (reliability), the tensor and shape layers: shapes are checked once where they enter
// (negative sizes, products past int64), and an empty axis list means no axes. Issue 38: slices with
// extreme steps, the sign of zero, out-of-memory and unreadable-file messages.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "device_scope.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/nn/state.hpp"
#include "metagrad/shape/shapetracker.hpp"
#include "metagrad/shape/symbolic.hpp"
#include "metagrad/tensor.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using i64 = std::int64_t;

namespace {
constexpr i64 k2p32 = i64{1} << 32, k2p62 = i64{1} << 62;
constexpr i64 kMax = std::numeric_limits<i64>::max();
}  // namespace

// ---- 7: shape products and negative sizes --------------------------------------------------------

TEST_CASE("shapes: creation rejects negative sizes and element counts past int64", "[reliability]") {
  // ones({2^32, 2^32}).sum() was 0: the product wrapped
  REQUIRE_THROWS_AS(Tensor::ones({k2p32, k2p32}), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tensor::ones({k2p32, k2p32}),
                      Contains("Tensor.full") && Contains("(4294967296, 4294967296)") && Contains("int64"));
  REQUIRE_THROWS_WITH(Tensor::rand({-2, -3}),
                      Contains("Tensor.rand") && Contains("(-2, -3)") && Contains("negative"));
  REQUIRE_THROWS_WITH(Tensor::randn({-2, -3}), Contains("Tensor.randn") && Contains("negative"));
  REQUIRE_THROWS_AS(Tensor::empty({-1}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::zeros({3, -1}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::uniform({-4}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::kaiming_uniform({k2p62, 8}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::glorot_uniform({k2p62, 8}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::scaled_uniform({k2p62, 8}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::eye(k2p32), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::arange(0, 1e30), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor(std::vector<float>{}, {-1, 0}), std::invalid_argument);
  // a zero size makes no element, but the other sizes still derive strides: they must fit too
  REQUIRE_THROWS_AS(Tensor::zeros({0, k2p62, 4}), std::invalid_argument);
  // the largest shapes that fit stay fine (nothing is allocated for a constant)
  REQUIRE(Tensor::zeros({0, k2p62}).numel() == 0);
  REQUIRE(Tensor::zeros({k2p32, 1 << 30}).numel() == k2p62);
}

TEST_CASE("shapes: movement ops reject results past int64", "[reliability]") {
  // zeros({0}).reshape({2^62, 4}) was accepted: 2^64 wrapped to 0 elements
  REQUIRE_THROWS_WITH(Tensor::zeros({0}).reshape({k2p62, 4}),
                      Contains("reshape") && Contains("(4611686018427387904, 4)"));
  REQUIRE_THROWS_AS(Tensor::zeros({0}).reshape({k2p62, 4, 0}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::zeros({0}).reshape({k2p62, -1, 4}), std::invalid_argument);
  REQUIRE_THROWS_AS(Tensor::zeros({0}).reshape({0, -1}), std::invalid_argument);  // -1 cannot be inferred
  REQUIRE(Tensor::zeros({0}).reshape({k2p62, 0}).numel() == 0);
  Tensor big = Tensor::ones({k2p32, 1});
  REQUIRE_THROWS_WITH(big.expand({k2p32, k2p32}), Contains("expand") && Contains("int64"));
  REQUIRE_THROWS_WITH(Tensor::ones({k2p62}).pad({{k2p62, k2p62}}), Contains("pad"));
  REQUIRE_THROWS_WITH(Tensor::ones({2}).pad({{kMax, 1}}), Contains("pad") && Contains("int64"));
  REQUIRE_THROWS_AS(Tensor::ones({2}).pad2d({0, kMax}), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tensor::ones({k2p32}).repeat({k2p32}), Contains("repeat"));
  REQUIRE_THROWS_WITH(Tensor::ones({2}).repeat({kMax}), Contains("repeat") && Contains("int64"));
  REQUIRE_THROWS_AS(Tensor::ones({k2p62}).cat({Tensor::ones({k2p62}), Tensor::ones({k2p62})}),
                    std::invalid_argument);
  // Views check too, and prod() itself never wraps
  REQUIRE_THROWS_AS(prod(Dims{k2p32, k2p32}), std::invalid_argument);
  REQUIRE_THROWS_WITH(check_shape("op", Dims{3, -1}), Contains("op") && Contains("(3, -1)"));
  REQUIRE(check_shape("op", Dims{}) == 1);
  REQUIRE(check_shape("op", Dims{kMax, 0}) == 0);
}

// ---- 6: an empty axis list is no axes; every axis is AllAxes -------------------------------------

TEST_CASE("flip and reductions: {} is no axes, AllAxes every axis", "[movement]") {
  Tensor x(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE(x.flip({}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.flip(Axes{}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.flip(std::vector<i64>{}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.flip(AllAxes).to_vector<float>() == std::vector<float>{6, 5, 4, 3, 2, 1});
  REQUIRE(x.flip(0).to_vector<float>() == std::vector<float>{4, 5, 6, 1, 2, 3});

  // reductions: the default and AllAxes reduce everything, an empty list nothing (numpy's axis=())
  REQUIRE(x.sum().item<float>() == 21);
  REQUIRE(x.sum(AllAxes).item<float>() == 21);
  Tensor none = x.sum({});
  REQUIRE(none.shape() == Dims{2, 3});
  REQUIRE(none.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.max(std::vector<i64>{}, true).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.min(Axes{}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.mean({}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(x.mean().item<float>() == 3.5f);
  REQUIRE(x.max(AllAxes, true).shape() == Dims{1, 1});
}

// ---- symbolic: a modulo of a sum reduces each coefficient modulo the divisor ----------------------

TEST_CASE("symbolic: (x*7 + y) % 6 is (x + y) % 6, and the modulo goes when the bounds allow", "[symbolic]") {
  using symbolic::Node;
  using symbolic::Variable;
  Node x = Variable("x", 0, 9), y = Variable("y", 0, 9);
  REQUIRE((x * 7 + y) % 6 == (x + y) % 6);
  REQUIRE(((x * 7 + y) % 6).render() == "((x+y)%6)");
  REQUIRE((x * -5 + y + 13) % 6 == (x + y + 1) % 6);  // floor remainders: -5 -> 1, 13 -> 1
  Node i = Variable("i", 0, 1), j = Variable("j", 0, 4);
  REQUIRE(((i * 7 + j) % 6).render() == "(i+j)");  // i + j lies in [0, 6)
  for (std::int64_t a = -4; a <= 4; ++a)
    for (std::int64_t b = 0; b <= 9; ++b) {
      Node n = (Variable("a", -4, 4) * 13 + Variable("b", 0, 9) * -8 + 5) % 6;
      REQUIRE(n.evaluate({{"a", a}, {"b", b}}) == symbolic::floormod(a * 13 - b * 8 + 5, 6));
    }
}

TEST_CASE("ShapeTracker: simplify merges a stack whose index needs the modulo rule", "[shapetracker]") {
  // Above reads flat = 7i + j of an expanded (2, 6) view, whose index is flat % 6 = (i + j) % 6 = i + j.
  const View below = View(Dims{1, 6}).expand(Dims{2, 6});
  const View above(Dims{2, 5}, Dims{7, 1});
  ShapeTracker st(std::vector<View>{below, above});
  st.simplify();
  REQUIRE(st.views().size() == 1);
  REQUIRE(st.views()[0] == View(Dims{2, 5}, Dims{1, 1}));
}

// ---- issue 38 -----------------------------------------------------------------------------------

TEST_CASE("slices: steps near the int64 limits take what numpy takes", "[reliability]") {
  // arange(5)[::INT64_MAX] was [] (numpy [0]), [::INT64_MIN] [] (numpy [4]): the step overflowed
  Tensor x = Tensor::arange(5);
  auto take = [&](std::optional<i64> start, std::optional<i64> stop, i64 step) {
    return x[{Slice{start, stop, step}}].to_vector<float>();
  };
  constexpr i64 kMin = std::numeric_limits<i64>::min();
  REQUIRE(take({}, {}, kMax) == std::vector<float>{0});
  REQUIRE(take({}, {}, kMin) == std::vector<float>{4});
  REQUIRE(take({}, {}, kMax - 1) == std::vector<float>{0});
  REQUIRE(take({}, {}, -kMax) == std::vector<float>{4});
  REQUIRE(take(2, {}, kMax) == std::vector<float>{2});
  REQUIRE(take(2, {}, kMin) == std::vector<float>{2});
  REQUIRE(take(kMin, kMax, kMax) == std::vector<float>{0});
  REQUIRE(take(kMax, kMin, kMin) == std::vector<float>{4});
  REQUIRE(take(kMin, kMax, 3) == std::vector<float>{0, 3});
  REQUIRE(take(kMax, kMin, -3) == std::vector<float>{4, 1});
  REQUIRE(take({}, {}, 5) == std::vector<float>{0});
  REQUIRE(take({}, {}, 4) == std::vector<float>{0, 4});
  REQUIRE(take({}, {}, -4) == std::vector<float>{4, 0});
  REQUIRE(take(3, 1, kMax).empty());
  REQUIRE(take(1, 3, kMin).empty());
  // on an empty axis too
  REQUIRE(Tensor::arange(0)[{Slice{{}, {}, kMin}}].to_vector<float>().empty());
}

TEST_CASE("sign of zero: cat keeps -0, rsqrt(-0) is -inf", "[reliability]") {
  // cat was a sum of zero-padded pieces: -0 + 0 is +0
  for (const char* dev : {"CPU", "CLANG"}) {
    INFO(dev);
    Tensor a = Tensor({-0.f, 0.f, -1.f}, {.device = dev}), b = Tensor({0.f, -0.f}, {.device = dev});
    std::vector<float> c = a.cat({b, a}).to_vector<float>();
    std::vector<float> want = {-0.f, 0.f, -1.f, 0.f, -0.f, -0.f, 0.f, -1.f};
    REQUIRE(c.size() == want.size());
    for (std::size_t i = 0; i < c.size(); ++i) {
      INFO("element " << i);
      REQUIRE(c[i] == want[i]);
      REQUIRE(std::signbit(c[i]) == std::signbit(want[i]));
    }
    Tensor z = Tensor({-0.f, 0.f, 4.f, -1.f}, {.device = dev});
    std::vector<float> r = z.rsqrt().to_vector<float>();
    REQUIRE(r[0] == -std::numeric_limits<float>::infinity());
    REQUIRE(r[1] == std::numeric_limits<float>::infinity());
    REQUIRE(r[2] == 0.5f);
    REQUIRE(std::isnan(r[3]));
  }
}

TEST_CASE("sign of zero: rsqrt(-0) is -inf on the static path and on every device", "[reliability]") {
  auto check = [](const std::vector<float>& r) {
    REQUIRE(r[0] == -std::numeric_limits<float>::infinity());
    REQUIRE(r[1] == std::numeric_limits<float>::infinity());
    REQUIRE(r[2] == 0.5f);
    REQUIRE(std::isnan(r[3]));
  };
  fixed::Tensor<float, 4> z{-0.f, 0.f, 4.f, -1.f};
  fixed::Tensor<float, 4> r = z.rsqrt();
  check({r.data(), r.data() + 4});
  for (const char* dev : {"CPU", "CLANG", "LLVM", "OPENCL"}) {
    if (!test::available(dev)) continue;
    INFO(dev);
    check(Tensor({-0.f, 0.f, 4.f, -1.f}, {.device = dev}).rsqrt().to_vector<float>());
  }
}

TEST_CASE("messages: an impossible size and safe_load of a directory say what failed", "[reliability]") {
  // a bare std::bad_alloc named nothing
  for (auto make :
       {+[] { return Tensor::rand({i64{1} << 45}); }, +[] { return Tensor::empty({i64{1} << 45}); },
        +[] { return Tensor::zeros({i64{1} << 45}).contiguous(); }}) {
    try {
      make().realize();
      FAIL("no exception");
    } catch (const std::bad_alloc& e) {
      std::string what = e.what();
      INFO(what);
      REQUIRE(what.find("out of memory for") != std::string::npos);
      REQUIRE(what.find("(35184372088832,)") != std::string::npos);
      REQUIRE(what.find("140737488355328 bytes") != std::string::npos);
    }
  }
  // "basic_filebuf::underflow error reading the file: Is a directory"
  REQUIRE_THROWS_WITH(nn::safe_load("."), Contains("safe_load") && Contains("'.'") && Contains("directory"));
}

TEST_CASE("to_vector and item: float to integer saturates as cast does, NaN gives 0", "[reliability]") {
  // to_vector<int32_t>() of NaN and 1e30 was INT_MIN (an undefined static_cast)
  constexpr float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x({nan, 1e30f, -1e30f, inf, -inf, 2.75f, -2.75f, 3e9f, -0.5f});
  auto same_as_cast = [&](auto zero, DType dt) {
    using T = decltype(zero);
    std::vector<T> got = x.to_vector<T>(), want = x.cast(dt).to_vector<T>();
    REQUIRE(got == want);
    return got;
  };
  using L32 = std::numeric_limits<std::int32_t>;
  REQUIRE(same_as_cast(std::int32_t{}, dtypes::int32) ==
          std::vector<std::int32_t>{0, L32::max(), L32::min(), L32::max(), L32::min(), 2, -2, L32::max(), 0});
  same_as_cast(std::int64_t{}, dtypes::int64);
  REQUIRE(same_as_cast(std::uint8_t{}, dtypes::uint8) ==
          std::vector<std::uint8_t>{0, 255, 0, 255, 0, 2, 0, 255, 0});
  same_as_cast(std::int8_t{}, dtypes::int8);
  REQUIRE(Tensor({nan}).item<std::int32_t>() == 0);
  REQUIRE(Tensor({1e30f}).item<std::int32_t>() == L32::max());
  REQUIRE(Tensor({-1e30f}).item<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
}
