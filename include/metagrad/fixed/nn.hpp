#pragma once
// The hlops a small CNN or MLP needs beyond elementwise and matmul, composed from static ops (so
// every evaluator and fixed::grad sees only the core op tags): pooling (pool.hpp), nll_loss and
// sparse_categorical_crossentropy on integer (or integral float) labels.
#include "metagrad/fixed/pool.hpp"
#include "metagrad/fixed/reduce.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

// Mean over the labelled positions of -logp[..., label]: logp (..., C) holds log-probabilities,
// labels (...) the classes, any arithmetic type (compared after a cast to logp's type).
template <Operand L, Operand Y>
auto nll_loss(const L& logp, const Y& labels) {
  using S = typename expr_t<L>::shape;
  using SY = typename expr_t<Y>::shape;
  using T = typename expr_t<L>::value_type;
  constexpr index_t c = S::rank ? S::dims[S::rank - 1] : 0;
  constexpr bool ok = S::rank >= 1 && SY::rank + 1 == S::rank && [] {
    for (std::size_t i = 0; i < SY::rank; ++i)
      if (SY::dims[i] != S::dims[i]) return false;
    return true;
  }();
  METAGRAD_FIXED_SHAPE_CHECK(
      ok,
      "fixed: cross_entropy: nll_loss / sparse_categorical_crossentropy labels must have the shape of the "
      "log-probabilities without the class axis",
      err::cross_entropy, S, SY);
  if constexpr (ok) {
    constexpr Dims col = [] {
      Dims d = SY::dims;
      d.push_back(1);
      return d;
    }();
    auto y = detail::move<expr_t<Y>, MovementOps::RESHAPE, col>(labels.expr()).template cast<T>();
    auto one_hot = (y == detail::arange<T, c>()).template cast<T>();
    return -(logp * one_hot).sum() * (T(1) / T(SY::size));
  }
}
// nll_loss of log_softmax over the last axis, as the dynamic path.
template <Operand X, Operand Y>
auto sparse_categorical_crossentropy(const X& logits, const Y& labels) {
  return nll_loss(logits.template log_softmax<-1>(), labels);
}

}  // namespace metagrad::fixed
