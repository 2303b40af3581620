// The workloads W1-W6 and machine limits L1-L2 of docs/benchmarks.md: Eigen 3.4 and metagrad's dynamic
// path on every available device, 1 and 2 threads, from one run, with the ratios and targets.
//
//   bench_workloads
//
// Env: BENCH_LARGE=1 adds W4 n = 2048; BENCH_ONLY=W1,W6 runs only those; BENCH_REP_MS=N sets one repetition's
// length (default 60); DEBUG=2 (passed to metagrad) prints every kernel's time and bandwidth on stderr.
//
// How: the parent measures the machine limits (L1, L2) with std::thread, then runs this program
// again twice (BENCH_CHILD=1 with THREADS=1 and THREADS=2: metagrad's pool is sized once, at first
// use), each with a fresh, private kernel cache so that the first realize of a kernel really
// compiles it. A child runs each workload on Eigen, every metagrad device and the limit kernel that
// bounds it, interleaved (the machine is shared: a load change hits all paths of a row alike), and
// prints "R row path value" lines on stdout, its progress on stderr; the parent prints the tables.
// Every figure is the median of 5 repetitions, each long enough to time (>= BENCH_REP_MS), after
// warm-up; metagrad inputs are realized beforehand and every timed iteration builds the lazy
// expression and realizes it (scheduling included).
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <stdio.h>   // popen, pclose
#include <stdlib.h>  // mkdtemp, setenv
#include <time.h>    // clock_gettime

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <metagrad/device/gemm.hpp>
#include <metagrad/device/threadpool.hpp>
#include <metagrad/metagrad.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eigen_mlp.hpp"
#include "machine_limits.hpp"

namespace {

using metagrad::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int kReps = 5;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double rep_seconds() { return static_cast<double>(metagrad::getenv_int("BENCH_REP_MS", 60)) * 1e-3; }
bool large() { return metagrad::getenv_int("BENCH_LARGE", 0) == 1; }
// BENCH_ONLY=W1,W6 runs just those workloads; the others' rows stay empty.
bool wanted(const char* w) {
  std::string only = metagrad::getenv("BENCH_ONLY");
  return only.empty() || ("," + only + ",").find(std::string(",") + w + ",") != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// The rows of the table, shared by the parent and the children.

enum class Limit { None, Triad, W1Cache, Read, Peak, MlpPeak };
struct Ratios {
  std::optional<double> best, eigen, limit;  // best: the best compiled device's figure (2 threads)
};
struct Target {
  const char* text;
  std::function<std::optional<bool>(const Ratios&)> met;  // nullopt: not checkable here
};
struct Row {
  std::string key, label, unit;
  bool higher;  // a higher figure is better (false: a time)
  Limit limit;
  Target first, goal;
};

// MLP: batch 128, 784 -> 512 -> 10. Flops of one step: forward and the two weight gradients of
// each layer (the input needs no gradient, the first layer's input gradient is not computed).
constexpr std::int64_t kBatch = 128, kIn = 784, kHidden = 512, kOut = 10;
constexpr double kMlpFlops = 2.0 * kBatch * (kIn * kHidden * 2 + kHidden * kOut * 3);

std::optional<bool> at_least(std::optional<double> v, double x) {
  if (!v) return std::nullopt;
  return *v >= x;
}

std::vector<Row> rows() {
  Target none{"report", [](const Ratios&) { return std::optional<bool>{}; }};
  Target lim80{"lim>=0.80", [](const Ratios& r) { return at_least(r.limit, 0.8); }};
  Target lim95{"lim>=0.95", [](const Ratios& r) { return at_least(r.limit, 0.95); }};
  Target lim90{"lim>=0.90", [](const Ratios& r) { return at_least(r.limit, 0.9); }};
  Target eig1{"Eig>=1.0", [](const Ratios& r) { return at_least(r.eigen, 1.0); }};
  Target eig2{"Eig>=2.0", [](const Ratios& r) { return at_least(r.eigen, 2.0); }};
  Target eig05{"Eig>=0.5", [](const Ratios& r) { return at_least(r.eigen, 0.5); }};
  Target stat{"static", [](const Ratios&) { return std::optional<bool>{}; }};
  Target mlp{"Eig>1,lim>=.67", [](const Ratios& r) -> std::optional<bool> {
               if (!r.eigen || !r.limit) return std::nullopt;
               return *r.eigen > 1.0 && *r.limit >= 1 / 1.5;
             }};
  Target eager{"<=1us", [](const Ratios& r) -> std::optional<bool> {
                 if (!r.best) return std::nullopt;
                 return *r.best <= 1.0;
               }};
  Target replay{"<=0.2us", [](const Ratios& r) -> std::optional<bool> {
                  if (!r.best) return std::nullopt;
                  return *r.best <= 0.2;
                }};
  Target replay16{"<=0.15us", [](const Ratios& r) -> std::optional<bool> {
                    if (!r.best) return std::nullopt;
                    return *r.best <= 0.15;
                  }};
  std::vector<Row> out = {
      {"W1_24", "W1 a*b+c 2^24", "GB/s", true, Limit::Triad, lim80, lim95},
      {"W1_20", "W1 a*b+c 2^20", "GB/s", true, Limit::W1Cache, lim80, lim95},
      {"W2", "W2 sigmoid()", "Gel/s", true, Limit::None, stat, eig2},
      {"W2f", "W2 1/(1+exp(-a))", "Gel/s", true, Limit::None, stat, eig2},
      {"W3a", "W3a sum axis 1", "GB/s", true, Limit::Read, eig1, lim90},
      {"W3b", "W3b sum axis 0", "GB/s", true, Limit::Read, eig1, lim90},
      {"W3c", "W3c full sum", "GB/s", true, Limit::Read, eig1, lim90},
      {"W4_512", "W4 matmul 512", "GFLOP/s", true, Limit::Peak, eig05, lim90},
      {"W4_1024", "W4 matmul 1024", "GFLOP/s", true, Limit::Peak, eig05, lim90},
  };
  if (large()) out.push_back({"W4_2048", "W4 matmul 2048", "GFLOP/s", true, Limit::Peak, eig05, lim90});
  out.push_back({"W5", "W5 MLP step", "ms", false, Limit::MlpPeak, none, mlp});
  out.push_back({"W5j", "W5 step, TinyJit", "ms", false, Limit::MlpPeak, none, mlp});
  out.push_back({"W6", "W6 16-elem add", "us/op", false, Limit::None, none, eager});
  out.push_back({"W6r", "W6 replay", "us/kern", false, Limit::None, none, replay});
  out.push_back({"W6r16", "W6 replay 16", "us/kern", false, Limit::None, none, replay16});
  return out;
}

// ---------------------------------------------------------------------------------------------
// L1, L2: the machine's limits, measured by the parent with std::thread.

// The FMA peak is measured in the widest ISA metagrad's GEMM uses (METAGRAD_ISA=avx2 lowers it).
bool wide_fma() { return metagrad::gemm::isa() == metagrad::gemm::Isa::avx512; }
const double kFmaFlopsPerIter = 12 * 2 * (wide_fma() ? 16 : 8);
float fma_kernel(long iters) {
  return wide_fma() ? limits::fma_peak_avx512(iters) : limits::fma_peak_avx2(iters);
}

// Runs body(begin, end) on `threads` std::threads over [0, n) split in 64-element-aligned chunks,
// `passes` times each; seconds for all.
template <class F>
double run_threads(int threads, std::size_t n, long passes, const F& body) {
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    std::size_t b = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads) / 64 * 64;
    std::size_t e = t + 1 == threads
                        ? n
                        : n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads) / 64 * 64;
    ts.emplace_back([&body, b, e, passes] {
      for (long p = 0; p < passes; ++p) body(b, e);
    });
  }
  for (auto& t : ts) t.join();
  return seconds_since(t0);
}

