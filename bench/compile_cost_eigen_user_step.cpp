// Compile-cost reference (bench/compile_cost.sh, issue 63): bench/compile_cost_user_step.cpp's program
// written by hand with Eigen (eigen_mlp.hpp): the step (loss, gradients, the four updates), then the
// updated model's logits for the accuracy; run on random data so nothing is optimised away.
#include <cstdio>
#include <random>
#include <vector>

#include "eigen_mlp.hpp"

int main() {
  constexpr std::int64_t B = 128, In = 784, H = 512, Out = 10;
  std::mt19937 rng(0);
  auto fill = [&](std::size_t n, float base) {
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    std::vector<float> v(n);
    for (float& f : v) f = u(rng) + base;
    return v;
  };
  std::vector<float> x = fill(B * In, 0.05f), w1 = fill(In * H, 0), w2 = fill(H * Out, 0), b1(H), b2(Out);
  std::vector<std::int32_t> y(B);
  for (auto& c : y) c = static_cast<std::int32_t>(rng() % Out);
  metagrad::bench::EigenMlp m(B, In, H, Out, x.data(), w1.data(), b1.data(), w2.data(), b2.data(), y);
  m.lr = 0.1f;
  float first = 0, last = 0;
  int hits = 0;
  for (int s = 0; s < 3; ++s) {
    float l = m.step();
    m.forward();  // the updated model's logits, for the accuracy
    hits = 0;
    for (std::int64_t i = 0; i < B; ++i) {
      Eigen::Index best = 0;
      m.l.row(i).maxCoeff(&best);
      hits += best == y[static_cast<std::size_t>(i)];
    }
    (s ? last : first) = l;
  }
  std::printf("loss %f -> %f, %d of %d right\n", first, last, hits, int(B));
}
