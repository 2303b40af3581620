// (4,3) + (5,3): leading dimensions 4 and 5 do not broadcast.
// expect: fixed: elementwise op
// expect g++: fixed: elementwise op (4, 3) and (5, 3): the shapes do not broadcast
// expect clang: err::elementwise, metagrad::fixed::Shape<4, 3>, metagrad::fixed::Shape<5, 3>>
// at most 15 lines
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> a;
  fx::Tensor<float, 5, 3> b;
  auto c = (a + b).eval();
}
