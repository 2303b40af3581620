#pragma once
// conv2d with compile-time stride and padding, NCHW input and (Cout, Cin, KH, KW) weights, as the
// dynamic Tensor::conv2d (groups 1, dilation 1). A Conv2d node is materialised per image: the
// input's windows are unrolled into an arena matrix (im2col, zeros for the padding) and the
// weights (Cout x Cin*KH*KW) multiply it with the matmul kernel, writing NCHW output directly.
#include "metagrad/detail/fixed/conv2d.hpp"
#include "metagrad/fixed/matmul.hpp"

namespace metagrad::fixed {

// x (N, Cin, H, W) convolved with w (Cout, Cin, KH, KW): (N, Cout, (H + 2P - KH) / S + 1, ...).
template <index_t Stride = 1, index_t Padding = 0, Operand X, Operand W>
auto conv2d(const X& x, const W& w) {
  using EX = expr_t<X>;
  using EW = expr_t<W>;
  constexpr Dims dx = EX::shape::dims, dw = EW::shape::dims;
  constexpr bool ok = dx.size() == 4 && dw.size() == 4 && dx[1] == dw[1] && Stride > 0 && Padding >= 0 &&
                      dx[2] + 2 * Padding >= dw[2] && dx[3] + 2 * Padding >= dw[3];
  METAGRAD_FIXED_SHAPE_CHECK(
      ok,
      "fixed: conv2d: (N, Cin, H, W) * (Cout, Cin, KH, KW): the channels must agree and the kernel "
      "must fit the padded image",
      err::conv2d, typename EX::shape, typename EW::shape);
  if constexpr (ok) return Expr<op::Conv2d<Stride, Padding>, EX, EW>({}, x.expr(), w.expr());
}
template <index_t Stride = 1, index_t Padding = 0, Operand X, Operand W, Operand B>
auto conv2d(const X& x, const W& w, const B& bias) {  // bias (Cout), added per output channel
  constexpr index_t cout = expr_t<W>::shape::dims[0];
  return conv2d<Stride, Padding>(x, w) + bias.template reshape<cout, 1, 1>();
}

}  // namespace metagrad::fixed
