// bench_gpt: the character GPT of examples/gpt (2 blocks, width 128, 4 heads, context 64, batch 32,
// AdamW with decay groups, gradient clipping at 1) in metagrad (eager and TinyJit on each compiled
// device) and in libtorch 1.13 (Debian's libtorch-dev), from the same initial weights on the same
// batches (random tokens: the step's cost does not depend on the text), in turns, at 1 and 2 threads.
// Prints the median ms/step of each, its ratio to libtorch's at the same thread count, and the
// kernels one step launched (GlobalCounters::kernel_count; a TinyJit replay counts its kernels).
//
//   bench_gpt [--steps=N] [--rounds=N] [--shape=char|gpt2|gpt2small] [--check] [--memory] [--text[=N]]
//
// --shape=gpt2: GPT-2 small's layer shapes (width 768, 12 heads) in 2 blocks, context 256, batch 2:
// products of 512 x 768 x 3072 where the character GPT's are 2048 x 128 x 512. --shape=gpt2small:
// GPT-2 small itself (12 blocks, width 768, 12 heads, vocabulary 50257; its head not tied to the
// token embedding: 163M parameters), batch 4 x 64 tokens.
// Each configuration's first step (1 thread) is printed too: kernels compiled into an empty cache
// (a fresh METAGRAD_CACHE of this process), or libtorch's first call.
// --check only compares the first 10 losses of metagrad (eager, the default device) with libtorch's
// and exits with 1 when one differs by more than 1e-5 relative: the test bench_gpt_losses.
// --memory runs each configuration alone in a new process (this program again, --memory-of=NAME) at
// 1 thread: 3 warm-up steps, then `steps` steps whose peak resident set (VmHWM, reset after the
// warm-up) less the resident set before the model was built (its libraries and device loaded and
// initialised, the device's compiler included) it prints, and for metagrad the most
// bytes its buffers (pooled free ones not counted) held at once during those steps. Each metagrad
// configuration runs twice on a kernel cache of its own: empty (the warm-up compiles, and what the
// compiler touched stays resident) and then filled, as in any later run of the same model.
// --text=N (600 if no N) trains as examples/gpt does, on its text (Debian's fortunes) with its learning
// rate schedule (cosine from 3e-3 to 3e-4 after a warm-up), in metagrad (eager on DEVICE, LLVM if
// unset) and in libtorch from the same weights on the same windows, at 2 threads: the validation
// loss of each every 100 steps (the same 4 validation batches) and the wall time of each.
#include <dlfcn.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <metagrad/device/compile_times.hpp>
#include <metagrad/fixed/parallel.hpp>
#include <metagrad/jit.hpp>
#include <random>
#include <string>
#include <vector>

#include "../examples/char_text.hpp"
#include "../examples/gpt_model.hpp"

using namespace metagrad;
using examples::GPT;
using examples::kVocab;

