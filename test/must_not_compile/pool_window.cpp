// A 5x5 pooling window on a 4x4 image.
// expect: fixed: pool
// at most 15 lines
// expect g++: fixed: pool (1, 2, 4, 4) with window, stride (5, 5, 2, 2)
// expect clang: err::pool, metagrad::fixed::Shape<1, 2, 4, 4>, metagrad::fixed::Args<5, 5, 2, 2>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 1, 2, 4, 4> x;
  auto y = fx::max_pool2d<5, 2>(x).eval();
}
