// ResNet-18's convolutions on the dynamic path (Tensor::conv2d, TinyJit on LLVM, one thread), batch 1:
// each layer's forward, a backward row (both gradients of the 3x3 64 -> 64 layer at 56), depthwise
// rows (MobileNet v2's), ResNet's max pool, and the whole network's forward (batch norm folded into the convs' biases, random
// weights) in ms per image. Each row prints GFLOP/s and its ratio to the FMA peak (the ISA the GEMM runs,
// timed in the same run: bench/machine_limits.hpp's loop). DEVICE overrides LLVM.
//   nice build/bench/bench_conv [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <time.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "machine_limits.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/jit.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;
using I = std::int64_t;

namespace {

std::string device() {
  const char* d = std::getenv("DEVICE");
  return d && *d ? d : "LLVM";
}

// This thread's CPU time in seconds: the rows' rates are per CPU second (Google Benchmark's default),
// so the peak is too (on a shared machine, wall time counts other processes' turns).
double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// FLOP/s of one core's FMAs in the GEMM's ISA, the best of a few timings of 2 x 10^7 trips.
double fma_peak() {
  const bool wide = gemm::isa() == gemm::Isa::avx512;
  const long iters = 20'000'000;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const double t0 = cpu_seconds();
    float v = wide ? limits::fma_peak_avx512(iters) : limits::fma_peak_avx2(iters);
    benchmark::DoNotOptimize(v);
    const double s = cpu_seconds() - t0;
    best = std::max(best, 12.0 * (wide ? 16 : 8) * 2 * iters / s);
  }
  return best;
}
double peak() {
  static const double p = fma_peak();
  return p;
}

Tensor param(const Dims& shape, double scale) {
  return (Tensor::randn(shape) * scale).realize().to(device()).realize();
}

// Times a TinyJit'd step over the benchmark's iterations, with `flops` a call.
void run(benchmark::State& state, const std::function<std::vector<Tensor>(Tensor)>& f, const Tensor& x,
         double flops) {
  TinyJit<std::function<std::vector<Tensor>(Tensor)>> jit(f);
  for (int i = 0; i < 3; ++i) jit(x);  // run, capture, replay
  for (auto _ : state) benchmark::DoNotOptimize(jit(x));
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["xpeak"] = benchmark::Counter(flops / peak(), benchmark::Counter::kIsIterationInvariantRate);
}

struct Layer {
  const char* name;
  I cin, cout, hw, k, stride, pad, groups = 1;
};
const Layer kLayers[] = {
    {"conv1_7x7s2_3-64_224", 3, 64, 224, 7, 2, 3}, {"3x3_64-64_56", 64, 64, 56, 3, 1, 1},
    {"3x3s2_64-128_56", 64, 128, 56, 3, 2, 1},     {"3x3_128-128_28", 128, 128, 28, 3, 1, 1},
    {"1x1s2_64-128_56", 64, 128, 56, 1, 2, 0},     {"3x3s2_128-256_28", 128, 256, 28, 3, 2, 1},
    {"3x3_256-256_14", 256, 256, 14, 3, 1, 1},     {"1x1s2_128-256_28", 128, 256, 28, 1, 2, 0},
    {"3x3s2_256-512_14", 256, 512, 14, 3, 2, 1},   {"3x3_512-512_7", 512, 512, 7, 3, 1, 1},
    {"1x1s2_256-512_14", 256, 512, 14, 1, 2, 0},   {"depthwise3x3_128_56", 128, 128, 56, 3, 1, 1, 128},
};
// MobileNet v2's depthwise 3x3 convs at 224 (torchvision's): memory-bound, so their rows print
// GB/s of the input read and output written (a lower bound on the traffic) beside GFLOP/s.
const Layer kDepthwise[] = {
    {"dw3x3_32_112", 32, 32, 112, 3, 1, 1, 32},     {"dw3x3s2_96_112", 96, 96, 112, 3, 2, 1, 96},
    {"dw3x3_144_56", 144, 144, 56, 3, 1, 1, 144},   {"dw3x3s2_144_56", 144, 144, 56, 3, 2, 1, 144},
    {"dw3x3_192_28", 192, 192, 28, 3, 1, 1, 192},   {"dw3x3s2_192_28", 192, 192, 28, 3, 2, 1, 192},
    {"dw3x3_384_14", 384, 384, 14, 3, 1, 1, 384},   {"dw3x3_576_14", 576, 576, 14, 3, 1, 1, 576},
    {"dw3x3s2_576_14", 576, 576, 14, 3, 2, 1, 576}, {"dw3x3_960_7", 960, 960, 7, 3, 1, 1, 960},
};

I out_size(const Layer& l) { return (l.hw + 2 * l.pad - l.k) / l.stride + 1; }
double conv_flops(const Layer& l) {
  const I o = out_size(l);
  return 2.0 * l.cout * o * o * (l.cin / l.groups) * l.k * l.k;
}

void BM_conv_forward(benchmark::State& state, Layer l) {
  cpu::set_threads(1);
  Tensor x = param({1, l.cin, l.hw, l.hw}, 1.0);
  Tensor w = param({l.cout, l.cin / l.groups, l.k, l.k}, 0.1), b = param({l.cout}, 0.1);
  run(
      state,
      [&](Tensor in) {
        return std::vector<Tensor>{in.conv2d(w, b, l.groups, {l.stride}, {1}, {l.pad}).relu().realize()};
      },
      x, conv_flops(l));
}

