#pragma once
// The internals of fixed/expr.hpp: a node's children held as plain members (Kids), and each node's
// element type and shape from its op and children (node).
#include <cstdint>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include "metagrad/fixed/shape.hpp"
#include "metagrad/functions.hpp"
#include "metagrad/ops.hpp"

namespace metagrad::fixed {

using fn::Fn;
using fn::FnTraits;
// Declared again, and defined, in fixed/expr.hpp.
namespace op {
template <class T, class S>
struct Leaf;
template <class T, class S>
struct Const;
template <class T, class S>
struct Cut;
template <Fn F>
struct Map;
template <class U>
struct Cast;
struct Detach;
struct Gate;
template <ReduceOps R, Dims Axes>
struct Reduce;
template <MovementOps M, auto Arg>
struct Move;
}  // namespace op

template <class Op, class... C>
struct Expr;

namespace detail {
// The shape of what an op returns after its shape check failed (its one error printed): a constant
// of a plausible shape S, marked. An expression reading it is `failed`: every later check (an
// elementwise op, a matmul, an assignment) lets it pass silently, so no follow-on error buries the
// first.
template <class S>
struct FailedShape : S {};
template <class E>
struct failed : std::false_type {};
template <class T, class S>
struct failed<Expr<op::Const<T, FailedShape<S>>>> : std::true_type {};
template <class Op, class... C>
struct failed<Expr<Op, C...>> : std::bool_constant<(failed<C>::value || ...)> {};
template <class... E>
inline constexpr bool any_failed = (failed<std::remove_cvref_t<E>>::value || ...);

// A node's children as plain members, one specialisation per arity (nodes have at most three):
// an aggregate costs the compiler one class each, where std::tuple costs dozens of traits.
template <class... C>
struct Kids {
  static_assert(sizeof...(C) == 0, "fixed: a node has at most three children");
  template <class F>
  constexpr decltype(auto) apply(F&& f) const {
    return f();
  }
};
template <class A>
struct Kids<A> {
  A k0;
  template <class F>
  constexpr decltype(auto) apply(F&& f) const {
    return f(k0);
  }
};
template <class A, class B>
struct Kids<A, B> {
  A k0;
  B k1;
  template <class F>
  constexpr decltype(auto) apply(F&& f) const {
    return f(k0, k1);
  }
};
template <class A, class B, class C>
struct Kids<A, B, C> {
  A k0;
  B k1;
  C k2;
  template <class F>
  constexpr decltype(auto) apply(F&& f) const {
    return f(k0, k1, k2);
  }
};
template <Dims D, Dims Axes>
constexpr Dims reduced(const Dims& d = D) {
  Dims r = d;
  for (std::int64_t a : Axes) r[a] = 1;
  return r;
}

// value_type and shape of a node, from its op and children.
template <class Op, class... C>
struct node;
template <class T, class S>
struct node<op::Leaf<T, S>> {
  using value_type = T;
  using shape = S;
};
template <class T, class S>
struct node<op::Const<T, S>> : node<op::Leaf<T, S>> {};
template <class T, class S>  // (the mark is the tag's alone: the node's shape is S itself)
struct node<op::Const<T, FailedShape<S>>> : node<op::Leaf<T, S>> {};
template <class T, class S>
struct node<op::Cut<T, S>> : node<op::Leaf<T, S>> {};
template <Fn F, class C0, class... C>
struct node<op::Map<F>, C0, C...> {
  static_assert(FnTraits<F>::arity == 1 + sizeof...(C), "fixed::Map: wrong number of children");
  // Comparisons give bool; where (the one ternary Fn: cond, x, y) the type of x.
  using value_type = std::conditional_t<
      FnTraits<F>::comparison, bool,
      typename boost::mp11::mp_at_c<boost::mp11::mp_list<C0, C...>, FnTraits<F>::arity == 3>::value_type>;
  using shape = typename C0::shape;
};
template <class U, class C>
struct node<op::Cast<U>, C> {
  using value_type = U;
  using shape = typename C::shape;
};
template <class C>
struct node<op::Detach, C> {
  using value_type = typename C::value_type;
  using shape = typename C::shape;
};
template <class C>
struct node<op::Gate, C> {
  using value_type = typename C::value_type;
  using shape = typename C::shape;
};
template <ReduceOps R, Dims Axes, class C>
struct node<op::Reduce<R, Axes>, C> {
  static constexpr Dims dims = reduced<C::shape::dims, Axes>();
  using value_type = typename C::value_type;
  using shape = ShapeOf<dims>;
};
template <MovementOps M, auto Arg, class C>
struct node<op::Move<M, Arg>, C> {
  static constexpr Dims dims = op::Move<M, Arg>::template view<typename C::shape>.shape;
  using value_type = typename C::value_type;
  using shape = ShapeOf<dims>;
};
}  // namespace detail

}  // namespace metagrad::fixed
