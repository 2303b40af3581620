// The low-precision products (cpu/gemm_lowp.hpp, cpu/quant.hpp) at n = 1024 against the f32 GEMM,
// and the quantised GEMV (m = 1, k = n = 4096, decoding's shape) against the machine's read
// bandwidth measured in the same run (a sum over 256 MB), with A f32 (gemv_q) and int8 (gemv_q_int8).
// Targets: bf16 >= 1.8x the f32 GFLOP/s, int8 >= 3x; the GEMV's bytes of weights read per second near the
// read bandwidth.
//
// Run: THREADS=1 nice build/bench/bench_gemm_lowp (one thread: the figures docs/gemm.md gives). A
// summary follows Google Benchmark's table: each row's best and median iteration in CPU time
// (Arg 1: the best path, Arg 0: the AVX2 fallback).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <metagrad/cpu/gemm_lowp.hpp>
#include <metagrad/cpu/gemv_int8.hpp>
#include <metagrad/cpu/quant.hpp>
#include <metagrad/device/gemm.hpp>

namespace cpu = metagrad::cpu;
using cpu::LowpPath;
using cpu::QuantType;

namespace {

constexpr std::int64_t kN = 1024, kGemv = 4096;
std::map<std::string, std::vector<double>> seconds;  // every iteration's CPU time, by row

// The process's CPU time: on a shared, loaded machine wall time counts other programs' turns (one
// thread: the same as its own time).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
std::map<std::string, double> work;  // flops, ops or bytes an iteration

template <class F>
void timed(benchmark::State& state, const std::string& row, double units, F&& f) {
  work[row] = units;
  for (auto _ : state) {
    const double t0 = cpu_seconds();
    f();
    seconds[row].push_back(cpu_seconds() - t0);
  }
  state.counters["G/s"] = benchmark::Counter(units, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::OneK::kIs1000);
  state.counters["G/s"].value /= 1e9;
}

std::vector<float> random_floats(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

void BM_f32(benchmark::State& state) {
  const auto a = random_floats(kN * kN, 1), b = random_floats(kN * kN, 2);
  std::vector<float> c(a.size());
  metagrad::gemm::Problem p{kN, kN, kN, a.data(), kN, 1, b.data(), kN, 1, c.data(), kN};
  timed(state, "f32 GEMM GFLOP/s", 2.0 * kN * kN * kN, [&] { metagrad::gemm::sgemm(p); });
}

void BM_bf16(benchmark::State& state) {
  const auto path = state.range(0) ? cpu::best_bf16_path() : LowpPath::avx2;
  const auto af = random_floats(kN * kN, 1), bf = random_floats(kN * kN, 2);
  std::vector<std::uint16_t> a(af.size()), b(bf.size());
  cpu::f32_to_bf16(af.data(), a.data(), kN * kN);
  cpu::f32_to_bf16(bf.data(), b.data(), kN * kN);
  std::vector<float> c(af.size());
  const std::string row = path == LowpPath::native ? "bf16 GEMM GFLOP/s (vdpbf16ps)"
                                                   : "bf16 GEMM GFLOP/s (avx2, widened as packed)";
  timed(state, row, 2.0 * kN * kN * kN,
        [&] { cpu::gemm_bf16(kN, kN, kN, a.data(), kN, b.data(), kN, c.data(), kN, false, path); });
}

void BM_s8(benchmark::State& state) {
  const auto path = state.range(0) ? cpu::best_s8_path() : LowpPath::avx2;
  std::mt19937 rng(3);
  std::vector<std::int8_t> a(static_cast<std::size_t>(kN * kN)), b(a.size());
  for (auto& x : a) x = static_cast<std::int8_t>(rng());
  for (auto& x : b) x = static_cast<std::int8_t>(rng());
  std::vector<std::int32_t> c(a.size());
  const std::string row =
      path == LowpPath::native ? "int8 GEMM GOP/s (vpdpbusd)" : "int8 GEMM GOP/s (avx2 vpmaddwd)";
  timed(state, row, 2.0 * kN * kN * kN,
        [&] { cpu::gemm_s8(kN, kN, kN, a.data(), kN, b.data(), kN, c.data(), kN, false, path); });
}

// Arg 0: the type; Arg 1: 1 for gemv_q_int8 (A quantised to int8 too).
void BM_gemv(benchmark::State& state) {
  const auto t = static_cast<QuantType>(state.range(0));
  const bool int8 = state.range(1);
  const auto wf = random_floats(kGemv * kGemv, 4), a = random_floats(kGemv, 5);
  const std::size_t bytes = static_cast<std::size_t>(kGemv) * cpu::quant_row_bytes(t, kGemv);
  std::vector<unsigned char> w(bytes);
  cpu::quantize(t, kGemv, kGemv, wf.data(), kGemv, w.data());
  std::vector<float> c(kGemv);
  const std::string row = std::string(t == QuantType::q8_0 ? "Q8_0" : "Q4_0") + " GEMV GB/s of weights" +
                          (int8 ? " (int8 A)" : "");
  timed(state, row, static_cast<double>(bytes), [&] {
    (int8 ? cpu::gemv_q_int8 : cpu::gemv_q)(1, kGemv, kGemv, a.data(), kGemv, t, w.data(), c.data(), kGemv,
                                            false, LowpPath::best);
  });
}

// C = A W^T at n = 1024 with W in Q8_0 (dequantised as it is packed): against the f32 GEMM.
void BM_gemm_q8(benchmark::State& state) {
  const auto wf = random_floats(kN * kN, 6), a = random_floats(kN * kN, 7);
  std::vector<unsigned char> w(static_cast<std::size_t>(kN) * cpu::quant_row_bytes(QuantType::q8_0, kN));
  cpu::quantize(QuantType::q8_0, kN, kN, wf.data(), kN, w.data());
  std::vector<float> c(a.size());
  timed(state, "Q8_0 GEMM GFLOP/s (m = 1024)", 2.0 * kN * kN * kN,
        [&] { cpu::gemm_q(kN, kN, kN, a.data(), kN, QuantType::q8_0, w.data(), c.data(), kN); });
}

void BM_read(benchmark::State& state) {
  std::vector<float> v(std::size_t{64} << 20, 1.0f);  // 256 MB
  timed(state, "read bandwidth GB/s (sum of 256 MB)", 4.0 * static_cast<double>(v.size()), [&] {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (std::size_t i = 0; i < v.size(); i += 8)
      s0 += v[i], s1 += v[i + 1], s2 += v[i + 2], s3 += v[i + 3], s4 += v[i + 4], s5 += v[i + 5],
          s6 += v[i + 6], s7 += v[i + 7];
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7);
  });
}

}  // namespace