// A depthwise conv with its bias and ReLU6 (MobileNet's, batch norm folded).
void BM_depthwise(benchmark::State& state, Layer l) {
  cpu::set_threads(1);
  Tensor x = param({1, l.cin, l.hw, l.hw}, 1.0);
  Tensor w = param({l.cout, 1, l.k, l.k}, 0.1), b = param({l.cout}, 0.1);
  run(
      state,
      [&](Tensor in) {
        return std::vector<Tensor>{in.conv2d(w, b, l.groups, {l.stride}, {1}, {l.pad}).clip(0, 6).realize()};
      },
      x, conv_flops(l));
  const I o = out_size(l);
  state.counters["GB/s"] = benchmark::Counter(4e-9 * static_cast<double>(l.cin * (l.hw * l.hw + o * o)),
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// ResNet's max pool (3 x 3, stride 2, padding 1) of the stem's ReLU: GB/s of its input read and
// output written.
void BM_max_pool(benchmark::State& state) {
  cpu::set_threads(1);
  Tensor x = param({1, 64, 112, 112}, 1.0);
  run(
      state,
      [&](Tensor in) {
        return std::vector<Tensor>{in.relu().max_pool2d({3, 3}, {2, 2}, {1}, {1}).realize()};
      },
      x, 64.0 * 56 * 56 * 9);
  state.counters["GB/s"] =
      benchmark::Counter(4e-9 * 64 * (112 * 112 + 56 * 56), benchmark::Counter::kIsIterationInvariantRate);
}

// Both gradients of a conv (the input's and the weight's) from a given output gradient: twice the
// forward's multiply-adds.
void BM_conv_backward(benchmark::State& state, Layer l) {
  cpu::set_threads(1);
  Tensor x = param({1, l.cin, l.hw, l.hw}, 1.0);
  Tensor w = param({l.cout, l.cin / l.groups, l.k, l.k}, 0.1);
  const I o = out_size(l);
  Tensor dy = param({1, l.cout, o, o}, 1.0);
  run(
      state,
      [&](Tensor in) {
        Tensor xi = in.detach().requires_grad_(), wi = w.detach().requires_grad_();
        (xi.conv2d(wi, {}, l.groups, {l.stride}, {1}, {l.pad}) * dy).sum().backward();
        return std::vector<Tensor>{xi.grad->realize(), wi.grad->realize()};
      },
      x, 2 * conv_flops(l));
}

// ResNet-18 (torchvision's), batch norm folded into each conv's bias, random weights (He's scale).
struct Conv {
  Tensor w, b;
  I stride, pad;
  Conv(I cin, I cout, I k, I stride_, I pad_)
      : w(param({cout, cin, k, k}, std::sqrt(2.0 / static_cast<double>(cin * k * k)))),
        b(param({cout}, 0.01)),
        stride(stride_),
        pad(pad_) {}
  Tensor operator()(const Tensor& x) const { return x.conv2d(w, b, 1, {stride}, {1}, {pad}); }
};
struct Block {
  Conv c1, c2;
  std::optional<Conv> down;
  Block(I cin, I cout, I stride) : c1(cin, cout, 3, stride, 1), c2(cout, cout, 3, 1, 1) {
    if (stride != 1 || cin != cout) down.emplace(cin, cout, 1, stride, 0);
  }
  Tensor operator()(const Tensor& x) const { return (c2(c1(x).relu()) + (down ? (*down)(x) : x)).relu(); }
};
struct ResNet18 {
  Conv stem{3, 64, 7, 2, 3};
  std::vector<Block> blocks;
  Tensor fc_w = param({512, 1000}, std::sqrt(1.0 / 512)), fc_b = param({1000}, 0.01);
  ResNet18() {
    I c = 64;
    for (I out : {64, 128, 256, 512}) {
      blocks.emplace_back(c, out, out == 64 ? 1 : 2);
      blocks.emplace_back(out, out, 1);
      c = out;
    }
  }
  Tensor operator()(const Tensor& x) const {
    Tensor h = stem(x).relu().max_pool2d({3, 3}, {2, 2}, {1}, {1});
    for (const Block& b : blocks) h = b(h);
    return h.mean({2, 3}).linear(fc_w, fc_b);
  }
  // Multiply-adds x 2 of its convs and the classifier at 224 x 224.
  static double flops() { return 2 * 1.814e9; }
};

void BM_resnet18_forward(benchmark::State& state) {
  cpu::set_threads(1);
  ResNet18 net;
  Tensor x = param({1, 3, 224, 224}, 1.0);
  Tensor::NoGradGuard no_grad;
  run(
      state, [&](Tensor in) { return std::vector<Tensor>{net(in).realize()}; }, x, ResNet18::flops());
}

}  // namespace

int main(int argc, char** argv) {
  setenv("THREADS", "1", 0);
  for (const Layer& l : kLayers)
    benchmark::RegisterBenchmark((std::string("conv_forward/") + l.name).c_str(), BM_conv_forward, l)
        ->Unit(benchmark::kMillisecond);
  for (const Layer& l : kDepthwise)
    benchmark::RegisterBenchmark((std::string("depthwise/") + l.name).c_str(), BM_depthwise, l)
        ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("pool/max3x3s2_64_112", BM_max_pool)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("conv_backward/3x3_64-64_56", BM_conv_backward, kLayers[1])
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("conv_backward/3x3_256-256_14", BM_conv_backward, kLayers[6])
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("resnet18_forward/batch1", BM_resnet18_forward)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  std::printf("device %s, FMA peak %.1f GFLOP/s (1 thread)\n", device().c_str(), peak() * 1e-9);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
