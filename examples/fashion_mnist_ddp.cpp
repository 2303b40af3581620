// Fashion-MNIST data-parallel: examples/fashion_mnist.cpp's MLP trained by N processes at once,
// each on its share of every batch, gradients averaged over MPI by dist::DataParallel.
//
//   mpirun -np 2 build/examples/fashion_mnist_ddp [--epochs=N] [--batch=N] [--subset=N] [--lr=X]
//                                                [--device=NAME] [--data=DIR] [--min-accuracy=X]
//
// --batch is the global batch (default 64): each of the N ranks takes batch / N examples of it, so
// the training is the one-process training of fashion_mnist.cpp up to float rounding. Rank 0 draws
// the progress bar (its own loss and accuracy) and prints the test accuracy, which the ranks
// compute on a share of the test set each. Each rank runs THREADS threads: by default the cores
// divided by the ranks on this machine. Env: EPOCHS, BS, SUBSET, LR, DEVICE, DATA as flags.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <metagrad/dist/data_parallel.hpp>
#include <metagrad/metagrad.hpp>
#include <string>
#include <thread>

#include "options.hpp"
#include "progress.hpp"

using namespace metagrad;

namespace {

// The command line (examples/options.hpp), checked.
examples::Options parse(int argc, char** argv) {
  examples::Options o = examples::parse_options(argc, argv, true);
  if (o.epochs < 1 || o.batch < dist::world_size() || o.subset < o.batch || !(o.lr > 0))
    throw std::invalid_argument(
        "epochs must be positive, batch at least the number of ranks, subset at least "
        "one batch, lr > 0");
  return o;
}

// One thread per core this rank gets, unless THREADS says otherwise (Open MPI names the ranks that
// share this machine). Before metagrad's thread pool first starts, which reads THREADS once.
void share_cores() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (std::getenv("THREADS") || !local) return;
  long cores = std::max(1u, std::thread::hardware_concurrency()), ranks = std::max(1L, std::atol(local));
  setenv("THREADS", std::to_string(std::max(1L, cores / ranks)).c_str(), 0);
}

struct MLP {  // as examples/fashion_mnist.cpp
  nn::Linear l1{784, 128}, l2{128, 10};
  Tensor operator()(const Tensor& x) const { return l2(l1((x - 0.2860) / 0.3530).relu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
};

std::string progress(long epoch, long epochs, long done, long total, double loss, double acc, double secs,
                     long samples) {
  char stats[160];
  std::snprintf(stats, sizeof stats, " %ld/%ld  loss %.4f  acc %5.2f%%  %.0f samples/s (all ranks)", done,
                total, loss, 100 * acc, secs > 0 ? samples / secs : 0.0);
  return detail::cat("epoch ", std::to_string(epoch), "/", std::to_string(epochs), " ",
                     examples::Progress::bar(done, total), stats);
}

}  // namespace

int main(int argc, char** argv) try {
  share_cores();
  dist::init();
  const int rank = dist::rank(), world = dist::world_size();
  examples::Options opt = parse(argc, argv);
  Device::get(opt.device);
  Device::DEFAULT = opt.device;
  datasets::FashionMNIST ds = datasets::load_fashion_mnist(opt.data);
  datasets::ImageSet train = ds.train.head(opt.subset);
  const long local_batch = opt.batch / world, global_batch = local_batch * world;
  if (rank == 0) {
    std::printf("Fashion-MNIST on %d rank%s: training on %ld images, testing on %ld; device %s\n", world,
                world == 1 ? "" : "s", train.size(), ds.test.size(), opt.device.c_str());
    std::printf(
        "MLP 784 -> 128 relu -> 10, Adam lr %g decaying linearly to 0, batch %ld (%ld per rank), %ld "
        "epoch%s\n",
        opt.lr, global_batch, local_batch, opt.epochs, opt.epochs == 1 ? "" : "s");
  }

  Tensor::manual_seed(1337);
  MLP model;
  dist::DataParallel ddp(model);  // rank 0's initial weights on every rank
  nn::optim::Adam optim(nn::get_parameters(model), opt.lr);
  const long steps = train.size() / global_batch;
  long step = 0;
  auto t0 = std::chrono::steady_clock::now();

  for (long epoch = 1; epoch <= opt.epochs; ++epoch) {
    Tensor::TrainingGuard training;
    std::vector<std::int64_t> mine = train.epoch_indices(1337, epoch, rank, world);  // one order, N slices
    long seen = 0, correct = 0;
    double loss_sum = 0;
    auto start = std::chrono::steady_clock::now();
    examples::Progress line;
    for (long s = 0; s < steps; ++s, ++step) {
      auto first = mine.begin() + s * local_batch;
      datasets::Batch b = train.batch(std::vector<std::int64_t>(first, first + local_batch));
      optim.set_lr(opt.lr * (1 - double(step) / double(steps * opt.epochs)));
      Tensor out = model(b.X);
      Tensor loss = out.sparse_categorical_crossentropy(b.Y);
      optim.zero_grad();
      loss.backward();
      ddp.average_gradients();
      optim.step();
      if (rank != 0) continue;
      seen += local_batch;
      correct += out.detach().argmax(-1).eq(b.Y).sum().item<long>();
      loss_sum += loss.item<double>() * static_cast<double>(local_batch);
      if (line.due(s + 1 == steps))
        line.show(progress(epoch, opt.epochs, s + 1, steps, loss_sum / seen, double(correct) / seen,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                           seen * world),
                  s + 1 == steps);
    }
  }
  double train_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Each rank tests a share of the test set; the correct counts are summed.
  Tensor::NoGradGuard no_grad;
  std::int64_t counts[2] = {0, 0};  // correct, tested
  std::int64_t per = (ds.test.size() + world - 1) / world, lo = rank * per,
               hi = std::min(ds.test.size(), lo + per);
  for (std::int64_t start = lo; start < hi; start += 1000) {
    datasets::Batch b = ds.test.batch(start, std::min<std::int64_t>(1000, hi - start));
    counts[0] += model(b.X).argmax(-1).eq(b.Y).sum().item<long>();
    counts[1] += b.Y.numel();
  }
  dist::allreduce_sum(counts, 2, dtypes::int64, "test accuracy");
  double acc = double(counts[0]) / double(counts[1]);
  if (rank == 0)
    std::printf("test accuracy %.2f%% (%ld/%ld); training took %.1f s on %d ranks\n", 100 * acc,
                long(counts[0]), long(counts[1]), train_secs, world);
  if (acc < opt.min_accuracy) {
    if (rank == 0) std::fprintf(stderr, "fashion_mnist_ddp: accuracy below %.2f%%\n", 100 * opt.min_accuracy);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_ddp: %s\n", e.what());
  return 1;
}
