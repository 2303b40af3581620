// Fashion-MNIST with the static MLP of W5 (784 -> 512 relu -> 10, log-softmax + NLL, batches of 128,
// plain SGD): the model, its gradient and the update are fixed:: expression types, evaluated by
// fused loops; metagrad is linked only for the dataset loader.
//
//   fashion_mnist_static [--epochs=N] [--lr=X] [--min-accuracy=A] [--data=DIR]
//
// Defaults: 2 epochs over the 60000 training images at lr 0.1, then the 10000 test images; about
// 86% test accuracy. Exits 1 if the accuracy is below --min-accuracy (a test uses it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <metagrad/datasets/fashion_mnist.hpp>
#include <metagrad/fixed/mlp.hpp>

#include "flags.hpp"
#include "progress.hpp"

namespace fx = metagrad::fixed;

namespace {

constexpr fx::index_t B = 128, In = 784, Hidden = 512, Classes = 10;
using Model = fx::MLP<float, B, In, Hidden, Classes>;

struct Options {
  long epochs = 2;
  float lr = 0.1f, min_accuracy = 0;
  std::string data = metagrad::datasets::fashion_mnist_dir;
};

Options parse(int argc, char** argv) {
  Options o;
  examples::Flags flags(argv[0]);
  flags.add("epochs", o.epochs, "N").add("lr", o.lr, "X").add("min-accuracy", o.min_accuracy, "A");
  flags.add("data", o.data, "DIR").parse(argc, argv);
  flags.require(o.epochs >= 1 && o.lr > 0, "epochs must be positive and lr > 0");
  return o;
}

// Rows idx[0..n) of the set into x (standardised pixels, as the dynamic example) and y (one-hot);
// rows past n are zero.
void fill(const metagrad::datasets::ImageSet& set, const std::int64_t* idx, fx::index_t n,
          fx::Tensor<float, B, In>& x, fx::Tensor<float, B, Classes>& y) {
  std::fill(x.begin(), x.end(), 0.f);
  std::fill(y.begin(), y.end(), 0.f);
  for (fx::index_t r = 0; r < n; ++r) {
    const std::uint8_t* px = set.pixels.data() + idx[r] * In;
    for (fx::index_t c = 0; c < In; ++c) x(r, c) = (px[c] / 255.f - 0.2860f) / 0.3530f;
    y(r, set.labels[static_cast<std::size_t>(idx[r])]) = 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  metagrad::datasets::FashionMNIST data = metagrad::datasets::load_fashion_mnist(opt.data);
  auto model = std::make_unique<Model>(0);
  fx::Tensor<float, B, In> x;
  fx::Tensor<float, B, Classes> y;

  std::vector<std::int64_t> order(static_cast<std::size_t>(data.train.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(0);
  const fx::index_t steps = data.train.size() / B;  // the last partial batch is dropped
  for (long epoch = 0; epoch < opt.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    auto start = std::chrono::steady_clock::now();
    double total = 0;
    examples::Progress line;
    for (fx::index_t s = 0; s < steps; ++s) {
      fill(data.train, order.data() + s * B, B, x, y);
      total += model->step(x, y, opt.lr);
      if (s + 1 < steps && line.due())
        line.show(metagrad::detail::cat("epoch ", std::to_string(epoch + 1), "/", std::to_string(opt.epochs),
                                        " ", examples::Progress::bar(s + 1, steps), " mean loss ",
                                        std::to_string(total / double(s + 1))));
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char done[120];
    std::snprintf(done, sizeof done, "epoch %ld: mean loss %.4f, %.1f s (%.2f ms/step)", epoch + 1,
                  total / double(steps), secs, 1e3 * secs / double(steps));
    line.show(done, true);
  }

  std::vector<std::int64_t> all(static_cast<std::size_t>(data.test.size()));
  std::iota(all.begin(), all.end(), 0);
  std::int64_t correct = 0;
  for (std::int64_t at = 0; at < data.test.size(); at += B) {
    fx::index_t n = std::min<std::int64_t>(B, data.test.size() - at);
    fill(data.test, all.data() + at, n, x, y);
    fx::Tensor<float, B, Classes> logits = model->logits(x);
    for (fx::index_t r = 0; r < n; ++r) {
      const float* row = logits.data() + r * Classes;
      correct += y(r, std::max_element(row, row + Classes) - row) == 1;
    }
  }
  double accuracy = double(correct) / double(data.test.size());
  std::printf("test accuracy %.2f%% (%lld / %lld)\n", 100 * accuracy, static_cast<long long>(correct),
              static_cast<long long>(data.test.size()));
  return accuracy >= opt.min_accuracy ? 0 : 1;
}
