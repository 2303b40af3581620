// The same .onnx files through ONNX Runtime, metagrad::onnx (TinyJit on LLVM; DEVICE overrides) and
// metagrad-aot's C library of the model (built by the system C compiler, dlopened), in turns, in one run, at
// 1 and 2 threads: ResNet-18 at batch 1 and 8, MobileNet v2 at batch 1, the 2-layer transformer encoder at
// batch 1 and 16 (64 positions), the GPT of examples/gpt on one token and on a 64-token prompt. The models
// come from tools/export_onnx_models.py:
//
//   /usr/bin/python3 tools/export_onnx_models.py /tmp/onnx_models
//   nice build/bench/bench_onnx /tmp/onnx_models [--reps=N] [--rounds=N] [--threads=1,2] [--only=gpt]
//                               [--no-aot]
//
// ONNX Runtime runs in a child process, `node bench/ort_bench.js` with onnxruntime-node found through
// env ORT_NODE or the CMake cache variable METAGRAD_ORT_NODE (its folder); without node or the module
// its columns say so and metagrad's rows still print. Each round times ONNX Runtime's runs, then
// metagrad's, on the same shape; a row reports the best round's median. First inference is metagrad's
// load + first call (codegen and compilation, kernel cache empty at the start of the run) beside ONNX
// Runtime's session creation + first run; the AOT's first is metagrad-aot + the C compiler + the first
// call. An AOT run must allocate nothing: malloc is counted around its calls (a row says if it did).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "count_mallocs.hpp"  // test/aot: malloc counted while `counting`
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/jit.hpp"
#include "metagrad/metagrad.hpp"
#include "metagrad/onnx.hpp"

using namespace metagrad;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  std::string name, folder;  // folder under the models' directory: test_<model>
  Dims shape;
  bool tokens;       // int64 tokens below 96 (the GPT) rather than float32 values
  double items;      // what one run processes, for the throughput: images, sequences or tokens
  const char* unit;  // ... and its name
};

