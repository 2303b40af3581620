// A tiny static CNN (conv2d 5x5 -> relu -> 2x2 max_pool2d -> linear, sparse categorical
// cross-entropy) trained by plain SGD through fixed::grad on a slice of Fashion-MNIST: its loss
// falls clearly, and its held-out accuracy rises well above chance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <tuple>

#include "metagrad/datasets/fashion_mnist.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/grad.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;

namespace {

constexpr index_t B = 32, C = 4, Classes = 10, Features = C * 12 * 12;

struct Cnn {
  fx::Tensor<float, C, 1, 5, 5> w1, gw1;
  fx::Tensor<float, C> b1, gb1;
  fx::Tensor<float, Features, Classes> w2, gw2;
  fx::Tensor<float, Classes> b2, gb2;

  explicit Cnn(std::uint32_t seed) {
    std::mt19937 rng(seed);
    auto init = [&](auto& t, double fan_in) {  // uniform +-1/sqrt(fan_in), as PyTorch's default
      std::uniform_real_distribution<float> u(-1 / std::sqrt(float(fan_in)), 1 / std::sqrt(float(fan_in)));
      for (float& v : t) v = u(rng);
    };
    init(w1, 25), init(b1, 25), init(w2, Features), init(b2, Features);
  }
  template <class X>
  auto logits(const X& x) const {
    auto h = fx::max_pool2d<2>(fx::conv2d(x, w1, b1).relu());  // (B, C, 12, 12)
    return fx::matmul(h.template reshape<B, Features>(), w2) + b2;
  }
  template <class X, class Y>
  float step(const X& x, const Y& y, float lr) {
    float loss = fx::grad_into(std::tie(gw1, gb1, gw2, gb2),
                               fx::sparse_categorical_crossentropy(logits(x), y), w1, b1, w2, b2);
    w1 -= lr * gw1, b1 -= lr * gb1, w2 -= lr * gw2, b2 -= lr * gb2;
    return loss;
  }
};

// Images [at, at + B) of the set, standardised as the examples do, and their labels.
void fill(const metagrad::datasets::ImageSet& set, std::int64_t at, fx::Tensor<float, B, 1, 28, 28>& x,
          fx::Tensor<std::int32_t, B>& y) {
  for (index_t r = 0; r < B; ++r) {
    const std::uint8_t* px = set.pixels.data() + (at + r) * 784;
    for (index_t c = 0; c < 784; ++c) x.data()[r * 784 + c] = (px[c] / 255.f - 0.2860f) / 0.3530f;
    y[r] = set.labels[static_cast<std::size_t>(at + r)];
  }
}

}  // namespace

TEST_CASE("a static CNN trained by SGD on a Fashion-MNIST slice learns", "[fixed][fashion_mnist]") {
  metagrad::datasets::FashionMNIST data = metagrad::datasets::load_fashion_mnist();
  auto model = std::make_unique<Cnn>(1);
  auto x = std::make_unique<fx::Tensor<float, B, 1, 28, 28>>();
  fx::Tensor<std::int32_t, B> y;
  auto accuracy = [&] {  // on 8 batches of the test set
    index_t right = 0;
    for (std::int64_t at = 0; at < 8 * B; at += B) {
      fill(data.test, at, *x, y);
      fx::Tensor<float, B, Classes> l = model->logits(*x);
      for (index_t r = 0; r < B; ++r) {
        const float* row = l.data() + r * Classes;
        right += std::max_element(row, row + Classes) - row == y[r];
      }
    }
    return double(right) / double(8 * B);
  };
  double before = accuracy();
  constexpr int steps = 60;
  float losses[steps];
  for (int s = 0; s < steps; ++s) {
    fill(data.train, s * B, *x, y);
    losses[s] = model->step(*x, y, 0.05f);
    REQUIRE(std::isfinite(losses[s]));
  }
  double first = 0, last = 0;
  for (int s = 0; s < 5; ++s) first += losses[s] / 5, last += losses[steps - 1 - s] / 5;
  double after = accuracy();
  INFO("mean loss of the first 5 steps " << first << ", of the last 5 " << last << "; held-out accuracy "
                                         << before << " -> " << after);
  CHECK(first > 1.8);  // about ln 10 at the start
  CHECK(last < 0.6 * first);
  CHECK(after > 0.6);
  CHECK(after > before + 0.3);
}
