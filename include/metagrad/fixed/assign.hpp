#pragma once
// fx::assign: several assignments of one shape as one pass over memory.
//
//   fx::assign(std::tie(m, v, w), m * b1 + g * (1 - b1), v * b2 + g * g * (1 - b2),
//              w - m / (v.sqrt() + eps) * lr);
//
// is m = ...; v = ...; w = ...; in that order (w's expression reads m's and v's new values), but as
// one loop: each chunk of every expression in turn while the chunk is in the L1, where three
// assignments stream every tensor from memory three times (an optimizer's update over a model's
// parameters: one pass instead of three). Elementwise expressions only fuse; one that computes a
// node whole first (a reduction, a product) or reads a destination through another view (a
// transpose, a broadcast) makes the assignments run one after another, with the same result.
#include <array>
#include <tuple>
#include <type_traits>

#include "metagrad/detail/fixed/assign.hpp"
#include "metagrad/fixed/expr.hpp"

namespace metagrad::fixed {

template <class... Dst, class... E>
void assign(std::tuple<Dst&...> dst, const E&... e) {
  static_assert(sizeof...(Dst) == sizeof...(E), "fixed::assign: give one expression per destination");
  static_assert(sizeof...(Dst) > 0, "fixed::assign: give at least one destination");
  constexpr bool shapes = ((std::remove_cvref_t<Dst>::shape::dims == expr_t<E>::shape::dims) && ...);
  METAGRAD_FIXED_SHAPE_CHECK(shapes, "fixed::assign: a destination and its expression differ in shape",
                             err::assign, typename std::remove_cvref_t<Dst>::shape...,
                             typename expr_t<E>::shape...);
  using First = std::remove_cvref_t<std::tuple_element_t<0, std::tuple<Dst...>>>;
  using T = typename First::value_type;
  constexpr bool one_type = (std::is_same_v<typename std::remove_cvref_t<Dst>::value_type, T> && ...) &&
                            (std::is_same_v<typename expr_t<E>::value_type, T> && ...);
  static_assert(one_type,
                "fixed::assign: every destination and expression of one element type: cast<T>() it");
  if constexpr (shapes && one_type) {
    if constexpr (((std::remove_cvref_t<Dst>::shape::dims == First::shape::dims) && ...))
      std::apply(
          [&](auto&... t) {
            detail::assign_fused<T>(std::array<T*, sizeof...(Dst)>{t.data()...}, e.expr()...);
          },
          dst);
    else  // shapes differ between the pairs: one loop each
      std::apply([&](auto&... t) { ((t = e), ...); }, dst);
  }
}

}  // namespace metagrad::fixed
