// permute<0, 0> names axis 0 twice.
// expect: fixed: permute
// expect g++: fixed: permute (2, 3) by (0, 0)
// expect clang: err::permute, metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<0, 0>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.permute<0, 0>();
}
