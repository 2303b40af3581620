#pragma once
// The internals of fixed/transformer.hpp: the constant masks of triu and tril, and shapes with an
// axis inserted.
#include <cstddef>

#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

namespace err {
struct attention {
  static constexpr const char* join = " with key and value ";
};
struct gather {
  static constexpr const char* join = " with index ";
};
struct band {
  static constexpr const char* join = "";
};
}  // namespace err

namespace detail {
// keep(i, j) of triu (Upper) or tril for diagonal K, as a constant (R, W) tensor.
template <index_t R, index_t W, index_t K, bool Upper>
const Tensor<bool, R, W>& band_mask() {
  static const Tensor<bool, R, W> m = [] {
    Tensor<bool, R, W> t;
    for (index_t i = 0; i < R; ++i)
      for (index_t j = 0; j < W; ++j) t(i, j) = Upper ? j - i >= K : j - i <= K;
    return t;
  }();
  return m;
}
template <class X, index_t K, bool Upper>
auto band(const X& x) {
  using S = typename expr_t<X>::shape;
  using T = typename expr_t<X>::value_type;
  METAGRAD_FIXED_SHAPE_CHECK(S::rank >= 2, "fixed: triu / tril: the tensor needs at least 2 axes", err::band,
                             S);
  if constexpr (S::rank >= 2)
    return where(band_mask<S::dims[S::rank - 2], S::dims[S::rank - 1], K, Upper>(), x, T(0));
  else
    return x.expr();
}
// d with a size-1 axis inserted at position `at`.
template <Dims D, std::size_t At>
constexpr Dims insert_one() {
  Dims r;
  for (std::size_t i = 0; i <= D.size(); ++i) {
    if (i == At) r.push_back(1);
    if (i < D.size()) r.push_back(D[i]);
  }
  return r;
}
}  // namespace detail

}  // namespace metagrad::fixed
