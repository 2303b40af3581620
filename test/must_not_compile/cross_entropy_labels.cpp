// cross-entropy of (16, 10) logits with 15 labels.
// expect: fixed: nll_loss
// expect: ShapeMismatch<metagrad::fixed::err::cross_entropy,
// expect: metagrad::fixed::Shape<16, 10>, metagrad::fixed::Shape<15> >
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 16, 10> logits;
  fx::Tensor<int, 15> labels;
  auto loss = fx::sparse_categorical_crossentropy(logits, labels).eval();
}
