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

#include "metagrad/detail/hlops.hpp"
#include "metagrad/fixed/expr.hpp"
#include "metagrad/fixed/functions.hpp"

namespace metagrad::fixed {

namespace detail {
template <class E, MovementOps M, auto Arg>
auto move(const E& e) {
  return Expr<op::Move<M, Arg>, E>(op::Move<M, Arg>{}, e);
}
template <Fn F, class... E>
auto map(const E&... e) {
  return Expr<op::Map<F>, E...>(op::Map<F>{}, e...);
}
template <class T, class S>
auto constant(T v) {
  return Expr<op::Const<T, S>>(op::Const<T, S>{v});
}

// e (an Expr) broadcast to shape S: leading size-1 axes by RESHAPE, then EXPAND, as the dynamic path.
template <class S, class E>
auto broadcast_to(const E& e) {
  constexpr Dims from = E::shape::dims;
  constexpr Dims padded = [] {
    Dims d = Dims::filled(S::rank - E::shape::rank, 1);
    for (std::int64_t x : E::shape::dims) d.push_back(x);
    return d;
  }();
  if constexpr (from == S::dims)
    return e;
  else if constexpr (padded == S::dims)
    return move<E, MovementOps::RESHAPE, padded>(e);
  else if constexpr (padded == from)
    return move<E, MovementOps::EXPAND, S::dims>(e);
  else
    return move<decltype(move<E, MovementOps::RESHAPE, padded>(e)), MovementOps::EXPAND, S::dims>(
        move<E, MovementOps::RESHAPE, padded>(e));
}

template <class A>
concept Scalar = std::is_arithmetic_v<A>;

// The expression of an operand; a scalar becomes a constant of Like's type and shape.
template <class Like, class A>
auto operand(const A& a) {
  if constexpr (Scalar<A>)
    return constant<typename Like::value_type, typename Like::shape>(
        static_cast<typename Like::value_type>(a));
  else
    return a.expr();
}
// Operand a as an expression of shape S: a scalar a constant of Like's type and shape, broadcast;
// an expression of shape S itself. One function per operand (the expression's copy is its pointers).
template <class S, class Like, class A>
auto fit(const A& a) {
  if constexpr (Scalar<A>)
    return broadcast_to<S>(operand<Like>(a));
  else if constexpr (!std::is_same_v<typename A::shape, S>)
    return broadcast_to<S>(a.expr());
  else if constexpr (is_expr<A>::value)
    return a;
  else
    return a.expr();
}
template <class... A>
using first_operand = boost::mp11::mp_at<boost::mp11::mp_list<A...>,
                                         boost::mp11::mp_find_if<boost::mp11::mp_list<A...>, std::is_class>>;

// Elementwise F over operands (at least one a tensor or expression), broadcast to a common shape.
template <Fn F, class... A>
auto elementwise(const A&... a) {
  using Like = first_operand<A...>;
  using S0 = typename Like::shape;
  constexpr Broadcast bc = [] {
    Broadcast r{S0::dims};
    for (const Dims& d : {decltype(operand<Like>(std::declval<A>()))::shape::dims...}) {
      Broadcast n = broadcast(r.shape, d);
      r = {n.shape, r.ok && n.ok};
    }
    return r;
  }();
  METAGRAD_FIXED_SHAPE_CHECK(bc.ok, "fixed: elementwise op: the shapes do not broadcast (numpy rules)",
                             err::elementwise, typename decltype(operand<Like>(std::declval<A>()))::shape...);
  constexpr bool same_type = [] {
    using V = boost::mp11::mp_list<typename decltype(operand<Like>(std::declval<A>()))::value_type...>;
    if constexpr (F == Fn::WHERE)
      return std::is_same_v<boost::mp11::mp_at_c<V, 1>, boost::mp11::mp_at_c<V, 2>>;
    else
      return boost::mp11::mp_same<boost::mp11::mp_front<V>, boost::mp11::mp_back<V>>::value;
  }();
  static_assert(same_type, "fixed: elementwise op on different element types: cast<U>() one operand");
  if constexpr (bc.ok && same_type) {
    using S = ShapeOf<bc.shape>;
    return Expr<op::Map<F>, decltype(fit<S, Like>(a))...>(op::Map<F>{}, fit<S, Like>(a)...);
  } else {  // after the error: a plausible result, so that no second error follows
    using T = typename Like::value_type;
    return constant<std::conditional_t<is_comparison(F), bool, T>, S0>({});
  }
}
}  // namespace detail

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

namespace detail {
template <Fn F, class E>
auto unary(const E& e) {
  static_assert(!FnTraits<F>::float_only || std::is_floating_point_v<typename E::value_type>,
                "fixed: exp, log, sin, sqrt and sigmoid need a floating-point operand: cast<float>() first");
  return map<F>(e.expr());
}
}  // namespace detail

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
METAGRAD_FIXED_HLOP(gelu)
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
  return pow(2, self());
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

namespace detail {
// floor (Up false) or ceil (Up true) as the dynamic path's: a truncating cast of x clipped to where
// every value is whole (so it never saturates), one comparison, and x - clip(x) for what lies
// beyond (inf stays inf, NaN NaN). Casts to an integer and comparisons pass no gradient, and
// x - clip(x) passes 1 - 1: the gradient is 0, as in PyTorch. Integers are their own floor.
template <bool Up, class E>
auto round_toward(const E& x) {
  using T = typename E::value_type;
  if constexpr (!std::is_floating_point_v<T>) {
    return x.expr();
  } else {
    constexpr double lim = std::numeric_limits<T>::digits == 24 ? 0x1p23 : 0x1p52;
    auto y = x.clip(-lim, lim);
    auto t = y.template cast<std::int64_t>().template cast<T>();
    if constexpr (Up)
      return t + (y > t).template cast<T>() + (x - y);
    else
      return t - (y < t).template cast<T>() + (x - y);
  }
}
}  // namespace detail
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

}  // namespace metagrad::fixed
