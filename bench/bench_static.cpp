// The static path's inline evaluation on the workloads of docs/benchmarks.md (W1-W4), next to Eigen on
// the same shapes (Map/Array: these sizes are too big for Eigen's fixed-size types) and the triad
// bandwidth measured in the same run, at 1 and at 2 threads (fixed::set_threads and
// Eigen::setNbThreads: Eigen threads its products with OpenMP; its elementwise ops and reductions
// stay on one thread, which is what Eigen gives a user). After Google Benchmark's own table it prints
// each row's figure, the ratio to Eigen and (W1 2^24) to triad, and the target, per thread count.
// 1-thread rows are timed in CPU time, 2-thread rows in wall time (the workers' time counts).
// The Small_ rows (2x2 to 8x8: product, a + b, full sum, an elementwise chain) set fx::Tensor
// beside Eigen's fixed-size Matrix, one thread, and print ns per call and Eigen's time over ours.
// Run: build/bench/bench_static   (a selection: --benchmark_filter='W4|Triad', 'W1_20.*1t' or 'Small_';
// medians: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true)
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "metagrad/fixed.hpp"

namespace {

namespace fx = metagrad::fixed;
using fx::index_t;

template <class Tn>
std::unique_ptr<Tn> random_tensor(unsigned seed) {
  auto t = std::make_unique<Tn>();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : *t) x = u(rng);
  return t;
}
template <class Tn>
Eigen::Map<Eigen::ArrayXf> flat(Tn& t) {
  return {t.data(), Tn::size};
}
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Tn>
Eigen::Map<RowMajor> matrix(Tn& t) {
  return {t.data(), Tn::shape::dims[0], Tn::shape::dims[1]};
}

// One copy of each input and output per (type, seed), shared by a workload's static and Eigen rows:
// both then read and write the same pages (where a fresh allocation landed moved W2 by 15%).
template <class Tn, unsigned Seed>
Tn* shared() {
  static std::unique_ptr<Tn> t = random_tensor<Tn>(Seed);
  return t.get();
}

