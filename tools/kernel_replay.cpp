// Kernel replay (as tinygrad's process replay): prints the source of every kernel that a fixed set of
// graphs runs (each differentiable elementwise function forward and backward, with each operand
// needing a gradient or not, and a small training step), so that a structural change can be checked
// to leave generated code byte-identical: build this against the library before and after, run both
// under the same DEVICE (CLANG, LLVM, ...), and compare the outputs.
//   g++ -std=c++20 -O1 tools/kernel_replay.cpp -Iinclude -Idetail -Lbuild -lmetagrad -o replay
//   DEVICE=CLANG LD_LIBRARY_PATH=build ./replay > kernels.txt
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "metagrad/metagrad.hpp"

using metagrad::Tensor;

namespace {

Tensor values(const metagrad::Dims& shape, double lo, double hi, double shift, bool grad) {
  std::vector<float> v(static_cast<std::size_t>(metagrad::prod(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(lo + (hi - lo) *
                                       ((static_cast<double>(i) * 0.618 + shift) - int(i * 0.618 + shift)));
  return Tensor(v, shape, {.requires_grad = grad});
}

// Realizes each tensor, printing the kernels it ran.
void dump(const std::string& name, const std::vector<Tensor>& ts) {
  int k = 0;
  for (const Tensor& t : ts) {
    metagrad::GlobalCounters::cache.emplace();
    Tensor(t).realize();
    std::vector<metagrad::CacheEntry> ran = std::move(*metagrad::GlobalCounters::cache);
    metagrad::GlobalCounters::cache.reset();
    for (const metagrad::CacheEntry& e : ran)
      std::printf("=== %s #%d\n%s\n", name.c_str(), k++, e.prg.prg.c_str());
  }
}

void unary(const std::string& name, const std::function<Tensor(const Tensor&)>& f, double lo = -3,
           double hi = 3) {
  Tensor x = values({4, 8}, lo, hi, 0.1, true);
  Tensor y = f(x);
  (y * values(y.shape(), 0.5, 1.5, 0.3, false)).sum().backward();
  dump(name, {y, *x.grad});
}

void binary(const std::string& name, const std::function<Tensor(const Tensor&, const Tensor&)>& f,
            double lo = -3, double hi = 3) {
  for (int needs = 1; needs < 4; ++needs) {
    Tensor x = values({4, 8}, lo, hi, 0.1, needs & 1), y = values({4, 8}, lo, hi, 0.7, needs & 2);
    Tensor z = f(x, y);
    (z * values(z.shape(), 0.5, 1.5, 0.3, false)).sum().backward();
    std::vector<Tensor> out{z};
    if (x.grad) out.push_back(*x.grad);
    if (y.grad) out.push_back(*y.grad);
    dump(name + " needs " + std::to_string(needs), out);
  }
}

}  // namespace

int main() {
  unary("exp", [](const Tensor& x) { return x.exp(); });
  unary(
      "log", [](const Tensor& x) { return x.log(); }, 0.2, 3);
  unary("sin", [](const Tensor& x) { return x.sin(); });
  unary("relu", [](const Tensor& x) { return x.relu(); });
  unary("sigmoid", [](const Tensor& x) { return x.sigmoid(); });
  unary(
      "sqrt", [](const Tensor& x) { return x.sqrt(); }, 0.2, 3);
  unary("tanh", [](const Tensor& x) { return x.tanh(); });
  unary("gelu", [](const Tensor& x) { return x.gelu(); });
  unary("softplus", [](const Tensor& x) { return x.softplus(); });
  unary("abs", [](const Tensor& x) { return x.abs(); });
  unary("sign", [](const Tensor& x) { return x.sign(); });
  unary("leakyrelu", [](const Tensor& x) { return x.leakyrelu(0.1); });
  unary("floor", [](const Tensor& x) { return x.floor(); });
  unary("softmax", [](const Tensor& x) { return x.softmax(); });
  unary("max", [](const Tensor& x) { return x.max(1); });
  binary("add", [](const Tensor& x, const Tensor& y) { return x + y; });
  binary("sub", [](const Tensor& x, const Tensor& y) { return x - y; });
  binary("mul", [](const Tensor& x, const Tensor& y) { return x * y; });
  binary(
      "div", [](const Tensor& x, const Tensor& y) { return x / y; }, 0.5, 3);
  binary(
      "pow", [](const Tensor& x, const Tensor& y) { return x.pow(y); }, 0.2, 2);
  binary("maximum", [](const Tensor& x, const Tensor& y) { return x.maximum(y); });
  binary("minimum", [](const Tensor& x, const Tensor& y) { return x.minimum(y); });
  binary("where", [](const Tensor& x, const Tensor& y) { return (x < y).where(x * 2, y); });
  binary("lt",
         [](const Tensor& x, const Tensor& y) { return (x < y).cast(metagrad::dtypes::float32) + x * y; });
  binary("linear", [](const Tensor& x, const Tensor& w) {
    return x.reshape({8, 4}).matmul(w.reshape({4, 8})).relu().log_softmax().mean();
  });
  return 0;
}
