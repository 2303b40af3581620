// Decoding at batch 1 (issue 62): a GPT-2-small-shaped decoder (12 layers, width 768, 12 heads,
// vocabulary 50257, context 1024, random weights; an untied head) with f32, bf16, Q8_0 and Q4_0
// weights, at 1 and 2 threads. A 512-token prompt runs as one pass (its GFLOP/s against the FMA
// peak), then tokens are generated greedily one at a time over the KV cache (nn::KVCache): their rate
// against the bandwidth limit, the bytes of weights and cache each token reads over the read
// bandwidth measured here (machine_limits.hpp), and against PyTorch 1.13 on the same model
// (bench_decode_torch.py as a child process, fp32 for f32 and bf16, quantize_dynamic int8 for Q8_0
// and Q4_0) where /usr/bin/python3 has torch. Decoding runs eagerly, then replayed by nn::DecodeJit
// (rows marked "jit", on a compiled device). Ends with one line per weight type, thread count and mode:
//   decode q4_0 1t: 41.2 tok/s, 0.83 of the bandwidth limit, 2.4x PyTorch
//   decode q4_0 1t jit: 45.0 tok/s, 0.91 of the bandwidth limit, 2.6x PyTorch
//
// Run: nice build/bench/bench_decode [TOKENS] [--no-torch] [--kind=f32|bf16|q8_0|q4_0] [--threads=N]
// [--jit=0|1] (default 32 generated tokens, every kind, 1 and 2 threads, eager and jitted; DEVICE= as
// everywhere; --no-torch leaves PyTorch out).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <metagrad/cpu/parallel.hpp>
#include <metagrad/metagrad.hpp>

#include "machine_limits.hpp"

using metagrad::DType;
using metagrad::Tensor;
namespace dtypes = metagrad::dtypes;
namespace nn = metagrad::nn;
namespace cpu = metagrad::cpu;
using i64 = std::int64_t;

namespace {

constexpr i64 kLayers = 12, kWidth = 768, kHeads = 12, kVocab = 50257, kContext = 1024, kPrompt = 512;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// The process's CPU time (every thread's): on a shared machine, what the work cost while it ran.
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Block {
  nn::LayerNorm ln1{kWidth}, ln2{kWidth};
  nn::MultiheadAttention attn{kWidth, kHeads, 0, true, true};
  nn::Linear fc{kWidth, 4 * kWidth}, proj{4 * kWidth, kWidth};
};

// The decoder; `kind` is the weights' type: f32, bf16 (weights and activations), q8_0 or q4_0
// (the Linear weights quantised, activations f32).
struct Decoder {
  std::string kind;
  nn::Embedding wte{kVocab, kWidth}, wpe{kContext, kWidth};
  std::vector<Block> blocks;
  nn::LayerNorm ln_f{kWidth};
  nn::Linear head{kWidth, kVocab, false};
  std::vector<nn::KVCache> caches;

