#pragma once
// Shapes of the static path as types (Shape<64, 128>), the numpy broadcasting rule in constant
// expressions, and METAGRAD_FIXED_SHAPE_CHECK: a shape error as a compile error whose first line names
// the op and its shapes.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "metagrad/detail/fixed/shape.hpp"
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

// How an axis or index list prints in a shape error (Shape cannot hold negative values).
template <index_t... A>
struct Args {};

// Op names for shape errors, with what joins the op's shapes in the message.
namespace err {
struct elementwise {
  static constexpr const char* join = " and ";
};
struct where : elementwise {};
struct reshape {
  static constexpr const char* join = " to ";
};
struct expand : reshape {};
struct shrink : reshape {};
struct permute {
  static constexpr const char* join = " by ";
};
struct pad : permute {};
struct flip {
  static constexpr const char* join = " over axes ";
};
struct reduce : flip {};
struct matmul {
  static constexpr const char* join = " @ ";
};
struct linear : matmul {};
struct conv2d {
  static constexpr const char* join = " with weight ";
};
struct pool {
  static constexpr const char* join = " with window, stride ";
};
struct assign {
  static constexpr const char* join = " = ";
};
struct cross_entropy {
  static constexpr const char* join = " with labels ";
};
}  // namespace err

// Named only for a bad shape. g++ prints it whole as the error: `incomplete type
// 'ShapeError<ShapeText{"fixed: matmul (4, 3) @ (5, 3): the inner dimensions ... differ"}>'`.
template <detail::ShapeText M>
struct ShapeError;
// clang prints a failed static_assert's condition with its template arguments: op and shapes.
template <bool Ok, class Op, class... Shapes>
inline constexpr bool shape_ok = Ok;

// A shape check in an op's body: a compile error whose first line names the op, its shapes and
// msg ("fixed: OP: what is wrong"). The op then goes on and returns an expression of a plausible
// shape marked failed (detail::FailedShape), which later elementwise ops, matmuls and assignments
// let pass without a check, so that the one error is all the user sees.
#if defined(__clang__)
#define METAGRAD_FIXED_SHAPE_CHECK(ok, msg, Op, ...) \
  static_assert(::metagrad::fixed::shape_ok<(ok), Op, __VA_ARGS__>, msg)
#else
#define METAGRAD_FIXED_SHAPE_CHECK(ok, msg, Op, ...) \
  if constexpr (!(ok))                               \
  (void)sizeof(::metagrad::fixed::ShapeError<::metagrad::fixed::detail::shape_text<Op, __VA_ARGS__>(msg)>)
#endif

}  // namespace metagrad::fixed