const std::vector<Row>& rows() {
  static const std::vector<Row> r = {
      {"resnet18/batch1", "test_resnet18", {1, 3, 224, 224}, false, 1, "img"},
      {"resnet18/batch8", "test_resnet18", {8, 3, 224, 224}, false, 8, "img"},
      {"mobilenet_v2/batch1", "test_mobilenet_v2", {1, 3, 224, 224}, false, 1, "img"},
      {"encoder/batch1", "test_transformer_encoder", {64, 1, 64}, false, 1, "seq"},
      {"encoder/batch16", "test_transformer_encoder", {64, 16, 64}, false, 16, "seq"},
      {"gpt/token", "test_gpt", {1, 1}, true, 1, "tok"},
      {"gpt/prompt64", "test_gpt", {1, 64}, true, 64, "tok"},
  };
  return r;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// This process's CPU time (all its threads), ms: what a run cost on a machine that others load too.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One side's timings of a row: first inference (load + first run) and each timed run, in ms.
struct Timing {
  double first = 0;
  std::vector<double> runs;
  std::vector<double> cpu;  // each timed run's process CPU time, ms (ONNX Runtime's: its child process's)
  std::string error;        // why there is none
};

std::string shape_text(const Dims& d) {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

std::string ort_module() {
  if (const char* e = ::getenv("ORT_NODE"); e && *e) return e;
  return METAGRAD_ORT_NODE;
}

// Why ONNX Runtime cannot run here, or "" when it can.
std::string ort_missing() {
  const std::string mod = ort_module();
  if (mod.empty())
    return "ONNX Runtime skipped: set ORT_NODE (or -DMETAGRAD_ORT_NODE) to onnxruntime-node's folder";
  if (!fs::exists(fs::path(mod) / "package.json"))
    return "ONNX Runtime skipped: no onnxruntime-node at " + mod;
  if (std::system("node --version > /dev/null 2>&1") != 0) return "ONNX Runtime skipped: node is not on PATH";
  return "";
}

// ONNX Runtime through bench/ort_bench.js in a child process; its lines are documented there.
Timing ort_time(const std::string& model, const Row& row, int threads, int reps) {
  Timing t;
  std::string cmd = "ORT_NODE='" + ort_module() + "' node '" METAGRAD_ORT_BENCH_JS "' '" + model + "' " +
                    shape_text(row.shape) + (row.tokens ? " int64 " : " float32 ") + std::to_string(threads) +
                    " " + std::to_string(reps) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {0, {}, {}, "popen failed"};
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  if (pclose(p) != 0) return {0, {}, {}, out.substr(0, out.find('\n'))};
  std::istringstream lines(out);
  std::string line;
  double session = 0, first = 0;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string key;
    f >> key;
    if (key == "session_ms") f >> session;
    if (key == "first_ms") f >> first;
    for (double v; key == "run_ms" && f >> v;) t.runs.push_back(v);
    for (double v; key == "cpu_ms" && f >> v;) t.cpu.push_back(v);
  }
  t.first = session + first;
  if (t.runs.empty()) t.error = "no timings in: " + out.substr(0, out.find('\n'));
  return t;
}

Tensor input_of(const Row& row) {
  if (!row.tokens) return (Tensor::rand(row.shape) * 2 - 1).realize();
  return (Tensor::rand(row.shape) * 96).floor().cast(dtypes::int64).realize();
}

// metagrad: load, the first call realized (kernels generated and compiled), then TinyJit's capture and
// its replays; each timed run realizes the outputs.
Timing metagrad_time(const std::string& model, const Row& row, int reps) {
  Timing t;
  try {
    Tensor x = input_of(row);
    const auto t0 = Clock::now();
    onnx::Model m = onnx::load(model);
    auto step = [&](Tensor in) {
      std::vector<Tensor> outs = m({in});
      for (Tensor& o : outs) o.realize();
      return outs;
    };
    TinyJit<std::function<std::vector<Tensor>(Tensor)>> jit(step);
    jit(x);
    t.first = ms_since(t0);
    for (int i = 0; i < 2; ++i) jit(x);  // capture, one replay
    for (int i = 0; i < reps; ++i) {
      const auto r0 = Clock::now();
      const double c0 = cpu_ms();
      jit(x);
      t.cpu.push_back(cpu_ms() - c0);
      t.runs.push_back(ms_since(r0));
    }
  } catch (const std::exception& e) { t.error = e.what(); }
  return t;
}

struct Args {
  std::string models;
  int reps = 10, rounds = 2;
  std::vector<int> threads = {1, 2};
  std::string only;
  bool aot = true;  // --no-aot: metagrad's and ONNX Runtime's columns only (no C compiler runs)
};

// A model compiled by metagrad-aot for one row's shape: NAME_run and NAME_set_threads from the shared
// object the C compiler built, and host arrays for its input and outputs.
struct AotModel {
  void* so = nullptr;
  int (*run1)(void*, void*) = nullptr;  // one input, one output (every model of the bench)
  void (*threads)(int) = nullptr;
  std::vector<std::byte> in, out;
  double first = 0;  // metagrad-aot, the C compiler and the first call, ms
  std::string error;
  ~AotModel() {
    if (so) ::dlclose(so);
  }
};

std::string run_command(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return status = -1, "popen failed";
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  status = pclose(p);
  return out;
}

// The model compiled into `dir` (kept for the run), built as cmake/MetagradAOT.cmake builds it.
std::unique_ptr<AotModel> aot_build(const std::string& model, const Row& row, const fs::path& dir) {
  auto a = std::make_unique<AotModel>();
  auto fail = [&](std::string why) {
    a->error = std::move(why);
    return std::move(a);
  };
  const auto t0 = Clock::now();
  int status = 0;
  std::string said = run_command("DEVICE=CLANG '" METAGRAD_AOT_TOOL "' '" + model + "' -o '" + dir.string() +
                                     "' -n model --input input=" + shape_text(row.shape),
                                 status);
  if (status != 0) return fail("metagrad-aot: " + said.substr(0, said.find('\n')));
  fs::path so = dir / "libmodel.so";
  said =
      run_command("'" METAGRAD_AOT_CC "' -O3 -march=native -fno-math-errno -fopenmp-simd -shared -fPIC -o '" +
                      so.string() + "' '" + (dir / "model.c").string() + "' -lm -pthread",
                  status);
  if (status != 0) return fail("cc: " + said.substr(0, said.find('\n')));
  a->so = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!a->so) return fail(::dlerror());
  a->run1 = reinterpret_cast<int (*)(void*, void*)>(::dlsym(a->so, "model_run"));
  a->threads = reinterpret_cast<void (*)(int)>(::dlsym(a->so, "model_set_threads"));
  // the arrays' sizes from model.h: #define model_run_X_SIZE N, the input's first
  std::ifstream h(dir / "model.h");
  std::vector<std::int64_t> sizes;
  for (std::string line; std::getline(h, line);)
    if (line.rfind("#define model_run_", 0) == 0 && line.find("_SIZE ") != std::string::npos)
      sizes.push_back(std::stoll(line.substr(line.rfind(' ') + 1)));
  if (!a->run1 || !a->threads || sizes.size() != 2) return fail("not one input and one output");
  Tensor x = input_of(row);
  a->in.resize(static_cast<std::size_t>(x.numel() * x.dtype().itemsize));
  if (row.tokens)
    std::memcpy(a->in.data(), x.to_vector<std::int64_t>().data(), a->in.size());
  else
    std::memcpy(a->in.data(), x.to_vector<float>().data(), a->in.size());
  a->out.resize(static_cast<std::size_t>(sizes[1]) * 4);
  if (a->run1(a->in.data(), a->out.data()) != 0) return fail("model_run returned an error");
  a->first = ms_since(t0);
  return a;
}