BENCHMARK(BM_f32)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_bf16)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_s8)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_gemm_q8)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_read)->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_gemv)
    ->Args({static_cast<int>(QuantType::q8_0), 0})
    ->Args({static_cast<int>(QuantType::q4_0), 0})
    ->Args({static_cast<int>(QuantType::q8_0), 1})
    ->Args({static_cast<int>(QuantType::q4_0), 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::map<std::string, std::pair<double, double>> rate;  // best, median
  std::printf("\n%-42s %10s %10s\n", "summary", "best", "median");
  for (auto& [row, t] : seconds) {
    std::sort(t.begin(), t.end());
    rate[row] = {work[row] / t.front() / 1e9, work[row] / t[t.size() / 2] / 1e9};
    std::printf("%-42s %10.1f %10.1f\n", row.c_str(), rate[row].first, rate[row].second);
  }
  auto ratio = [&](const char* what, const std::string& num, const std::string& den, double target,
                   const char* label = "target") {
    if (!rate.count(num) || !rate.count(den)) return;
    const double r = rate[num].first / rate[den].first, rm = rate[num].second / rate[den].second;
    std::printf("%-42s %9.2fx %9.2fx  (%s %.1fx: %s)\n", what, r, rm, label, target,
                r >= target ? "met" : "NOT met");
  };
  const bool native_bf16 = cpu::best_bf16_path() == LowpPath::native,
             native_s8 = cpu::best_s8_path() == LowpPath::native;
  ratio("bf16 / f32",
        native_bf16 ? "bf16 GEMM GFLOP/s (vdpbf16ps)" : "bf16 GEMM GFLOP/s (avx2, widened as packed)",
        "f32 GEMM GFLOP/s", 1.8);
  ratio("int8 / f32", native_s8 ? "int8 GEMM GOP/s (vpdpbusd)" : "int8 GEMM GOP/s (avx2 vpmaddwd)",
        "f32 GEMM GFLOP/s", 3.0);
  ratio("Q8_0 GEMV / read bandwidth", "Q8_0 GEMV GB/s of weights", "read bandwidth GB/s (sum of 256 MB)", 0.8,
        "aim");
  ratio("Q4_0 GEMV / read bandwidth", "Q4_0 GEMV GB/s of weights", "read bandwidth GB/s (sum of 256 MB)", 0.8,
        "aim");
  ratio("Q8_0 int8-A GEMV / read bandwidth", "Q8_0 GEMV GB/s of weights (int8 A)",
        "read bandwidth GB/s (sum of 256 MB)", 0.8, "aim");
  ratio("Q4_0 int8-A GEMV / read bandwidth", "Q4_0 GEMV GB/s of weights (int8 A)",
        "read bandwidth GB/s (sum of 256 MB)", 0.8, "aim");
}
