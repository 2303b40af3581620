#pragma once
// The backward rule of conv2d as two materialised ops, each by the blocked matmul kernel: the
// weights' gradient is the incoming gradient times the whole batch's windows (im2col), the input's
// is the weights times the incoming gradient scattered back onto the pixels each window read
// (col2im), a few images at a time. Temporaries live in the arena.
#include "metagrad/detail/fixed/conv2d_vjp.hpp"
#include "metagrad/fixed/conv2d.hpp"
#include "metagrad/fixed/vjp.hpp"

namespace metagrad::fixed {

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
