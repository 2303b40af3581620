#pragma once
// The internals of fixed/conv2d_vjp.hpp: the two gradient nodes of conv2d and their materialisation.
#include <algorithm>

#include "metagrad/fixed/conv2d.hpp"

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

// The incoming gradient g (N, Cout, OH, OW) as a (Cout x N*OH*OW) matrix: column (b, y, z).
template <class G>
const typename G::value_type* channels_major(const G& g) {
  constexpr Dims d = G::shape::dims;
  if constexpr (d[0] == 1) {
    return contiguous_data(g);
  } else {
    constexpr Dims nc_hw{d[0], d[1], d[2] * d[3]}, order{1, 0, 2};
    auto* tmp = Arena::local().alloc<typename G::value_type>(G::shape::size);
    assign(tmp, move<decltype(move<G, MovementOps::RESHAPE, nc_hw>(g)), MovementOps::PERMUTE, order>(
                    move<G, MovementOps::RESHAPE, nc_hw>(g)));
    return tmp;
  }
}

// Images [b0, b1)'s windows as a (Cin*KH*KW x (b1-b0)*OH*OW) matrix, row (ci, i, j), column
// (b - b0, y, z): im2col in the forward's order, visited a run of output positions at a time, so
// that each run is read and written along contiguous memory (col2im reads it back the same way).
// f(at, src, z0, z1, ow): the run of row `at` (ow positions from column `at`) whose positions
// [z0, z1) read x[src + (z - z0) * S]; the others are padding.
template <index_t S, index_t P, Dims X, Dims Wt, class F>
void for_each_window_run(index_t b0, index_t b1, F&& f) {
  constexpr index_t c = X[1], h = X[2], w = X[3], kh = Wt[2], kw = Wt[3];
  constexpr index_t oh = (h + 2 * P - kh) / S + 1, ow = (w + 2 * P - kw) / S + 1, hw = oh * ow;
  for (index_t ci = 0, tap = 0; ci < c; ++ci)
    for (index_t i = 0; i < kh; ++i)
      for (index_t j = 0; j < kw; ++j, ++tap) {
        // positions z whose column z * S + j - P lies inside the image
        const index_t z0 = std::min(ow, std::max<index_t>(0, (P - j + S - 1) / S));
        const index_t z1 = std::max(z0, std::min(ow, (w - 1 + P - j) / S + 1));
        for (index_t b = b0; b < b1; ++b)
          for (index_t y = 0; y < oh; ++y) {
            const index_t iy = y * S + i - P, at = (tap * (b1 - b0) + b - b0) * hw + y * ow;
            if (iy < 0 || iy >= h)
              f(at, index_t(0), index_t(0), index_t(0), ow);
            else
              f(at, ((b * c + ci) * h + iy) * w + z0 * S + j - P, z0, z1, ow);
          }
      }
}

// dW (Cout x Cin*KH*KW) = g (Cout x N*OH*OW) @ cols^T, cols the windows of x as above.
template <index_t S, index_t P, index_t KH, index_t KW>
struct Materialise<op::Conv2dGradWeight<S, P, KH, KW>> {
  template <class T, class X, class G>
  static void run(T* out, const Expr<op::Conv2dGradWeight<S, P, KH, KW>, X, G>& e) {
    constexpr Dims dx = X::shape::dims, dw = node<op::Conv2dGradWeight<S, P, KH, KW>, X, G>::shape::dims;
    constexpr index_t n = dx[0], cout = dw[0], k = dw[1] * KH * KW;
    constexpr index_t hw = G::shape::dims[2] * G::shape::dims[3];
    Arena::Scope scope;
    const T* x = contiguous_data(fixed::child<0>(e));
    const T* g = channels_major(fixed::child<1>(e));
    T* cols = Arena::local().alloc<T>(k * n * hw);
    for_each_window_run<S, P, dx, dw>(0, n, [&](index_t at, index_t src, index_t z0, index_t z1, index_t ow) {
      T* __restrict to = cols + at;
      std::fill(to, to + z0, T(0));
      for (index_t z = z0; z < z1; ++z) to[z] = x[src + (z - z0) * S];
      std::fill(to + z1, to + ow, T(0));
    });
    Gemm<T>::run(cout, k, n * hw, g, n * hw, 1, cols, 1, n * hw, out, k);
  }
};

// dx = col2im(W^T (Cin*KH*KW x Cout) @ g (Cout x N*OH*OW)): each window's gradient added back to
// the pixels it read; the padding's share is dropped. A few images at a time, so that their windows'
// gradients (the product's C) are read back from L2 rather than from memory.
template <index_t S, index_t P, index_t H, index_t W>
struct Materialise<op::Conv2dGradInput<S, P, H, W>> {
  template <class T, class G, class Wt>
  static void run(T* out, const Expr<op::Conv2dGradInput<S, P, H, W>, G, Wt>& e) {
    constexpr Dims dx = node<op::Conv2dGradInput<S, P, H, W>, G, Wt>::shape::dims, dw = Wt::shape::dims;
    constexpr index_t n = dx[0], chw = dx[1] * H * W, cout = dw[0], k = dw[1] * dw[2] * dw[3];
    constexpr index_t hw = G::shape::dims[2] * G::shape::dims[3];
    static_assert(dx[2] == H && dx[3] == W);
    Arena::Scope scope;
    const T* g = channels_major(fixed::child<0>(e));
    const T* wt = contiguous_data(fixed::child<1>(e));
    const index_t nb = std::clamp<index_t>(host_caches().l2 / 4 / (k * hw * index_t(sizeof(T))), 1, n);
    T* cols = Arena::local().alloc<T>(k * nb * hw);
    std::fill(out, out + n * chw, T(0));
    for (index_t b0 = 0; b0 < n; b0 += nb) {
      const index_t b1 = std::min(n, b0 + nb);
      Gemm<T>::run(k, (b1 - b0) * hw, cout, wt, 1, k, g + b0 * hw, n * hw, 1, cols, (b1 - b0) * hw);
      for_each_window_run<S, P, dx, dw>(b0, b1,
                                        [&](index_t at, index_t src, index_t z0, index_t z1, index_t) {
                                          T* __restrict to = out + src;
                                          const T* from = cols + at;
                                          for (index_t z = z0; z < z1; ++z) to[(z - z0) * S] += from[z];
                                        });
    }
  }
};
}  // namespace detail

}  // namespace metagrad::fixed
