// pad needs (before, after) for each of the two axes.
// expect: fixed: pad
// expect g++: fixed: pad (2, 3) by (1, 1)
// expect clang: err::pad, metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<1, 1>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.pad<1, 1>();
}