namespace {

long B = 32, T = 64, C = 128, H = 4, N = 2, V = kVocab;  // --shape sets others
constexpr double kLr = 1e-3, kDecay = 0.1;

// libtorch's thread count: its own pool and, where its BLAS is OpenBLAS (Debian's libtorch), the BLAS's
// threads too, which torch::set_num_threads leaves at one a core (a "1 thread" libtorch step then ran
// its products on every core, and at 2 threads oversubscribed them).
void torch_threads(int n) {
  torch::set_num_threads(n);
  if (auto* f = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

// ---- the same model in libtorch, its parameters copied from metagrad's state dict by name ----

struct TorchGPT {
  std::map<std::string, torch::Tensor> p;
  std::vector<torch::Tensor> decay, no_decay;
  explicit TorchGPT(const nn::StateDict& sd) {
    for (const auto& [k, t] : sd) {
      std::vector<float> v = t.to_vector<float>();
      std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
      torch::Tensor x = torch::from_blob(v.data(), shape, torch::kFloat32).clone().set_requires_grad(true);
      p[k] = x;
      (t.ndim() >= 2 ? decay : no_decay).push_back(x);
    }
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    namespace F = torch::nn::functional;
    long b = idx.size(0), t = idx.size(1), hd = C / H;
    torch::Tensor x =
        p["wte.weight"].index_select(0, idx.reshape({-1})).view({b, t, C}) + p["wpe.weight"].narrow(0, 0, t);
    torch::Tensor mask = torch::ones({t, t}, torch::kBool).triu(1);
    for (long i = 0; i < N; ++i) {
      std::string pre = "blocks." + std::to_string(i) + ".";
      auto w = [&](const std::string& k) { return p[pre + k]; };
      torch::Tensor h = F::layer_norm(
          x, F::LayerNormFuncOptions({C}).weight(w("ln1.weight")).bias(w("ln1.bias")).eps(1e-5));
      auto qkv = F::linear(h, w("attn.in_proj_weight"), w("attn.in_proj_bias")).chunk(3, -1);
      auto heads = [&](const torch::Tensor& z) { return z.view({b, t, H, hd}).transpose(1, 2); };
      torch::Tensor att =
          heads(qkv[0]).matmul(heads(qkv[1]).transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
      att = att.masked_fill(mask, -INFINITY).softmax(-1);
      torch::Tensor y = att.matmul(heads(qkv[2])).transpose(1, 2).contiguous().view({b, t, C});
      x = x + F::linear(y, w("attn.out_proj.weight"), w("attn.out_proj.bias"));
      h = F::layer_norm(x,
                        F::LayerNormFuncOptions({C}).weight(w("ln2.weight")).bias(w("ln2.bias")).eps(1e-5));
      x = x + F::linear(torch::gelu(F::linear(h, w("fc.weight"), w("fc.bias")), "tanh"), w("proj.weight"),
                        w("proj.bias"));
    }
    x = F::layer_norm(x,
                      F::LayerNormFuncOptions({C}).weight(p["ln_f.weight"]).bias(p["ln_f.bias"]).eps(1e-5));
    return F::linear(x, p["head.weight"]);
  }
};

struct TorchTrainer {
  TorchGPT m;
  torch::optim::AdamW opt;
  std::vector<torch::Tensor> all;
  explicit TorchTrainer(const nn::StateDict& sd, double lr = kLr)
      : m(sd),
        opt(std::vector<
                torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(
                                                       m.decay, std::make_unique<torch::optim::AdamWOptions>(
                                                                    torch::optim::AdamWOptions(lr)
                                                                        .betas({0.9, 0.99})
                                                                        .eps(1e-8)
                                                                        .weight_decay(kDecay))),
                                                   torch::optim::OptimizerParamGroup(
                                                       m.no_decay,
                                                       std::make_unique<torch::optim::AdamWOptions>(
                                                           torch::optim::AdamWOptions(lr)
                                                               .betas({0.9, 0.99})
                                                               .eps(1e-8)
                                                               .weight_decay(0)))},
            torch::optim::AdamWOptions(lr)) {
    all = m.decay;
    all.insert(all.end(), m.no_decay.begin(), m.no_decay.end());
  }
  double step(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y) {
    auto xt = torch::from_blob(const_cast<std::int64_t*>(x.data()), {B, T}, torch::kInt64);
    auto yt = torch::from_blob(const_cast<std::int64_t*>(y.data()), {B * T}, torch::kInt64);
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(m.forward(xt).view({-1, V}), yt);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(all, 1.0);
    opt.step();
    return loss.item<double>();
  }
  void set_lr(double lr) {
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  }
  double loss(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y) {
    torch::NoGradGuard no_grad;
    auto xt = torch::from_blob(const_cast<std::int64_t*>(x.data()), {B, T}, torch::kInt64);
    auto yt = torch::from_blob(const_cast<std::int64_t*>(y.data()), {B * T}, torch::kInt64);
    return torch::nn::functional::cross_entropy(m.forward(xt).view({-1, V}), yt).item<double>();
  }
};

// ---- metagrad, eager or under TinyJit, on one device ----

struct MetaTrainer {
  std::string device;
  GPT m;
  nn::optim::AdamW opt;
  std::function<Tensor(Tensor, Tensor)> run;
  std::optional<TinyJit<std::function<Tensor(Tensor, Tensor)>>> jit;
  static GPT make(const std::string& device, const nn::StateDict& init) {
    std::string prev = Device::DEFAULT;
    Device::DEFAULT = device;
    GPT g(T, C, H, N, V);
    Device::DEFAULT = prev;
    nn::StateDict moved;
    for (const auto& [k, t] : init) moved.add(k, t.to(device));
    nn::load_state_dict(g, moved);
    return g;
  }
  MetaTrainer(const std::string& dev, const nn::StateDict& init, bool use_jit, double lr = kLr)
      : device(dev),
        m(make(dev, init)),
        opt(nn::optim::decay_groups(nn::get_parameters(m), kDecay), lr, 0.9, 0.99) {
    run = [this](Tensor x, Tensor y) { return examples::train_step(m, opt, x, y); };
    if (use_jit) jit.emplace(run);
  }
  double step(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y) {
    Tensor xt(x, {B, T}, {.device = device}), yt(y, {B, T}, {.device = device});
    return (jit ? (*jit)(xt, yt) : run(xt, yt)).item<double>();
  }
  double loss(const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& y) {
    Tensor::NoGradGuard no_grad;
    Tensor::TrainingGuard eval(false);
    Tensor xt(x, {B, T}, {.device = device}), yt(y, {B, T}, {.device = device});
    return examples::loss_of(m, xt, yt).item<double>();
  }
};

// examples/gpt's run (its text, learning rate schedule, validation batches) in metagrad and libtorch.
int text_run(const nn::StateDict& init, long steps) {
  const examples::SplitText text(examples::load_text("/usr/share/games/fortunes"));
  constexpr double lr = 3e-3;
  const long warmup = std::min(100L, steps / 10 + 1);
  setenv("THREADS", "2", 1);
  metagrad::fixed::set_threads(2);
  torch_threads(2);
  std::string dev = getenv("DEVICE", "LLVM");
  MetaTrainer mg(dev, init, false, lr);
  nn::optim::CosineWarmup sched(mg.opt, warmup, steps, lr, lr / 10);
  TorchTrainer tt(init, lr);
  std::printf(
      "bench_gpt --text: examples/gpt's run (fortunes, %zu training characters; batch %ld, context %ld; "
      "cosine learning rate %.0e -> %.0e after %ld warm-up steps), 2 threads\n",
      text.train.size(), B, T, lr, lr / 10, warmup);
  std::printf("%6s  %26s  %26s\n", "step", ("metagrad " + dev + " eager: val loss").c_str(),
              "libtorch 1.13: val loss");
  std::mt19937_64 rng(1337);
  double mg_s = 0, tt_s = 0;
  auto val = [&](auto& trainer) {  // examples/gpt's validation batches
    return examples::validation_loss(text.val, B, T,
                                     [&](const auto& x, const auto& y) { return trainer.loss(x, y); });
  };
  for (long step = 1; step <= steps; ++step) {
    auto [x, y] = examples::windows(text.train, B, T, rng);
    auto t0 = std::chrono::steady_clock::now();
    mg.step(x, y);
    auto t1 = std::chrono::steady_clock::now();
    tt.step(x, y);
    auto t2 = std::chrono::steady_clock::now();
    mg_s += std::chrono::duration<double>(t1 - t0).count();
    tt_s += std::chrono::duration<double>(t2 - t1).count();
    if (step % 100 == 0 || step == steps) std::printf("%6ld  %26.4f  %26.4f\n", step, val(mg), val(tt));
    tt.set_lr(sched.step());
  }
  std::printf("%6s  %24.1f s  %24.1f s\n", "time", mg_s, tt_s);
  return 0;
}

struct Batches {
  std::vector<std::vector<std::int64_t>> x, y;
  explicit Batches(int n) {
    std::mt19937_64 g(5);
    std::uniform_int_distribution<std::int64_t> d(0, V - 1);
    for (int i = 0; i < n; ++i) {
      std::vector<std::int64_t> a(B * T), b(B * T);
      for (auto& v : a) v = d(g);
      for (auto& v : b) v = d(g);
      x.push_back(a), y.push_back(b);
    }
  }
};

// Resident set figures of this process from /proc/self/status, in bytes ("VmRSS", "VmHWM").
double proc_status(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return NAN;
  char line[256];
  double kb = NAN;
  std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') kb = std::atof(line + n + 1);
  std::fclose(f);
  return kb * 1024;
}

// One configuration's training memory, in this process alone: "libtorch" or "<DEVICE> eager|jit".
int memory_of(const std::string& config, const nn::StateDict& init, const Batches& data, long steps) {
  setenv("THREADS", "1", 1);
  torch_threads(1);
  // The baseline after the libraries are loaded and initialised, libtorch's (linked, loaded before
  // main) and the device's alike: LLVM's is loaded when its device is first made (libLLVM, about
  // 49 MiB of its pages resident: relocations, symbol tables, static initialisers).
  if (config != "libtorch") (void)Device::get(config.substr(0, config.find(' ')));
  double rss0 = proc_status("VmRSS"), anon0 = proc_status("RssAnon");
  std::function<double(std::size_t)> step;
  std::unique_ptr<TorchTrainer> tt;
  std::unique_ptr<MetaTrainer> mt;
  if (config == "libtorch") {
    tt = std::make_unique<TorchTrainer>(init);
    step = [&](std::size_t i) { return tt->step(data.x[i % data.x.size()], data.y[i % data.y.size()]); };
  } else {
    std::size_t sp = config.find(' ');
    mt = std::make_unique<MetaTrainer>(config.substr(0, sp), init, config.substr(sp + 1) == "jit");
    step = [&](std::size_t i) { return mt->step(data.x[i % data.x.size()], data.y[i % data.y.size()]); };
  }
  // Warm-up (compiles, captures), then the steady state alone: the resident peak counted afresh
  // (Linux: writing 5 to clear_refs resets VmHWM) and metagrad's buffer peak reset.
  for (std::size_t s = 0; s < 3; ++s) step(s);
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) std::fputs("5", f), std::fclose(f);
  GlobalCounters::reset();
  for (long s = 0; s < steps; ++s) step(static_cast<std::size_t>(3 + s));
  double mib = 1024.0 * 1024.0, trained = proc_status("VmHWM") - rss0, anon = proc_status("RssAnon") - anon0;
  // Anonymous memory (the heap, mappings, stacks) apart from file pages (libraries, compiled kernels).
  if (tt)
    std::printf("  %-24s %8.1f MiB peak resident (%.1f anonymous at the end)\n", "libtorch 1.13 eager",
                trained / mib, anon / mib);
  else
    std::printf("  %-24s %8.1f MiB peak resident (%.1f anonymous at the end), buffers %.1f MiB at peak\n",
                ("metagrad " + config).c_str(), trained / mib, anon / mib,
                static_cast<double>(GlobalCounters::mem_peak) / mib);
  return 0;
}

// One cold (or, with the cache filled, warm-disk) first eager step on `device` in this process:
// prints `wall schedule codegen compile run kernels` (ms; kernels compiled) on one line.
int cold_of(const std::string& device, const nn::StateDict& init, const Batches& data) {
  auto files = [] {  // the kernels the disk cache holds (a sidecar each)
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(metagrad::getenv("METAGRAD_CACHE"), ec))
      n += e.path().extension() == ".sum";
    return n;
  };
  (void)Device::get(device);  // its library loaded and initialised (LLVM's target, CLANG's compiler probe)
  MetaTrainer m(device, init, false);
  std::size_t before = files();
  auto cpu_ms = [] {  // this process's threads and its finished children (CLANG's compilers)
    rusage self{}, kids{};
    getrusage(RUSAGE_SELF, &self), getrusage(RUSAGE_CHILDREN, &kids);
    auto ms = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) * 1e-3;
    };
    return ms(self.ru_utime) + ms(self.ru_stime) + ms(kids.ru_utime) + ms(kids.ru_stime);
  };
  GlobalCounters::reset();
  double gen0 = CompileTimes::codegen, cpu0 = cpu_ms();
  auto t0 = std::chrono::steady_clock::now();
  m.step(data.x[0], data.y[0]);
  double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  double cpu = cpu_ms() - cpu0;
  double gen = (CompileTimes::codegen - gen0) * 1e3, compile = GlobalCounters::compile_time * 1e3 - gen,
         run = GlobalCounters::time_sum * 1e3;
  std::size_t compiled = files() - before;
  // The steady state after it, for a check that a cheaper compile did not cost run time: the best
  // of 5 steps after 2 more (an optimizer's first steps differ).
  double warm = INFINITY;
  for (std::size_t s = 1; s < 8; ++s) {
    auto t1 = std::chrono::steady_clock::now();
    m.step(data.x[s % data.x.size()], data.y[s % data.y.size()]);
    if (s > 2)
      warm = std::min(
          warm, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count());
  }
  std::printf("%.1f %.1f %.1f %.1f %.1f %zu %.1f %.1f\n", wall, wall - gen - compile - run, gen, compile, run,
              compiled, cpu, warm);
  return 0;
}