  explicit Decoder(std::string k) : kind(std::move(k)), blocks(kLayers) {
    auto realize = [](Tensor& t) { t.realize(); };
    for_each_tensor(realize);
    if (kind == "bf16") {
      for_each_tensor([](Tensor& t) { t = t.cast(dtypes::bfloat16).realize(); });
    } else if (kind != "f32") {
      cpu::QuantType t = kind == "q8_0" ? cpu::QuantType::q8_0 : cpu::QuantType::q4_0;
      for (Block& b : blocks) b.attn.quantize(t), b.fc.quantize(t), b.proj.quantize(t);
      head.quantize(t);
    }
    for (Block& b : blocks) caches.push_back(b.attn.make_cache(1, kContext));
  }
  template <class F>
  void for_each_tensor(F f) {
    f(wte.weight), f(wpe.weight), f(*ln_f.weight), f(*ln_f.bias), f(head.weight);
    for (Block& b : blocks) {
      f(*b.ln1.weight), f(*b.ln1.bias), f(*b.ln2.weight), f(*b.ln2.bias), f(b.attn.in_proj_weight),
          f(*b.attn.in_proj_bias), f(b.attn.out_proj.weight), f(*b.attn.out_proj.bias), f(b.fc.weight),
          f(*b.fc.bias), f(b.proj.weight), f(*b.proj.bias);
    }
  }
  // The bytes of the products' weights, which each token reads once (embedding rows, norms and
  // biases are a few KiB).
  double weight_bytes() const {
    double per = kind == "f32" ? 4 : kind == "bf16" ? 2 : kind == "q8_0" ? 34.0 / 32 : 18.0 / 32;
    return per * static_cast<double>(kLayers * 12 * kWidth * kWidth + kWidth * kVocab);
  }
  // The bytes of cache one step at position `pos` reads: keys and values over the scores' span.
  double cache_bytes(i64 pos) const {
    i64 span = nn::KVCache::span(pos + 1, kContext);
    return 2.0 * kLayers * static_cast<double>(span * kWidth) * (kind == "bf16" ? 2 : 4);
  }
  // idx (1, T) at positions [start, start + T): the last position's greedy next token. Eager, or
  // replayed by nn::DecodeJit (the position as data).
  i64 step(const std::vector<std::int64_t>& idx, i64 start, bool jit = false) {
    Tensor::NoGradGuard no_grad;
    auto t = static_cast<i64>(idx.size());
    if (jit) return decode(Tensor(idx, {1, t}), start).item<std::int64_t>();
    Tensor pos = Tensor::arange(static_cast<double>(start), static_cast<double>(start + t), 1,
                                {.dtype = dtypes::int64});
    return next(wte(Tensor(idx, {1, t})) + wpe(pos),
                [&](Block& b, const Tensor& x, std::size_t i) { return b.attn(x, caches[i]); })
        .item<std::int64_t>();
  }
  // The blocks, the last position's head and its greedy token; attend(block, x, i) is block i's attention.
  template <class A>
  Tensor next(Tensor x, A attend) {
    i64 t = x.shape()[1];
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      Block& b = blocks[i];
      x = x + attend(b, b.ln1(x), i);
      x = x + b.proj(b.fc(b.ln2(x)).gelu());
    }
    x = x.shrink({{0, 1}, {t - 1, t}, {0, kWidth}});
    return head(ln_f(x)).argmax(-1);
  }
  nn::DecodeJit decode{[this](const Tensor& tok, const Tensor& pos, i64 span) {
                         Tensor at = pos + Tensor::arange(0, tok.shape()[1], 1, {.dtype = dtypes::int64});
                         return next(wte(tok) + wpe(at), [&](Block& b, const Tensor& x, std::size_t i) {
                           return b.attn(x, caches[i], pos, span);
                         });
                       },
                       kContext};
};

// The best of a few timings of f.
template <class F>
double best_seconds(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    f();
    best = std::min(best, now() - t0);
  }
  return best;
}

// Read bandwidth (bytes/s) of `threads` threads summing their parts of 512 MB, the best read kernel;
// `on_cpu` the same over the threads' CPU time a thread (what they read while they ran).
double read_bandwidth(int threads, double* on_cpu) {
  std::vector<float> v(std::size_t{128} << 20, 1.0f);
  auto kernel = limits::fastest(limits::read_kernels(), [&](limits::ReadFn f) {
    return best_seconds(1, [&] {
      volatile float s = f(v.data(), v.size() / 4);
      (void)s;
    });
  });
  double cpu = 1e30;
  double t = best_seconds(3, [&] {
    double c0 = cpu_now();
    std::vector<std::thread> ts;
    std::size_t part = v.size() / static_cast<std::size_t>(threads);
    for (int i = 0; i < threads; ++i)
      ts.emplace_back([&, i] {
        volatile float s = kernel(v.data() + part * static_cast<std::size_t>(i), part);
        (void)s;
      });
    for (auto& th : ts) th.join();
    cpu = std::min(cpu, (cpu_now() - c0) / threads);
  });
  *on_cpu = 4.0 * static_cast<double>(v.size()) / cpu;
  return 4.0 * static_cast<double>(v.size()) / t;
}

