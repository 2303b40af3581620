#pragma once
// Reductions over compile-time axis lists (sum, max, min, mean, var and the var_mean and std_mean pairs;
// keepdim as on the dynamic path),
// softmax and log_softmax, and their inline evaluation: a reduction is materialised once into a
// temporary (so an elementwise op that broadcasts it back never recomputes it), accumulating along
// the innermost axis in 256 bytes of independent lanes, which the compiler keeps in vector registers.
// Large ones are split across threads as parallel.hpp describes.
#include <cstdint>
#include <utility>

#include "metagrad/detail/fixed/reduce.hpp"
#include "metagrad/fixed/eval.hpp"
#include "metagrad/fixed/movement.hpp"

namespace metagrad::fixed {

template <class D>
template <index_t... A>
auto ExprBase<D>::sum() const {
  return detail::reduce<ReduceOps::SUM, false, A...>(self().expr());
}
template <class D>
template <index_t... A>
auto ExprBase<D>::sum(keepdim_t) const {
  return detail::reduce<ReduceOps::SUM, true, A...>(self().expr());
}
template <class D>
template <index_t... A>
auto ExprBase<D>::max() const {
  return detail::reduce<ReduceOps::MAX, false, A...>(self().expr());
}
template <class D>
template <index_t... A>
auto ExprBase<D>::max(keepdim_t) const {
  return detail::reduce<ReduceOps::MAX, true, A...>(self().expr());
}
// -max(-x), as the dynamic path
template <class D>
template <index_t... A>
auto ExprBase<D>::min() const {
  return -(-self()).template max<A...>();
}
template <class D>
template <index_t... A>
auto ExprBase<D>::min(keepdim_t) const {
  return -(-self()).template max<A...>(keepdim);
}
template <class D>
template <index_t... A>
auto ExprBase<D>::mean() const {
  using T = typename D::value_type;
  return self().template sum<A...>() * (T(1) / T(detail::reduced_count<expr_t<D>, A...>()));
}
template <class D>
template <index_t... A>
auto ExprBase<D>::mean(keepdim_t) const {
  using T = typename D::value_type;
  return self().template sum<A...>(keepdim) * (T(1) / T(detail::reduced_count<expr_t<D>, A...>()));
}
// The variance over axes A... with Bessel's correction (divided by n - correction, n the reduced count),
// as Tensor::var, and PyTorch's pairs with the mean (Tensor::var_mean, std_mean): one mean for both,
// composed from static ops, so the gradients are the core rules'.
template <index_t... A, Operand X>
auto var(const X& x, std::int64_t correction = 1) {
  using T = typename expr_t<X>::value_type;
  constexpr auto n = static_cast<std::int64_t>(detail::reduced_count<expr_t<X>, A...>());
  auto d = x - x.template mean<A...>(keepdim);
  return (d * d).template sum<A...>() * (T(1) / T(n - correction > 0 ? n - correction : 0));
}
template <index_t... A, Operand X>
auto var_mean(const X& x, std::int64_t correction = 1) {
  return std::pair{var<A...>(x, correction), x.template mean<A...>()};
}
template <index_t... A, Operand X>
auto std_mean(const X& x, std::int64_t correction = 1) {
  return std::pair{var<A...>(x, correction).sqrt(), x.template mean<A...>()};
}

// x - max, exponentiated, normalised: the dynamic path's _softmax. The shift is detached, as there:
// the result does not depend on it, so its gradient (a max's, through a mask) would be zeros at the
// cost of a row reduction and a pass.
template <class D>
template <index_t Axis>
auto ExprBase<D>::softmax() const {
  auto e = (self() - self().template max<Axis>(keepdim).detach()).exp();
  return e / e.template sum<Axis>(keepdim);
}
template <class D>
template <index_t Axis>
auto ExprBase<D>::log_softmax() const {
  auto m = self() - self().template max<Axis>(keepdim).detach();
  return m - m.exp().template sum<Axis>(keepdim).log();
}

}  // namespace metagrad::fixed