// --cold: each device's first step in new processes, into an empty kernel cache and then from it.
int cold_start(const std::string& self, const std::string& shape, const std::string& root, long n) {
  std::printf(
      "bench_gpt --cold: GPT %ld blocks, width %ld, context %ld, batch %ld; the first eager step of a new "
      "process, ms wall (best of %ld by wall marked *)\n",
      N, C, T, B, n);
  std::printf("  %-28s %8s %9s %8s %8s %8s %8s %8s %8s\n", "", "wall", "schedule", "codegen", "compile",
              "run", "CPU", "compiled", "warm");
  int failed = 0;
  for (std::string device : {"LLVM", "CLANG"})
    for (bool filled : {false, true}) {
      std::vector<std::array<double, 8>> rows;
      for (long i = 0; i < (filled ? 1 : n); ++i) {
        std::filesystem::path dir = std::filesystem::path(root) / (device + std::to_string(filled ? 0 : i));
        if (!filled) std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        std::string cmd =
            "METAGRAD_CACHE='" + dir.string() + "' '" + self + "'" + shape + " '--cold-of=" + device + "'";
        std::array<double, 8> r{};
        std::FILE* p = popen(cmd.c_str(), "r");
        bool ok = p && std::fscanf(p, "%lf %lf %lf %lf %lf %lf %lf %lf", &r[0], &r[1], &r[2], &r[3], &r[4],
                                   &r[5], &r[6], &r[7]) == 8;
        if (p) ok &= pclose(p) == 0;
        if (!ok) {
          std::fprintf(stderr, "bench_gpt --cold: %s failed\n", cmd.c_str());
          failed = 1;
          continue;
        }
        rows.push_back(r);
      }
      auto best = std::min_element(rows.begin(), rows.end(), [](auto& a, auto& b) { return a[0] < b[0]; });
      for (auto it = rows.begin(); it != rows.end(); ++it)
        std::printf("  %-28s %8.0f %9.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.1f%s\n",
                    (device + (filled ? " from the disk cache" : " empty cache")).c_str(), (*it)[0], (*it)[1],
                    (*it)[2], (*it)[3], (*it)[4], (*it)[6], (*it)[5], (*it)[7],
                    it == best && rows.size() > 1 ? " *" : "");
    }
  return failed;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  long steps = 5, rounds = 4;
  bool check = false, memory = false;
  long text_steps = 0, cold = 0;
  std::string memory_config, shape_flag, cold_device;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--steps=", 0) == 0)
      steps = std::atol(a.c_str() + 8);
    else if (a.rfind("--rounds=", 0) == 0)
      rounds = std::atol(a.c_str() + 9);
    else if (a == "--check")
      check = true;
    else if (a == "--memory")
      memory = true;
    else if (a == "--text" || a.rfind("--text=", 0) == 0)
      text_steps = a.size() > 7 ? std::atol(a.c_str() + 7) : 600;
    else if (a.rfind("--memory-of=", 0) == 0)
      memory_config = a.substr(12);
    else if (a == "--cold" || a.rfind("--cold=", 0) == 0)
      cold = a.size() > 7 ? std::atol(a.c_str() + 7) : 3;
    else if (a.rfind("--cold-of=", 0) == 0)
      cold_device = a.substr(10);
    else if (a == "--shape=gpt2")
      B = 2, T = 256, C = 768, H = 12, N = 2, shape_flag = " " + a;
    else if (a == "--shape=gpt2small")
      B = 4, T = 64, C = 768, H = 12, N = 12, V = 50257, shape_flag = " " + a;
    else if (a != "--shape=char") {
      std::fprintf(stderr,
                   "usage: %s [--steps=N] [--rounds=N] [--shape=char|gpt2|gpt2small] [--check] [--memory] "
                   "[--text[=N]] [--cold[=N]]\n",
                   argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // An empty kernel cache of this process's own, so that each device's first step compiles.
  std::string cache_template = (std::filesystem::temp_directory_path() / "bench_gpt_XXXXXX").string();
  std::unique_ptr<char, void (*)(char*)> cache(mkdtemp(cache_template.data()), [](char* d) {
    if (d) std::filesystem::remove_all(d);
  });
  if (cache && memory_config.empty() && cold_device.empty()) setenv("METAGRAD_CACHE", cache.get(), 1);
  if (cold > 0 && cache) return cold_start(argv[0], shape_flag, cache.get(), cold);
  Tensor::manual_seed(1337);
  nn::StateDict init;
  {
    Device::DEFAULT = "CPU";
    GPT g(T, C, H, N, V);
    for (const auto& [k, t] : nn::get_state_dict(g)) init.add(k, t.detach().realize());
  }
  if (text_steps > 0) return text_run(init, text_steps);
  Batches data(static_cast<int>(std::max(10L, steps)));
  if (!memory_config.empty()) return memory_of(memory_config, init, data, steps);
  if (!cold_device.empty()) return cold_of(cold_device, init, data);
  if (memory) {  // each configuration in a process of its own: resident sets do not mix
    std::printf(
        "bench_gpt --memory: GPT %ld blocks, width %ld, context %ld, batch %ld; %ld steps, 1 thread\n", N, C,
        T, B, steps);
    std::string self = argv[0], shape = shape_flag;
    int failed = 0;
    auto run = [&](const std::string& config, const std::string& dir) {
      std::string env = dir.empty() ? "" : "METAGRAD_CACHE='" + dir + "' ";
      failed |= std::system(
          (env + self + " --steps=" + std::to_string(steps) + shape + " '--memory-of=" + config + "'")
              .c_str());
    };
    // Each configuration's own kernel cache: empty for its first run, which compiles during the
    // warm-up (a compiler's pages and heap stay resident), filled for its second, as every later run.
    const std::vector<std::string> configs = {"LLVM eager", "LLVM jit", "CLANG eager", "CLANG jit"};
    for (const char* phase : {"first run (an empty kernel cache: kernels compiled during the warm-up)",
                              "later runs (kernels from the disk cache the first run filled)"}) {
      std::printf("%s\n", phase);
      for (std::size_t i = 0; i < configs.size(); ++i)
        run(configs[i], (std::filesystem::path(cache.get()) / std::to_string(i)).string());
    }
    run("libtorch", "");
    return failed ? 1 : 0;
  }

  if (check) {  // the first 10 losses, metagrad eager on DEVICE (default CLANG) against libtorch
    torch_threads(1);
    std::string dev = getenv("DEVICE", "CLANG");
    MetaTrainer mg(dev, init, false);
    TorchTrainer tt(init);
    double worst = 0;
    for (int s = 0; s < 10; ++s) {
      double a = mg.step(data.x[static_cast<std::size_t>(s)], data.y[static_cast<std::size_t>(s)]);
      double b = tt.step(data.x[static_cast<std::size_t>(s)], data.y[static_cast<std::size_t>(s)]);
      double rel = std::abs(a - b) / std::abs(b);
      worst = std::max(worst, rel);
      std::printf("step %d: metagrad %s %.7f, libtorch %.7f, relative difference %.2e\n", s + 1, dev.c_str(),
                  a, b, rel);
    }
    std::printf("largest relative difference %.2e (limit 1e-5)\n", worst);
    return worst <= 1e-5 ? 0 : 1;
  }

  std::vector<std::string> devices;
  for (std::string d : {"CLANG", "LLVM"}) try {
      Device::get(d);
      devices.push_back(d);
    } catch (const std::exception&) {}
  std::printf(
      "bench_gpt: GPT %ld blocks, width %ld, %ld heads, context %ld, batch %ld; AdamW; %ld rounds of %ld "
      "steps\n",
      N, C, H, T, B, rounds, steps);
  for (int threads : {1, 2}) {
    setenv("THREADS", std::to_string(threads).c_str(), 1);
    metagrad::fixed::set_threads(threads);  // the pool read THREADS when it started
    torch_threads(threads);
    struct Config {
      std::string name;
      std::function<double(std::size_t)> step;
      std::vector<double> ms;
      double first_ms = 0;
      std::int64_t kernels = 0;  // launched by one step (GlobalCounters::kernel_count)
    };
    std::vector<Config> configs;
    std::vector<std::unique_ptr<MetaTrainer>> mts;
    auto tt = std::make_unique<TorchTrainer>(init);
    for (const std::string& d : devices)
      for (bool j : {false, true}) {
        mts.push_back(std::make_unique<MetaTrainer>(d, init, j));
        MetaTrainer* m = mts.back().get();
        configs.push_back({"metagrad " + d + (j ? " TinyJit" : " eager"),
                           [m, &data](std::size_t i) {
                             return m->step(data.x[i % data.x.size()], data.y[i % data.y.size()]);
                           },
                           {}});
      }
    configs.push_back({"libtorch 1.13 eager",
                       [&tt, &data](std::size_t i) {
                         return tt->step(data.x[i % data.x.size()], data.y[i % data.y.size()]);
                       },
                       {}});
    for (Config& c : configs)  // warm-up: compiles kernels, captures the JITs (3 calls)
      for (std::size_t i = 0; i < 3; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        c.step(i);
        if (i == 0)
          c.first_ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      }
    for (long r = 0; r < rounds; ++r)
      for (Config& c : configs)
        for (long s = 0; s < steps; ++s) {
          std::int64_t k0 = GlobalCounters::kernel_count;
          auto t0 = std::chrono::steady_clock::now();
          c.step(static_cast<std::size_t>(3 + r * steps + s));
          c.kernels = GlobalCounters::kernel_count - k0;
          c.ms.push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
    double torch_ms = median(configs.back().ms);
    std::printf("\n%d thread%s\n", threads, threads == 1 ? "" : "s");
    for (const Config& c : configs) {
      std::printf("  %-24s %8.1f ms/step  %5.2fx libtorch", c.name.c_str(), median(c.ms),
                  torch_ms / median(c.ms));
      // A device's first configuration compiled its kernels into the empty cache; the next reuses them.
      if (c.name.find("libtorch") == std::string::npos)
        std::printf("  %4lld kernels", static_cast<long long>(c.kernels));
      if (threads == 1 && c.name.find("TinyJit") == std::string::npos)
        std::printf("   first step %7.0f ms", c.first_ms);
      std::printf("\n");
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpt: %s\n", e.what());
  return 1;
}
