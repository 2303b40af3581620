// Compile-cost reference (bench/compile_cost.sh): the W5 MLP training step written by hand with
// Eigen (eigen_mlp.hpp) in one translation unit, run on random data so nothing is optimised away.
#include <cstdio>
#include <random>
#include <vector>

#include "eigen_mlp.hpp"

int main() {
  constexpr std::int64_t B = 128, In = 784, H = 512, Out = 10;
  std::mt19937 rng(0);
  auto fill = [&](std::size_t n) {
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    std::vector<float> v(n);
    for (float& f : v) f = u(rng);
    return v;
  };
  std::vector<float> x = fill(B * In), w1 = fill(In * H), b1 = fill(H), w2 = fill(H * Out), b2 = fill(Out);
  std::vector<std::int32_t> y(B);
  for (auto& c : y) c = static_cast<std::int32_t>(rng() % Out);
  metagrad::bench::EigenMlp m(B, In, H, Out, x.data(), w1.data(), b1.data(), w2.data(), b2.data(), y);
  float loss = 0;
  for (int s = 0; s < 3; ++s) loss = m.step();
  std::printf("loss after 3 steps: %f\n", loss);
}
