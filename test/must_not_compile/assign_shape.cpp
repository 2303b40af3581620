// Assigning a (4,3) expression to a (4,7) tensor.
// expect: fixed: assignment
// expect g++: fixed: assignment (4, 7) = (4, 3): the tensor and the expression differ in shape
// expect clang: err::assign, metagrad::fixed::Shape<4, 7>, metagrad::fixed::Shape<4, 3>>
// at most 15 lines
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> a;
  fx::Tensor<float, 4, 7> b = a * 2;
}
