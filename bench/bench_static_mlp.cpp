// W5 on the static path: one SGD step of the 784 -> 512 relu -> 10 MLP (batch 128, log-softmax +
// NLL) as fixed:: expression types (fixed::MLP::step: forward, fixed::grad, update), next to the
// same step written by hand with Eigen (eigen_mlp.hpp), at 1 and 2 threads on both sides
// (fixed::set_threads, Eigen::setNbThreads: Eigen threads its products). Prints ms/step (wall time)
// and the ratio (Eigen's time / the static path's: above 1 is faster than Eigen). The dynamic
// path's W5 rows are in bench_workloads. Run: build/bench/bench_static_mlp [--benchmark_filter=1t]
// [--benchmark_repetitions=5: medians]
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "eigen_mlp.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/mlp.hpp"

namespace {

namespace fx = metagrad::fixed;
constexpr fx::index_t kBatch = 128, kIn = 784, kHidden = 512, kOut = 10;
using Static = fx::MLP<float, kBatch, kIn, kHidden, kOut>;

struct Data {
  std::vector<float> x, w1, b1, w2, b2;
  std::vector<std::int32_t> y;
};
Data data() {
  std::mt19937 rng(5);
  auto fill = [&](std::size_t n, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& f : v) f = u(rng);
    return v;
  };
  Data d{fill(kBatch * kIn, 1), fill(kIn * kHidden, 1 / std::sqrt(float(kIn))),
         fill(kHidden, 0.01f),  fill(kHidden * kOut, 1 / std::sqrt(float(kHidden))),
         fill(kOut, 0.01f),     {}};
  for (fx::index_t i = 0; i < kBatch; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % kOut));
  return d;
}

struct StaticStep {
  std::unique_ptr<Static> m = std::make_unique<Static>();
  fx::Tensor<float, kBatch, kIn> x;
  fx::Tensor<float, kBatch, kOut> y;
  explicit StaticStep(const Data& d) : x(fx::Tensor<float, kBatch, kIn>::from(d.x.data())) {
    m->w1 = fx::Tensor<float, kIn, kHidden>::from(d.w1.data());
    m->b1 = fx::Tensor<float, kHidden>::from(d.b1.data());
    m->w2 = fx::Tensor<float, kHidden, kOut>::from(d.w2.data());
    m->b2 = fx::Tensor<float, kOut>::from(d.b2.data());
    for (fx::index_t i = 0; i < kBatch; ++i) y(i, d.y[static_cast<std::size_t>(i)]) = 1;
  }
  float step() { return m->step(x, y, 0.01f); }
};

// (iterations, ms/step) of every call; Google Benchmark's shorter probe calls come first.
std::map<std::string, std::vector<std::pair<std::int64_t, double>>> ms_per_step;
// The median over the calls with the most iterations (one per --benchmark_repetitions).
double median(const std::vector<std::pair<std::int64_t, double>>& runs, std::size_t* count = nullptr) {
  std::int64_t most = 0;
  for (const auto& r : runs) most = std::max(most, r.first);
  std::vector<double> v;
  for (const auto& r : runs)
    if (r.first == most) v.push_back(r.second);
  std::sort(v.begin(), v.end());
  if (count) *count = v.size();
  return v[v.size() / 2];
}

template <class Step>
void run(benchmark::State& state, const std::string& name, int threads) {
  fx::set_threads(threads);
  Eigen::setNbThreads(threads);
  Data d = data();
  Step s = [&] {
    if constexpr (std::is_same_v<Step, StaticStep>)
      return StaticStep(d);
    else
      return metagrad::bench::EigenMlp(kBatch, kIn, kHidden, kOut, d.x.data(), d.w1.data(), d.b1.data(),
                                       d.w2.data(), d.b2.data(), d.y);
  }();
  s.step();  // warm-up: buffers and arena grown
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(s.step());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double ms = 1e3 * secs / double(state.iterations());
  ms_per_step[name].emplace_back(state.iterations(), ms);
  state.counters["ms/step"] = ms;
}

}  // namespace

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);
  {  // the two steps compute the same loss: the bench measures the right computation
    Data d = data();
    float a = StaticStep(d).step();
    float b = metagrad::bench::EigenMlp(kBatch, kIn, kHidden, kOut, d.x.data(), d.w1.data(), d.b1.data(),
                                        d.w2.data(), d.b2.data(), d.y)
                  .step();
    std::printf("W5 initial loss: static %.6f, Eigen %.6f%s\n", a, b,
                std::abs(a - b) > 1e-4f * std::max(1.f, std::abs(b)) ? "  (DIFFER)" : "");
  }
  for (int t : {1, 2}) {
    std::string n = std::to_string(t) + "t";
    benchmark::RegisterBenchmark(("BM_W5_static/" + n).c_str(),
                                 [t, n](benchmark::State& s) { run<StaticStep>(s, "static/" + n, t); })
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2)
        ->UseRealTime();
    benchmark::RegisterBenchmark(
        ("BM_W5_eigen/" + n).c_str(),
        [t, n](benchmark::State& s) { run<metagrad::bench::EigenMlp>(s, "Eigen/" + n, t); })
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const char* n : {"1t", "2t"}) {
    std::string st = std::string("static/") + n, ei = std::string("Eigen/") + n;
    if (ms_per_step.count(st) && ms_per_step.count(ei)) {
      std::size_t runs = 0;
      double a = median(ms_per_step[st], &runs), b = median(ms_per_step[ei]);
      std::printf("W5 MLP step, %s (median of %zu): static %.3f ms, Eigen %.3f ms, xEigen %.2f\n", n, runs, a,
                  b, b / a);
    }
  }
}
