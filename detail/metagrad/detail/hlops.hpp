#pragma once
// The elementwise hlops whose formula both paths share, written once: templates over the tensor
// type X, a metagrad::Tensor (runtime/tensor/elementwise.cpp, after its float promotion) or a
// static expression (fixed/elementwise.hpp). They use only what both have: the mlop methods
// (relu, exp, log, sin, sigmoid), maximum/minimum with a scalar, arithmetic with scalars, and
// other hlops as methods. Where tinygrad's formula overflows (exp of a large x gives inf, and
// inf * 0 = NaN in the backward pass), the function is written so every exp sees a non-positive
// argument; smooth parts split at 0 with maximum/minimum, whose tie rule (half the gradient to
// each side) gives the exact derivative there, where relu's subgradient 0 would not.
#include <numbers>
#include <stdexcept>

namespace metagrad::hlops {

template <class X>
auto cos(const X& x) {
  return (std::numbers::pi / 2 - x).sin();
}
template <class X>
auto tan(const X& x) {
  return x.sin() / x.cos();
}
// 2 sigmoid(2x) - 1: exact at +-inf; near 0 its error is absolute (about one ulp of 1), not relative.
template <class X>
auto tanh(const X& x) {
  return 2.0 * (2.0 * x).sigmoid() - 1.0;
}
template <class X>
auto quick_gelu(const X& x) {
  return x * (x * 1.702).sigmoid();
}
template <class X>
auto square(const X& x) {
  return x * x;
}
template <class X>
auto abs(const X& x) {  // signed x (unsigned and bool values are their own magnitude)
  return x.relu() + (-x).relu();
}
template <class X>
auto reciprocal(const X& x) {
  return 1.0 / x;
}
template <class X>
auto log2(const X& x) {
  return x.log() * (1 / std::numbers::ln2);
}
// min > max gives max everywhere, as PyTorch's clamp; NaN stays NaN.
template <class X>
auto clip(const X& x, double min, double max) {
  return x.maximum(min).minimum(max);
}
// relu(x) clipped at 6, not tinygrad's relu(x) - relu(x - 6), which is inf - inf = NaN at inf.
template <class X>
auto relu6(const X& x) {
  return x.relu().minimum(6);
}
template <class X>
auto hardswish(const X& x) {
  return x * (x + 3).relu6() * (1.0 / 6);
}
template <class X>
auto elu(const X& x, double alpha) {
  return x.maximum(0) + alpha * (x.minimum(0).exp() - 1);
}
template <class X>
auto celu(const X& x, double alpha) {
  if (alpha == 0) throw std::invalid_argument("celu: alpha must not be 0 (it divides x)");
  return x.maximum(0) + alpha * ((x.minimum(0) / alpha).exp() - 1);
}
// relu(x) - slope * relu(-x): also right for a negative slope, unlike relu(x) - relu(-slope * x).
template <class X>
auto leakyrelu(const X& x, double neg_slope) {
  return x.relu() - neg_slope * (-x).relu();
}
template <class X>
auto swish(const X& x) {
  return x * x.sigmoid();
}
// log(1 + exp(b x)) / b as max(z, 0) + log(1 + exp(-|z|)) with z = b x: no overflow for large x
// (PyTorch switches to x above a threshold instead). Very negative z gives 0, not exp(z).
template <class X>
auto softplus(const X& x, double beta) {
  if (beta == 0) throw std::invalid_argument("softplus: beta must not be 0 (it divides the result)");
  auto z = x * beta;
  auto r = z.maximum(0), p = (-z).maximum(0);
  return (r + (1.0 + (-(r + p)).exp()).log()) / beta;
}
template <class X>
auto mish(const X& x) {
  return x * x.softplus().tanh();
}
template <class X>
auto softsign(const X& x) {
  return x / (1 + x.abs());
}

}  // namespace metagrad::hlops
