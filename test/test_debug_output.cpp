// What a running program prints under DEBUG, checked against what ran: DEBUG=2's numbered kernel
// lines, compile lines and a realize's totals against GlobalCounters, DEBUG=1's "compiling N kernels
// (M from cache)" against the kernels the device built and the disk cache (in child processes on a
// fresh cache); and the memory counters against the buffers held and the pool.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "child_process.hpp"
#include "device_scope.hpp"
#include "metagrad/device/buffer_pool.hpp"
#include "metagrad/metagrad.hpp"
#include "stderr_capture.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

Tensor input(std::mt19937& gen, const Dims& shape) {
  auto v = test::random_floats(static_cast<std::size_t>(prod(shape)), static_cast<unsigned>(gen()));
  return Tensor(v, shape, {.dtype = dtypes::float32}).realize();
}

// A random graph of elementwise work, reductions and a matmul over (rows, cols) inputs: a few
// kernels, whose number the test does not need to know.
Tensor random_graph(std::mt19937& gen, i64 rows, i64 cols) {
  Tensor a = input(gen, {rows, cols}), b = input(gen, {rows, cols});
  Tensor t = a;
  int steps = 1 + static_cast<int>(gen() % 5);
  for (int s = 0; s < steps; ++s) {
    switch (gen() % 6) {
      case 0:
        t = t + b;
        break;
      case 1:
        t = (t * b).relu();
        break;
      case 2:
        t = t.exp() - t.sum(1, true);
        break;  // a reduce read by elementwise work
      case 3:
        t = t.softmax(-1);
        break;
      case 4:
        t = t.matmul(b.transpose()).matmul(b) * 0.1f;
        break;
      default:
        t = t.max(0, true) + a;
        break;
    }
  }
  return t.sum(1);
}

struct KernelLine {
  i64 number;
  std::size_t args;
  double us;
  std::string mem;
};

const std::regex kKernelLine(
    R"(^\*\*\* +(\d+) (\S+(?: \S+)?) +arg +(\d+) +([\d.]+) us +([\d.]+) GFLOP/s +([\d.]+) GB/s  mem (.+)$)");
const std::regex kTotals(
    R"(^\*\*\* realize: (\d+) kernels, ([\d.]+) ms in kernels \(([\d.]+) GFLOP/s, ([\d.]+) GB/s\), ([\d.]+) ms wall(?: \(([\d.]+) compiling, ([\d.]+) scheduling and launching\))?, mem (.+) in use, (.+) peak$)");
const std::regex kCompiling(R"(^compiling (\d+) kernels? \((\d+) from cache\)$)");
// A program built from source (not loaded from the disk cache), DEBUG>=2.
const std::regex kCompiled(R"(^(CLANG|LLVM|OPENCL|CUDA): compiled (\S+) in ([\d.]+) ms(?: \(.*\))?$)");

}  // namespace

TEST_CASE("DEBUG=2 numbers every kernel and ends a realize with totals that match the counters", "[debug]") {
  for (const char* device : {"CLANG", "CPU"}) {
    test::DeviceScope dev(device);
    if (!dev.ok) continue;
    std::mt19937 gen(7);
    for (int trial = 0; trial < 12; ++trial) {
      i64 rows = 2 + static_cast<i64>(gen() % 9), cols = 3 + static_cast<i64>(gen() % 17);
      INFO(device << " trial " << trial << ": " << rows << "x" << cols);
      Tensor t = random_graph(gen, rows, cols);
      i64 before = GlobalCounters::kernel_count;
      double time_before = GlobalCounters::time_sum;
      test::StderrCapture capture("2");
      t.realize();
      auto lines = capture.lines();
      i64 ran = GlobalCounters::kernel_count - before;
      REQUIRE(ran >= 1);
      std::vector<KernelLine> kernels;
      std::vector<std::string> names, compiled;
      std::smatch m;
      int totals = 0;
      for (const std::string& line : lines) {
        INFO(line);
        if (std::regex_match(line, m, kKernelLine)) {
          REQUIRE(totals == 0);  // the totals come last
          kernels.push_back({std::stoll(m[1]), std::stoul(m[3]), std::stod(m[4]), m[7]});
          names.push_back(m[2]);
        } else if (std::regex_match(line, m, kCompiled)) {
          REQUIRE(kernels.empty());  // every kernel is built before any runs
          REQUIRE(m[1] == device);
          REQUIRE(std::stod(m[3]) > 0);
          compiled.push_back(m[2]);
        } else if (std::regex_match(line, m, kTotals)) {
          ++totals;
          REQUIRE(std::stoll(m[1]) == ran);
          double kernel_ms = (GlobalCounters::time_sum - time_before) * 1e3;
          REQUIRE(std::stod(m[2]) == Approx(kernel_ms).margin(0.0006));
          double summed = 0;
          for (const auto& k : kernels) summed += k.us;
          REQUIRE(std::stod(m[2]) == Approx(summed / 1e3).margin(0.001 + 0.00001 * static_cast<double>(ran)));
          REQUIRE(std::stod(m[5]) >= std::stod(m[2]) - 0.001);  // wall time includes the kernels
          if (m[6].matched) {  // a realize that compiled: its wall time split, the parts adding up
            REQUIRE(std::stod(m[6]) > 0);
            REQUIRE(std::stod(m[6]) + std::stod(m[7]) + std::stod(m[2]) ==
                    Approx(std::stod(m[5])).margin(0.003));
          }
          REQUIRE(m[8] == human_bytes(GlobalCounters::mem_used));  // nothing allocated since
          REQUIRE(m[9] == human_bytes(GlobalCounters::mem_peak));
        } else {
          REQUIRE(std::regex_match(line, kCompiling));  // DEBUG>=1's notice, nothing else
        }
      }
      REQUIRE(static_cast<i64>(kernels.size()) == ran);  // one line per launch
      for (std::size_t k = 0; k < kernels.size(); ++k) {
        REQUIRE(kernels[k].number == before + 1 + static_cast<i64>(k));  // numbered in launch order
        REQUIRE(kernels[k].args >= 1);
      }
      REQUIRE(totals == (ran >= 2 ? 1 : 0));  // one kernel's own line says it all
      // A kernel compiled is one that ran, or a part of a GEMM that ran (its epilogue or a pack, which
      // a realize builds with its kernels).
      const bool gemm_ran = std::any_of(names.begin(), names.end(),
                                        [](const std::string& n) { return n.rfind("gemm_", 0) == 0; });
      for (const auto& c : compiled)
        REQUIRE((gemm_ran || std::find(names.begin(), names.end(), c) != names.end()));
    }
  }
}

