// shrink past the end of axis 1 (size 3).
// expect: fixed: shrink
// expect g++: fixed: shrink (2, 3) to (0, 2, 1, 4)
// expect clang: err::shrink, metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<0, 2, 1, 4>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.shrink<0, 2, 1, 4>();
}
