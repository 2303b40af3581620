#pragma once
// max_pool2d and avg_pool2d over the last two axes with any compile-time window and stride, as the
// dynamic path's (windows that do not fit at the end are dropped; no padding or dilation there).
// The windows are tinygrad's _pool: a view of the input built from movement ops, then a max or
// mean over its last two axes, so every evaluator and fixed::grad see only core op tags
// (detail/metagrad/detail/fixed/pool.hpp).
#include "metagrad/detail/fixed/pool.hpp"

// The message of a pooling op's shape check. The check is in each op's own body, so that the
// error's context is short; after it the op returns zeros of a plausible shape (pool_fallback), so
// that the one error is all the user sees.
#define METAGRAD_FIXED_POOL_MESSAGE                                                                  \
  "fixed: pool: max_pool2d / avg_pool2d<KH, KW, SH, SW> on (..., H, W): the window must fit in (H, " \
  "W), and window and stride must be positive"

namespace metagrad::fixed {

// (..., H, W) -> (..., (H - KH) / SH + 1, (W - KW) / SW + 1): the max (or mean) of each KH x KW
// window, windows SH and SW apart; they overlap when the window is larger than the stride.
template <index_t KH, index_t KW, index_t SH, index_t SW, Operand X>
auto max_pool2d(const X& x) {
  using S = typename expr_t<X>::shape;
  constexpr bool ok = detail::pool_fits<S, KH, KW, SH, SW>;
  METAGRAD_FIXED_SHAPE_CHECK(ok, METAGRAD_FIXED_POOL_MESSAGE, err::pool, S, Args<KH, KW, SH, SW>);
  if constexpr (ok)
    return detail::Windows<S, KH, KW, SH, SW>::apply(x.expr()).template max<-2, -1>();
  else
    return detail::pool_fallback<X, KH, KW, SH, SW>();
}
template <index_t KH, index_t KW, index_t SH, index_t SW, Operand X>
auto avg_pool2d(const X& x) {
  using S = typename expr_t<X>::shape;
  constexpr bool ok = detail::pool_fits<S, KH, KW, SH, SW>;
  METAGRAD_FIXED_SHAPE_CHECK(ok, METAGRAD_FIXED_POOL_MESSAGE, err::pool, S, Args<KH, KW, SH, SW>);
  if constexpr (ok)
    return detail::Windows<S, KH, KW, SH, SW>::apply(x.expr()).template mean<-2, -1>();
  else
    return detail::pool_fallback<X, KH, KW, SH, SW>();
}
// A K x K window, stride S (by default K: windows side by side).
template <index_t K, index_t S = K, Operand X>
auto max_pool2d(const X& x) {
  return max_pool2d<K, K, S, S>(x);
}
template <index_t K, index_t S = K, Operand X>
auto avg_pool2d(const X& x) {
  return avg_pool2d<K, K, S, S>(x);
}

}  // namespace metagrad::fixed

#undef METAGRAD_FIXED_POOL_MESSAGE
