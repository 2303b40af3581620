#pragma once
// The backward rules of the ops that change shape, one definition for both paths, as FnTraits
// (metagrad/functions.hpp) is for the elementwise functions: MoveTraits<M> for every movement,
// ReduceTraits<R> for every reduction. The static path's rules (fixed::Vjp, fixed/vjp.hpp) and
// the dynamic path's mlops (mlops::Move<M>, mlops::Reduce<R>, runtime/tensor/mlops.cpp) are both
// generated from them.
//
// A movement's gradient is g moved back to the input's shape `in` by one op, `back` (a movement,
// or for expand the SUM reduction to `in`), with the argument back_arg(arg, in), where arg is the
// forward's (of type Arg): the inverses of metagrad/shape/inverse.hpp, constexpr, so the static
// path computes them in constant expressions.
//
// A reduction's gradient is grad(n, g), in the vocabulary of functions.hpp, on a node n that gives
// the forward's input (arg<0>(n)) and output (n.out(), the input's rank with reduced axes 1) and
// the path's n.expand(v) (v of the output's shape broadcast to the input's), n.sum(v) (v summed
// down to the output's shape) and n.as_grad(mask) (a bool mask in the gradient's type).
#include <array>
#include <type_traits>

#include "metagrad/functions.hpp"
#include "metagrad/ops.hpp"
#include "metagrad/shape/inverse.hpp"

namespace metagrad::fn {

template <MovementOps M>
struct MoveTraits {
  using Arg = std::conditional_t<M == MovementOps::PAD || M == MovementOps::SHRINK, Pairs, Dims>;
  static constexpr const char* name =
      std::array{"reshape", "permute", "expand", "pad", "shrink", "flip"}[int(M)];
  static constexpr auto back = [] {
    if constexpr (M == MovementOps::EXPAND)
      return ReduceOps::SUM;  // summed over the broadcast axes
    else
      return M == MovementOps::PAD ? MovementOps::SHRINK : M == MovementOps::SHRINK ? MovementOps::PAD : M;
  }();
  static constexpr auto back_arg(const Arg& arg, const Dims& in) {
    if constexpr (M == MovementOps::RESHAPE || M == MovementOps::EXPAND)
      return in;
    else if constexpr (M == MovementOps::PERMUTE)
      return inverse_permutation(arg);
    else if constexpr (M == MovementOps::PAD)
      return shrink_of_pad(arg, in);  // the padding cut off again
    else if constexpr (M == MovementOps::SHRINK)
      return pad_of_shrink(arg, in);  // zeros where the slice cut
    else
      return arg;  // flip (STRIDE of +-1, flip_steps): its own inverse
  }
};

template <ReduceOps R>
struct ReduceTraits;

template <>
struct ReduceTraits<ReduceOps::SUM> {
  static constexpr const char* name = "sum";
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return n.expand(g);
  }
};
// As PyTorch's amax: the gradient is split equally among the elements that reach the max, and a
// NaN max (the reduction propagates NaN) is reached by the NaNs. A select, so an inf in g reaches
// the max's positions only; g / count is one division on both paths, so they agree bitwise.
template <>
struct ReduceTraits<ReduceOps::MAX> {
  static constexpr const char* name = "max";
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    auto x = arg<0>(n);
    auto is_max = (x == n.expand(n.out())) == (x == x);  // equal to the max, or NaN (where both fail)
    return where(is_max, n.expand(g / n.sum(n.as_grad(is_max))), 0.0);
  }
};

}  // namespace metagrad::fn