TEST_CASE("DEBUG=1 says once how many kernels a cold realize compiles, before running them", "[debug]") {
  test::DeviceScope scope("CLANG");
  if (!scope.ok) return;
  auto& dev = dynamic_cast<Compiled&>(Device::get("CLANG"));
  std::mt19937 gen(11);
  int cold = 0;
  for (int trial = 0; trial < 10; ++trial) {
    // Shapes no other test uses, so that most graphs need new kernels.
    i64 rows = 37 + static_cast<i64>(gen() % 50), cols = 41 + static_cast<i64>(gen() % 60);
    unsigned seed = static_cast<unsigned>(gen());
    INFO("trial " << trial << ": " << rows << "x" << cols);
    for (int run = 0; run < 2; ++run) {  // the same graph twice: the second run is warm
      std::mt19937 graph_gen(seed);
      Tensor t = random_graph(graph_gen, rows, cols);
      std::size_t built = dev.kernels();
      test::StderrCapture capture("1");
      t.realize();
      auto lines = capture.lines();
      std::size_t compiled = dev.kernels() - built;
      if (run == 1) REQUIRE(compiled == 0);
      if (compiled == 0) {
        REQUIRE(lines.empty());
        continue;
      }
      ++cold;
      REQUIRE(lines.size() == 1);  // one notice for the whole realize, no per-kernel lines at 1
      std::smatch m;
      REQUIRE(std::regex_match(lines[0], m, kCompiling));
      REQUIRE(std::stoul(m[1]) == compiled);
      REQUIRE(std::stoul(m[2]) <= compiled);
    }
  }
  REQUIRE(cold >= 5);
  // DEBUG=0 prints nothing at all.
  std::mt19937 graph_gen(99);
  Tensor t = random_graph(graph_gen, 53, 59);
  test::StderrCapture quiet("0");
  t.realize();
  REQUIRE(quiet.lines().empty());
}

namespace {
constexpr const char* kCacheChild = "debug cache child process";
}

TEST_CASE("debug cache child process", "[.][debug]") {
  const char* device = std::getenv("METAGRAD_TEST_CHILD_DEVICE");
  if (!device) return;  // only as a child of the test below
  Device::DEFAULT = device;
  std::mt19937 gen(31);
  // Elementwise work, reductions and a softmax; products, one with an epilogue (the GEMM's kernel
  // is its epilogue) and one without (nothing to compile: from the cache on every run).
  for (int r = 0; r < 3; ++r) {
    Tensor a = input(gen, {7 + r, 13}), b = input(gen, {7 + r, 13});
    ((a * b + 1).relu().sum(1) + a.max(1)).realize();
    (a.softmax(-1) * b - a.exp()).realize();
    Tensor x = input(gen, {40 + r, 48}), w = input(gen, {48, 36});
    ((x.matmul(w) + 1).relu()).realize();
    x.matmul(w).realize();
  }
}

