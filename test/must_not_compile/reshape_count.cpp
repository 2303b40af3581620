// reshape (4,6) -> (5,5): 24 elements cannot become 25.
// expect: fixed: reshape
// expect g++: fixed: reshape (4, 6) to (5, 5)
// expect clang: err::reshape, metagrad::fixed::Shape<4, 6>, metagrad::fixed::Args<5, 5>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 6> a;
  auto b = a.reshape<5, 5>();
}
