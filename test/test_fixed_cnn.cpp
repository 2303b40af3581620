// The static path's CNN ops: conv2d forward and both gradients (im2col + the blocked matmul) and
// pooling with any window and stride, against the dynamic Tensor path on the CPU device in float
// and central finite differences in double (tolerances in fixed_grad_check.hpp), over many shapes,
// strides, paddings and seeds.
#include <catch2/catch.hpp>

#include <optional>
#include <random>
#include <tuple>
#include <type_traits>

#include "fixed_grad_check.hpp"
#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/nn.hpp"

using namespace metagrad::test;

namespace {

template <index_t N, index_t C, index_t H, index_t W, index_t CO, index_t KH, index_t KW, index_t S,
          index_t P>
struct Conv {};

// Forward and both gradients of sum(r * relu(conv2d(x, w))) (the incoming gradient an expression
// the backward evaluates), on both paths.
template <index_t N, index_t C, index_t H, index_t W, index_t CO, index_t KH, index_t KW, index_t S,
          index_t P>
void conv_vs_dynamic(Conv<N, C, H, W, CO, KH, KW, S, P>, std::mt19937& rng) {
  INFO("x (" << N << ", " << C << ", " << H << ", " << W << "), w (" << CO << ", " << C << ", " << KH << ", "
             << KW << "), stride " << S << ", padding " << P);
  auto x = random_tensor<float, N, C, H, W>(rng);
  auto w = random_tensor<float, CO, C, KH, KW>(rng);
  auto y = fx::conv2d<S, P>(x, w);
  auto r = random_tensor<float, decltype(y)::shape::dims[0], CO, decltype(y)::shape::dims[2],
                         decltype(y)::shape::dims[3]>(rng);
  metagrad::Tensor dx = dyn(x, true), dw = dyn(w, true);
  metagrad::Tensor dy = dx.conv2d(dw, std::nullopt, 1, {S}, {1}, {P});
  same(fx::eval(y), dy, "forward");
  (dy.relu() * dyn(r)).sum().backward();
  auto [gx, gw] = fx::eval(fx::grad((y.relu() * r).sum(), x, w));
  same(gw, *dw.grad, "weight gradient");
  same(gx, *dx.grad, "input gradient");
}

template <index_t N, index_t C, index_t H, index_t W, index_t CO, index_t KH, index_t KW, index_t S,
          index_t P>
void conv_fd(Conv<N, C, H, W, CO, KH, KW, S, P>, std::mt19937& rng) {
  INFO("x (" << N << ", " << C << ", " << H << ", " << W << "), w (" << CO << ", " << C << ", " << KH << ", "
             << KW << "), stride " << S << ", padding " << P);
  auto x = random_tensor<double, N, C, H, W>(rng);
  auto w = random_tensor<double, CO, C, KH, KW>(rng);
  auto y = fx::conv2d<S, P>(x, w);
  using Y = typename decltype(y)::shape;
  auto r = random_tensor<double, Y::dims[0], Y::dims[1], Y::dims[2], Y::dims[3]>(rng);
  check_fd((y.sigmoid() * r).sum(), x, w);
}

// Shapes: batch 1 (no transposed copy of g) and more, square and not, kernels 1x1 to 5x5 and
// rectangular, stride 1 to 3, padding 0 to 2 (windows in the padding only, at stride > kernel).
const auto conv_cases = std::make_tuple(
    Conv<1, 1, 5, 5, 1, 3, 3, 1, 0>{}, Conv<2, 3, 9, 11, 4, 3, 3, 1, 1>{}, Conv<3, 2, 8, 8, 5, 3, 3, 2, 1>{},
    Conv<2, 3, 9, 11, 5, 5, 2, 3, 2>{}, Conv<1, 4, 7, 6, 3, 1, 1, 1, 0>{},
    Conv<4, 1, 12, 12, 6, 5, 5, 1, 0>{}, Conv<2, 2, 6, 7, 3, 2, 3, 2, 0>{}, Conv<2, 3, 5, 5, 2, 4, 4, 1, 2>{},
    Conv<2, 2, 4, 5, 3, 1, 1, 3, 1>{});

template <class Shape, index_t KH, index_t KW, index_t SH, index_t SW>
struct Pool {};

template <index_t... D>
auto random_of(fx::Shape<D...>, std::mt19937& rng) {
  return random_tensor<float, D...>(rng);
}

// max_pool2d and avg_pool2d forward and their gradients (through fixed::grad, under a random
// weighting) against the dynamic path.
template <class Shape, index_t KH, index_t KW, index_t SH, index_t SW>
void pool_vs_dynamic(Pool<Shape, KH, KW, SH, SW>, std::mt19937& rng) {
  INFO("input " << metagrad::to_string(Shape::dims) << ", window (" << KH << ", " << KW << "), stride (" << SH
                << ", " << SW << ")");
  auto x = random_of(Shape{}, rng);
  auto mp = fx::max_pool2d<KH, KW, SH, SW>(x);
  auto ap = fx::avg_pool2d<KH, KW, SH, SW>(x);
  auto r = random_of(typename decltype(mp)::shape{}, rng);
  metagrad::Tensor dx = dyn(x, true);
  metagrad::Tensor dm = dx.max_pool2d({KH, KW}, {SH, SW}), da = dx.avg_pool2d({KH, KW}, {SH, SW});
  same(fx::eval(mp), dm, "max_pool2d");
  same(fx::eval(ap), da, "avg_pool2d");
  (dm * dyn(r)).sum().backward();
  same(std::get<0>(fx::eval(fx::grad((mp * r).sum(), x))), *dx.grad, "max_pool2d gradient");
  metagrad::Tensor dx2 = dyn(x, true);
  (dx2.avg_pool2d({KH, KW}, {SH, SW}) * dyn(r)).sum().backward();
  same(std::get<0>(fx::eval(fx::grad((ap * r).sum(), x))), *dx2.grad, "avg_pool2d gradient");
}
// Both poolings' gradients against finite differences in double.
template <class Shape, index_t KH, index_t KW, index_t SH, index_t SW>
void pool_fd(Pool<Shape, KH, KW, SH, SW>, std::mt19937& rng) {
  auto x = fx::eval(random_of(Shape{}, rng).template cast<double>());
  auto r = fx::eval(
      random_of(typename decltype(fx::max_pool2d<KH, KW, SH, SW>(x))::shape{}, rng).template cast<double>());
  check_fd((fx::max_pool2d<KH, KW, SH, SW>(x) * r).sum(), x);
  check_fd((fx::avg_pool2d<KH, KW, SH, SW>(x) * r).sum(), x);
}

// Window = stride (the old form), overlapping windows (window > stride), gaps (window < stride, the
// end padded and cut), rectangular windows and strides, window = input, rank 2 to 5.
const auto pool_cases =
    std::make_tuple(Pool<fx::Shape<2, 3, 6, 4>, 2, 2, 2, 2>{}, Pool<fx::Shape<1, 2, 7, 7>, 3, 3, 2, 2>{},
                    Pool<fx::Shape<2, 1, 8, 9>, 2, 3, 1, 2>{}, Pool<fx::Shape<2, 2, 5, 5>, 2, 2, 3, 3>{},
                    Pool<fx::Shape<3, 7, 6>, 3, 3, 1, 1>{}, Pool<fx::Shape<5, 5>, 5, 5, 5, 5>{},
                    Pool<fx::Shape<2, 1, 9, 10>, 3, 2, 2, 3>{}, Pool<fx::Shape<1, 2, 2, 6, 7>, 1, 4, 2, 1>{},
                    Pool<fx::Shape<2, 3, 11, 8>, 4, 3, 3, 2>{});

}  // namespace

