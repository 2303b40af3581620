// linear with a bias of the wrong length: (8,4) + (5).
// expect: fixed: elementwise
// expect g++: fixed: elementwise op (8, 4) and (5,)
// expect clang: err::elementwise, metagrad::fixed::Shape<8, 4>, metagrad::fixed::Shape<5>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 8, 16> x;
  fx::Tensor<float, 16, 4> w;
  fx::Tensor<float, 5> b;
  auto y = fx::linear(x, w, b).eval();
}
