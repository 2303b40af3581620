// cross-entropy of (16, 10) logits with 15 labels.
// expect: fixed: cross_entropy
// expect g++: fixed: cross_entropy (16, 10) with labels (15,)
// expect clang: err::cross_entropy, metagrad::fixed::Shape<16, 10>, metagrad::fixed::Shape<15>>
#include "metagrad/fixed.hpp"
namespace fx = metagrad::fixed;
int main() {
  fx::Tensor<float, 16, 10> logits;
  fx::Tensor<int, 15> labels;
  auto loss = fx::sparse_categorical_crossentropy(logits, labels).eval();
}
