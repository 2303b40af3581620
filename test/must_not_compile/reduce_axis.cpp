// sum over axis 2 of a rank-2 tensor.
// expect: fixed: reduce
// expect: ShapeMismatch<metagrad::fixed::err::reduce,
// expect: metagrad::fixed::Shape<2, 3>, metagrad::fixed::Args<2>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = a.sum<2>();
}