// Seconds per pass of body over [0, n) on `threads` threads: the fastest of kReps repetitions (a
// limit: what the machine did at least once).
template <class F>
double fastest_pass(int threads, std::size_t n, const F& body) {
  double one = run_threads(threads, n, 1, body);  // warm-up
  one = std::min(one, run_threads(threads, n, 1, body));
  long passes = std::max<long>(1, std::lround(2 * rep_seconds() / one));
  std::vector<double> per;
  for (int r = 0; r < kReps; ++r)
    per.push_back(run_threads(threads, n, passes, body) / static_cast<double>(passes));
  std::sort(per.begin(), per.end());
  return per.front();
}

// The fastest form of each limit kernel on `threads` threads over these arrays (machine_limits.hpp).
limits::TriadFn fastest_triad(int threads, float* a, const float* b, const float* c, std::size_t n) {
  return limits::fastest(limits::triad_kernels(), [&](limits::TriadFn f) {
    return run_threads(threads, n, 1,
                       [&](std::size_t s, std::size_t e) { f(a + s, b + s, c + s, 3.0f, e - s); });
  });
}
limits::ReadFn fastest_read(int threads, const float* a, std::size_t n) {
  return limits::fastest(limits::read_kernels(), [&](limits::ReadFn f) {
    return run_threads(threads, n, 1, [&](std::size_t s, std::size_t e) {
      float r = f(a + s, e - s);
      benchmark::DoNotOptimize(r);
    });
  });
}
limits::Fma4Fn fastest_fma4(int threads, float* o, const float* a, const float* b, const float* c,
                            std::size_t n) {
  return limits::fastest(limits::fma4_kernels(), [&](limits::Fma4Fn f) {
    return run_threads(threads, n, 16,
                       [&](std::size_t s, std::size_t e) { f(o + s, a + s, b + s, c + s, e - s); });
  });
}

struct Limits {
  std::size_t l3_bytes = 0, n = 0;
  double triad[2]{}, copy[2]{}, read[2]{}, w1_cache[2]{}, peak[2]{};  // [threads - 1]
};

std::size_t l3_size() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (!(f >> s) || s.empty()) return 32u << 20;
  std::size_t v = std::strtoull(s.c_str(), nullptr, 10);
  char unit = s.back();
  if (unit == 'K') v <<= 10;
  if (unit == 'M') v <<= 20;
  return v ? v : 32u << 20;
}

Limits measure_limits() {
  Limits L;
  L.l3_bytes = l3_size();
  L.n = 4 * L.l3_bytes / sizeof(float);  // each array 4x L3
  std::vector<float> a(L.n, 0.0f), b(L.n, 1.0f), c(L.n, 2.0f);
  for (int t = 1; t <= 2; ++t) {
    std::fprintf(stderr, "[limits] %d thread%s: triad, copy, read over %zu MiB arrays; FMA peak\n", t,
                 t == 1 ? "" : "s", L.n * sizeof(float) >> 20);
    double n = static_cast<double>(L.n);
    auto per_pass = [&](std::size_t len, const auto& body) { return fastest_pass(t, len, body); };
    limits::TriadFn triad = fastest_triad(t, a.data(), b.data(), c.data(), L.n);
    L.triad[t - 1] =
        12 * n /
        per_pass(L.n, [&](std::size_t s,
                          std::size_t e) { triad(a.data() + s, b.data() + s, c.data() + s, 3.0f, e - s); }) *
        1e-9;
    L.copy[t - 1] =
        8 * n /
        per_pass(L.n, [&](std::size_t s,
                          std::size_t e) { limits::copy_avx2(a.data() + s, b.data() + s, e - s); }) *
        1e-9;
    limits::ReadFn read = fastest_read(t, b.data(), L.n);
    L.read[t - 1] = 4 * n /
                    per_pass(L.n,
                             [&](std::size_t s, std::size_t e) {
                               float r = read(b.data() + s, e - s);
                               benchmark::DoNotOptimize(r);
                             }) *
                    1e-9;
    std::size_t nc = 1 << 20;  // in cache: W1 at 2^20
    limits::Fma4Fn w1 = fastest_fma4(t, a.data(), b.data(), c.data(), c.data() + nc, nc);
    L.w1_cache[t - 1] = 16 * static_cast<double>(nc) /
                        per_pass(nc,
                                 [&](std::size_t s, std::size_t e) {
                                   w1(a.data() + s, b.data() + s, c.data() + s, c.data() + nc + s, e - s);
                                 }) *
                        1e-9;
    long iters = 1 << 20;
    auto fma = [&](std::size_t, std::size_t) {
      float r = fma_kernel(iters);
      benchmark::DoNotOptimize(r);
    };
    double one = run_threads(t, 2 * 64, 1, fma);
    iters = std::max<long>(1, std::lround(iters * rep_seconds() / one));
    std::vector<double> per;
    for (int r = 0; r < kReps; ++r) per.push_back(run_threads(t, 2 * 64, 1, fma));
    std::sort(per.begin(), per.end());
    L.peak[t - 1] = t * kFmaFlopsPerIter * static_cast<double>(iters) / per.front() * 1e-9;
  }
  return L;
}

