// vjp_into of a (4, 3) output with a (3, 4) gradient: the gradient must have the output shape.
// expect: fixed: vjp_into
// expect g++: fixed: vjp_into (4, 3) with gradient (3, 4): the gradient must have the output shape
// expect clang: err::vjp, metagrad::fixed::Shape<4, 3>, metagrad::fixed::Shape<3, 4>>
// at most 15 lines
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/grad.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> x, dx;
  fx::Tensor<float, 3, 4> g;
  fx::vjp_into(std::tie(dx), x.exp(), g, x);
}
