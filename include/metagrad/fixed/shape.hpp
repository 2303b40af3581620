#pragma once
// Shapes of the static path as types (Shape<64, 128>), the numpy broadcasting rule in constant
// expressions, and ShapeMismatch: how a shape error becomes a compile error naming op and shapes.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "metagrad/shape/view.hpp"

namespace metagrad::fixed {

using index_t = std::int64_t;

template <index_t... D>
struct Shape {
  static_assert(((D >= 0) && ...), "fixed::Shape: sizes must be non-negative");
  static constexpr std::size_t rank = sizeof...(D);
  static constexpr index_t size = (index_t{1} * ... * D);
  static constexpr Dims dims{D...};
};

namespace detail {
template <Dims D, class = std::make_index_sequence<D.size()>>
struct shape_of;
template <Dims D, std::size_t... I>
struct shape_of<D, std::index_sequence<I...>> {
  using type = Shape<D[I]...>;
};
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

// The Shape type of a constexpr Dims value.
template <Dims D>
using ShapeOf = typename detail::shape_of<D>::type;

// numpy: align trailing dimensions; each pair must be equal or contain a 1. `ok` false otherwise.
struct Broadcast {
  Dims shape;
  bool ok = true;
};
constexpr Broadcast broadcast(const Dims& a, const Dims& b) {
  Broadcast r;
  std::size_t n = a.size() > b.size() ? a.size() : b.size();
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t x = i + a.size() >= n ? a[i + a.size() - n] : 1,
                 y = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (x != y && x != 1 && y != 1) r.ok = false;
    r.shape.push_back(x == 1 ? y : x);
  }
  return r;
}

// Axis lists: negative axes count from the end, as on the dynamic path. `ok` false when an axis is
// out of range or repeated.
struct AxisSet {
  Dims axes;
  bool ok = true;
};
constexpr AxisSet normalize_axes(const Dims& axes, std::size_t rank) {
  AxisSet r;
  for (std::int64_t a : axes) {
    std::int64_t n = a < 0 ? a + static_cast<std::int64_t>(rank) : a;
    if (n < 0 || n >= static_cast<std::int64_t>(rank)) r.ok = false;
    for (std::int64_t seen : r.axes) r.ok = r.ok && seen != n;
    r.axes.push_back(n < 0 ? 0 : n);
  }
  return r;
}

// Op names for shape errors (incomplete types: only their names matter).
namespace err {
struct elementwise;
struct where;
struct reshape;
struct permute;
struct expand;
struct pad;
struct shrink;
struct flip;
struct reduce;
struct matmul;
struct linear;
struct conv2d;
struct pool;
struct assign;
struct cross_entropy;
}  // namespace err

// Instantiated only for a bad shape: the compiler prints the op and the shapes as template
// arguments (`ShapeMismatch<err::matmul, Shape<64, 128>, Shape<64, 10>>`) next to this message.
template <class Op, class... Shapes>
struct ShapeMismatch {
  static_assert(detail::always_false<Op>,
                "fixed: these shapes do not fit this op (op and shapes are ShapeMismatch's arguments)");
  static constexpr bool value = false;
};
// true when Ok; otherwise instantiates ShapeMismatch. Use as the condition of a static_assert whose
// message names the op: static_assert(shapes_fit<ok, err::matmul, A, B>, "matmul: ...").
template <bool Ok, class Op, class... Shapes>
inline constexpr bool shapes_fit =
    std::conditional_t<Ok, std::true_type, ShapeMismatch<Op, Shapes...>>::value;

}  // namespace metagrad::fixed
