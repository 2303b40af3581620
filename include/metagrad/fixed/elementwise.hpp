#pragma once
// Elementwise operations: broadcasting per numpy through explicit RESHAPE/EXPAND nodes, scalar operands on
// either side, the operators, where, and the elementwise hlops built from them (as the dynamic path).
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/detail/fixed/elementwise.hpp"
#include "metagrad/detail/hlops.hpp"
#include "metagrad/fixed/expr.hpp"
#include "metagrad/functions.hpp"

namespace metagrad::fixed {

template <class A, class B>
concept BinaryOperands = (Operand<A> && (Operand<B> || detail::Scalar<B>)) ||
                         (detail::Scalar<A> && Operand<B>);

// Written out, not by a macro: a shape error's notes then point at the user's line, not a macro's.
template <class A, class B>
requires BinaryOperands<A, B>
auto operator+(const A& a, const B& b) { return detail::elementwise<Fn::ADD>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator-(const A& a, const B& b) { return detail::elementwise<Fn::SUB>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator*(const A& a, const B& b) { return detail::elementwise<Fn::MUL>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator/(const A& a, const B& b) { return detail::elementwise<Fn::DIV>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator<(const A& a, const B& b) { return detail::elementwise<Fn::CMPLT>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator<=(const A& a, const B& b) { return detail::elementwise<Fn::CMPLE>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator==(const A& a, const B& b) { return detail::elementwise<Fn::CMPEQ>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator!=(const A& a, const B& b) { return detail::elementwise<Fn::CMPNE>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto pow(const A& a, const B& b) { return detail::elementwise<Fn::POW>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto maximum(const A& a, const B& b) { return detail::elementwise<Fn::MAX>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto minimum(const A& a, const B& b) { return detail::elementwise<Fn::MIN>(a, b); }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator>(const A& a, const B& b) { return b < a; }
template <class A, class B>
requires BinaryOperands<A, B>
auto operator>=(const A& a, const B& b) { return b <= a; }
template <Operand A>
auto operator-(const A& a) {
  return a.neg();
}

// cond ? x : y elementwise (cond: any element type, nonzero is true); x or y may be scalars.
template <Operand C, class X, class Y>
requires(Operand<X> || detail::Scalar<X>) &&
    (Operand<Y> || detail::Scalar<Y>)auto where(const C& cond, const X& x, const Y& y) {
  if constexpr (Operand<X>)
    return detail::elementwise<Fn::WHERE>(cond, x, detail::operand<X>(y));
  else if constexpr (Operand<Y>)
    return detail::elementwise<Fn::WHERE>(cond, detail::operand<Y>(x), y);
  else {
    using T = std::common_type_t<X, Y>;
    using S = typename C::shape;
    return detail::elementwise<Fn::WHERE>(cond, detail::constant<T, S>(x), detail::constant<T, S>(y));
  }
}

template <class D>
auto ExprBase<D>::neg() const {
  return detail::unary<Fn::NEG>(self());
}
template <class D>
auto ExprBase<D>::exp() const {
  return detail::unary<Fn::EXP>(self());
}
template <class D>
auto ExprBase<D>::log() const {
  return detail::unary<Fn::LOG>(self());
}
template <class D>
auto ExprBase<D>::sin() const {
  return detail::unary<Fn::SIN>(self());
}
template <class D>
auto ExprBase<D>::sqrt() const {
  return detail::unary<Fn::SQRT>(self());
}
template <class D>
auto ExprBase<D>::relu() const {
  return detail::unary<Fn::RELU>(self());
}
template <class D>
auto ExprBase<D>::sigmoid() const {
  return detail::unary<Fn::SIGMOID>(self());
}
template <class D>
auto ExprBase<D>::erf() const {
  return detail::unary<Fn::ERF>(self());
}
template <class D>
auto ExprBase<D>::gelu() const {
  return detail::unary<Fn::GELU>(self());
}
template <class D>
auto ExprBase<D>::asin() const {
  return detail::unary<Fn::ASIN>(self());
}
template <class D>
auto ExprBase<D>::acos() const {
  return detail::unary<Fn::ACOS>(self());
}
template <class D>
auto ExprBase<D>::atan() const {
  return detail::unary<Fn::ATAN>(self());
}
// hlops: the formulas both paths share (detail/hlops.hpp), and the few written per path
template <class D>
template <class B>
auto ExprBase<D>::maximum(const B& y) const {
  return fixed::maximum(self(), y);
}
template <class D>
template <class B>
auto ExprBase<D>::minimum(const B& y) const {
  return fixed::minimum(self(), y);
}
#define METAGRAD_FIXED_HLOP(name)  \
  template <class D>               \
  auto ExprBase<D>::name() const { \
    return hlops::name(self());    \
  }
METAGRAD_FIXED_HLOP(cos)
METAGRAD_FIXED_HLOP(tan)
METAGRAD_FIXED_HLOP(tanh)
METAGRAD_FIXED_HLOP(quick_gelu)
METAGRAD_FIXED_HLOP(square)
METAGRAD_FIXED_HLOP(reciprocal)
METAGRAD_FIXED_HLOP(log2)
METAGRAD_FIXED_HLOP(relu6)
METAGRAD_FIXED_HLOP(hardswish)
METAGRAD_FIXED_HLOP(swish)
METAGRAD_FIXED_HLOP(mish)
METAGRAD_FIXED_HLOP(softsign)
#undef METAGRAD_FIXED_HLOP
template <class D>
auto ExprBase<D>::silu() const {
  return self().swish();
}
template <class D>
auto ExprBase<D>::clip(double min, double max) const {
  return hlops::clip(self(), min, max);
}
template <class D>
auto ExprBase<D>::hardtanh(double min, double max) const {
  return hlops::clip(self(), min, max);
}
template <class D>
auto ExprBase<D>::elu(double alpha) const {
  return hlops::elu(self(), alpha);
}
template <class D>
auto ExprBase<D>::celu(double alpha) const {
  return hlops::celu(self(), alpha);
}
template <class D>
auto ExprBase<D>::leakyrelu(double neg_slope) const {
  return hlops::leakyrelu(self(), neg_slope);
}
template <class D>
auto ExprBase<D>::softplus(double beta) const {
  return hlops::softplus(self(), beta);
}
// Unsigned and bool values are their own magnitude (negating them would wrap).
template <class D>
auto ExprBase<D>::abs() const {
  using T = typename D::value_type;
  if constexpr (std::is_unsigned_v<T>)
    return self().expr();
  else
    return hlops::abs(self());
}
template <class D>
auto ExprBase<D>::exp2() const {
  return detail::unary<Fn::EXP2>(self());
}
template <class D>
auto ExprBase<D>::rsqrt() const {
  return 1 / self().sqrt();
}
// From comparisons, so sign(inf) is 1 and tiny values keep their sign; as on the dynamic path, the
// max with min(x, -1) never changes the value but lets NaN through (and passes x no gradient).
template <class D>
auto ExprBase<D>::sign() const {
  using T = typename D::value_type;
  auto v = (self() > 0).template cast<T>() - (self() < 0).template cast<T>();
  if constexpr (std::is_floating_point_v<T>)
    return fixed::maximum(v, self().minimum(-1));
  else
    return v;
}

template <class D>
auto ExprBase<D>::floor() const {
  return detail::round_toward<false>(self());
}
template <class D>
auto ExprBase<D>::ceil() const {
  return detail::round_toward<true>(self());
}

template <class D>
template <class U>
auto ExprBase<D>::cast() const {
  using E = expr_t<D>;
  if constexpr (std::is_same_v<U, typename E::value_type>)
    return self().expr();
  else
    return Expr<op::Cast<U>, E>(op::Cast<U>{}, self().expr());
}

template <class D>
auto ExprBase<D>::detach() const {
  using E = expr_t<D>;
  return Expr<op::Detach, E>(op::Detach{}, self().expr());
}

}  // namespace metagrad::fixed
