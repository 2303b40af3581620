// A 2x6 average-pooling window on a (3, 8, 5) tensor: wider than its 5 columns.
// expect: fixed: pool
// at most 15 lines
// expect g++: fixed: pool (3, 8, 5) with window, stride (2, 6, 1, 1)
// expect clang: err::pool, metagrad::fixed::Shape<3, 8, 5>, metagrad::fixed::Args<2, 6, 1, 1>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 3, 8, 5> x;
  auto y = fx::avg_pool2d<2, 6, 1, 1>(x).eval();
}
