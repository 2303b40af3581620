// The static path's elementwise hlops, floor, ceil and celu among them: values against the dynamic
// Tensor path on the CPU device in float, gradients through fixed::grad against central finite
// differences in double (tolerances in fixed_grad_check.hpp), over random inputs; floor and ceil
// also at whole, huge, infinite and NaN values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <type_traits>

#include "fixed_grad_check.hpp"

using namespace metagrad::test;

namespace {

// An elementwise hlop, f on the static path and d on the dynamic one, over random x in [lo, hi):
// its values, and the gradient of sum(r * f(x)) against finite differences.
template <class F, class D>
void hlop(const char* name, F f, D d, double lo, double hi, std::mt19937& rng) {
  INFO(name << " on [" << lo << ", " << hi << ")");
  auto x = random_tensor<float, 4, 13>(rng, lo, hi);
  same(fx::eval(f(x)), d(dynamic(x)), "value");
  auto xd = fx::eval(x.cast<double>());
  auto r = random_tensor<double, 4, 13>(rng);
  check_fd((f(xd) * r).sum(), xd);
}

}  // namespace

TEST_CASE("fixed elementwise hlops agree with the dynamic path and finite differences", "[fixed]") {
  std::mt19937 rng(2005);
  using T = metagrad::Tensor;
  for (int seed = 0; seed < 2; ++seed) {
    hlop(
        "floor", [](const auto& x) { return x.floor(); }, [](const T& x) { return x.floor(); }, -5, 5, rng);
    hlop(
        "ceil", [](const auto& x) { return x.ceil(); }, [](const T& x) { return x.ceil(); }, -5, 5, rng);
    hlop(
        "celu", [](const auto& x) { return x.celu(0.7); }, [](const T& x) { return x.celu(0.7); }, -4, 4,
        rng);
    hlop(
        "cos", [](const auto& x) { return x.cos(); }, [](const T& x) { return x.cos(); }, -4, 4, rng);
    hlop(
        "tan", [](const auto& x) { return x.tan(); }, [](const T& x) { return x.tan(); }, -1.2, 1.2, rng);
    hlop(
        "tanh", [](const auto& x) { return x.tanh(); }, [](const T& x) { return x.tanh(); }, -4, 4, rng);
    hlop(
        "gelu", [](const auto& x) { return x.gelu(); }, [](const T& x) { return x.gelu(); }, -4, 4, rng);
    hlop(
        "square", [](const auto& x) { return x.square(); }, [](const T& x) { return x.square(); }, -4, 4,
        rng);
    hlop(
        "abs", [](const auto& x) { return x.abs(); }, [](const T& x) { return x.abs(); }, -4, 4, rng);
    hlop(
        "sign", [](const auto& x) { return x.sign(); }, [](const T& x) { return x.sign(); }, -4, 4, rng);
    hlop(
        "reciprocal", [](const auto& x) { return x.reciprocal(); }, [](const T& x) { return x.reciprocal(); },
        0.3, 4, rng);
    hlop(
        "log2", [](const auto& x) { return x.log2(); }, [](const T& x) { return x.log2(); }, 0.3, 4, rng);
    hlop(
        "exp2", [](const auto& x) { return x.exp2(); }, [](const T& x) { return x.exp2(); }, -4, 4, rng);
    hlop(
        "rsqrt", [](const auto& x) { return x.rsqrt(); }, [](const T& x) { return x.rsqrt(); }, 0.3, 4, rng);
    hlop(
        "clip", [](const auto& x) { return x.clip(-1.5, 2); }, [](const T& x) { return x.clip(-1.5, 2); }, -4,
        4, rng);
    hlop(
        "hardtanh", [](const auto& x) { return x.hardtanh(); }, [](const T& x) { return x.hardtanh(); }, -3,
        3, rng);
    hlop(
        "relu6", [](const auto& x) { return x.relu6(); }, [](const T& x) { return x.relu6(); }, -8, 8, rng);
    hlop(
        "elu", [](const auto& x) { return x.elu(0.5); }, [](const T& x) { return x.elu(0.5); }, -4, 4, rng);
    hlop(
        "leakyrelu", [](const auto& x) { return x.leakyrelu(0.2); },
        [](const T& x) { return x.leakyrelu(0.2); }, -4, 4, rng);
    hlop(
        "swish", [](const auto& x) { return x.swish(); }, [](const T& x) { return x.swish(); }, -4, 4, rng);
    hlop(
        "silu", [](const auto& x) { return x.silu(); }, [](const T& x) { return x.silu(); }, -4, 4, rng);
    hlop(
        "hardswish", [](const auto& x) { return x.hardswish(); }, [](const T& x) { return x.hardswish(); },
        -5, 5, rng);
    hlop(
        "quick_gelu", [](const auto& x) { return x.quick_gelu(); }, [](const T& x) { return x.quick_gelu(); },
        -4, 4, rng);
    hlop(
        "softplus", [](const auto& x) { return x.softplus(2); }, [](const T& x) { return x.softplus(2); }, -4,
        4, rng);
    hlop(
        "mish", [](const auto& x) { return x.mish(); }, [](const T& x) { return x.mish(); }, -4, 4, rng);
    hlop(
        "softsign", [](const auto& x) { return x.softsign(); }, [](const T& x) { return x.softsign(); }, -4,
        4, rng);
  }
  // floor and ceil exactly, where the float is already whole, at +-inf and NaN
  fx::Tensor<float, 8> v{-2.5f, -0.5f, -0.f, 3.f, 0x1p30f, -0x1p30f, INFINITY, NAN};
  same(fx::eval(v.floor()), dyn(v).floor(), "floor of special values");
  same(fx::eval(v.ceil()), dyn(v).ceil(), "ceil of special values");
  fx::Tensor<int32_t, 3> i{-3, 0, 7};
  static_assert(std::is_same_v<decltype(i.floor().eval()), fx::Tensor<int32_t, 3>>);
  REQUIRE(i.ceil().eval()[0] == -3);
  REQUIRE_THROWS_AS(v.celu(0), std::invalid_argument);
}

TEST_CASE("fixed var, var_mean, std_mean agree with the dynamic path and finite differences", "[fixed]") {
  std::mt19937 rng(2040);
  auto x = random_tensor<float, 4, 13>(rng, -2, 2);
  metagrad::Tensor xd = dynamic(x);
  for (std::int64_t c : {0, 1, 2}) {
    INFO("correction " << c);
    auto [v, m] = fx::var_mean<1>(x, c);
    auto [dv, dm] = xd.var_mean(1, false, c);
    same(fx::eval(v), dv, "var_mean: var");
    same(fx::eval(m), dm, "var_mean: mean");
    auto [s, m0] = fx::std_mean<0>(x, c);
    auto [ds, dm0] = xd.std_mean(0, false, c);
    same(fx::eval(s), ds, "std_mean: std");
    same(fx::eval(m0), dm0, "std_mean: mean");
    same(fx::eval(fx::var<0, 1>(x, c).reshape<1>()), xd.var({0, 1}, false, c).reshape({1}), "var, both axes");
  }
  auto x64 = fx::eval(x.cast<double>());
  auto r = random_tensor<double, 13>(rng);
  auto [v, m] = fx::std_mean<0>(x64, 1);
  check_fd(((v + m * 2.0) * r).sum(), x64);
  auto [v1, m1] = fx::var_mean<1>(x64, 0);
  check_fd((v1 * m1).sum(), x64);
}
