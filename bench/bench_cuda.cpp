// bench_cuda: the GPU figures of docs/cuda.md on the CUDA device, printed as "R key value unit" lines
// that bench/bench_cuda_torch.py reads to print them beside PyTorch's on the same GPU:
//   W1 a*b+c at 2^24 and 2^26 elements (GB/s, 16 bytes an element), W4 fp32 matmul at 2048 and
//   4096 (GFLOP/s), W6 dispatch (us per eager op of 16 elements; us per kernel in a TinyJit replay),
//   and the character GPT of examples/gpt (batch 32, context 64, width 128, 4 heads, 2 blocks,
//   AdamW, clipping at 1): the first step (kernels compiled), then ms/step eager and under TinyJit.
//
//   bench_cuda [--gpt-dir=DIR] [--steps=N] [--only=W1,W4,W6,GPT]
//
// --gpt-dir writes the GPT's initial weights (init.safetensors), its batches (batches.bin: int64
// x then y per step) and metagrad's losses (losses.txt) there: the PyTorch script trains from the
// same weights on the same batches and compares the losses. Every figure is the median of 5
// repetitions of at least 0.2 s (GPT: of the timed steps), each ending in a synchronize.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <metagrad/jit.hpp>
#include <metagrad/metagrad.hpp>
#include <metagrad/backends/ops_cuda.hpp>
#include <random>
#include <string>
#include <vector>

#include "../examples/gpt_model.hpp"

using namespace metagrad;
using Clock = std::chrono::steady_clock;