// ---------------------------------------------------------------------------------------------
// The child: every workload on Eigen, each metagrad device and the machine limit that bounds it,
// at the pool size THREADS. The paths of one row are interleaved: each repetition times every path
// once, so a change in the machine's load (it is shared) hits them alike and the ratios hold.

using Op = std::function<void()>;
using Figure = std::function<double(double seconds)>;

// One path of a row: setup() uploads the inputs and returns the timed operation; fig turns
// seconds per operation into the row's figure.
struct Candidate {
  std::string path;
  std::function<Op()> setup;
  Figure fig;
};

class Child {
 public:
  Child() : threads_(metagrad::thread_count()) {
    Eigen::setNbThreads(threads_);
    for (const auto& d : metagrad::Device::available())
      if (d != "CPU") devices_.push_back(d);
    std::printf("D");
    for (const auto& d : devices_) std::printf(" %s", d.c_str());
    std::printf("\n");
    for (const char* d : {"CLANG", "LLVM", "OPENCL"}) {  // why a device is missing
      if (std::find(devices_.begin(), devices_.end(), d) != devices_.end()) continue;
      try {
        metagrad::Device::get(d);
      } catch (const std::exception& e) {
        std::string msg = e.what();
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        std::printf("N %s\n", msg.c_str());
      }
    }
    std::fflush(stdout);
    std::mt19937 gen(1234);
    std::normal_distribution<float> nd;
    pool_.resize(std::size_t{1} << 24);
    for (float& x : pool_) x = nd(gen);
  }

  int run() {
    if (wanted("W1")) w1(std::int64_t{1} << 24, "W1_24"), w1(std::int64_t{1} << 20, "W1_20");
    if (wanted("W2")) w2();
    if (wanted("W3")) w3();
    if (wanted("W4")) {
      w4(512, "W4_512");
      w4(1024, "W4_1024");
      if (large()) w4(2048, "W4_2048");
    }
    if (wanted("W5")) w5();
    if (wanted("W6")) w6();
    return 0;
  }

 private:
  int threads_;
  std::vector<std::string> devices_;
  std::vector<float> pool_;                           // random normal numbers all inputs are drawn from
  std::shared_ptr<std::vector<float>> la_, lb_, lc_;  // the limit's DRAM arrays, 4x L3 each

  // n values from the pool; k picks a different rotation, so a, b and c differ.
  std::vector<float> host(std::size_t n, std::size_t k, float scale = 1.0f) const {
    std::vector<float> v(n);
    std::size_t off = k * 7919 * 1021, p = pool_.size();
    for (std::size_t i = 0; i < n; ++i) v[i] = pool_[(i + off) % p] * scale;
    return v;
  }
  static Tensor upload(const std::vector<float>& v, const metagrad::Dims& shape, const std::string& dev,
                       bool grad = false) {
    Tensor t(v, shape, {.device = dev, .requires_grad = grad});
    t.realize();
    return t;
  }

  void emit_value(const std::string& row, const std::string& path, double v, const char* unit) {
    std::printf("R %s %s %.9g\n", row.c_str(), path.c_str(), v);
    std::fflush(stdout);
    std::fprintf(stderr, "[%dt] %-8s %-7s %10.4g %s\n", threads_, row.c_str(), path.c_str(), v, unit);
  }
  void emit_error(const std::string& row, const std::string& path, std::string msg) {
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    if (msg.size() > 300) msg = msg.substr(0, 300) + "...";
    std::printf("E %s %s %s\n", row.c_str(), path.c_str(), msg.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "[%dt] %-8s %-7s FAILED: %s\n", threads_, row.c_str(), path.c_str(), msg.c_str());
  }

  // Sets up every path, times its first call (cold: metagrad compiles there) and warms it up, then
  // runs kReps rounds, each timing every path over enough calls to last rep_seconds(); prints the
  // medians, and for metagrad's paths the compile time (first call minus the median) and kernels.
  void row(const std::string& key, const char* unit, const std::vector<Candidate>& cands) {
    struct Live {
      const Candidate* c = nullptr;
      Op op;
      double cold = 0;
      int compiles = 0;
      long iters = 1;
      std::vector<double> per;
      bool ok = true;
    };
    std::vector<Live> live;
    for (const Candidate& c : cands) {
      try {
        Live l;
        l.c = &c;
        l.op = c.setup();
        int c0 = metagrad::ClangProgram::compiles;
        auto t0 = Clock::now();
        l.op();
        l.cold = seconds_since(t0);
        l.compiles = metagrad::ClangProgram::compiles - c0;
        double warm = 1e30;
        for (int i = 0; i < 2; ++i) {
          t0 = Clock::now();
          l.op();
          warm = std::min(warm, seconds_since(t0));
          if (warm > rep_seconds()) break;
        }
        l.iters = std::clamp<long>(std::lround(rep_seconds() / std::max(warm, 1e-9)), 1, 10'000'000);
        live.push_back(std::move(l));
      } catch (const std::exception& e) { emit_error(key, c.path, e.what()); }
    }
    for (int r = 0; r < kReps; ++r)
      for (Live& l : live) {
        if (!l.ok) continue;
        try {
          auto t0 = Clock::now();
          for (long i = 0; i < l.iters; ++i) l.op();
          l.per.push_back(seconds_since(t0) / static_cast<double>(l.iters));
        } catch (const std::exception& e) {
          l.ok = false;
          emit_error(key, l.c->path, e.what());
        }
      }
    for (Live& l : live) {
      if (!l.ok) continue;
      std::sort(l.per.begin(), l.per.end());
      double median = l.per[kReps / 2];
      // A limit is what the machine did at least once: its fastest repetition. (On a shared VM
      // an in-cache pass varies by a quarter between repetitions; a median limit sat below paths'
      // medians taken in its better moments.)
      emit_value(key, l.c->path, l.c->fig(l.c->path == "limit" ? l.per.front() : median), unit);
      if (l.c->path == "Eigen" || l.c->path == "limit") continue;
      std::int64_t k0 = metagrad::GlobalCounters::kernel_count;
      l.op();
      std::printf("C %s %s %.9g %d %lld\n", key.c_str(), l.c->path.c_str(), l.cold - median, l.compiles,
                  static_cast<long long>(metagrad::GlobalCounters::kernel_count - k0));
      std::fflush(stdout);
    }
    live.clear();
  }

  // ---- the limits, on this child's thread count ----

