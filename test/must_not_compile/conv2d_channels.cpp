// conv2d of a 3-channel image with 4-channel kernels.
// expect: fixed: conv2d
// expect g++: fixed: conv2d (1, 3, 8, 8) with weight (2, 4, 3, 3)
// expect clang: err::conv2d, metagrad::fixed::Shape<1, 3, 8, 8>, metagrad::fixed::Shape<2, 4, 3, 3>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 1, 3, 8, 8> x;
  fx::Tensor<float, 2, 4, 3, 3> w;
  auto y = fx::conv2d<1, 1>(x, w).eval();
}
