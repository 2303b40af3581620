// Average pooling of a vector: there is no (H, W) to pool over; a zero stride is wrong too.
// expect: fixed: pool
// at most 15 lines
// expect g++: fixed: pool (8,) with window, stride (2, 2, 0, 0)
// expect clang: err::pool, metagrad::fixed::Shape<8>, metagrad::fixed::Args<2, 2, 0, 0>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 8> x;
  fx::Tensor<float, 8> y = fx::avg_pool2d<2, 0>(x) + x;
}
