// Lowering an expression that reads a fixed::cut: its value was computed already, so the lowered
// graph would freeze it; Lowering::cut is the lowered model's cut.
// expect: metagrad::lower: fixed::cut evaluated this value already
// expect: Lowering::cut
#include "metagrad/fixed/cut.hpp"
#include "metagrad/lower.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 4, 3> x;
  fx::Tape tape;
  metagrad::lower(fx::cut(x.exp()) * 2.f);
}
