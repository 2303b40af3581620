#pragma once
// The inverses of the movement ops, as constexpr functions of their arguments and the input's
// shape: the backward rules of both paths (metagrad/shape_rules.hpp) move a gradient back with
// them, the static path in constant expressions, the dynamic one at run time.
#include <cstddef>
#include <cstdint>

#include "metagrad/shape/view.hpp"

namespace metagrad {

// The permutation that undoes `order`: inverse[order[i]] = i.
constexpr Dims inverse_permutation(const Dims& order) {
  Dims inverse = Dims::filled(order.size(), 0);
  for (std::size_t i = 0; i < order.size(); ++i)
    inverse[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  return inverse;
}

// The window [before, before + size) of a padded result that holds the input of shape `in`: the
// shrink that undoes pad(arg), arg[i] = (before, after).
constexpr Pairs shrink_of_pad(const Pairs& pad, const Dims& in) {
  Pairs keep;
  for (std::size_t i = 0; i < pad.size(); ++i) keep.push_back({pad[i].first, pad[i].first + in[i]});
  return keep;
}

// The padding that puts a slice [begin, end) of `in` back in place, zeros where the slice cut: the
// pad that undoes shrink(arg).
constexpr Pairs pad_of_shrink(const Pairs& shrink, const Dims& in) {
  Pairs around;
  for (std::size_t i = 0; i < shrink.size(); ++i)
    around.push_back({shrink[i].first, in[i] - shrink[i].second});
  return around;
}

// The axes along which `from` was broadcast to a shape of the same rank: where `to` differs from
// it, the axes a gradient sums back over.
constexpr Dims broadcast_axes(const Dims& from, const Dims& to) {
  Dims axes;
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[i]) axes.push_back(static_cast<std::int64_t>(i));
  return axes;
}

// flip's STRIDE argument: -1 on each of `axes` (non-negative, each once), 1 elsewhere. Its own
// inverse.
constexpr Dims flip_steps(const Dims& axes, std::size_t rank) {
  Dims steps = Dims::filled(rank, 1);
  for (std::int64_t a : axes) steps[static_cast<std::size_t>(a)] = -1;
  return steps;
}

}  // namespace metagrad
