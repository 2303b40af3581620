#pragma once
// The internals of fixed/elementwise.hpp: nodes built by hand (move, map, constant), broadcasting
// and scalar operands, the elementwise op with its shape check, and floor and ceil.
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/fixed/expr.hpp"
#include "metagrad/functions.hpp"

namespace metagrad::fixed::detail {
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
// What an op returns after its shape check failed: a constant of shape S marked failed (expr.hpp).
template <class T, class S>
auto failed_result() {
  return constant<T, FailedShape<S>>(T{});
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
  constexpr bool quiet = any_failed<decltype(operand<Like>(std::declval<A>()))...>;  // an error was said
  METAGRAD_FIXED_SHAPE_CHECK(bc.ok || quiet,
                             "fixed: elementwise op: the shapes do not broadcast (numpy rules)",
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
    return failed_result<std::conditional_t<FnTraits<F>::comparison, bool, T>, S0>();
  }
}

template <Fn F, class E>
auto unary(const E& e) {
  static_assert(!FnTraits<F>::float_only || std::is_floating_point_v<typename E::value_type>,
                "fixed: exp, log, sin, sqrt, sigmoid, erf and the inverse trigonometric functions need a "
                "floating-point operand: cast<float>() first");
  return map<F>(e.expr());
}

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
}  // namespace metagrad::fixed::detail