namespace {

CUDABackend& gpu() { return dynamic_cast<CUDABackend&>(Device::get("CUDA")); }

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds per call of f: 5 repetitions of enough calls to last 0.2 s, each ended by a synchronize.
double time_per_call(const std::function<void()>& f) {
  f(), f(), gpu().synchronize();
  long n = 1;
  for (;;) {
    auto t0 = Clock::now();
    for (long i = 0; i < n; ++i) f();
    gpu().synchronize();
    if (seconds_since(t0) > 0.05) break;
    n *= 2;
  }
  n = std::max(1L, n * 4);
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (long i = 0; i < n; ++i) f();
    gpu().synchronize();
    reps.push_back(seconds_since(t0) / static_cast<double>(n));
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

Tensor rand_on_gpu(const Dims& shape) { return Tensor::rand(shape, {.device = "CUDA"}).realize(); }

void w1() {
  for (int lg : {24, 26}) {
    std::int64_t n = std::int64_t{1} << lg;
    Tensor a = rand_on_gpu({n}), b = rand_on_gpu({n}), c = rand_on_gpu({n});
    double t = time_per_call([&] { (a * b + c).realize(); });
    std::printf("R W1_%d %.1f GB/s\n", lg, 16.0 * static_cast<double>(n) / t * 1e-9);
  }
}

void w4() {
  for (std::int64_t n : {2048, 4096}) {
    Tensor a = rand_on_gpu({n, n}), b = rand_on_gpu({n, n});
    // Correctness first: a few entries against a float64 dot product on the host.
    std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(),
                       cv = a.matmul(b).to_vector<float>();
    double worst = 0;
    for (std::int64_t k = 0; k < 16; ++k) {
      std::int64_t i = (k * 131) % n, j = (k * 977) % n;
      double ref = 0;
      for (std::int64_t q = 0; q < n; ++q) ref += static_cast<double>(av[i * n + q]) * bv[q * n + j];
      worst = std::max(worst, std::abs(cv[i * n + j] - ref) / std::abs(ref));
    }
    double t = time_per_call([&] { a.matmul(b).realize(); });
    std::printf("R W4_%ld %.1f GFLOP/s (worst relative error of 16 entries %.2g)\n", static_cast<long>(n),
                2.0 * static_cast<double>(n * n * n) / t * 1e-9, worst);
  }
}

void w6() {
  Tensor a = rand_on_gpu({16}), b = rand_on_gpu({16});
  std::printf("R W6 %.2f us/op\n", time_per_call([&] { (a + b).realize(); }) * 1e6);
  // Of that, the front end alone (the lazy graph of the add, no schedule, no launch).
  std::printf("R W6_lazy %.2f us/op\n", time_per_call([&] { Tensor c = a + b; }) * 1e6);
  TinyJit<std::function<Tensor(Tensor, Tensor)>> jit([](const Tensor& x, const Tensor& y) { return x + y; });
  jit(a, b), jit(a, b);
  double kernels = static_cast<double>(jit.captured()->kernels.size());
  std::printf("R W6r %.2f us/kern\n", time_per_call([&] { jit(a, b); }) * 1e6 / kernels);
  // A step of 16 kernels (16 results of one add each): where a graph's one submission pays.
  TinyJit<std::function<std::vector<Tensor>(Tensor, Tensor)>> jit16([](const Tensor& x, const Tensor& y) {
    std::vector<Tensor> out;
    for (int k = 1; k <= 16; ++k) out.push_back(x + y * static_cast<double>(k));
    return out;
  });
  jit16(a, b), jit16(a, b);
  double kernels16 = static_cast<double>(jit16.captured()->kernels.size());
  double per_kernel = time_per_call([&] { jit16(a, b); }) * 1e6 / kernels16;
  std::printf("R W6r16 %.2f us/kern (%s)\n", per_kernel,
              jit16.graphed() ? "one CUDA graph" : "kernel by kernel");
  // The floor under both: one launch of a hand-written kernel through the device's Program.
  auto prg =
      gpu().compile("nop", "extern \"C\" __global__ void nop(float* x) { if (x[0] == 12345.f) x[0] = 0.f; }");
  std::shared_ptr<RawBuffer> x = gpu().alloc(1, dtypes::float32);
  std::vector<RawBuffer*> bufs{x.get()};
  std::printf("R W6_launch %.2f us/launch\n", time_per_call([&] { (*prg)({1}, {}, bufs); }) * 1e6);
}

constexpr long B = 32, T = 64, C = 128, H = 4, N = 2;

void gpt(const std::string& dir, int steps) {
  Device::DEFAULT = "CUDA";
  std::vector<std::vector<std::int64_t>> xs, ys;
  std::mt19937_64 g(5);
  std::uniform_int_distribution<std::int64_t> d(0, examples::kVocab - 1);
  for (int i = 0; i < steps; ++i) {
    std::vector<std::int64_t> x(B * T), y(B * T);
    for (auto& v : x) v = d(g);
    for (auto& v : y) v = d(g);
    xs.push_back(x), ys.push_back(y);
  }
  for (bool use_jit : {false, true}) {
    Tensor::manual_seed(1337);
    examples::GPT m(T, C, H, N);
    if (!dir.empty() && !use_jit) {
      nn::safe_save(nn::get_state_dict(m), dir + "/init.safetensors");
      std::ofstream f(dir + "/batches.bin", std::ios::binary);
      for (int i = 0; i < steps; ++i) {
        f.write(reinterpret_cast<const char*>(xs[i].data()), static_cast<std::streamsize>(B * T * 8));
        f.write(reinterpret_cast<const char*>(ys[i].data()), static_cast<std::streamsize>(B * T * 8));
      }
    }
    nn::optim::AdamW opt(nn::optim::decay_groups(nn::get_parameters(m), 0.1), 1e-3, 0.9, 0.99);
    std::function<Tensor(Tensor, Tensor)> run = [&](Tensor x, Tensor y) {
      return examples::train_step(m, opt, x, y);
    };
    TinyJit<std::function<Tensor(Tensor, Tensor)>> jit(run);
    std::vector<double> ms, losses;
    for (int i = 0; i < steps; ++i) {
      std::fprintf(stderr, "=== step %d %s\n", i, use_jit ? "jit" : "eager");
      auto t0 = Clock::now();
      Tensor x(xs[i], {B, T}, {.device = "CUDA"}), y(ys[i], {B, T}, {.device = "CUDA"});
      losses.push_back((use_jit ? jit(x, y) : run(x, y)).item<double>());
      ms.push_back(seconds_since(t0) * 1e3);
    }
    const char* name = use_jit ? "jit" : "eager";
    std::printf("R GPT_first_%s %.0f ms\n", name, ms[0]);
    std::vector<double> timed(ms.begin() + std::min(3, steps - 1), ms.end());
    std::sort(timed.begin(), timed.end());
    std::printf("R GPT_%s %.2f ms/step (losses %.5f .. %.5f)\n", name, timed[timed.size() / 2],
                losses.front(), losses.back());
    if (!dir.empty() && !use_jit) {
      std::ofstream f(dir + "/losses.txt");
      for (double l : losses) f << l << "\n";
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, only;
  int steps = 30;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gpt-dir=", 10) == 0)
      dir = argv[i] + 10;
    else if (std::strncmp(argv[i], "--steps=", 8) == 0)
      steps = std::max(5, std::atoi(argv[i] + 8));
    else if (std::strncmp(argv[i], "--only=", 7) == 0)
      only = argv[i] + 7;
    else
      return std::fprintf(stderr, "usage: bench_cuda [--gpt-dir=DIR] [--steps=N] [--only=W1,W4,W6,GPT]\n"), 2;
  }
  try {
    std::printf("# %s, %s\n", gpu().device_name().c_str(), nvrtc_version().c_str());
  } catch (const std::exception& e) {
    std::printf("skipped: %s\n", e.what());
    return 0;
  }
  const std::pair<const char*, std::function<void()>> parts[] = {
      {"W1", w1}, {"W4", w4}, {"W6", w6}, {"GPT", [&] { gpt(dir, steps); }}};
  for (const auto& [name, f] : parts) {
    if (!only.empty() && ("," + only + ",").find(std::string(",") + name + ",") == std::string::npos)
      continue;
    try {
      f();
    } catch (const std::exception& e) { std::printf("E %s %s\n", name, e.what()); }
    std::fflush(stdout);
  }
}
