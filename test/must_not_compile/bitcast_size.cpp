// bitcast reads each element's bits as the new type: a float (4 bytes) is no double (8).
// expect: fixed: bitcast: the element types differ in size
// at most 25 lines
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 2, 3> a;
  auto b = fx::bitcast<double>(a);
}