TEST_CASE("fixed conv2d forward and gradients agree with the dynamic path on the CPU device", "[fixed]") {
  std::mt19937 rng(2001);
  for (int seed = 0; seed < 3; ++seed)
    std::apply([&](auto... c) { (conv_vs_dynamic(c, rng), ...); }, conv_cases);
}

TEST_CASE("fixed conv2d gradients against finite differences", "[fixed]") {
  std::mt19937 rng(2002);
  conv_fd(Conv<1, 1, 5, 5, 1, 3, 3, 1, 0>{}, rng);
  conv_fd(Conv<2, 2, 6, 7, 3, 3, 3, 2, 1>{}, rng);
  conv_fd(Conv<2, 3, 5, 5, 2, 2, 3, 3, 2>{}, rng);
  conv_fd(Conv<2, 1, 4, 4, 2, 4, 4, 1, 2>{}, rng);
}

TEST_CASE("fixed conv2d gradients when the input is an expression and the kernel a view", "[fixed]") {
  std::mt19937 rng(2003);
  auto x = random_tensor<double, 2, 3, 6, 6>(rng);
  auto w = random_tensor<double, 3, 4, 3, 3>(rng);  // used as (Cout 4, Cin 3) through a permute
  auto r = random_tensor<double, 2, 4, 3, 3>(rng);
  check_fd((fx::conv2d<2, 1>(x.tanh() * 2, w.permute<1, 0, 2, 3>()).relu() * r).sum(), x, w);
}

TEST_CASE("fixed pooling with any window and stride agrees with the dynamic path and finite differences",
          "[fixed]") {
  std::mt19937 rng(2004);
  for (int seed = 0; seed < 3; ++seed)
    std::apply([&](auto... c) { (pool_vs_dynamic(c, rng), ...); }, pool_cases);
  pool_fd(Pool<fx::Shape<1, 2, 7, 7>, 3, 3, 2, 2>{}, rng);   // overlapping
  pool_fd(Pool<fx::Shape<2, 2, 5, 5>, 2, 2, 3, 3>{}, rng);   // gaps
  pool_fd(Pool<fx::Shape<2, 1, 9, 10>, 3, 2, 2, 3>{}, rng);  // rectangular, mixed
  // the short forms: a K x K window, stride K or S
  auto x = random_tensor<float, 1, 1, 7, 7>(rng);
  static_assert(std::is_same_v<decltype(fx::max_pool2d<2>(x).eval()), fx::Tensor<float, 1, 1, 3, 3>>);
  static_assert(std::is_same_v<decltype(fx::avg_pool2d<3, 2>(x).eval()), fx::Tensor<float, 1, 1, 3, 3>>);
  same(fx::eval(fx::max_pool2d<3, 2>(x)), dyn(x).max_pool2d({3, 3}, {2, 2}), "max_pool2d<3, 2>");
  same(fx::eval(fx::avg_pool2d<2>(x)), dyn(x).avg_pool2d({2, 2}), "avg_pool2d<2>");
}
