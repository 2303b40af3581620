#pragma once
// The internals of fixed/vjp.hpp: a gradient broadcast back to, or summed down to, a shape.
#include <cstddef>
#include <cstdint>

#include "metagrad/fixed/elementwise.hpp"

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
  constexpr Dims axes = [] {
    Dims a;
    for (std::size_t i = 0; i < To.size(); ++i)
      if (To[i] != G::shape::dims[i]) a.push_back(static_cast<std::int64_t>(i));
    return a;
  }();
  if constexpr (axes.empty())
    return g;
  else
    return Expr<op::Reduce<ReduceOps::SUM, axes>, G>(op::Reduce<ReduceOps::SUM, axes>{}, g);
}
}  // namespace metagrad::fixed::detail
