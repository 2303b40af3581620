#pragma once
// The internals of fixed/conv2d.hpp: the Conv2d node and its materialisation (im2col, then one
// product by the matmul kernel per image).
#include "metagrad/fixed/matmul.hpp"

namespace metagrad::fixed {

namespace op {
template <index_t Stride, index_t Padding>
struct Conv2d {  // children: x (N, Cin, H, W), w (Cout, Cin, KH, KW); shape (N, Cout, OH, OW)
  static constexpr index_t stride = Stride, padding = Padding;
};
}  // namespace op

namespace detail {
template <index_t S, index_t P>
constexpr Dims conv_shape(const Dims& x, const Dims& w) {
  return Dims{x[0], w[0], (x[2] + 2 * P - w[2]) / S + 1, (x[3] + 2 * P - w[3]) / S + 1};
}
template <index_t S, index_t P, class X, class W>
struct node<op::Conv2d<S, P>, X, W> {
  static constexpr Dims dims = conv_shape<S, P>(X::shape::dims, W::shape::dims);
  using value_type = typename X::value_type;
  using shape = ShapeOf<dims>;
};

// An operand as row-major contiguous data: in place when it is a tensor, else evaluated.
template <class E>
constexpr bool contiguous_in_place() {
  if constexpr (strided<E>::exists)
    return strided<E>::view.contiguous;
  else
    return false;
}
template <class E>
const typename E::value_type* contiguous_data(const E& e) {
  if constexpr (contiguous_in_place<E>()) {
    return strided<E>::data(e);
  } else {
    auto* tmp = Arena::local().alloc<typename E::value_type>(E::shape::size);
    assign(tmp, e);
    return tmp;
  }
}

// Every (kernel tap, output position) pair of one image's convolution with the input offset it
// reads, -1 in the padding: f(tap, pos, x offset), tap (ci, i, j) = (ci * KH + i) * KW + j and
// pos (y, z) = y * OW + z. TapsOuter visits them in the order of a (taps x positions) matrix's
// rows (im2col for the forward product), else of a (positions x taps) one (the backward's).
template <index_t S, index_t P, Dims X, Dims Wt, bool TapsOuter, class F>
void for_each_tap(F&& f) {
  constexpr index_t c = X[1], h = X[2], w = X[3], kh = Wt[2], kw = Wt[3];
  constexpr index_t oh = (h + 2 * P - kh) / S + 1, ow = (w + 2 * P - kw) / S + 1;
  auto at = [](index_t ci, index_t iy, index_t iz) {
    if constexpr (P == 0)  // every window inside the image
      return (ci * h + iy) * w + iz;
    else
      return iy >= 0 && iy < h && iz >= 0 && iz < w ? (ci * h + iy) * w + iz : index_t(-1);
  };
  if constexpr (TapsOuter) {
    for (index_t ci = 0, tap = 0; ci < c; ++ci)
      for (index_t i = 0; i < kh; ++i)
        for (index_t j = 0; j < kw; ++j, ++tap)
          for (index_t y = 0, pos = 0; y < oh; ++y)
            for (index_t z = 0; z < ow; ++z, ++pos) f(tap, pos, at(ci, y * S + i - P, z * S + j - P));
  } else {
    for (index_t y = 0, pos = 0; y < oh; ++y)
      for (index_t z = 0; z < ow; ++z, ++pos)
        for (index_t ci = 0, tap = 0; ci < c; ++ci)
          for (index_t i = 0; i < kh; ++i)
            for (index_t j = 0; j < kw; ++j, ++tap) f(tap, pos, at(ci, y * S + i - P, z * S + j - P));
  }
}

template <index_t S, index_t P>
struct Materialise<op::Conv2d<S, P>> {
  template <class T, class X, class W>
  static void run(T* out, const Expr<op::Conv2d<S, P>, X, W>& e) {
    constexpr Dims dx = X::shape::dims, dw = W::shape::dims, dout = node<op::Conv2d<S, P>, X, W>::dims;
    constexpr index_t n = dx[0], chw = dx[1] * dx[2] * dx[3], cout = dw[0];
    constexpr index_t k = dw[1] * dw[2] * dw[3], hw = dout[2] * dout[3];
    Arena::Scope scope;
    const T* x = contiguous_data(fixed::child<0>(e));
    const T* wt = contiguous_data(fixed::child<1>(e));
    T* cols = Arena::local().alloc<T>(k * hw);  // row: tap, column: output position
    for (index_t b = 0; b < n; ++b) {
      const T* img = x + b * chw;
      for_each_tap<S, P, dx, dw, true>(
          [&](index_t tap, index_t pos, index_t xo) { cols[tap * hw + pos] = xo >= 0 ? img[xo] : T(0); });
      Gemm<T>::run(cout, hw, k, wt, k, 1, cols, hw, 1, out + b * cout * hw, hw);
    }
  }
};
}  // namespace detail

}  // namespace metagrad::fixed
