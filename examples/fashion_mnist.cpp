// Fashion-MNIST with a two-layer MLP on the dynamic path: the README's main example.
//
//   fashion_mnist [--epochs=N] [--batch=N] [--subset=N] [--lr=X] [--device=NAME] [--data=DIR]
//
// The same options come from the environment as EPOCHS, BS, SUBSET, LR, DEVICE, DATA (flags win).
// Defaults: 1 epoch over the first 30000 training images in batches of 64, Adam at lr 0.004
// decaying linearly to 0, then the whole test set (10000 images), on Device::DEFAULT. They are
// chosen for the interpreted CPU device (DEVICE=CPU), where this takes about 45 s of CPU time and
// reaches 85.2% test accuracy; --subset=60000 --epochs=3 gets to about 88% in six times as long.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <metagrad/metagrad.hpp>
#include <numeric>
#include <random>
#include <string>

#include "options.hpp"
#include "progress.hpp"

using namespace metagrad;

namespace {

// The command line (examples/options.hpp), checked.
examples::Options parse(int argc, char** argv) {
  examples::Options o = examples::parse_options(argc, argv, false);
  if (o.epochs < 1 || o.batch < 1 || o.subset < 1 || !(o.lr > 0)) {
    std::fprintf(stderr, "fashion_mnist: epochs, batch and subset must be positive and lr > 0\n");
    std::exit(2);
  }
  return o;
}

// Pixels are standardised with the training set's mean and deviation inside the model, so the
// first layer sees centred inputs (about 1% test accuracy for one subtraction and one division).
struct MLP {
  nn::Linear l1{784, 128}, l2{128, 10};
  Tensor operator()(const Tensor& x) const { return l2(l1((x - 0.2860) / 0.3530).relu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
};

// ---- the progress line: one per epoch (examples/progress.hpp) ----

struct Progress {
  Progress(long epoch_, long epochs_, long total_) : epoch(epoch_), epochs(epochs_), total(total_) {}
  long epoch, epochs, total;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  examples::Progress line;
  void draw(long done, double loss, double acc, long samples) {
    bool last = done == total;
    if (!line.due(last)) return;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char stats[160];
    std::snprintf(stats, sizeof stats, " %ld/%ld  loss %.4f  acc %5.2f%%  %.0f samples/s", done, total, loss,
                  100 * acc, secs > 0 ? samples / secs : 0.0);
    line.show(detail::cat("epoch ", std::to_string(epoch), "/", std::to_string(epochs), " ",
                          examples::Progress::bar(done, total), stats),
              last);
  }
};

}  // namespace

int main(int argc, char** argv) try {
  examples::Options opt = parse(argc, argv);
  Device::get(opt.device);       // a device that is not available says so here
  Device::DEFAULT = opt.device;  // where the layers and batches are created
  datasets::FashionMNIST ds = datasets::load_fashion_mnist(opt.data);
  datasets::ImageSet train = ds.train.head(opt.subset);
  std::printf("Fashion-MNIST: training on %ld of %ld images, testing on %ld; device %s\n", train.size(),
              ds.train.size(), ds.test.size(), opt.device.c_str());
  std::printf("MLP 784 -> 128 relu -> 10, Adam lr %g decaying linearly to 0, batch %ld, %ld epoch%s\n",
              opt.lr, opt.batch, opt.epochs, opt.epochs == 1 ? "" : "s");

  Tensor::manual_seed(1337);
  MLP model;
  nn::optim::Adam optim(nn::get_parameters(model), opt.lr);
  std::mt19937_64 rng(1337);
  std::vector<std::int64_t> order(static_cast<std::size_t>(train.size()));
  std::iota(order.begin(), order.end(), 0);
  long steps = (train.size() + opt.batch - 1) / opt.batch, step = 0;
  auto t0 = std::chrono::steady_clock::now();

  for (long epoch = 1; epoch <= opt.epochs; ++epoch) {
    Tensor::TrainingGuard training;
    std::shuffle(order.begin(), order.end(), rng);
    long seen = 0, correct = 0;
    double loss_sum = 0;
    Progress bar{epoch, opt.epochs, steps};
    for (long s = 0; s < steps; ++s, ++step) {
      auto first = order.begin() + s * opt.batch;
      std::vector<std::int64_t> idx(first, first + std::min<long>(opt.batch, train.size() - s * opt.batch));
      datasets::Batch b = train.batch(idx);
      // Linear decay: the last steps take small steps, so the final weights are not one noisy update.
      optim.set_lr(opt.lr * (1 - double(step) / double(steps * opt.epochs)));
      Tensor out = model(b.X);
      Tensor loss = out.sparse_categorical_crossentropy(b.Y);
      optim.zero_grad();
      loss.backward();
      optim.step();
      seen += static_cast<long>(idx.size());
      correct += out.detach().argmax(-1).eq(b.Y).sum().item<long>();
      loss_sum += loss.item<double>() * static_cast<double>(idx.size());
      bar.draw(s + 1, loss_sum / seen, double(correct) / seen, seen);
    }
  }
  double train_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Tensor::NoGradGuard no_grad;
  long correct = 0;
  for (std::int64_t start = 0; start < ds.test.size(); start += 1000) {
    datasets::Batch b = ds.test.batch(start, 1000);
    correct += model(b.X).argmax(-1).eq(b.Y).sum().item<long>();
  }
  std::printf("test accuracy %.2f%% (%ld/%ld); training took %.1f s\n", 100.0 * correct / ds.test.size(),
              correct, ds.test.size(), train_secs);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  return 1;
}
