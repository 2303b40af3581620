// Fashion-MNIST through an ahead-of-time compiled training step: the MLP's forward pass and SGD
// step are plain C functions generated at build time (gen.cpp, fashion_mnist_mlp.h); metagrad
// itself only loads the dataset here.
//
//   fashion_mnist_aot [--epochs=N] [--lr=X] [--min-accuracy=A] [--data=DIR]
//
// Defaults: 3 epochs over the 60000 training images in shuffled batches of 64, SGD at lr 0.1
// decaying linearly to 0, then the 10000 test images. Exits 3 when the test accuracy is below
// --min-accuracy (the ctest asks for 0.84).
#include <fashion_mnist_mlp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <metagrad/datasets/fashion_mnist.hpp>
#include <numeric>
#include <random>
#include <string>

#include "model.hpp"

using namespace fmnist;

namespace {

// Pixels of the images `idx` as floats in [0, 1], row-major (n, 784).
void gather(const metagrad::datasets::ImageSet& set, const std::int64_t* idx, std::int64_t n, float* x,
            std::int32_t* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t* p = set.pixels.data() + idx[i] * kPixels;
    for (std::int64_t j = 0; j < kPixels; ++j) x[i * kPixels + j] = static_cast<float>(p[j]) / 255.f;
    if (y) y[i] = set.labels[static_cast<std::size_t>(idx[i])];
  }
}

// Uniform in +-1/sqrt(fan_in), as PyTorch's nn.Linear.
std::vector<float> init(std::mt19937& rng, std::int64_t fan_in, std::int64_t n) {
  float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) try {
  long epochs = 3;
  double lr = 0.1, min_accuracy = 0;
  std::string data = metagrad::datasets::fashion_mnist_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v = a.substr(a.find('=') + 1);
    if (a.rfind("--epochs=", 0) == 0)
      epochs = std::atol(v.c_str());
    else if (a.rfind("--lr=", 0) == 0)
      lr = std::atof(v.c_str());
    else if (a.rfind("--min-accuracy=", 0) == 0)
      min_accuracy = std::atof(v.c_str());
    else if (a.rfind("--data=", 0) == 0)
      data = v;
    else {
      std::fprintf(stderr, "usage: %s [--epochs=N] [--lr=X] [--min-accuracy=A] [--data=DIR]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (epochs < 1 || !(lr > 0)) {
    std::fprintf(stderr, "fashion_mnist_aot: epochs must be positive and lr > 0\n");
    return 2;
  }
  metagrad::datasets::FashionMNIST ds = metagrad::datasets::load_fashion_mnist(data);
  std::printf(
      "Fashion-MNIST through the AOT-compiled step: MLP 784 -> 128 relu -> 10, SGD lr %g decaying "
      "linearly to 0, batch %ld, %ld epoch%s\n",
      lr, static_cast<long>(kTrainBatch), epochs, epochs == 1 ? "" : "s");

  std::mt19937 rng(1337);
  std::vector<float> w1 = init(rng, kPixels, kPixels * kHidden), b1 = init(rng, kPixels, kHidden),
                     w2 = init(rng, kHidden, kHidden * kClasses), b2 = init(rng, kHidden, kClasses);
  std::vector<std::int64_t> order(static_cast<std::size_t>(ds.train.size()));
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> x(static_cast<std::size_t>(kEvalBatch * kPixels));
  std::vector<std::int32_t> y(static_cast<std::size_t>(kEvalBatch));
  long steps = ds.train.size() / kTrainBatch, step = 0;  // the last partial batch is left out
  auto t0 = std::chrono::steady_clock::now();
  for (long epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = 0;
    for (long s = 0; s < steps; ++s, ++step) {
      gather(ds.train, order.data() + s * kTrainBatch, kTrainBatch, x.data(), y.data());
      float rate = static_cast<float>(lr * (1 - double(step) / double(steps * epochs))), loss = 0;
      fmnist_train_step(x.data(), y.data(), rate, w1.data(), b1.data(), w2.data(), b2.data(), &loss);
      loss_sum += loss;
    }
    std::printf("epoch %ld/%ld  mean loss %.4f\n", epoch, epochs, loss_sum / static_cast<double>(steps));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  long correct = 0;
  std::vector<float> logits(static_cast<std::size_t>(kEvalBatch * kClasses));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(kEvalBatch));
  for (std::int64_t start = 0; start + kEvalBatch <= ds.test.size(); start += kEvalBatch) {
    std::iota(idx.begin(), idx.end(), start);
    gather(ds.test, idx.data(), kEvalBatch, x.data(), y.data());
    fmnist_logits(x.data(), w1.data(), b1.data(), w2.data(), b2.data(), logits.data());
    for (std::int64_t i = 0; i < kEvalBatch; ++i) {
      const float* row = logits.data() + i * kClasses;
      correct += std::max_element(row, row + kClasses) - row == y[static_cast<std::size_t>(i)];
    }
  }
  double accuracy = static_cast<double>(correct) / static_cast<double>(ds.test.size());
  std::printf("test accuracy %.2f%% (%ld/%ld); training took %.1f s (%.2f ms/step)\n", 100 * accuracy,
              correct, static_cast<long>(ds.test.size()), secs, 1e3 * secs / static_cast<double>(step));
  if (accuracy < min_accuracy) {
    std::fprintf(stderr, "fashion_mnist_aot: accuracy %.4f is below --min-accuracy=%.4f\n", accuracy,
                 min_accuracy);
    return 3;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_aot: %s\n", e.what());
  return 1;
}