// Timed runs of the compiled model (its GEMM on `threads`), counting their allocations.
Timing aot_time(AotModel& a, int threads, int reps, unsigned long& allocs) {
  Timing t;
  if (!a.error.empty()) return t.error = a.error, t;
  a.threads(threads);
  a.run1(a.in.data(), a.out.data());  // the threads' buffers, allocated on first use
  for (int i = 0; i < reps; ++i) {
    const auto r0 = Clock::now();
    mallocs = 0, counting = true;
    a.run1(a.in.data(), a.out.data());
    counting = false;
    t.runs.push_back(ms_since(r0));
    allocs += mallocs;
  }
  return t;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* flag) {
      return s.rfind(flag, 0) == 0 ? s.substr(std::string(flag).size()) : "";
    };
    if (auto v = value("--reps="); !v.empty()) {
      a.reps = std::max(1, std::stoi(v));
    } else if (auto v2 = value("--rounds="); !v2.empty()) {
      a.rounds = std::max(1, std::stoi(v2));
    } else if (auto v3 = value("--threads="); !v3.empty()) {
      a.threads.clear();
      std::istringstream f(v3);
      for (std::string n; std::getline(f, n, ',');) a.threads.push_back(std::max(1, std::stoi(n)));
    } else if (auto v4 = value("--only="); !v4.empty()) {
      a.only = v4;
    } else if (s == "--no-aot") {
      a.aot = false;
    } else if (s.rfind("--", 0) != 0 && a.models.empty()) {
      a.models = s;
    } else {
      fprintf(stderr, "bench_onnx: unknown argument %s\n", s.c_str());
      exit(2);
    }
  }
  if (a.models.empty()) {
    fprintf(stderr,
            "usage: bench_onnx MODELS [--reps=N] [--rounds=N] [--threads=1,2] [--only=NAME] [--no-aot]\n"
            "  MODELS: the folder tools/export_onnx_models.py wrote (/usr/bin/python3 "
            "tools/export_onnx_models.py MODELS)\n");
    exit(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  // (Device::DEFAULT is read from the environment before main: setting DEVICE here alone left it CLANG)
  if (!::getenv("DEVICE")) Device::DEFAULT = "LLVM";
  ::setenv("DEVICE", Device::DEFAULT.c_str(), 0);
  // An empty kernel cache, so that the first inference includes every compilation.
  char dir[] = "/tmp/bench_onnx_cache_XXXXXX";
  if (!::getenv("METAGRAD_CACHE") && mkdtemp(dir)) ::setenv("METAGRAD_CACHE", dir, 1);
  const std::string missing = ort_missing();
  printf(
      "bench_onnx: metagrad on %s (TinyJit) and its AOT C library against ONNX Runtime; median of %d runs, "
      "best of %d rounds\n",
      ::getenv("DEVICE"), args.reps, args.rounds);
  if (!missing.empty()) printf("%s\n", missing.c_str());
  printf("%-20s %3s | %9s %10s | %9s %10s | %9s %10s %8s | %6s %6s | %9s %9s %9s\n", "model", "thr", "mg ms",
         "mg /s", "aot ms", "aot /s", "ort ms", "ort /s", "", "xORT", "aotxORT", "mg first", "aot first",
         "ort first");
  fs::path aot_dir = fs::temp_directory_path() / ("bench_onnx_aot_" + std::to_string(::getpid()));
  std::map<std::string, std::unique_ptr<AotModel>> aots;  // by row: compiled once, timed at each thread count
  for (int threads : args.threads) {
    cpu::set_threads(threads);
    for (const Row& row : rows()) {
      if (!args.only.empty() && row.name.find(args.only) == std::string::npos) continue;
      const std::string model = (fs::path(args.models) / row.folder / "model.onnx").string();
      if (!fs::exists(model)) {
        printf("%-20s %3d | no %s (run tools/export_onnx_models.py)\n", row.name.c_str(), threads,
               model.c_str());
        continue;
      }
      Timing mg, ort, aot;
      double mg_best = 0, ort_best = 0, aot_best = 0, mg_cpu = 0, ort_cpu = 0;
      unsigned long allocs = 0;
      auto& compiled = aots[row.name];
      if (!compiled && args.aot)
        compiled = aot_build(model, row, aot_dir / row.folder / shape_text(row.shape));
      if (!compiled) compiled = std::make_unique<AotModel>(), compiled->error = "skipped (--no-aot)";
      for (int r = 0; r < args.rounds; ++r) {
        if (missing.empty()) {
          Timing o = ort_time(model, row, threads, args.reps);
          if (!o.error.empty()) ort.error = o.error;
          if (!o.runs.empty() && (ort_best == 0 || median(o.runs) < ort_best)) ort_best = median(o.runs);
          if (!o.cpu.empty() && (ort_cpu == 0 || median(o.cpu) < ort_cpu)) ort_cpu = median(o.cpu);
          if (r == 0) ort.first = o.first;
        }
        Timing m = metagrad_time(model, row, args.reps);
        if (!m.error.empty()) mg.error = m.error;
        if (!m.runs.empty() && (mg_best == 0 || median(m.runs) < mg_best)) mg_best = median(m.runs);
        if (!m.cpu.empty() && (mg_cpu == 0 || median(m.cpu) < mg_cpu)) mg_cpu = median(m.cpu);
        if (r == 0) mg.first = m.first;
        Timing a = aot_time(*compiled, threads, args.reps, allocs);
        if (!a.error.empty() && args.aot) aot.error = a.error;
        if (!a.runs.empty() && (aot_best == 0 || median(a.runs) < aot_best)) aot_best = median(a.runs);
      }
      printf("%-20s %3d | ", row.name.c_str(), threads);
      for (double best : {mg_best, aot_best})
        if (best > 0)
          printf("%9.3f %10.1f | ", best, row.items * 1e3 / best);
        else
          printf("%9s %10s | ", "-", "-");
      if (ort_best > 0)
        printf("%9.3f %10.1f %-8s | ", ort_best, row.items * 1e3 / ort_best,
               (std::string(row.unit) + "/s").c_str());
      else
        printf("%9s %10s %-8s | ", "-", "-", "");
      for (double best : {mg_best, aot_best})
        if (best > 0 && ort_best > 0)
          printf("%5.2fx ", ort_best / best);
        else
          printf("%6s ", "-");
      auto first = [](double ms, bool ran) {  // "-" where that side did not run
        char b[32] = "-";
        if (ran) snprintf(b, sizeof b, "%.1f", ms);
        return std::string(b);
      };
      printf("| %9s %9s %9s\n", first(mg.first, mg_best > 0).c_str(),
             first(compiled->first, aot_best > 0 && threads == args.threads[0]).c_str(),
             first(ort.first, ort_best > 0).c_str());
      if (mg_cpu > 0 && ort_cpu > 0)
        printf(
            "  process CPU time a run (best round's median): metagrad %.3f ms, ONNX Runtime %.3f ms: %.2fx\n",
            mg_cpu, ort_cpu, ort_cpu / mg_cpu);
      else if (mg_cpu > 0)
        printf("  metagrad's process CPU time a run: %.3f ms (best round's median)\n", mg_cpu);
      if (allocs) printf("  the AOT library allocated %lu times in its runs\n", allocs);
      if (!mg.error.empty()) printf("  metagrad failed: %s\n", mg.error.c_str());
      if (!aot.error.empty()) printf("  metagrad AOT failed: %s\n", aot.error.c_str());
      if (!ort.error.empty()) printf("  ONNX Runtime failed: %s\n", ort.error.c_str());
      fflush(stdout);
    }
  }
  aots.clear();
  fs::remove_all(aot_dir);
  if (dir[sizeof dir - 2] != 'X') fs::remove_all(dir);
}
