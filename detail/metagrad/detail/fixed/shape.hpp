#pragma once
// The internals of fixed/shape.hpp: Shape types from Dims values, and a shape error's text built in
// a constant expression.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "metagrad/shape/view.hpp"

namespace metagrad::fixed {

// Declared again, and defined, in fixed/shape.hpp.
using index_t = std::int64_t;
template <index_t... D>
struct Shape;
template <index_t... A>
struct Args;

namespace detail {
template <Dims D, class = std::make_index_sequence<D.size()>>
struct shape_of;
template <Dims D, std::size_t... I>
struct shape_of<D, std::index_sequence<I...>> {
  using type = Shape<D[I]...>;
};
// pad<...>() and shrink<...>()'s flat (before, after) list as Pairs.
template <index_t... P>
constexpr Pairs pairs() {
  constexpr index_t v[] = {P..., 0};
  Pairs r;
  for (std::size_t i = 0; i + 1 < sizeof...(P); i += 2) r.push_back({v[i], v[i + 1]});
  return r;
}
// false, but only once a template is instantiated: a static_assert in a branch never taken.
template <class>
inline constexpr bool always_false = false;

// A shape error's message as a structural value (a template argument g++ prints as a string).
struct ShapeText {
  char s[240];
};
constexpr void put(ShapeText& t, const char* x, const char* end = nullptr) {
  std::size_t n = 0;
  while (t.s[n]) ++n;
  for (; *x && x != end && n + 1 < sizeof t.s; ++x) t.s[n++] = *x;
}
constexpr void put(ShapeText& t, std::int64_t v) {
  char buf[24] = {}, *p = buf + 22;
  bool neg = v < 0;
  std::uint64_t u = neg ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  do *p-- = static_cast<char>('0' + u % 10), u /= 10;
  while (u);
  if (neg) *p-- = '-';
  put(t, p + 1);
}
template <class S>
struct printed;
template <index_t... D>
struct printed<Shape<D...>> {
  static constexpr Dims dims{D...};
};
template <index_t... A>
struct printed<Args<A...>> : printed<Shape<>> {
  static constexpr Dims dims{A...};
};
constexpr void put(ShapeText& t, const Dims& d) {
  put(t, "(");
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i) put(t, ", ");
    put(t, d[i]);
  }
  put(t, d.size() == 1 ? ",)" : ")");
}
// msg is "fixed: OP: what is wrong"; the text puts the shapes after OP: "fixed: OP (4, 3) @ (5, 3): ...".
template <class Op, class... S>
constexpr ShapeText shape_text(const char* msg) {
  ShapeText t{};
  const char* colon = msg;
  for (int seen = 0; *colon && seen < 2; ++colon)
    if (*colon == ':' && ++seen == 2) break;
  put(t, msg, colon);
  bool first = true;
  for (const Dims& d : {printed<S>::dims...}) {
    put(t, first ? " " : Op::join);
    put(t, d);
    first = false;
  }
  put(t, colon);
  return t;
}
}  // namespace detail

}  // namespace metagrad::fixed
