// (3,4) + (5): trailing dimensions 4 and 5 do not broadcast.
// expect: fixed: elementwise op
// expect: ShapeMismatch<metagrad::fixed::err::elementwise,
// expect: metagrad::fixed::Shape<3, 4>, metagrad::fixed::Shape<5> >
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 3, 4> a;
  fx::Tensor<float, 5> b;
  auto c = (a + b).eval();
}
