// permute<0, 0> names axis 0 twice.
// expect: fixed: permute
// expect: ShapeMismatch<metagrad::fixed::err::permute,
// expect: metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<0, 0> >
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.permute<0, 0>();
}