  void limit_arrays() {
    if (la_) return;
    std::size_t n = 4 * l3_size() / sizeof(float);
    la_ = std::make_shared<std::vector<float>>(n, 0.0f);
    lb_ = std::make_shared<std::vector<float>>(n, 1.0f);
    lc_ = std::make_shared<std::vector<float>>(n, 2.0f);
  }
  Candidate triad_limit() {
    limit_arrays();
    double n = static_cast<double>(la_->size());
    return {"limit",
            [this]() -> Op {
              limits::TriadFn k = fastest_triad(threads_, la_->data(), lb_->data(), lc_->data(), la_->size());
              return [a = la_, b = lb_, c = lc_, t = threads_, k] {
                run_threads(t, a->size(), 1, [&](std::size_t s, std::size_t e) {
                  k(a->data() + s, b->data() + s, c->data() + s, 3.0f, e - s);
                });
              };
            },
            [n](double t) { return 12 * n / t * 1e-9; }};
  }
  Candidate cache_w1_limit(std::size_t n) {
    constexpr long kPasses = 128;  // per thread start: starting threads costs as much as a pass
    return {"limit",
            [this, n]() -> Op {
              auto v = std::make_shared<std::vector<float>>(4 * n, 1.0f);
              float* q = v->data();
              limits::Fma4Fn k = fastest_fma4(threads_, q, q + n, q + 2 * n, q + 3 * n, n);
              return [v, n, t = threads_, k] {
                float* p = v->data();
                run_threads(t, n, kPasses, [&](std::size_t s, std::size_t e) {
                  k(p + s, p + n + s, p + 2 * n + s, p + 3 * n + s, e - s);
                });
              };
            },
            [n](double t) { return 16.0 * static_cast<double>(n) * kPasses / t * 1e-9; }};
  }
  // The read bandwidth over an array of n floats, the size of the workload's input (W3's matrix
  // is twice an L3 on some machines: part of it stays cached, as it does for the sums it bounds),
  // several passes per thread start so that starting the threads does not count.
  Candidate read_limit(std::size_t n) {
    constexpr long kPasses = 8;
    return {"limit",
            [this, n]() -> Op {
              auto a = std::make_shared<std::vector<float>>(n, 1.0f);
              limits::ReadFn k = fastest_read(threads_, a->data(), n);
              return [a, t = threads_, k] {
                run_threads(t, a->size(), kPasses, [&](std::size_t s, std::size_t e) {
                  float r = k(a->data() + s, e - s);
                  benchmark::DoNotOptimize(r);
                });
              };
            },
            [n](double t) { return 4.0 * static_cast<double>(n) * kPasses / t * 1e-9; }};
  }
  // GFLOP/s at FMA peak, or (mlp) the milliseconds of one MLP step at that rate.
  Candidate peak_limit(bool mlp) {
    constexpr long kIters = 1 << 21;
    double flops = threads_ * kFmaFlopsPerIter * kIters;
    return {"limit",
            [this]() -> Op {
              return [t = threads_] {
                run_threads(t, 64 * static_cast<std::size_t>(t), 1, [](std::size_t, std::size_t) {
                  float r = fma_kernel(kIters);
                  benchmark::DoNotOptimize(r);
                });
              };
            },
            [flops, mlp](double t) { return mlp ? kMlpFlops / (flops / t) * 1e3 : flops / t * 1e-9; }};
  }

  // A metagrad path: make(dev) uploads the inputs and returns the operation.
  static Candidate mg(const std::string& dev, std::function<Op(const std::string&)> make, Figure fig) {
    return {dev, [dev, make = std::move(make)] { return make(dev); }, std::move(fig)};
  }

  // W1: out = a*b + c; 16 bytes per element. The CPU interpreter at 2^20 only.
  void w1(std::int64_t n, const char* key) {
    auto a = host(n, 0), b = host(n, 1), c = host(n, 2);
    Figure gbs = [n](double t) { return 16.0 * static_cast<double>(n) / t * 1e-9; };
    std::vector<Candidate> cands;
    cands.push_back(n >= (std::int64_t{1} << 24) ? triad_limit() : cache_w1_limit(n));
    cands.push_back({"Eigen",
                     [&]() -> Op {
                       struct E {
                         Eigen::ArrayXf a, b, c, o;
                       };
                       auto e = std::make_shared<E>();
                       e->a = Eigen::Map<Eigen::ArrayXf>(a.data(), n);
                       e->b = Eigen::Map<Eigen::ArrayXf>(b.data(), n);
                       e->c = Eigen::Map<Eigen::ArrayXf>(c.data(), n);
                       e->o.resize(n);
                       return [e] {
                         e->o = e->a * e->b + e->c;
                         benchmark::DoNotOptimize(e->o.data());
                         benchmark::ClobberMemory();
                       };
                     },
                     gbs});
    auto make = [&](const std::string& dev) -> Op {
      Tensor ta = upload(a, {n}, dev), tb = upload(b, {n}, dev), tc = upload(c, {n}, dev);
      return [=] { (ta * tb + tc).realize(); };
    };
    for (const auto& dev : devices_) cands.push_back(mg(dev, make, gbs));
    if (n <= (std::int64_t{1} << 20)) cands.push_back(mg("CPU", make, gbs));
    row(key, "GB/s", cands);
  }

  // W2: sigmoid of 2^22 elements, as metagrad's sigmoid() against Eigen's logistic(), and as the
  // formula 1/(1+exp(-a)) on both.
  void w2() {
    std::int64_t n = std::int64_t{1} << 22;
    auto a = host(n, 3);
    Figure ges = [n](double t) { return static_cast<double>(n) / t * 1e-9; };
    for (bool formula : {false, true}) {
      std::vector<Candidate> cands;
      cands.push_back({"Eigen",
                       [&, formula]() -> Op {
                         struct E {
                           Eigen::ArrayXf a, o;
                         };
                         auto e = std::make_shared<E>();
                         e->a = Eigen::Map<Eigen::ArrayXf>(a.data(), n);
                         e->o.resize(n);
                         if (formula)
                           return [e] {
                             e->o = 1.0f / (1.0f + (-e->a).exp());
                             benchmark::DoNotOptimize(e->o.data());
                             benchmark::ClobberMemory();
                           };
                         return [e] {
                           e->o = e->a.logistic();
                           benchmark::DoNotOptimize(e->o.data());
                           benchmark::ClobberMemory();
                         };
                       },
                       ges});
      auto make = [&, formula](const std::string& dev) -> Op {
        Tensor ta = upload(a, {n}, dev);
        if (formula) return [=] { (1.0 / (1.0 + (-ta).exp())).realize(); };
        return [=] { ta.sigmoid().realize(); };
      };
      for (const auto& dev : devices_) cands.push_back(mg(dev, make, ges));
      cands.push_back(mg("CPU", make, ges));  // the interpreter baseline
      row(formula ? "W2f" : "W2", "Gel/s", cands);
    }
  }

