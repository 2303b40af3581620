// The static path's hlops: the elementwise ones composed from core ops, conv2d (compile-time
// stride and padding), pooling, nll_loss and sparse_categorical_crossentropy, against explicit
// loops and the dynamic CPU path.
// Tolerances as in test_fixed.cpp (conv2d sums Cin*KH*KW products: 1e-4 relative).
#include "fixed_check.hpp"

using namespace metagrad::test;

namespace {
// The textbook convolution, in double.
template <index_t S, index_t P, class X, class W>
double conv_at(const X& x, const W& w, index_t n, index_t co, index_t y, index_t z) {
  constexpr auto dx = X::shape::dims, dw = W::shape::dims;
  double s = 0;
  for (index_t c = 0; c < dw[1]; ++c)
    for (index_t i = 0; i < dw[2]; ++i)
      for (index_t j = 0; j < dw[3]; ++j) {
        index_t iy = y * S + i - P, iz = z * S + j - P;
        if (iy >= 0 && iy < dx[2] && iz >= 0 && iz < dx[3]) s += double(x(n, c, iy, iz)) * w(co, c, i, j);
      }
  return s;
}
template <index_t S, index_t P, class X, class W, class O>
void check_conv(const X& x, const W& w, const O& out) {
  constexpr auto d = O::shape::dims;
  check_all(
      out,
      [&](index_t f) {
        auto [n, co, y, z] = unravel(f, std::array<index_t, 4>{d[0], d[1], d[2], d[3]});
        return conv_at<S, P>(x, w, n, co, y, z);
      },
      1e-4, 1e-5);
}
}  // namespace

TEST_CASE("fixed conv2d matches the textbook loop for strides and paddings", "[fixed]") {
  std::mt19937 rng(11);
  auto x = random_tensor<float, 2, 3, 9, 11>(rng);
  auto w = random_tensor<float, 4, 3, 3, 3>(rng);
  fx::Tensor<float, 2, 4, 7, 9> a = fx::conv2d(x, w);
  check_conv<1, 0>(x, w, a);
  fx::Tensor<float, 2, 4, 5, 6> b = fx::conv2d<2, 1>(x, w);
  check_conv<2, 1>(x, w, b);
  auto w5 = random_tensor<float, 5, 3, 5, 2>(rng);
  fx::Tensor<float, 2, 5, 3, 5> c = fx::conv2d<3, 2>(x * 2, w5);  // an expression input
  check_conv<3, 2>((x * 2).eval(), w5, c);
  auto bias = random_tensor<float, 4>(rng);
  fx::Tensor<float, 2, 4, 9, 11> d = fx::conv2d<1, 1>(x, w, bias).relu();
  check_all(
      d,
      [&](index_t f) {
        auto [n, co, y, z] = unravel(f, std::array<index_t, 4>{2, 4, 9, 11});
        return std::max(0.0, conv_at<1, 1>(x, w, n, co, y, z) + bias(co));
      },
      1e-4, 1e-5);
}

TEST_CASE("fixed pooling, nll_loss and cross-entropy match loops", "[fixed]") {
  std::mt19937 rng(12);
  auto x = random_tensor<float, 2, 3, 6, 4>(rng);
  fx::Tensor<float, 2, 3, 3, 2> mp = fx::max_pool2d<2>(x), ap = fx::avg_pool2d<2>(x);
  for (index_t f = 0; f < mp.size; ++f) {
    auto [n, c, y, z] = unravel(f, std::array<index_t, 4>{2, 3, 3, 2});
    double m = -1e30, s = 0;
    for (index_t i = 0; i < 2; ++i)
      for (index_t j = 0; j < 2; ++j)
        m = std::max<double>(m, x(n, c, 2 * y + i, 2 * z + j)), s += x(n, c, 2 * y + i, 2 * z + j);
    REQUIRE(close(mp[f], m));
    REQUIRE(close(ap[f], s / 4));
  }
  auto logits = random_tensor<float, 16, 10>(rng, -4, 4);
  fx::Tensor<int32_t, 16> labels;
  std::uniform_int_distribution<int> cls(0, 9);
  for (auto& l : labels) l = cls(rng);
  fx::Tensor<float> ce = fx::sparse_categorical_crossentropy(logits, labels);
  fx::Tensor<float> nll = fx::nll_loss(logits.log_softmax<1>(), labels.cast<float>());
  double want = 0;
  for (index_t n = 0; n < 16; ++n) {
    double m = -1e30, z = 0;
    for (index_t c = 0; c < 10; ++c) m = std::max<double>(m, logits(n, c));
    for (index_t c = 0; c < 10; ++c) z += std::exp(logits(n, c) - m);
    want -= (logits(n, labels(n)) - m - std::log(z)) / 16;
  }
  REQUIRE(close(ce[0], want));
  REQUIRE(close(nll[0], want));
}

