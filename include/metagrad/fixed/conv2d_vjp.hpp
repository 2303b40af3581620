#pragma once
// The backward rule of conv2d as two materialised ops: the gradient of the input (the incoming
// gradient scattered back through the weights, a transposed convolution) and of the weights (the
// incoming gradient correlated with the input's windows). Each is one loop nest over the output
// positions; the padding is skipped by bounds, as the forward's im2col fills it with zeros.
#include <algorithm>

#include "metagrad/fixed/conv2d.hpp"
#include "metagrad/fixed/vjp.hpp"

namespace metagrad::fixed {

namespace op {
template <index_t Stride, index_t Padding, index_t H, index_t W>
struct Conv2dGradInput {};  // children: g (N, Cout, OH, OW), w (Cout, Cin, KH, KW); shape (N, Cin, H, W)
template <index_t Stride, index_t Padding, index_t KH, index_t KW>
struct Conv2dGradWeight {};  // children: x (N, Cin, H, W), g (N, Cout, OH, OW); shape (Cout, Cin, KH, KW)
}  // namespace op

namespace detail {
template <index_t S, index_t P, index_t H, index_t W, class G, class Wt>
struct node<op::Conv2dGradInput<S, P, H, W>, G, Wt> {
  using value_type = typename G::value_type;
  using shape = Shape<G::shape::dims[0], Wt::shape::dims[1], H, W>;
};
template <index_t S, index_t P, index_t KH, index_t KW, class X, class G>
struct node<op::Conv2dGradWeight<S, P, KH, KW>, X, G> {
  using value_type = typename X::value_type;
  using shape = Shape<G::shape::dims[1], X::shape::dims[1], KH, KW>;
};

// For every output position (b, co, y, z) and kernel tap (ci, i, j) inside the image:
// f(g offset, w offset, x offset).
template <index_t S, index_t P, Dims X, Dims Wt, Dims G, class F>
void for_each_tap(F&& f) {
  constexpr index_t n = X[0], c = X[1], h = X[2], w = X[3], cout = Wt[0], kh = Wt[2], kw = Wt[3];
  constexpr index_t oh = G[2], ow = G[3];
  for (index_t b = 0; b < n; ++b)
    for (index_t co = 0; co < cout; ++co)
      for (index_t y = 0; y < oh; ++y)
        for (index_t z = 0; z < ow; ++z) {
          index_t go = ((b * cout + co) * oh + y) * ow + z;
          for (index_t ci = 0; ci < c; ++ci)
            for (index_t i = 0; i < kh; ++i) {
              index_t iy = y * S + i - P;
              if (iy < 0 || iy >= h) continue;
              for (index_t j = 0; j < kw; ++j) {
                index_t iz = z * S + j - P;
                if (iz >= 0 && iz < w)
                  f(go, ((co * c + ci) * kh + i) * kw + j, ((b * c + ci) * h + iy) * w + iz);
              }
            }
        }
}

// Both rules are one loop: out = 0, then at every tap out[the input's or the weight's position] +=
// g * the other operand there. E's children are (g, w) for the input's rule, (x, g) for the weight's.
template <index_t S, index_t P, bool ToInput, class T, class E>
void scatter_taps(T* out, const E& e) {
  using A = boost::mp11::mp_at_c<typename E::children_types, 0>;
  using B = boost::mp11::mp_at_c<typename E::children_types, 1>;
  using G = std::conditional_t<ToInput, A, B>;
  constexpr Dims x = ToInput ? E::shape::dims : A::shape::dims, w = ToInput ? B::shape::dims : E::shape::dims;
  Arena::Scope scope;
  const T* a = contiguous_data(std::get<0>(e.children()));
  const T* b = contiguous_data(std::get<1>(e.children()));
  std::fill(out, out + E::shape::size, T(0));
  for_each_tap<S, P, x, w, G::shape::dims>([&](index_t go, index_t wo, index_t xo) {
    if constexpr (ToInput)
      out[xo] += a[go] * b[wo];
    else
      out[wo] += b[go] * a[xo];
  });
}

template <index_t S, index_t P, index_t H, index_t W>
struct Materialise<op::Conv2dGradInput<S, P, H, W>> {
  template <class T, class E>
  static void run(T* out, const E& e) {
    scatter_taps<S, P, true>(out, e);
  }
};
template <index_t S, index_t P, index_t KH, index_t KW>
struct Materialise<op::Conv2dGradWeight<S, P, KH, KW>> {
  template <class T, class E>
  static void run(T* out, const E& e) {
    scatter_taps<S, P, false>(out, e);
  }
};
}  // namespace detail

template <index_t S, index_t P>
struct Vjp<op::Conv2d<S, P>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    using X = typename N::template child_t<0>;
    using Wt = typename N::template child_t<1>;
    if constexpr (I == 0) {
      using Op = op::Conv2dGradInput<S, P, X::shape::dims[2], X::shape::dims[3]>;
      return Expr<Op, G, decltype(n.template x<1>())>(Op{}, g, n.template x<1>());
    } else {
      using Op = op::Conv2dGradWeight<S, P, Wt::shape::dims[2], Wt::shape::dims[3]>;
      return Expr<Op, decltype(n.template x<0>()), G>(Op{}, n.template x<0>(), g);
    }
  }
};

}  // namespace metagrad::fixed
