// Compile-cost reference (bench/compile_cost.sh, issue 63): the W5 MLP training step as a new user
// writes it from the README, with the public API alone: the weights as fx::Tensors, the loss as one
// expression, fx::grad's gradient expressions, the loss and a gradient read into tensors, four
// `w -= 0.1f * g` updates and one fx::eval; run on random data so nothing is optimised away.
#include <cstdio>
#include <memory>
#include <random>

#include <metagrad/fixed.hpp>

namespace fx = metagrad::fixed;

constexpr fx::index_t B = 128, In = 784, H = 512, Out = 10;

// The model's tensors (on the heap: their values are, too, so the struct is small).
struct Net {
  fx::Tensor<float, B, In> x;
  fx::Tensor<float, B, Out> y;  // one-hot
  fx::Tensor<float, In, H> w1;
  fx::Tensor<float, H> b1;
  fx::Tensor<float, H, Out> w2;
  fx::Tensor<float, Out> b2;
};

int main() {
  auto n = std::make_unique<Net>();
  auto& [x, y, w1, b1, w2, b2] = *n;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (float& v : x) v = u(rng) + 0.05f;
  for (float& v : w1) v = u(rng);
  for (float& v : w2) v = u(rng);
  for (fx::index_t i = 0; i < B; ++i) y(i, rng() % Out) = 1;
  float first = 0, last = 0;
  int hits = 0;
  for (int s = 0; s < 3; ++s) {
    auto logits = fx::matmul((fx::matmul(x, w1) + b1).relu(), w2) + b2;
    auto loss = -(logits.log_softmax<1>() * y).sum() / 128.f;
    fx::Tensor<float> l = loss;  // the loss read into a tensor
    auto [gw1, gb1, gw2, gb2] = fx::grad(loss, w1, b1, w2, b2);
    fx::Tensor<float, Out> tb2 = gb2;  // a gradient read into a tensor
    w1 -= 0.1f * gw1;                  // each update fused with its gradient; b1 last, as gw2 reads it
    w2 -= 0.1f * gw2;
    b1 -= 0.1f * gb1;
    b2 -= 0.1f * tb2;
    auto p = fx::eval(logits);  // the updated model's logits, for the accuracy
    hits = 0;
    for (fx::index_t i = 0; i < B; ++i) {
      fx::index_t best = 0;
      for (fx::index_t j = 1; j < Out; ++j) best = p(i, j) > p(i, best) ? j : best;
      hits += y(i, best) > 0;
    }
    (s ? last : first) = l[0];
  }
  std::printf("loss %f -> %f, %d of %d right\n", first, last, hits, int(B));
}