  // W3: sums of a 4096 x 4096 row-major matrix over axis 1, axis 0, all; GB/s of input read. The
  // CPU interpreter runs them on 1024 x 1024.
  void w3() {
    constexpr std::int64_t r = 4096, rc = 1024;
    auto a = host(static_cast<std::size_t>(r * r), 4);
    auto gbs = [](std::int64_t n) {
      return [n](double t) { return 4.0 * static_cast<double>(n * n) / t * 1e-9; };
    };
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    for (int axis : {1, 0, -1}) {
      std::vector<Candidate> cands;
      cands.push_back(read_limit(static_cast<std::size_t>(r * r)));
      cands.push_back({"Eigen",
                       [&, axis]() -> Op {
                         struct E {
                           RowMajor m;
                           Eigen::VectorXf rs;
                           Eigen::RowVectorXf cs;
                         };
                         auto e = std::make_shared<E>();
                         e->m = Eigen::Map<RowMajor>(a.data(), r, r);
                         e->rs.resize(r);
                         e->cs.resize(r);
                         if (axis == 1)
                           return [e] {
                             e->rs.noalias() = e->m.rowwise().sum();
                             benchmark::DoNotOptimize(e->rs.data());
                             benchmark::ClobberMemory();
                           };
                         if (axis == 0)
                           return [e] {
                             e->cs.noalias() = e->m.colwise().sum();
                             benchmark::DoNotOptimize(e->cs.data());
                             benchmark::ClobberMemory();
                           };
                         return [e] {
                           float s = e->m.sum();
                           benchmark::DoNotOptimize(s);
                         };
                       },
                       gbs(r)});
      auto make = [&, axis](std::int64_t n) {
        return [&, axis, n](const std::string& dev) -> Op {
          Tensor ta = upload(n == r ? a : std::vector<float>(a.begin(), a.begin() + n * n), {n, n}, dev);
          if (axis < 0) return [=] { ta.sum().realize(); };
          return [=] { ta.sum(axis).realize(); };
        };
      };
      for (const auto& dev : devices_) cands.push_back(mg(dev, make(r), gbs(r)));
      cands.push_back(mg("CPU", make(rc), gbs(rc)));
      row(axis == 1 ? "W3a" : axis == 0 ? "W3b" : "W3c", "GB/s", cands);
    }
  }

  // W4: square matmul, 2 n^3 flops.
  void w4(std::int64_t n, const char* key) {
    auto a = host(static_cast<std::size_t>(n * n), 5), b = host(static_cast<std::size_t>(n * n), 6);
    Figure gfs = [n](double t) { return 2.0 * static_cast<double>(n * n * n) / t * 1e-9; };
    std::vector<Candidate> cands;
    cands.push_back(peak_limit(false));
    cands.push_back({"Eigen",
                     [&]() -> Op {
                       struct E {
                         Eigen::MatrixXf a, b, c;
                       };
                       auto e = std::make_shared<E>();
                       e->a = Eigen::Map<Eigen::MatrixXf>(a.data(), n, n);
                       e->b = Eigen::Map<Eigen::MatrixXf>(b.data(), n, n);
                       e->c.resize(n, n);
                       return [e] {
                         e->c.noalias() = e->a * e->b;
                         benchmark::DoNotOptimize(e->c.data());
                         benchmark::ClobberMemory();
                       };
                     },
                     gfs});
    auto make = [&](const std::string& dev) -> Op {
      Tensor ta = upload(a, {n, n}, dev), tb = upload(b, {n, n}, dev);
      return [=] { ta.matmul(tb).realize(); };
    };
    for (const auto& dev : devices_) cands.push_back(mg(dev, make, gfs));
    if (n <= 512) cands.push_back(mg("CPU", make, gfs));  // the interpreter, 512 only: it is slow
    row(key, "GFLOP/s", cands);
  }

  // W5: one SGD step of the MLP, forward + backward + update.
  struct MlpData {
    std::vector<float> x, w1, b1, w2, b2;
    std::vector<std::int32_t> y;
  };
  MlpData mlp_data() const {
    MlpData d;
    d.x = host(kBatch * kIn, 7);
    d.w1 = host(kIn * kHidden, 8, 1.0f / std::sqrt(static_cast<float>(kIn)));
    d.b1 = host(kHidden, 9, 0.01f);
    d.w2 = host(kHidden * kOut, 10, 1.0f / std::sqrt(static_cast<float>(kHidden)));
    d.b2 = host(kOut, 11, 0.01f);
    std::mt19937 gen(7);
    for (std::int64_t i = 0; i < kBatch; ++i) d.y.push_back(static_cast<std::int32_t>(gen() % kOut));
    return d;
  }

  // Written by hand (eigen_mlp.hpp, shared with bench_static_mlp).
  struct EigenMlp : metagrad::bench::EigenMlp {
    explicit EigenMlp(const MlpData& d)
        : metagrad::bench::EigenMlp(kBatch, kIn, kHidden, kOut, d.x.data(), d.w1.data(), d.b1.data(),
                                    d.w2.data(), d.b2.data(), d.y) {}
  };

  struct Net {
    Tensor x, y;
    std::vector<Tensor> p;
  };
  static Net mlp_net(const MlpData& d, const std::string& dev) {
    Tensor y(d.y, {kBatch}, {.device = dev});
    y.realize();
    return Net{upload(d.x, {kBatch, kIn}, dev),
               y,
               {upload(d.w1, {kIn, kHidden}, dev, true), upload(d.b1, {kHidden}, dev, true),
                upload(d.w2, {kHidden, kOut}, dev, true), upload(d.b2, {kOut}, dev, true)}};
  }
  static Tensor mlp_loss(const Net& n) {
    return n.x.linear(n.p[0], n.p[1]).relu().linear(n.p[2], n.p[3]).log_softmax().nll_loss(n.y);
  }

