// matmul (64,128) @ (64,10): the inner dimensions differ.
// expect: fixed: matmul
// expect: ShapeMismatch<metagrad::fixed::err::matmul,
// expect: metagrad::fixed::Shape<64, 128>, metagrad::fixed::Shape<64, 10> >
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 64, 128> x;
  fx::Tensor<float, 64, 10> w;
  fx::Tensor<float, 64, 10> y = fx::matmul(x, w);
}