// f32 FMA peak (flop/s) of one thread.
double fma_peak() {
  long iters = 20'000'000;
  bool z = limits::has_avx512();
  double t = best_seconds(3, [&] {
    volatile float s = z ? limits::fma_peak_avx512(iters) : limits::fma_peak_avx2(iters);
    (void)s;
  });
  return 2.0 * 12 * (z ? 16 : 8) * static_cast<double>(iters) / t;
}

// PyTorch's tokens/s by "fp32 1t" ..., from bench_decode_torch.py; empty without torch.
std::map<std::string, double> torch_rates(i64 tokens, const std::string& thread_list) {
  std::map<std::string, double> r;
  std::string cmd = std::string("/usr/bin/python3 ") + METAGRAD_BENCH_DIR + "/bench_decode_torch.py " +
                    std::to_string(kPrompt) + " " + std::to_string(tokens) + " " + thread_list +
                    " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char line[256], name[32], th[8];
  double rate = 0;
  while (std::fgets(line, sizeof line, p))
    if (std::sscanf(line, "torch %31s %7[^:]: %lf tok/s", name, th, &rate) == 3) {
      std::printf("  %s", line);
      r[std::string(name) + " " + th] = rate;
    }
  pclose(p);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  i64 tokens = argc > 1 ? std::atol(argv[1]) : 32;
  bool with_torch = true;
  std::vector<int> threads{1, 2};
  std::vector<std::string> kinds{"f32", "bf16", "q8_0", "q4_0"};
  std::vector<bool> modes{false, true};  // eager, then replayed by nn::DecodeJit (on a compiled device)
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-torch") with_torch = false;
    if (a.rfind("--kind=", 0) == 0) kinds = {a.substr(7)};
    if (a.rfind("--threads=", 0) == 0) threads = {std::atoi(a.c_str() + 10)};
    if (a == "--jit=0") modes = {false};
    if (a == "--jit=1") modes = {true};
  }
  std::printf(
      "bench_decode: GPT-2-small shape (%lld layers, width %lld, %lld heads, vocabulary %lld), batch 1, "
      "device %s, %lld-token prompt, %lld generated tokens\n",
      static_cast<long long>(kLayers), static_cast<long long>(kWidth), static_cast<long long>(kHeads),
      static_cast<long long>(kVocab), metagrad::Device::DEFAULT.c_str(), static_cast<long long>(kPrompt),
      static_cast<long long>(tokens));
  std::map<int, double> bw, bw_cpu;
  for (int t : threads) bw[t] = read_bandwidth(t, &bw_cpu[t]);
  double peak = fma_peak();
  std::printf("read bandwidth:");
  for (int t : threads)
    std::printf(" %.1f GB/s (%d thread%s; %.1f GB/s over CPU time)", bw[t] / 1e9, t, t > 1 ? "s" : "",
                bw_cpu[t] / 1e9);
  std::printf("; f32 FMA peak %.1f GFLOP/s a thread\n", peak / 1e9);
  std::string torch_threads;  // 1 up to the most threads measured
  for (int u = 1; u <= *std::max_element(threads.begin(), threads.end()); ++u)
    torch_threads += (u > 1 ? "," : "") + std::to_string(u);
  std::printf("PyTorch 1.13 (/usr/bin/python3 bench_decode_torch.py):\n");
  std::map<std::string, double> torch =
      with_torch ? torch_rates(tokens, torch_threads) : std::map<std::string, double>{};
  if (torch.empty()) std::printf("  (not available)\n");

  std::vector<std::string> summary;
  std::vector<std::int64_t> prompt(static_cast<std::size_t>(kPrompt));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7919) % kVocab);
  for (const std::string& kind_name : kinds) {
    const char* kind = kind_name.c_str();
    Tensor::manual_seed(1);
    Decoder m(kind);
    std::map<int, std::vector<i64>> eager_generated;  // by threads
    if (!metagrad::Device::get(metagrad::Device::DEFAULT).compiled()) modes = {false};
    for (int t : threads)
      for (bool jit : modes) {
        cpu::set_threads(t);
        double best = 1e30, best_cpu = 1e30, prompt_s = 1e30, bytes = 0;
        std::vector<i64> generated;
        for (int rep = 0; rep < 2; ++rep) {  // the first run compiles the kernels: the second is timed
          for (nn::KVCache& c : m.caches) c.clear();
          double t0 = now();
          i64 next = m.step(prompt, 0, jit);
          prompt_s = std::min(prompt_s, now() - t0);
          t0 = now();
          double c0 = cpu_now();
          bytes = 0;
          generated.clear();
          for (i64 i = 0; i < tokens; ++i) {
            bytes += m.weight_bytes() + m.cache_bytes(kPrompt + i);
            next = m.step({next}, kPrompt + i, jit);
            generated.push_back(next);
          }
          best = std::min(best, now() - t0);
          best_cpu = std::min(best_cpu, (cpu_now() - c0) / t);
        }
        // The jitted tokens are the eager ones (greedy, so any difference in the logits would show).
        auto& eager_tokens = eager_generated[t];
        if (!jit)
          eager_tokens = generated;
        else if (!eager_tokens.empty() && eager_tokens != generated)
          std::printf("%s %dt: the jitted tokens differ from the eager ones\n", kind, t);
        const char* mode = jit ? " jit" : "";
        double rate = static_cast<double>(tokens) / best,
               limit = bw[t] / (bytes / static_cast<double>(tokens));
        double flops = 2.0 * kPrompt * (kLayers * 12.0 * kWidth * kWidth) + 2.0 * kWidth * kVocab +
                       4.0 * kLayers * kPrompt * kPrompt * kWidth;
        double pk = peak * t * (std::string(kind) == "bf16" ? 2 : 1);  // vdpbf16ps: 2 products an f32 FMA
        std::printf(
            "%s %dt%s: prompt %.3f s (%.1f GFLOP/s, %.2f of the %s FMA peak), decode %.2f tok/s "
            "(%.2f ms/token; limit %.1f tok/s at %.0f MB a token)\n",
            kind, t, mode, prompt_s, flops / prompt_s / 1e9, flops / prompt_s / pk,
            std::string(kind) == "bf16" ? "bf16" : "f32", rate, 1e3 / rate, limit,
            bytes / static_cast<double>(tokens) / 1e6);
        // The same over CPU time (a thread's share), against the read kernel's bandwidth over its CPU time:
        // on a loaded machine the wall clock counts the time other processes held the cores
        const double per_token = bytes / static_cast<double>(tokens);
        std::printf("%s %dt%s on CPU: %.2f ms/token a thread, %.2f of the limit at %.1f GB/s\n", kind, t,
                    mode, 1e3 * best_cpu / static_cast<double>(tokens),
                    per_token / bw_cpu[t] / (best_cpu / static_cast<double>(tokens)), bw_cpu[t] / 1e9);
        std::fflush(stdout);
        // PyTorch at its best with up to t threads (its 2-thread run can be slower than its 1-thread one
        // on a shared machine: the anchor is what PyTorch does best on these cores)
        const std::string dt = kind == std::string("f32") || kind == std::string("bf16") ? "fp32" : "int8";
        double anchor = 0;
        for (int u = 1; u <= t; ++u)
          if (auto it = torch.find(dt + " " + std::to_string(u) + "t"); it != torch.end())
            anchor = std::max(anchor, it->second);
        char line[160];
        if (anchor > 0)
          std::snprintf(line, sizeof line,
                        "decode %s %dt%s: %.1f tok/s, %.2f of the bandwidth limit, %.1fx PyTorch", kind, t,
                        mode, rate, rate / limit, rate / anchor);
        else
          std::snprintf(line, sizeof line, "decode %s %dt%s: %.1f tok/s, %.2f of the bandwidth limit", kind,
                        t, mode, rate, rate / limit);
        summary.push_back(line);
      }
  }
  for (const std::string& s : summary) std::printf("%s\n", s.c_str());
}