  void w5() {
    MlpData d = mlp_data();
    Figure ms = [](double t) { return t * 1e3; };
    std::vector<Candidate> cands;
    cands.push_back(peak_limit(true));
    cands.push_back({"Eigen",
                     [&]() -> Op {
                       auto m = std::make_shared<EigenMlp>(d);
                       return [m] {
                         float l = m->step();
                         benchmark::DoNotOptimize(l);
                       };
                     },
                     ms});
    auto make = [&](const std::string& dev) -> Op {
      Net n = mlp_net(d, dev);
      auto opt = std::make_shared<metagrad::nn::optim::SGD>(n.p, 0.01);
      return [n, opt] {
        Tensor l = mlp_loss(n);
        opt->zero_grad();
        l.backward();
        l.realize();
        opt->step();
      };
    };
    for (const auto& dev : devices_) cands.push_back(mg(dev, make, ms));
    cands.push_back(mg("CPU", make, ms));  // the interpreter: the baseline later devices beat
    row("W5", "ms", cands);
    // W5j: the same step captured by TinyJit on its second call and replayed (no scheduling).
    cands.resize(2);  // the limit and Eigen
    auto jitted = [&](const std::string& dev) -> Op {
      Net n = mlp_net(d, dev);
      auto opt = std::make_shared<metagrad::nn::optim::SGD>(n.p, 0.01);
      auto step = [n, opt](const Tensor& x, const Tensor& y) {
        Net m = n;
        m.x = x, m.y = y;
        Tensor l = mlp_loss(m);
        opt->zero_grad();
        l.backward();
        opt->step();
        return l;
      };
      auto jit = std::make_shared<metagrad::TinyJit<decltype(step)>>(step);
      return [n, jit] { (*jit)(n.x, n.y).realize(); };
    };
    for (const auto& dev : devices_)
      if (dev != "OPENCL") cands.push_back(mg(dev, jitted, ms));
    row("W5j", "ms", cands);
    // The same initial loss as Eigen's: the bench measures the right computation.
    float eigen_loss0 = EigenMlp(d).forward();
    for (const auto& dev : devices_) {
      try {
        float l0 = mlp_loss(mlp_net(d, dev)).item<float>();
        std::fprintf(stderr, "[%dt] W5 initial loss: Eigen %.6f, %s %.6f\n", threads_, eigen_loss0,
                     dev.c_str(), l0);
        if (std::abs(l0 - eigen_loss0) > 1e-3f * std::max(1.0f, std::abs(eigen_loss0)))
          std::printf("N W5 on %s: initial loss %.6f differs from Eigen's %.6f\n", dev.c_str(), l0,
                      eigen_loss0);
      } catch (const std::exception& e) { emit_error("W5", dev, e.what()); }
    }
  }

