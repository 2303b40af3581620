#pragma once
// matmul (2-D, and batched: (..., m, k) @ (k, n) or (..., k, n) with the same batch axes) and
// linear. A MatMul node is materialised by the blocked kernel of gemm.hpp; an operand that is a
// tensor seen through movement ops (x.transpose(), w.permute<...>()) is read in place through its
// strides, anything else is evaluated into an arena temporary first.
#include "metagrad/detail/fixed/matmul.hpp"
#include "metagrad/fixed/elementwise.hpp"

namespace metagrad::fixed {

template <Operand A, Operand B>
auto matmul(const A& a, const B& b) {
  using EA = expr_t<A>;
  using EB = expr_t<B>;
  constexpr bool ok = detail::matmul_fits<EA, EB>(), quiet = detail::any_failed<EA, EB>;  // said already
  METAGRAD_FIXED_SHAPE_CHECK(
      ok || quiet, "fixed: matmul: the inner dimensions differ ((..., m, k) @ (k, n), batch axes equal)",
      err::matmul, typename EA::shape, typename EB::shape);
  static_assert(std::is_same_v<typename EA::value_type, typename EB::value_type>,
                "fixed: matmul: both operands need the same element type");
  if constexpr (ok) {
    return Expr<op::MatMul, EA, EB>(op::MatMul{}, a.expr(), b.expr());
  } else {  // after the error: a plausible (..., m, n), so that no second error follows
    constexpr Dims out = [] {
      Dims d = EA::shape::dims;
      if (d.empty()) d.push_back(1);
      d.back() = EB::shape::rank ? EB::shape::dims[EB::shape::rank - 1] : 1;
      return d;
    }();
    return detail::failed_result<typename EA::value_type, ShapeOf<out>>();
  }
}

// x @ weight + bias (weight is (in, out), as the dynamic Tensor::linear).
template <Operand X, Operand W>
auto linear(const X& x, const W& weight) {
  return matmul(x, weight);
}
template <Operand X, Operand W, Operand B>
auto linear(const X& x, const W& weight, const B& bias) {
  return matmul(x, weight) + bias;
}

}  // namespace metagrad::fixed
