// An AOT generator in a project outside the tree: softmax of x @ w, emitted as C.
#include <metagrad/aot.hpp>

int main(int argc, char** argv) {
  metagrad::aot::Generator g("consumer_model");
  metagrad::Tensor x = metagrad::Tensor::empty({2, 3}), w = metagrad::Tensor::empty({3, 4});
  g.function("consumer_softmax", {{"x", x}, {"w", w}}, {{"out", x.matmul(w).softmax()}});
  return g.main(argc, argv);
}
