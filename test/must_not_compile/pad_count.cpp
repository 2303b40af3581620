// pad needs (before, after) for each of the two axes.
// expect: fixed: pad
// expect: ShapeMismatch<metagrad::fixed::err::pad,
// expect: metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<1, 1>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.pad<1, 1>();
}
