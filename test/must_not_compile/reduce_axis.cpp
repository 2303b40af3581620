// sum over axis 2 of a rank-2 tensor.
// expect: fixed: reduce
// expect g++: fixed: reduce (4, 3) over axes (2,): each axis must exist and appear once
// expect clang: err::reduce, metagrad::fixed::Shape<4, 3>, metagrad::fixed::Args<2>>
// at most 15 lines
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> a;
  auto b = a.sum<2>();
}
