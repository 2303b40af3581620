#pragma once
// The internals of fixed/movement.hpp.
#include <cstddef>

#include "metagrad/fixed/shape.hpp"

namespace metagrad::fixed {

namespace detail {
// pad<...>()'s flat (before, after) list as Pairs.
template <index_t... P>
constexpr Pairs pairs() {
  constexpr index_t v[] = {P..., 0};
  Pairs r;
  for (std::size_t i = 0; i + 1 < sizeof...(P); i += 2) r.push_back({v[i], v[i + 1]});
  return r;
}
}  // namespace detail

}  // namespace metagrad::fixed
