// A wrong matmul whose result is used on: combined with a tensor of the shape the user meant,
// multiplied by another matmul, evaluated, and assigned to a tensor of another shape than the failed
// product's placeholder.
// The failed op's result passes every later check silently: the matmul's error is the only one.
// expect: fixed: matmul
// expect g++: fixed: matmul (4, 3) @ (5, 3): the inner dimensions differ
// expect clang: err::matmul, metagrad::fixed::Shape<4, 3>, metagrad::fixed::Shape<5, 3>>
// at most 15 lines
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> x;
  fx::Tensor<float, 5, 3> w;
  fx::Tensor<float, 4, 5> y;
  fx::Tensor<float, 4, 5> z = fx::matmul(x, w).relu() * y + 1;
  y = fx::matmul(x, w);
  fx::Tensor<float, 4, 5> u = fx::matmul(fx::matmul(x, w), y.transpose());
  auto v = (fx::matmul(x, w) * 2).sum().eval();
}
