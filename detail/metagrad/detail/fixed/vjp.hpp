#pragma once
// The internals of fixed/vjp.hpp: a gradient broadcast back to, or summed down to, a shape; which
// transposed products a rule may write as the product of the transposes.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "metagrad/detail/fixed/matmul.hpp"
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/shape/inverse.hpp"

namespace metagrad::fixed::detail {
// A node as an FnTraits rule sees it, asking for child Want's gradient only: the others' terms are
// never built (building one reads their forward values, which may compute them).
template <std::size_t Want, class N>
struct Only {
  const N& n;
  auto out() const { return n.out(); }
  template <std::size_t I>
  auto x() const {
    return n.template x<I>();
  }
  template <std::size_t I, class F>
  auto when(F f) const {
    if constexpr (I == Want)
      return f();
    else
      return none{};
  }
};
// g broadcast back to `To` (a reduction's input shape: same rank, reduced axes 1 in g).
template <Dims To, class G>
auto expand_to(const G& g) {
  if constexpr (G::shape::dims == To)
    return g;
  else
    return move<G, MovementOps::EXPAND, To>(g);
}
// g summed down to `To` (same rank: the axes where To is 1 and g is not).
template <Dims To, class G>
auto sum_to(const G& g) {
  constexpr Dims axes = broadcast_axes(To, G::shape::dims);
  if constexpr (axes.empty())
    return g;
  else
    return Expr<op::Reduce<ReduceOps::SUM, axes>, G>(op::Reduce<ReduceOps::SUM, axes>{}, g);
}
// g moved back by a MoveTraits rule: a movement, or expand's sum back to the input's shape.
template <auto Back, auto Arg, class G>
auto move_back(const G& g) {
  if constexpr (std::is_same_v<decltype(Back), ReduceOps>)
    return sum_to<Arg>(g);
  else
    return move<G, Back, Arg>(g);
}
// A reduction's node as its ReduceTraits rule sees it (metagrad/shape_rules.hpp), T the gradient's
// element type: its only child's value and output as Only gives them.
template <Dims Axes, class N, class T>
struct ReduceNode : Only<0, N> {
  template <class V>
  auto expand(const V& v) const {
    return expand_to<N::template child_t<0>::shape::dims>(v);
  }
  template <class V>
  auto sum(const V& v) const {
    return Expr<op::Reduce<ReduceOps::SUM, Axes>, V>({}, v);
  }
  template <class M>
  auto as_grad(const M& mask) const {
    return mask.template cast<T>();
  }
};

// A permutation that swaps the last two axes and keeps the others.
template <MovementOps M, auto Arg>
constexpr bool swaps_last_two() {
  if constexpr (M != MovementOps::PERMUTE)
    return false;
  else {
    const std::size_t r = Arg.size();
    if (r < 2 || Arg[r - 1] != std::int64_t(r - 2) || Arg[r - 2] != std::int64_t(r - 1)) return false;
    for (std::size_t i = 0; i + 2 < r; ++i)
      if (Arg[i] != std::int64_t(i)) return false;
    return true;
  }
}
// x with its last two axes swapped: the child where x is itself such a swap (a weight read as
// w.transpose(), whose gradient's product then reads w's layout), else x.transpose().
template <class X>
auto transposed(const X& x) {
  return x.transpose();
}
template <MovementOps M, auto Arg, class C>
requires(swaps_last_two<M, Arg>()) auto transposed(const Expr<op::Move<M, Arg>, C>& x) {
  return fixed::child<0>(x);
}
// A product whose transpose is b^T a^T: both operands of one rank (a 2-D product, or one batch of
// products with both operands batched).
template <class G>
struct transposable_product : std::false_type {};
template <class A, class B>
struct transposable_product<Expr<op::MatMul, A, B>>
    : std::bool_constant<A::shape::rank == B::shape::rank &&
                         std::is_floating_point_v<typename A::value_type>> {};
}  // namespace metagrad::fixed::detail