TEST_CASE("DEBUG=1 counts the kernels found in the disk cache apart; DEBUG=2 times every compile",
          "[debug]") {
  for (const char* device : {"CLANG", "LLVM"}) {
    if (!test::available(device)) continue;
    test::TempDir dir("metagrad_debug_cache");
    REQUIRE(!dir.path.empty());
    for (int run = 0; run < 2; ++run) {  // a fresh cache, then the same kernels from it
      INFO(device << " run " << run);
      std::vector<std::string> lines;
      {
        test::StderrCapture capture("2");  // the child's stderr, with DEBUG=2
        pid_t pid = test::spawn_child(kCacheChild,
                                      {"METAGRAD_CACHE=" + (dir.path / "cache").string(),
                                       std::string("METAGRAD_TEST_CHILD_DEVICE=") + device, "THREADS=1"});
        REQUIRE(pid > 0);
        REQUIRE(test::wait_for(pid) == 0);
        lines = capture.lines();
      }
      std::size_t to_build = 0, from_cache = 0, compiled = 0, notices = 0;
      std::smatch m;
      for (const std::string& line : lines) {
        INFO(line);
        if (std::regex_match(line, m, kCompiling)) {
          ++notices, to_build += std::stoul(m[1]), from_cache += std::stoul(m[2]);
          REQUIRE(std::stoul(m[2]) <= std::stoul(m[1]));
        } else if (std::regex_match(line, m, kCompiled)) {
          REQUIRE(m[1] == device);
          ++compiled;
        }
      }
      REQUIRE(notices >= 2);
      REQUIRE(to_build >= 6);
      REQUIRE(compiled == to_build - from_cache);  // each kernel compiled or loaded, and said so
      if (run == 0) REQUIRE(compiled >= 4);        // (two kernels may share one source)
      if (run == 1) REQUIRE(from_cache == to_build);
    }
  }
}

TEST_CASE("DEBUG=4 prints the renderer's prelude once and each kernel's own source", "[debug]") {
  test::DeviceScope scope("CLANG");
  if (!scope.ok) return;
  std::mt19937 gen(23);
  test::StderrCapture capture("4");
  for (int trial = 0; trial < 3; ++trial) {  // shapes no other test uses: kernels built here
    i64 rows = 101 + static_cast<i64>(gen() % 50), cols = 151 + static_cast<i64>(gen() % 60);
    Tensor a = input(gen, {rows, cols});
    ((a * 3 + 1).relu().sum(1) + 2).realize();
  }
  int preludes = 0, functions = 0;
  for (const std::string& line : capture.lines()) {
    preludes += line.find("#define mg_max") != std::string::npos;
    functions += line.rfind("void ", 0) == 0;
  }
  CHECK(preludes <= 1);  // once in the process (perhaps already, by an earlier test)
  CHECK(functions >= 3);
}

TEST_CASE("GlobalCounters::mem_used is the bytes of the buffers in use; pooled buffers are free", "[debug]") {
  test::DeviceScope scope("CLANG");
  if (!scope.ok) return;
  auto& clang = dynamic_cast<Compiled&>(Device::get("CLANG"));
  Backend& cpu = Device::get("CPU");
  std::mt19937 gen(3);
  std::vector<std::shared_ptr<RawBuffer>> held;
  i64 base = GlobalCounters::mem_used, held_bytes = 0, peak = base;
  GlobalCounters::reset();
  REQUIRE(GlobalCounters::mem_peak == base);  // reset() starts the peak from what is in use
  const DType types[] = {dtypes::float32, dtypes::int32, dtypes::uint8, dtypes::float64};
  for (int step = 0; step < 400; ++step) {
    INFO("step " << step);
    if (held.empty() || gen() % 3 != 0) {
      std::size_t n = 1 + gen() % 3000;
      DType dt = types[gen() % 4];
      bool pooled = gen() % 2;
      auto before = clang.pool().stats();
      held.push_back(pooled ? clang.alloc(n, dt) : cpu.alloc(n, dt));
      held_bytes += static_cast<i64>(held.back()->nbytes());
      if (pooled) {  // a reused buffer leaves the pool's free bytes, into use
        auto after = clang.pool().stats();
        REQUIRE(static_cast<i64>(before.pooled_bytes - after.pooled_bytes) ==
                (after.reused > before.reused ? static_cast<i64>(held.back()->nbytes()) : 0));
      }
    } else {
      std::size_t i = gen() % held.size();
      auto pool_before = clang.pool().stats();
      i64 bytes = static_cast<i64>(held[i]->nbytes()), used_before = GlobalCounters::mem_used;
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      held_bytes -= bytes;
      auto pool_after = clang.pool().stats();
      // Freed into the pool or to the system: out of use either way.
      REQUIRE(GlobalCounters::mem_used == used_before - bytes);
      REQUIRE(pool_after.pooled_bytes - pool_before.pooled_bytes <= static_cast<std::size_t>(bytes));
    }
    peak = std::max(peak, base + held_bytes);
    REQUIRE(GlobalCounters::mem_used == base + held_bytes);
    REQUIRE(GlobalCounters::mem_peak == peak);
  }
  i64 used = GlobalCounters::mem_used;
  clang.pool().clear();  // freeing free memory changes neither figure
  REQUIRE(GlobalCounters::mem_used == used);
  REQUIRE(GlobalCounters::mem_peak == peak);
  held.clear();
  REQUIRE(GlobalCounters::mem_used == base);
  // A moved buffer is counted once.
  {
    RawMallocBuffer a(1000, dtypes::float32);
    REQUIRE(GlobalCounters::mem_used == base + 4000);
    RawMallocBuffer b(std::move(a));
    REQUIRE(GlobalCounters::mem_used == base + 4000);
  }
  REQUIRE(GlobalCounters::mem_used == base);
}