  // W6: a + b on 16 elements, realized each time; and the same step replayed by TinyJit (its cost
  // per kernel: argument checks, the captured kernels on the bound buffers, no scheduling).
  void w6() {
    auto a = host(16, 12), b = host(16, 13);
    Figure us = [](double t) { return t * 1e6; };
    std::vector<Candidate> cands;
    cands.push_back({"Eigen",
                     [&]() -> Op {
                       using A = Eigen::Array<float, 16, 1>;
                       struct E {
                         A a, b, c;
                       };
                       auto e = std::make_shared<E>();
                       e->a = Eigen::Map<A>(a.data());
                       e->b = Eigen::Map<A>(b.data());
                       return [e] {
                         benchmark::DoNotOptimize(e->a);
                         benchmark::DoNotOptimize(e->b);
                         e->c = e->a + e->b;
                         benchmark::DoNotOptimize(e->c);
                       };
                     },
                     us});
    auto make = [&](const std::string& dev) -> Op {
      Tensor ta = upload(a, {16}, dev), tb = upload(b, {16}, dev);
      return [=] { (ta + tb).realize(); };
    };
    for (const auto& dev : devices_) cands.push_back(mg(dev, make, us));
    cands.push_back(mg("CPU", make, us));
    row("W6", "us/op", cands);

    // Replayed: the add alone (a call's own cost, one kernel), and a step of `n` adds, each
    // realized (n kernels: the cost of one more kernel in a captured step).
    auto replayed = [&](const char* key, int n) {
      std::vector<Candidate> replay;
      for (const auto& dev : devices_) {
        auto kernels = std::make_shared<std::size_t>(1);
        replay.push_back(mg(
            dev,
            [&, kernels, n](const std::string& d) -> Op {
              Tensor ta = upload(a, {16}, d), tb = upload(b, {16}, d);
              auto jit = std::make_shared<metagrad::TinyJit<std::function<Tensor(Tensor, Tensor)>>>(
                  [n](const Tensor& x, const Tensor& y) {
                    Tensor z = x + y;
                    for (int k = 1; k < n; ++k) z = (z.realize() + y);
                    return z;
                  });
              (*jit)(ta, tb), (*jit)(ta, tb);  // a plain call, then the capture
              if (!jit->captured() || jit->captured()->kernels.empty())
                throw std::runtime_error("no kernel was captured");
              *kernels = jit->captured()->kernels.size();
              return [jit, ta, tb] { benchmark::DoNotOptimize((*jit)(ta, tb)); };
            },
            [kernels](double t) { return t * 1e6 / static_cast<double>(*kernels); }));
      }
      row(key, "us/kern", replay);
    };
    replayed("W6r", 1);
    replayed("W6r16", 16);
    // The same in this thread's CPU time, best of 5 (a shared machine's load stretches wall time,
    // not CPU time): a note of the 1-thread child.
    if (threads_ != 1) return;
    auto cpu_us = [](const Op& op, int n) {
      auto now = [] {
        timespec t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
      };
      double best = 1e30;
      for (int r = 0; r < kReps; ++r) {
        double t0 = now();
        for (int i = 0; i < n; ++i) op();
        best = std::min(best, (now() - t0) / n);
      }
      return best * 1e6;
    };
    for (const auto& dev : devices_) {
      try {
        Tensor ta = upload(a, {16}, dev), tb = upload(b, {16}, dev);
        auto eager = [&] { (ta + tb).realize(); };
        metagrad::TinyJit<std::function<Tensor(Tensor, Tensor)>> jit(
            [](const Tensor& x, const Tensor& y) { return x + y; });
        metagrad::TinyJit<std::function<Tensor(Tensor, Tensor)>> jit16([](const Tensor& x, const Tensor& y) {
          Tensor z = x + y;
          for (int k = 1; k < 16; ++k) z = (z.realize() + y);
          return z;
        });
        for (int i = 0; i < 3; ++i) eager(), jit(ta, tb), jit16(ta, tb);
        double k16 = static_cast<double>(jit16.captured()->kernels.size());
        std::printf(
            "N W6 in thread CPU time on %s (best of %d): eager %.3f us/op, replay %.3f us/kern, replay 16 "
            "%.3f us/kern\n",
            dev.c_str(), kReps, cpu_us(eager, 5000), cpu_us([&] { jit(ta, tb); }, 5000),
            cpu_us([&] { jit16(ta, tb); }, 500) / k16);
      } catch (const std::exception& e) { emit_error("W6", dev, e.what()); }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The parent: limits, the two children, the tables.

struct ChildResult {
  std::map<std::string, double> value;  // "row path"
  std::map<std::string, std::string> error;
  struct Compile {
    double cold_minus_warm;
    int compiles;
    long long kernels;
  };
  std::map<std::string, Compile> compile;
  std::vector<std::string> devices, notes;
  int rc = 0;
};

ChildResult run_child(int threads) {
  ChildResult res;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  char dir[] = "/tmp/metagrad-bench-XXXXXX";
  if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
  std::string t = std::to_string(threads);
  setenv("BENCH_CHILD", "1", 1);
  setenv("THREADS", t.c_str(), 1);
  setenv("METAGRAD_CACHE", dir, 1);  // a fresh kernel cache: the first realize really compiles
  setenv("OMP_NUM_THREADS", t.c_str(), 1);
  setenv("POCL_CPU_MAX_CU_COUNT", t.c_str(), 1);  // PoCL's CPU device: its own worker threads
  setenv("POCL_MAX_PTHREAD_COUNT", t.c_str(), 1);
  std::fprintf(stderr, "[parent] running the %d-thread child\n", threads);
  FILE* p = popen(("'" + exe + "'").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed");
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    std::istringstream in(line);
    std::string kind, row, path;
    in >> kind;
    if (kind == "D") {
      while (in >> path) res.devices.push_back(path);
      continue;
    }
    if (kind == "N") {
      std::string rest;
      std::getline(in, rest);
      if (std::find(res.notes.begin(), res.notes.end(), rest) == res.notes.end()) res.notes.push_back(rest);
      continue;
    }
    in >> row >> path;
    std::string key = row + " " + path;
    if (kind == "R") {
      double v;
      in >> v;
      res.value[key] = v;
    } else if (kind == "C") {
      ChildResult::Compile c{};
      in >> c.cold_minus_warm >> c.compiles >> c.kernels;
      res.compile[key] = c;
    } else if (kind == "E") {
      std::string rest;
      std::getline(in, rest);
      res.error[key] = rest;
    }
  }
  res.rc = pclose(p);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  for (const char* v : {"BENCH_CHILD", "THREADS", "METAGRAD_CACHE", "OMP_NUM_THREADS",
                        "POCL_CPU_MAX_CU_COUNT", "POCL_MAX_PTHREAD_COUNT"})
    unsetenv(v);
  return res;
}

std::string num(std::optional<double> v) {
  if (!v) return "-";
  double a = std::abs(*v);
  char buf[32];
  const char* f = a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : a >= 0.01 ? "%.3f" : "%.4f";
  std::snprintf(buf, sizeof buf, f, *v);
  return buf;
}

std::string pad(const std::string& s, std::size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// The 1-minute load average: on a shared machine, how many others competed for the cores.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string s;
  return f >> s ? s : "?";
}

int parent_main() {
  auto t_start = Clock::now();
  std::string load_start = load_average();
  Limits L = measure_limits();
  ChildResult c[2] = {run_child(1), run_child(2)};
  const std::vector<std::string>& devs = c[0].devices.empty() ? c[1].devices : c[0].devices;

  std::printf("\nmetagrad workloads (docs/benchmarks.md): %s, %u hardware threads, L3 %zu MiB\n",
              cpu_model().c_str(), std::thread::hardware_concurrency(), L.l3_bytes >> 20);
  std::printf("Figures: median of %d repetitions after warm-up, compile time excluded; each cell 1t/2t.\n",
              kReps);
  std::printf("Eigen threads only its products (W4, W5); metagrad devices: THREADS=1 / THREADS=2.\n\n");

  std::printf(
      "Machine limits, measured first (std::thread; arrays of %zu MiB = 4x L3; bytes as STREAM counts\n"
      "them). The table's limit column measures them again inside each row, interleaved with its paths.\n",
      L.n * sizeof(float) >> 20);
  auto lim = [&](const char* name, const double* v, const char* unit) {
    std::printf("  %-34s %8s / %-8s %s\n", name, num(v[0]).c_str(), num(v[1]).c_str(), unit);
  };
  lim("L1 triad a = b + s*c (DRAM)", L.triad, "GB/s");
  lim("L1 copy a = b (DRAM)", L.copy, "GB/s");
  lim("L1 read sum(a) (DRAM)", L.read, "GB/s");
  lim("L1 a*b+c 2^20 by hand (in cache)", L.w1_cache, "GB/s");
  lim(wide_fma() ? "L2 peak fp32 AVX-512 FMA, 12 acc" : "L2 peak fp32 AVX2 FMA, 12 acc", L.peak, "GFLOP/s");
  std::printf("\n");

  auto get = [&](int t, const std::string& row, const std::string& path) -> std::optional<double> {
    auto it = c[t].value.find(row + " " + path);
    if (it == c[t].value.end()) return std::nullopt;
    return it->second;
  };
  // The row's limit as its child measured it, interleaved with the paths (the parent's if missing).
  auto limit_of = [&](const Row& r, int t) -> std::optional<double> {
    if (r.limit == Limit::None) return std::nullopt;
    if (auto v = get(t, r.key, "limit")) return v;
    switch (r.limit) {
      case Limit::Triad:
        return L.triad[t];
      case Limit::W1Cache:
        return L.w1_cache[t];
      case Limit::Read:
        return L.read[t];
      case Limit::Peak:
        return L.peak[t];
      case Limit::MlpPeak:
        return kMlpFlops / (L.peak[t] * 1e9) * 1e3;  // ms
      case Limit::None:
        return std::nullopt;
    }
    return std::nullopt;
  };
  auto cell = [&](const std::string& row, const std::string& path, std::optional<double> v1,
                  std::optional<double> v2) {
    std::string s1 = c[0].error.count(row + " " + path) ? "err" : num(v1);
    std::string s2 = c[1].error.count(row + " " + path) ? "err" : num(v2);
    if (s1 == "-" && s2 == "-") return std::string("-");
    return s1 + "/" + s2;
  };

  std::vector<std::string> cols = {"limit", "Eigen"};
  for (const auto& d : devs) cols.push_back(d);
  cols.push_back("CPU");
  constexpr std::size_t kW = 14;
  std::string header = pad("workload", 17) + pad("unit", 8);
  for (const auto& col : cols) header += pad(col == "CPU" ? "CPU(interp)" : col, kW, true);
  header += "  " + pad("best 2t", 15) + pad("xEigen", 7, true) + pad("xLimit", 7, true) + "  " +
            pad("first step", 16) + pad("met", 5) + pad("goal", 16) + "met";
  std::printf("%s\n%s\n", header.c_str(), std::string(header.size(), '-').c_str());

  for (const Row& r : rows()) {
    std::string line = pad(r.label, 17) + pad(r.unit, 8);
    line += pad(cell(r.key, "limit", limit_of(r, 0), limit_of(r, 1)), kW, true);
    for (std::size_t i = 1; i < cols.size(); ++i) {
      const std::string& p = cols[i];
      line += pad(cell(r.key, p, get(0, r.key, p), get(1, r.key, p)), kW, true);
    }
    // The best compiled device at 2 threads; ratios as speed-ups (higher = better).
    Ratios ratios;
    std::string best_dev;
    for (const auto& d : devs) {
      auto v = get(1, r.key, d);
      if (v && (!ratios.best || (r.higher ? *v > *ratios.best : *v < *ratios.best)))
        ratios.best = v, best_dev = d;
    }
    auto speed = [&](std::optional<double> ref) -> std::optional<double> {
      if (!ratios.best || !ref || *ratios.best <= 0 || *ref <= 0) return std::nullopt;
      return r.higher ? *ratios.best / *ref : *ref / *ratios.best;
    };
    // A reference is its better figure of 1 and 2 threads: on a loaded machine Eigen's threaded
    // products (busy-waiting workers) can lose to its own 1-thread run, and a limit measured lower
    // at 2 threads than at 1 is noise. So the ratios never flatter metagrad.
    auto better = [&](std::optional<double> a, std::optional<double> b) -> std::optional<double> {
      if (!a || !b) return a ? a : b;
      return r.higher ? std::max(*a, *b) : std::min(*a, *b);
    };
    ratios.eigen = speed(better(get(0, r.key, "Eigen"), get(1, r.key, "Eigen")));
    ratios.limit = speed(better(limit_of(r, 0), limit_of(r, 1)));
    auto yn = [](std::optional<bool> b) { return std::string(!b ? "n/a" : *b ? "yes" : "NO"); };
    line += "  " + pad(ratios.best ? best_dev + " " + num(ratios.best) : "-", 15) +
            pad(num(ratios.eigen), 7, true) + pad(num(ratios.limit), 7, true) + "  " + pad(r.first.text, 16) +
            pad(yn(r.first.met(ratios)), 5) + pad(r.goal.text, 16) + yn(r.goal.met(ratios));
    std::printf("%s\n", line.c_str());
  }
  std::printf(
      "\nlimit: measured in the same row, interleaved with its paths (std::thread, hand-written AVX2; the "
      "FMA peak in AVX-512 where the GEMM uses it):\n"
      "W1 2^24 STREAM triad over 4x L3 arrays; W1 2^20 a*b+c by hand in cache; W3 read bandwidth (sum) of "
      "its size;\n"
      "W4 FMA peak; W5 the step's %.0f MFLOP at FMA peak, in ms. xEigen, xLimit: the best compiled\n"
      "device at 2 threads as a speed-up over Eigen and as a fraction of the limit, each taken at its\n"
      "better of 1 and 2 threads (times: reference time / its time). CPU(interp): the interpreter;\n"
      "W3 on 1024x1024, not 4096. Targets (2 threads) from docs/benchmarks.md; \"static\" ones are for the\n"
      "static path, not measured here. W2: sigmoid() is metagrad's (one exp, overflow harmless) against\n"
      "Eigen's logistic(); W2 1/(1+exp(-a)) is the formula on both. W6 replay: the step a + b called\n"
      "through TinyJit after its capture, us per captured kernel; W6 replay 16: a step of 16 such adds\n"
      "(16 kernels), us per kernel.\n\n",
      kMlpFlops * 1e-6);

  // Compile times (1-thread child, fresh kernel cache): the first realize minus a warm one.
  std::string ch = pad("workload", 17);
  for (const auto& d : devs) ch += pad(d + " kern/op", 16, true) + pad("cold-warm ms", 14, true);
  ch += pad("CLANG compiles", 16, true) + pad("ms/compile", 12, true);
  std::printf("Cold start, 1-thread child with a fresh kernel cache: the first realize minus a warm one\n");
  std::printf("%s\n%s\n", ch.c_str(), std::string(ch.size(), '-').c_str());
  for (const Row& r : rows()) {
    if (r.key == "W6r" || r.key == "W6r16") continue;
    std::string line = pad(r.label, 17);
    std::optional<ChildResult::Compile> clang;
    for (const auto& d : devs) {
      auto it = c[0].compile.find(r.key + " " + d);
      if (it == c[0].compile.end()) {
        line += pad("-", 16, true) + pad("-", 14, true);
        continue;
      }
      if (d == "CLANG") clang = it->second;
      line += pad(std::to_string(it->second.kernels), 16, true) +
              pad(num(it->second.cold_minus_warm * 1e3), 14, true);
    }
    if (clang && clang->compiles > 0)
      line += pad(std::to_string(clang->compiles), 16, true) +
              pad(num(clang->cold_minus_warm * 1e3 / clang->compiles), 12, true);
    else
      line += pad(clang ? "0" : "-", 16, true) + pad("-", 12, true);
    std::printf("%s\n", line.c_str());
  }
  std::printf(
      "kern/op: kernels one warm realize runs. CLANG compiles: kernels compiled by `cc` in that first "
      "realize\n"
      "(LLVM compiles in process; OPENCL may hit PoCL's own kernel cache).\n");

  bool any = false;
  for (int t = 0; t < 2; ++t) {
    for (const auto& [key, msg] : c[t].error) {
      if (!any) std::printf("\nFailures:\n");
      any = true;
      std::printf("  [%dt] %s: %s\n", t + 1, key.c_str(), msg.c_str());
    }
    for (const auto& n : c[t].notes) std::printf("  [%dt] note:%s\n", t + 1, n.c_str());
    if (c[t].rc != 0)
      std::printf("  [%dt] the child exited with status %d: its figures are partial\n", t + 1, c[t].rc);
  }
  std::printf("\nTotal run time: %.0f s; load average %s at the start, %s at the end (%u hardware threads)\n",
              seconds_since(t_start), load_start.c_str(), load_average().c_str(),
              std::thread::hardware_concurrency());
  return c[0].rc == 0 && c[1].rc == 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
    if (metagrad::getenv_int("BENCH_CHILD", 0) == 1) return Child().run();
    return parent_main();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_workloads: %s\n", e.what());
    return 1;
  }
}