TEST_CASE("fixed conv2d, pooling and cross-entropy agree with the dynamic path on the CPU device",
          "[fixed]") {
  std::mt19937 rng(13);
  auto x = random_tensor<float, 2, 2, 8, 8>(rng);
  auto w = random_tensor<float, 3, 2, 3, 3>(rng);
  auto b = random_tensor<float, 3>(rng);
  fx::Tensor<float, 2, 3, 4, 4> y = fx::max_pool2d<2>(fx::conv2d<1, 1>(x, w, b).relu());
  std::vector<float> d = dynamic(x)
                             .conv2d(dynamic(w), dynamic(b), 1, {1}, {1}, {1})
                             .relu()
                             .max_pool2d({2, 2})
                             .to_vector<float>();
  check_all(
      y, [&](index_t i) { return double(d[static_cast<std::size_t>(i)]); }, 1e-4, 1e-5);
  auto logits = random_tensor<float, 6, 5>(rng);
  fx::Tensor<float, 6> labels{0, 4, 2, 2, 1, 3};
  fx::Tensor<float> ce = fx::sparse_categorical_crossentropy(logits, labels);
  REQUIRE(close(ce[0], dynamic(logits).sparse_categorical_crossentropy(dynamic(labels)).item<float>()));
}

TEST_CASE("fixed elementwise hlops agree with the dynamic path on the CPU device", "[fixed]") {
  std::mt19937 rng(14);
  auto a = random_tensor<float, 5, 13>(rng, -5, 5);
  auto p = random_tensor<float, 5, 13>(rng, 0.1, 5);
  metagrad::Tensor da = dynamic(a), dp = dynamic(p);
  auto same = [](const auto& fixed_result, const metagrad::Tensor& dyn, double rel = 1e-5) {
    auto r = fx::eval(fixed_result);
    std::vector<float> want = dyn.to_vector<float>();
    check_all(
        r, [&](index_t i) { return double(want[static_cast<std::size_t>(i)]); }, rel, 1e-5);
  };
  same(p.log2(), dp.log2());
  same(a.exp2(), da.exp2());
  same(a.tan(), da.tan(), 1e-4);
  same(p.rsqrt(), dp.rsqrt());
  same(a.sign(), da.sign());
  same(a.clip(-1.5, 2), da.clip(-1.5, 2));
  same(a.hardtanh(), da.hardtanh());
  same(a.relu6(), da.relu6());
  same(a.elu(0.5), da.elu(0.5));
  same(a.leakyrelu(0.2), da.leakyrelu(0.2));
  same(a.swish(), da.swish());
  same(a.silu(), da.silu());
  same(a.hardswish(), da.hardswish());
  same(a.quick_gelu(), da.quick_gelu());
  same(a.softplus(2), da.softplus(2));
  same(a.mish(), da.mish(), 1e-4);
  same(a.softsign(), da.softsign());
  same(a.tanh(), da.tanh(), 1e-4);
  same(a.cos(), da.cos(), 1e-4);
  same(a.abs(), da.abs());
  same(fx::minimum(a, p) - fx::maximum(a, 1), da.minimum(dp) - da.maximum(1));
  same((a != p).cast<float>() + (a <= 0).cast<float>(),
       da.ne(dp).cast(metagrad::dtypes::float32) + (da <= 0).cast(metagrad::dtypes::float32));
}
