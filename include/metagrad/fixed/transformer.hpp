#pragma once
// The pieces a transformer needs, as on the dynamic path (Tensor::arange, triu, tril, masked_fill,
// layernorm, scaled_dot_product_attention, gather, nn::Embedding), composed from static ops so that
// their backward rules are the core tags' type-level rules (fixed/vjp.hpp) and every evaluator sees
// only those tags: masks and index ranges are constant tensors (leaves, read for free, no gradient),
// a gather is a one-hot product, an embedding a one-hot matmul (its gradient the scatter-add).
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "metagrad/detail/fixed/transformer.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/reduce.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

// 0, 1, ..., N - 1 as T: a constant (N) tensor's expression.
template <class T, index_t N>
auto arange() {
  return detail::arange<T, N>().expr();
}

// x with the elements below diagonal K of its last two axes zeroed (triu), or above it (tril).
template <index_t K = 0, Operand X>
auto triu(const X& x) {
  return detail::band<X, K, true>(x);
}
template <index_t K = 0, Operand X>
auto tril(const X& x) {
  return detail::band<X, K, false>(x);
}

// value where mask (broadcast to x) is true, else x.
template <Operand X, Operand M>
auto masked_fill(const X& x, const M& mask, double value) {
  return where(mask, static_cast<typename expr_t<X>::value_type>(value), x);
}

// (x - mean) / sqrt(var + eps) over axis Axis (var: the biased variance), as Tensor::layernorm;
// with weight and bias (broadcast, as nn::LayerNorm's of the last axis) scaled and shifted.
template <index_t Axis = -1, Operand X>
auto layernorm(const X& x, double eps = 1e-5) {
  using T = typename expr_t<X>::value_type;
  auto y = x - x.template mean<Axis>(keepdim);
  return y * ((y * y).template mean<Axis>(keepdim) + T(eps)).rsqrt();
}
template <index_t Axis = -1, Operand X, Operand W, Operand B>
auto layernorm(const X& x, const W& weight, const B& bias, double eps = 1e-5) {
  return layernorm<Axis>(x, eps) * weight + bias;
}

// softmax(q @ k^T / sqrt(E) + mask) @ v over the last two axes, as PyTorch 2's
// F.scaled_dot_product_attention (q (..., L, E), k (..., S, E), v (..., S, Ev), the batch axes
// equal): Causal masks j > i; a bool mask is true where a query may attend (false: -inf), a
// floating one is added.
template <bool Causal = false, Operand Q, Operand K, Operand V>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v) {
  using SQ = typename expr_t<Q>::shape;
  using SK = typename expr_t<K>::shape;
  using SV = typename expr_t<V>::shape;
  using T = typename expr_t<Q>::value_type;
  constexpr bool ok = SQ::rank >= 2 && SK::rank == SQ::rank && SV::rank == SQ::rank &&
                      SQ::dims[SQ::rank - 1] == SK::dims[SK::rank - 1] &&
                      SK::dims[SK::rank - 2] == SV::dims[SV::rank - 2];
  METAGRAD_FIXED_SHAPE_CHECK(
      ok,
      "fixed: scaled_dot_product_attention: q (..., L, E), k (..., S, E) and v (..., S, "
      "Ev) must agree",
      err::attention, SQ, SK, SV);
  if constexpr (ok) {
    constexpr index_t E = SQ::dims[SQ::rank - 1], L = SQ::dims[SQ::rank - 2], S = SK::dims[SK::rank - 2];
    auto s = matmul(q, k.transpose()) * T(1 / std::sqrt(double(E)));
    if constexpr (Causal)
      return matmul(where(detail::band_mask<L, S, 0, false>(), s, -std::numeric_limits<T>::infinity())
                        .template softmax<-1>(),
                    v);
    else
      return matmul(s.template softmax<-1>(), v);
  } else {
    return v.expr();
  }
}
template <Operand Q, Operand K, Operand V, Operand M>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, const M& mask) {
  using T = typename expr_t<Q>::value_type;
  constexpr index_t E = expr_t<Q>::shape::dims[expr_t<Q>::shape::rank - 1];
  auto s = matmul(q, k.transpose()) * T(1 / std::sqrt(double(E)));
  if constexpr (std::is_same_v<typename expr_t<M>::value_type, bool>)
    return matmul(where(mask, s, -std::numeric_limits<T>::infinity()).template softmax<-1>(), v);
  else
    return matmul((s + mask).template softmax<-1>(), v);
}

// PyTorch's gather along Axis: out[..., i, ...] = x[..., index[..., i, ...], ...], index of any
// arithmetic type, of x's shape but at Axis; the result has index's shape. A one-hot product summed
// over x's axis: O(index size x x's size at Axis), as the dynamic path inside a TinyJit step.
template <index_t Axis, Operand X, Operand I>
auto gather(const X& x, const I& index) {
  using SX = typename expr_t<X>::shape;
  using SI = typename expr_t<I>::shape;
  using T = typename expr_t<X>::value_type;
  constexpr std::size_t a = Axis < 0 ? std::size_t(std::int64_t(SX::rank) + Axis) : std::size_t(Axis);
  constexpr bool ok = SX::rank == SI::rank && a < SX::rank && [] {
    for (std::size_t d = 0; d < SX::rank; ++d)
      if (d != a && SX::dims[d] != SI::dims[d]) return false;
    return true;
  }();
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: gather: the index must have the tensor's shape but at the axis",
                             err::gather, SX, SI);
  if constexpr (ok) {
    constexpr index_t n = SX::dims[a];
    constexpr Dims range = [] {
      Dims d = Dims::filled(SI::rank + 1, 1);
      d[a + 1] = n;
      return d;
    }();
    auto idx =
        detail::move<expr_t<I>, MovementOps::RESHAPE, detail::insert_one<SI::dims, a + 1>()>(index.expr());
    auto at = detail::move<std::remove_cvref_t<decltype(arange<T, n>())>, MovementOps::RESHAPE, range>(
        arange<T, n>());
    auto one_hot = (idx.template cast<T>() == at).template cast<T>();
    auto xs = detail::move<expr_t<X>, MovementOps::RESHAPE, detail::insert_one<SX::dims, a>()>(x.expr());
    auto picked = detail::reduce<ReduceOps::SUM, false, index_t(a + 1)>(xs * one_hot);
    return picked;
  } else {
    return detail::constant<T, SI>(T(0));
  }
}

// Rows of weight (V, C) picked by integer indices (...): (..., C), as nn::Embedding. A one-hot
// (..., V) matmul, so its gradient is the matmul's rule: the scatter-add of the rows' gradients.
template <Operand W, Operand I>
auto embedding(const W& weight, const I& index) {
  using SW = typename expr_t<W>::shape;
  using SI = typename expr_t<I>::shape;
  using T = typename expr_t<W>::value_type;
  static_assert(SW::rank == 2, "fixed: embedding: the weight must be (vocabulary, width)");
  constexpr index_t v = SW::dims[0];
  auto idx =
      detail::move<expr_t<I>, MovementOps::RESHAPE, detail::insert_one<SI::dims, SI::rank>()>(index.expr());
  return matmul((idx.template cast<T>() == arange<T, v>()).template cast<T>(), weight);
}

}  // namespace metagrad::fixed