// Each benchmark reports `rate`: its row's unit (GB/s, Gelem/s, GFLOP/s) per second, times 1e9.
void set_rate(benchmark::State& s, double units_per_iter) {
  s.counters["rate"] =
      benchmark::Counter(units_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// L1: STREAM triad a = b + s*c over 2^24 floats (12 bytes per element), the W1 2^24 arrays' size, on
// fixed::threads() threads.
void Triad(benchmark::State& s) {
  constexpr index_t n = index_t{1} << 24;
  std::vector<float> a(n), b(n, 1.f), c(n, 2.f);
  for (auto _ : s) {
    fx::detail::parallel_for(n, 16, n / 16, [&](index_t lo, index_t hi) {
      float* __restrict pa = a.data();
      const float* __restrict pb = b.data();
      const float* __restrict pc = c.data();
      for (index_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.f * pc[i];
    });
    benchmark::ClobberMemory();
  }
  set_rate(s, 12.0 * n);
}

template <index_t N>
void W1Static(benchmark::State& s) {
  auto a = shared<fx::Tensor<float, N>, 1>(), b = shared<fx::Tensor<float, N>, 2>(),
       c = shared<fx::Tensor<float, N>, 3>(), out = shared<fx::Tensor<float, N>, 4>();
  for (auto _ : s) {
    *out = *a * *b + *c;
    benchmark::ClobberMemory();
  }
  set_rate(s, 16.0 * N);
}
template <index_t N>
void W1Eigen(benchmark::State& s) {
  auto a = shared<fx::Tensor<float, N>, 1>(), b = shared<fx::Tensor<float, N>, 2>(),
       c = shared<fx::Tensor<float, N>, 3>(), out = shared<fx::Tensor<float, N>, 4>();
  for (auto _ : s) {
    flat(*out) = flat(*a) * flat(*b) + flat(*c);
    benchmark::ClobberMemory();
  }
  set_rate(s, 16.0 * N);
}

constexpr index_t kW2 = index_t{1} << 22;
void W2Static(benchmark::State& s) {
  auto a = shared<fx::Tensor<float, kW2>, 1>(), out = shared<fx::Tensor<float, kW2>, 2>();
  for (auto _ : s) {
    *out = a->sigmoid();
    benchmark::ClobberMemory();
  }
  set_rate(s, kW2);
}
void W2Eigen(benchmark::State& s) {
  auto a = shared<fx::Tensor<float, kW2>, 1>(), out = shared<fx::Tensor<float, kW2>, 2>();
  for (auto _ : s) {
    flat(*out) = flat(*a).logistic();
    benchmark::ClobberMemory();
  }
  set_rate(s, kW2);
}

constexpr index_t kW3 = 4096;
using W3In = fx::Tensor<float, kW3, kW3>;
template <int Which>
void W3Static(benchmark::State& s) {
  auto a = shared<W3In, 1>();
  auto rows = std::make_unique<fx::Tensor<float, kW3>>();
  auto all = std::make_unique<fx::Tensor<float>>();
  for (auto _ : s) {
    if constexpr (Which == 0)
      *rows = a->sum<1>();
    else if constexpr (Which == 1)
      *rows = a->sum<0>();
    else
      *all = a->sum();
    benchmark::ClobberMemory();
  }
  set_rate(s, 4.0 * W3In::size);
}
template <int Which>
void W3Eigen(benchmark::State& s) {
  auto a = shared<W3In, 1>();
  Eigen::VectorXf rows(kW3);
  Eigen::RowVectorXf cols(kW3);
  float all = 0;
  for (auto _ : s) {
    if constexpr (Which == 0)
      rows = matrix(*a).rowwise().sum();
    else if constexpr (Which == 1)
      cols = matrix(*a).colwise().sum();
    else
      all = matrix(*a).sum();
    benchmark::DoNotOptimize(all);
    benchmark::ClobberMemory();
  }
  set_rate(s, 4.0 * W3In::size);
}

template <index_t N>
void W4Static(benchmark::State& s) {
  auto a = shared<fx::Tensor<float, N, N>, 1>(), b = shared<fx::Tensor<float, N, N>, 2>(),
       c = shared<fx::Tensor<float, N, N>, 3>();
  for (auto _ : s) {
    *c = fx::matmul(*a, *b);
    benchmark::ClobberMemory();
  }
  set_rate(s, 2.0 * N * N * N);
}
template <index_t N>
void W4Eigen(benchmark::State& s) {
  auto a = shared<fx::Tensor<float, N, N>, 1>(), b = shared<fx::Tensor<float, N, N>, 2>(),
       c = shared<fx::Tensor<float, N, N>, 3>();
  for (auto _ : s) {
    matrix(*c).noalias() = matrix(*a) * matrix(*b);
    benchmark::ClobberMemory();
  }
  set_rate(s, 2.0 * N * N * N);
}

// Small shapes, as a user holds them: fx::Tensor (in-object storage) next to Eigen's fixed-size
// Matrix (row-major, as fx), both on the stack. Each call reads its inputs from memory (the escaped
// pointers and the memory clobber forbid hoisting) and writes its result there; Eigen products are
// noalias(), its best. `rate` is calls per ns.
enum SmallOp { kMatmul, kAdd, kSum, kChain };
template <index_t N>
using EigenN = Eigen::Matrix<float, N, N, N == 1 ? Eigen::ColMajor : Eigen::RowMajor>;
template <index_t N, class M>
void fill(M& m, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (index_t i = 0; i < N * N; ++i) m.data()[i] = u(rng);
}
template <index_t N, SmallOp Op>
void SmallStatic(benchmark::State& s) {
  fx::Tensor<float, N, N> a, b, c, out;
  fx::Tensor<float> total;
  fill<N>(a, 1), fill<N>(b, 2), fill<N>(c, 3);
  for (auto _ : s) {
    benchmark::DoNotOptimize(a.data()), benchmark::DoNotOptimize(b.data()),
        benchmark::DoNotOptimize(c.data());
    if constexpr (Op == kMatmul)
      out = fx::matmul(a, b);
    else if constexpr (Op == kAdd)
      out = a + b;
    else if constexpr (Op == kSum)
      total = a.sum();
    else
      out = ((a * b + c) * 0.5f - a).relu();
    benchmark::DoNotOptimize(out.data()), benchmark::DoNotOptimize(total.data());
    benchmark::ClobberMemory();
  }
  set_rate(s, 1.0);
}
template <index_t N, SmallOp Op>
void SmallEigen(benchmark::State& s) {
  EigenN<N> a, b, c, out;
  float total = 0;
  fill<N>(a, 1), fill<N>(b, 2), fill<N>(c, 3);
  for (auto _ : s) {
    benchmark::DoNotOptimize(a.data()), benchmark::DoNotOptimize(b.data()),
        benchmark::DoNotOptimize(c.data());
    if constexpr (Op == kMatmul)
      out.noalias() = a * b;
    else if constexpr (Op == kAdd)
      out = a + b;
    else if constexpr (Op == kSum)
      total = a.sum();
    else
      out = ((a.array() * b.array() + c.array()) * 0.5f - a.array()).max(0.f).matrix();
    benchmark::DoNotOptimize(out.data()), benchmark::DoNotOptimize(&total);
    benchmark::ClobberMemory();
  }
  set_rate(s, 1.0);
}
template <index_t N, SmallOp Op>
void small_row(const char* op) {
  std::string name = std::string("Small_") + op + "_" + std::to_string(N);
  benchmark::RegisterBenchmark((name + "/static/1t").c_str(), SmallStatic<N, Op>)
      ->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark((name + "/Eigen/1t").c_str(), SmallEigen<N, Op>)->Unit(benchmark::kNanosecond);
}
template <index_t N>
void small_rows() {
  small_row<N, kMatmul>("matmul"), small_row<N, kAdd>("add"), small_row<N, kSum>("sum"),
      small_row<N, kChain>("chain");
}

// The static results must equal Eigen's before either is timed (this build's ISA paths: AVX-512
// exp, sigmoid and streaming stores are not what the test binary runs).
bool same(const float* a, const float* b, index_t n, double tol, const char* what) {
  for (index_t i = 0; i < n; ++i)
    if (!(std::abs(double(a[i]) - b[i]) <= tol * (1 + std::abs(double(b[i]))))) {
      std::fprintf(stderr, "%s: static %g, Eigen %g at %ld\n", what, double(a[i]), double(b[i]), long(i));
      return false;
    }
  return true;
}
// The Small_ rows' results, each op on the same inputs, equal on both sides.
template <index_t N>
bool verify_small() {
  fx::Tensor<float, N, N> a, b, c, out;
  EigenN<N> ea, eb, ec, eout;
  fill<N>(a, 1), fill<N>(b, 2), fill<N>(c, 3), fill<N>(ea, 1), fill<N>(eb, 2), fill<N>(ec, 3);
  std::string n = std::to_string(N);
  out = fx::matmul(a, b), eout.noalias() = ea * eb;
  bool ok = same(out.data(), eout.data(), N * N, 1e-5, ("Small_matmul_" + n).c_str());
  out = a + b, eout = ea + eb;
  ok = ok && same(out.data(), eout.data(), N * N, 0, ("Small_add_" + n).c_str());
  fx::Tensor<float> total = a.sum();
  float etotal = ea.sum();
  ok = ok && same(total.data(), &etotal, 1, 1e-5, ("Small_sum_" + n).c_str());
  out = ((a * b + c) * 0.5f - a).relu();
  for (index_t i = 0; i < N * N; ++i)  // (Eigen's max here trips g++ 12's -Wuninitialized)
    eout.data()[i] = std::max((ea.data()[i] * eb.data()[i] + ec.data()[i]) * 0.5f - ea.data()[i], 0.f);
  return ok && same(out.data(), eout.data(), N * N, 1e-6, ("Small_chain_" + n).c_str());
}

bool verify() {
  constexpr index_t n = (index_t{1} << 22) + 3;
  auto a = random_tensor<fx::Tensor<float, n>>(1), b = random_tensor<fx::Tensor<float, n>>(2),
       c = random_tensor<fx::Tensor<float, n>>(3), s = random_tensor<fx::Tensor<float, n>>(4),
       e = random_tensor<fx::Tensor<float, n>>(5);
  *s = *a * *b + *c;
  flat(*e) = flat(*a) * flat(*b) + flat(*c);
  bool ok = same(s->data(), e->data(), n, 1e-6, "W1");
  *s = (*a * 30).sigmoid();
  flat(*e) = (flat(*a) * 30).logistic();
  ok = ok && same(s->data(), e->data(), n, 1e-6, "W2");
  auto m = random_tensor<fx::Tensor<float, 300, 500>>(6);
  auto w = random_tensor<fx::Tensor<float, 500, 200>>(7);
  fx::Tensor<float, 300, 200> p = fx::matmul(*m, *w), q;
  matrix(q) = matrix(*m) * matrix(*w);
  fx::Tensor<float, 500> rows = m->sum<0>();
  Eigen::RowVectorXf cols = matrix(*m).colwise().sum();
  return ok && same(p.data(), q.data(), p.size, 1e-4, "W4") &&
         same(rows.data(), cols.data(), 500, 1e-5, "W3b") && verify_small<2>() && verify_small<3>() &&
         verify_small<4>() && verify_small<8>();
}

// Keeps each run's rate for the summary (under its name without "/real_time"); with
// --benchmark_repetitions=N, the median.
class Collect : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> rate;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("rate");
      if (it == r.counters.end() || (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median"))
        continue;
      std::string name = r.run_name.str();
      if (auto at = name.find("/real_time"); at != std::string::npos) name.erase(at);
      rate[name] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// Registers name/1t and name/2t: f with that many threads on both sides.
void row(const std::string& name, void (*f)(benchmark::State&), benchmark::TimeUnit unit) {
  for (int t : {1, 2}) {
    auto* b = benchmark::RegisterBenchmark((name + "/" + std::to_string(t) + "t").c_str(),
                                           [f, t](benchmark::State& s) {
                                             fx::set_threads(t);
                                             Eigen::setNbThreads(t);
                                             f(s);
                                           });
    b->Unit(unit);
    if (t > 1) b->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto ms = benchmark::kMillisecond, ns = benchmark::kNanosecond;
  row("Triad", Triad, ms);
  row("W1_24/static", W1Static<index_t{1} << 24>, ms);
  row("W1_24/Eigen", W1Eigen<index_t{1} << 24>, ms);
  row("W1_20/static", W1Static<index_t{1} << 20>, ns);
  row("W1_20/Eigen", W1Eigen<index_t{1} << 20>, ns);
  row("W2/static", W2Static, ms);
  row("W2/Eigen", W2Eigen, ms);
  row("W3a/static", W3Static<0>, ms);
  row("W3a/Eigen", W3Eigen<0>, ms);
  row("W3b/static", W3Static<1>, ms);
  row("W3b/Eigen", W3Eigen<1>, ms);
  row("W3c/static", W3Static<2>, ms);
  row("W3c/Eigen", W3Eigen<2>, ms);
  row("W4_512/static", W4Static<512>, ms);
  row("W4_512/Eigen", W4Eigen<512>, ms);
  row("W4_1024/static", W4Static<1024>, ms);
  row("W4_1024/Eigen", W4Eigen<1024>, ms);
  small_rows<2>(), small_rows<3>(), small_rows<4>(), small_rows<8>();
  benchmark::Initialize(&argc, argv);
  if (!verify()) return 1;
  Collect collect;
  benchmark::RunSpecifiedBenchmarks(&collect);
  struct Row {
    const char *key, *text, *unit;
    double eigen_target, triad_target;
  };
  const Row rows[] = {
      {"W1_24", "W1 a*b+c 2^24", "GB/s", 1.0, 0.85},  {"W1_20", "W1 a*b+c 2^20", "GB/s", 1.0, 0},
      {"W2", "W2 sigmoid 2^22", "Gelem/s", 1.0, 0},   {"W3a", "W3a sum axis 1", "GB/s", 1.0, 0},
      {"W3b", "W3b sum axis 0", "GB/s", 1.0, 0},      {"W3c", "W3c full sum", "GB/s", 1.0, 0},
      {"W4_512", "W4 matmul 512", "GFLOP/s", 0.7, 0}, {"W4_1024", "W4 matmul 1024", "GFLOP/s", 0.7, 0},
  };
  auto get = [&](const std::string& name) {
    auto it = collect.rate.find(name);
    return it == collect.rate.end() ? 0.0 : it->second;
  };
  for (const char* t : {"/1t", "/2t"}) {
    double triad = get(std::string("Triad") + t);
    std::printf("\nstatic inline vs Eigen 3.4, %c thread%s; triad %.1f GB/s\n", t[1], t[1] == '1' ? "" : "s",
                triad);
    std::printf("%-18s %8s %9s %9s %8s %8s  %s\n", "workload", "unit", "static", "Eigen", "xEigen", "xTriad",
                "target");
    for (const Row& r : rows) {
      double st = get(std::string(r.key) + "/static" + t), ei = get(std::string(r.key) + "/Eigen" + t);
      if (st == 0) continue;
      double xe = ei > 0 ? st / ei : 0, xt = r.triad_target > 0 && triad > 0 ? st / triad : 0;
      bool met = xe >= r.eigen_target && (r.triad_target == 0 || xt >= r.triad_target);
      std::string target =
          ">= " + std::to_string(r.eigen_target).substr(0, 3) + "x Eigen" +
          (r.triad_target > 0 ? ", >= " + std::to_string(r.triad_target).substr(0, 4) + " triad" : "");
      std::printf("%-18s %8s %9.2f %9.2f %8.2f %8s  %s: %s\n", r.text, r.unit, st, ei, xe,
                  xt > 0 ? std::to_string(xt).substr(0, 4).c_str() : "-", target.c_str(),
                  met ? "met" : "NOT met");
    }
  }
  if (collect.rate.count("Small_add_2/static/1t") || collect.rate.count("Small_matmul_3/static/1t")) {
    std::printf("\nsmall shapes, float, 1 thread: fx::Tensor vs Eigen::Matrix<float, N, N, RowMajor>\n");
    std::printf("%-18s %9s %9s %8s  %s\n", "op", "static ns", "Eigen ns", "xEigen", "target");
    for (const char* op : {"matmul", "add", "sum", "chain"})
      for (int n : {2, 3, 4, 8}) {
        std::string key = std::string("Small_") + op + "_" + std::to_string(n);
        double st = get(key + "/static/1t"), ei = get(key + "/Eigen/1t");
        if (st == 0 || ei == 0) continue;
        std::printf("%-18s %9.2f %9.2f %8.2f  >= 1.0x Eigen: %s\n",
                    (std::string(op) + " " + std::to_string(n) + "x" + std::to_string(n)).c_str(), 1 / st,
                    1 / ei, st / ei, st >= ei ? "met" : "NOT met");
      }
  }
  benchmark::Shutdown();
}
