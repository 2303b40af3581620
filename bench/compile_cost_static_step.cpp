// Compile-cost reference (bench/compile_cost.sh): the W5 MLP training step on the static path
// (fixed::MLP::step: forward, fixed::grad, SGD) in one translation unit without the dataset loader,
// run on random data so nothing is optimised away.
#include <cstdio>
#include <memory>
#include <random>

#include "metagrad/fixed/mlp.hpp"

int main() {
  namespace fx = metagrad::fixed;
  constexpr fx::index_t B = 128, In = 784, H = 512, Out = 10;
  auto m = std::make_unique<fx::MLP<float, B, In, H, Out>>(0);
  fx::Tensor<float, B, In> x;
  fx::Tensor<float, B, Out> y;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(0, 1);
  for (float& v : x) v = u(rng);
  for (fx::index_t i = 0; i < B; ++i) y(i, rng() % Out) = 1;
  float loss = 0;
  for (int s = 0; s < 3; ++s) loss = m->step(x, y, 0.1f);
  std::printf("loss after 3 steps: %f\n", loss);
}
