#pragma once
// Elementwise operations: the Fn table (what each function computes, for every evaluator that runs
// on the host), broadcasting per numpy through explicit RESHAPE/EXPAND nodes, scalar operands on
// either side, the operators, where, and the elementwise hlops built from them (as the dynamic path).
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/fixed/expr.hpp"
#include "metagrad/fixed/math.hpp"

namespace metagrad::fixed {

// One element of Fn F (y and z only for binary and ternary F).
template <Fn F, class X, class Y = X, class Z = Y>
inline auto apply_fn(X x, Y y = {}, Z z = {}) {
  if constexpr (F == Fn::NEG)
    return X(-x);
  else if constexpr (F == Fn::EXP)
    return math::exp(x);
  else if constexpr (F == Fn::LOG)
    return std::log(x);
  else if constexpr (F == Fn::SIN)
    return std::sin(x);
  else if constexpr (F == Fn::SQRT)
    return std::sqrt(x);
  else if constexpr (F == Fn::RELU)
    return x > 0 ? x : X(0);
  else if constexpr (F == Fn::SIGMOID)
    return math::sigmoid(x);
  else if constexpr (F == Fn::ADD)
    return X(x + y);
  else if constexpr (F == Fn::SUB)
    return X(x - y);
  else if constexpr (F == Fn::MUL)
    return X(x * y);
  else if constexpr (F == Fn::DIV)
    return X(x / y);
  else if constexpr (F == Fn::POW)
    return X(std::pow(x, y));
  else if constexpr (F == Fn::MAX)
    return x < y ? y : x;
  else if constexpr (F == Fn::MIN)
    return y < x ? y : x;
  else if constexpr (F == Fn::CMPLT)
    return x < y;
  else if constexpr (F == Fn::CMPLE)
    return x <= y;
  else if constexpr (F == Fn::CMPEQ)
    return x == y;
  else if constexpr (F == Fn::CMPNE)
    return x != y;
  else
    return x ? y : z;
}

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
  static_assert(
      shapes_fit<bc.ok, err::elementwise, typename decltype(operand<Like>(std::declval<A>()))::shape...>,
      "fixed: elementwise op: the operands' shapes do not broadcast (numpy rules)");
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
    return map<F>(broadcast_to<S>(operand<Like>(a))...);
  }
}
}  // namespace detail

template <class A, class B>
concept BinaryOperands = (Operand<A> && (Operand<B> || detail::Scalar<B>)) ||
                         (detail::Scalar<A> && Operand<B>);

#define METAGRAD_FIXED_BINARY(name, F) \
  template <class A, class B>          \
  requires BinaryOperands<A, B>        \
  auto name(const A& a, const B& b) { return detail::elementwise<Fn::F>(a, b); }
METAGRAD_FIXED_BINARY(operator+, ADD)
METAGRAD_FIXED_BINARY(operator-, SUB)
METAGRAD_FIXED_BINARY(operator*, MUL)
METAGRAD_FIXED_BINARY(operator/, DIV)
METAGRAD_FIXED_BINARY(operator<, CMPLT)
METAGRAD_FIXED_BINARY(operator<=, CMPLE)
METAGRAD_FIXED_BINARY(operator==, CMPEQ)
METAGRAD_FIXED_BINARY(operator!=, CMPNE)
METAGRAD_FIXED_BINARY(pow, POW)
METAGRAD_FIXED_BINARY(maximum, MAX)
METAGRAD_FIXED_BINARY(minimum, MIN)
#undef METAGRAD_FIXED_BINARY
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
  static_assert(F == Fn::NEG || F == Fn::RELU || std::is_floating_point_v<typename E::value_type>,
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
// hlops, composed as on the dynamic path
template <class D>
auto ExprBase<D>::cos() const {
  return (std::numbers::pi / 2 - self()).sin();
}
template <class D>
auto ExprBase<D>::tanh() const {
  return 2 * (2 * self()).sigmoid() - 1;
}
template <class D>
auto ExprBase<D>::gelu() const {
  const auto& x = self();
  return 0.5 * x * (1 + (x * 0.7978845608028654 * (1 + 0.044715 * x * x)).tanh());
}
template <class D>
auto ExprBase<D>::square() const {
  return self() * self();
}
template <class D>
auto ExprBase<D>::abs() const {
  return self().relu() + (-self()).relu();
}
template <class D>
auto ExprBase<D>::reciprocal() const {
  return 1 / self();
}
template <class D>
auto ExprBase<D>::log2() const {
  return self().log() * (1 / std::numbers::ln2);
}
template <class D>
auto ExprBase<D>::exp2() const {
  return pow(2, self());
}
template <class D>
auto ExprBase<D>::tan() const {
  return self().sin() / self().cos();
}
template <class D>
auto ExprBase<D>::rsqrt() const {
  return 1 / self().sqrt();
}
template <class D>
auto ExprBase<D>::sign() const {
  using T = typename D::value_type;
  return (self() > 0).template cast<T>() - (self() < 0).template cast<T>();
}
template <class D>
auto ExprBase<D>::clip(double min, double max) const {
  return minimum(maximum(self(), min), max);
}
template <class D>
auto ExprBase<D>::hardtanh(double min, double max) const {
  return self().clip(min, max);
}
template <class D>
auto ExprBase<D>::relu6() const {
  return minimum(self().relu(), 6);
}
template <class D>
auto ExprBase<D>::elu(double alpha) const {
  return maximum(self(), 0) + alpha * (minimum(self(), 0).exp() - 1);
}
template <class D>
auto ExprBase<D>::leakyrelu(double neg_slope) const {
  return self().relu() - neg_slope * (-self()).relu();
}
template <class D>
auto ExprBase<D>::swish() const {
  return self() * self().sigmoid();
}
template <class D>
auto ExprBase<D>::silu() const {
  return self().swish();
}
template <class D>
auto ExprBase<D>::hardswish() const {
  return self() * (self() + 3).relu6() * (1.0 / 6);
}
template <class D>
auto ExprBase<D>::quick_gelu() const {
  return self() * (self() * 1.702).sigmoid();
}
// max(z, 0) + log(1 + e^-|z|), z = beta x, over beta: no overflow for large x (as the dynamic path)
template <class D>
auto ExprBase<D>::softplus(double beta) const {
  auto z = self() * beta;
  return (maximum(z, 0) + (1 + (-z.abs()).exp()).log()) * (1 / beta);
}
template <class D>
auto ExprBase<D>::mish() const {
  return self() * self().softplus().tanh();
}
template <class D>
auto ExprBase<D>::softsign() const {
  return self() / (1 + self().abs());
}
template <class D>
auto ExprBase<D>::celu(double alpha) const {
  if (alpha == 0) throw std::invalid_argument("fixed: celu: alpha must not be 0 (it divides x)");
  return maximum(self(), 0) + alpha * ((minimum(self(), 0) * (1 / alpha)).exp() - 1);
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
