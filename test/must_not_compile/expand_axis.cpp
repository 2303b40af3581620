// expand (2,3) -> (4,3): only size-1 axes can grow.
// expect: fixed: expand
// expect g++: fixed: expand (2, 3) to (4, 3)
// expect clang: err::expand, metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<4, 3>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.expand<4, 3>();
}
