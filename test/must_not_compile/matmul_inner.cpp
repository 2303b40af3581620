// matmul (4,3) @ (5,3): the inner dimensions 3 and 5 differ.
// expect: fixed: matmul
// expect g++: fixed: matmul (4, 3) @ (5, 3): the inner dimensions differ
// expect clang: err::matmul, metagrad::fixed::Shape<4, 3>, metagrad::fixed::Shape<5, 3>>
// at most 15 lines
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> x;
  fx::Tensor<float, 5, 3> w;
  fx::Tensor<float, 4, 3> y = fx::matmul(x, w);
}
