// Assigning a (3,2) expression to a (2,3) tensor.
// expect: fixed: assignment
// expect: ShapeMismatch<metagrad::fixed::err::assign,
// expect: metagrad::fixed::Shape<2, 3>, metagrad::fixed::Shape<3, 2> >
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 3, 2> a;
  fx::Tensor<float, 2, 3> b = a * 2;
}
