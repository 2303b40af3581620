#pragma once
// Movement ops with compile-time arguments: reshape, permute, expand (numpy broadcasting), pad,
// shrink (slicing), flip, transpose. Each is a Move node; its View is computed in a constant
// expression, and a bad argument is a compile error naming the op, the shape and the argument.
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/shape/inverse.hpp"

namespace metagrad::fixed {

template <class D>
template <index_t... S>
auto ExprBase<D>::reshape() const {
  using E = expr_t<D>;
  constexpr Dims to{S...};
  constexpr bool ok = ((S >= 0) && ...) && prod(to) == E::shape::size;
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: reshape: the new shape must have the same number of elements",
                             err::reshape, typename E::shape, Args<S...>);
  if constexpr (!ok)
    return;
  else if constexpr (to == E::shape::dims)
    return self().expr();
  else
    return detail::move<E, MovementOps::RESHAPE, to>(self().expr());
}

template <class D>
template <index_t... Order>
auto ExprBase<D>::permute() const {
  using E = expr_t<D>;
  constexpr AxisSet ax = normalize_axes(Dims{Order...}, E::shape::rank);
  constexpr bool ok = ax.ok && sizeof...(Order) == E::shape::rank;
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: permute: the order must name every axis once", err::permute,
                             typename E::shape, Args<Order...>);
  if constexpr (ok) return detail::move<E, MovementOps::PERMUTE, ax.axes>(self().expr());
}

template <class D>
template <index_t... S>
auto ExprBase<D>::expand() const {
  using E = expr_t<D>;
  constexpr Broadcast bc = broadcast(E::shape::dims, Dims{S...});
  constexpr bool ok = bc.ok && bc.shape == Dims{S...};
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: expand: only size-1 (or missing leading) axes can grow", err::expand,
                             typename E::shape, Args<S...>);
  if constexpr (ok) return detail::broadcast_to<Shape<S...>>(self().expr());
}

// pad<before0, after0, before1, after1, ...>(): zeros around each axis.
template <class D>
template <index_t... P>
auto ExprBase<D>::pad() const {
  using E = expr_t<D>;
  constexpr bool ok = sizeof...(P) == 2 * E::shape::rank && ((P >= 0) && ...);
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: pad: give (before, after) >= 0 for every axis", err::pad,
                             typename E::shape, Args<P...>);
  if constexpr (ok) return detail::move<E, MovementOps::PAD, detail::pairs<P...>()>(self().expr());
}

// shrink<begin0, end0, begin1, end1, ...>(): keeps [begin, end) of each axis (compile-time slicing).
template <class D>
template <index_t... P>
auto ExprBase<D>::shrink() const {
  using E = expr_t<D>;
  constexpr bool ok = [] {
    if (sizeof...(P) != 2 * E::shape::rank) return false;
    Pairs p = detail::pairs<P...>();
    for (std::size_t i = 0; i < p.size(); ++i)
      if (p[i].first < 0 || p[i].second < p[i].first || p[i].second > E::shape::dims[i]) return false;
    return true;
  }();
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: shrink: need 0 <= begin <= end <= size for every axis", err::shrink,
                             typename E::shape, Args<P...>);
  if constexpr (ok) return detail::move<E, MovementOps::SHRINK, detail::pairs<P...>()>(self().expr());
}

// flip<axes...>(): reverses the given axes (a STRIDE of -1 on them, as the dynamic path).
template <class D>
template <index_t... A>
auto ExprBase<D>::flip() const {
  using E = expr_t<D>;
  constexpr AxisSet ax = normalize_axes(Dims{A...}, E::shape::rank);
  METAGRAD_FIXED_SHAPE_CHECK(ax.ok, "fixed: flip: each axis must exist and appear once", err::flip,
                             typename E::shape, Args<A...>);
  if constexpr (ax.ok) {
    constexpr Dims steps = flip_steps(ax.axes, E::shape::rank);
    return detail::move<E, MovementOps::STRIDE, steps>(self().expr());
  }
}

template <class D>
auto ExprBase<D>::transpose() const {
  constexpr std::size_t r = expr_t<D>::shape::rank;
  static_assert(r >= 2, "fixed: transpose needs at least two axes");
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return self()
        .template permute<(I + 2 < r    ? index_t(I)
                           : I + 2 == r ? index_t(r - 1)
                                        : index_t(r - 2))...>();
  }
  (std::make_index_sequence<r>{});
}

}  // namespace metagrad::fixed
