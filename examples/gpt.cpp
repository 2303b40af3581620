// A character-level GPT (token and position embeddings, N blocks of LayerNorm, causal multi-head
// self-attention and a GELU MLP, AdamW with a cosine schedule) trained on Debian's `fortunes`
// package: every text file of /usr/share/games/fortunes, 2.5 MB of English quips and quotations.
//
//   gpt [--steps=N] [--batch=N] [--context=N] [--width=N] [--heads=N] [--blocks=N] [--lr=X]
//       [--device=NAME] [--threads=N] [--data=FILE_OR_DIR] [--eval-every=N] [--seed=N]
//       [--save=FILE.safetensors] [--max-val-loss=X]               train, then print a sample
//   gpt --load=FILE.safetensors [--sample=N] [--temperature=X] [--top-k=N]   only generate
//
// --max-val-loss makes the run a test: exit status 1 when the last validation loss is above it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <metagrad/device/threadpool.hpp>
#include <metagrad/metagrad.hpp>
#include <random>
#include <string>
#include <vector>

#include "char_text.hpp"
#include "flags.hpp"
#include "gpt_model.hpp"

using namespace metagrad;
using examples::GPT;
using examples::kVocab;
using examples::loss_of;

namespace {

struct Options {
  long steps = 600, batch = 32, context = 64, width = 128, heads = 4, blocks = 2, eval_every = 100,
       seed = 1337, sample = 300, top_k = 0, threads = 0;
  double lr = 3e-3, temperature = 0.8, max_val_loss = 0;
  std::string device = getenv("DEVICE", Device::DEFAULT), data = "/usr/share/games/fortunes", save, load;
};

Options parse(int argc, char** argv) {
  Options o;
  examples::Flags flags(argv[0]);
  flags.add("steps", o.steps, "N").add("batch", o.batch, "N").add("context", o.context, "N");
  flags.add("width", o.width, "N").add("heads", o.heads, "N").add("blocks", o.blocks, "N");
  flags.add("lr", o.lr, "X").add("device", o.device, "NAME").add("threads", o.threads, "N");
  flags.add("data", o.data, "FILE_OR_DIR").add("eval-every", o.eval_every, "N").add("seed", o.seed, "N");
  flags.add("save", o.save, "FILE").add("max-val-loss", o.max_val_loss, "X").add("load", o.load, "FILE");
  flags.add("sample", o.sample, "N").add("temperature", o.temperature, "X").add("top-k", o.top_k, "N");
  flags.parse(argc, argv);
  o.device = Device::canonicalize(o.device);
  flags.require(o.steps >= 0 && o.batch >= 1 && o.context >= 1 && o.width >= 1 && o.heads >= 1 &&
                    o.blocks >= 0 && o.width % o.heads == 0 && o.eval_every >= 1,
                "sizes must be positive and the width a multiple of the heads");
  return o;
}

// Random windows of the text: inputs and the next characters, (batch, context) each.
std::pair<Tensor, Tensor> batch_of(const std::vector<std::int64_t>& text, long b, long t,
                                   std::mt19937_64& rng, const std::string& device) {
  auto [x, y] = examples::windows(text, b, t, rng);
  return {Tensor(x, {b, t}, {.device = device}), Tensor(y, {b, t}, {.device = device})};
}

// Decoding over the blocks' key/value caches: the prompt (here a newline) runs as one pass, then each
// token costs one step over the cache. When the context is full, its last half is the new prompt.
std::string generate(const GPT& m, long n, double temperature, long top_k, const std::string& device) {
  Tensor::NoGradGuard no_grad;
  std::vector<std::int64_t> ctx{0};  // start after a newline
  std::vector<nn::KVCache> caches = m.make_caches(1);
  std::string out;
  std::size_t fed = 0;  // tokens of ctx in the cache
  for (long i = 0; i < n; ++i) {
    if (static_cast<std::int64_t>(ctx.size()) > m.context) {
      ctx.erase(ctx.begin(), ctx.end() - m.context / 2);
      for (nn::KVCache& c : caches) c.clear();
      fed = 0;
    }
    std::vector<std::int64_t> fresh(ctx.begin() + static_cast<std::ptrdiff_t>(fed), ctx.end());
    auto t = static_cast<std::int64_t>(fresh.size());
    Tensor last = m.step(Tensor(fresh, {1, t}, {.device = device}), static_cast<std::int64_t>(fed), caches);
    fed = ctx.size();
    std::int64_t next = nn::sample(last, temperature, top_k).item<std::int64_t>();
    ctx.push_back(next);
    out += examples::decode(next);
  }
  return out;
}

// One terminal line redrawn with \r, only when stdout is a terminal.
struct Progress {
  long total;
  bool tty = isatty(STDOUT_FILENO);
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last{};
  void draw(long done, double loss, double lr) {
    auto now = std::chrono::steady_clock::now();
    if (!tty || (done < total && now - last < std::chrono::milliseconds(100))) return;
    last = now;
    double secs = std::chrono::duration<double>(now - start).count();
    int width = 30, fill = static_cast<int>(width * done / std::max(total, 1L));
    std::printf("\rstep %ld/%ld [%s%s] loss %.4f lr %.2e %.0f ms/step ", done, total,
                std::string(static_cast<std::size_t>(fill), '#').c_str(),
                std::string(static_cast<std::size_t>(width - fill), '.').c_str(), loss, lr,
                done ? 1000 * secs / static_cast<double>(done) : 0.0);
    std::fflush(stdout);
  }
  void clear() {
    if (tty) std::printf("\r%80s\r", "");
  }
};

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a log as they are printed
  Options o = parse(argc, argv);
  if (o.threads > 0) setenv("THREADS", std::to_string(o.threads).c_str(), 1);
  Device::get(o.device);
  Device::DEFAULT = o.device;
  Tensor::manual_seed(static_cast<std::uint64_t>(o.seed));

  if (!o.load.empty()) {  // generate only, the sizes from the file's metadata
    auto meta = nn::safe_load_metadata(o.load);
    auto size = [&](const char* k) { return std::stol(meta.at(k)); };
    GPT model(size("context"), size("width"), size("heads"), size("blocks"));
    nn::load_state_dict(model, nn::safe_load(o.load));
    std::printf("%s", generate(model, o.sample, o.temperature, o.top_k, o.device).c_str());
    std::printf("\n");
    return 0;
  }

  std::vector<std::int64_t> text = examples::load_text(o.data);
  const examples::SplitText split(text);
  const std::vector<std::int64_t>&train = split.train, &val = split.val;
  GPT model(o.context, o.width, o.heads, o.blocks);
  std::vector<Tensor> params = nn::get_parameters(model);
  std::int64_t count = 0;
  for (const Tensor& p : params) count += p.numel();
  std::printf("GPT: %ld blocks, width %ld, %ld heads, context %ld, vocab %d: %lld parameters\n", o.blocks,
              o.width, o.heads, o.context, kVocab, static_cast<long long>(count));
  std::printf("text: %s, %zu characters (%zu for validation); device %s, %d threads, batch %ld, %ld steps\n",
              o.data.c_str(), text.size(), val.size(), o.device.c_str(), thread_count(), o.batch, o.steps);

  nn::optim::AdamW opt(nn::optim::decay_groups(params, 0.1), o.lr, 0.9, 0.99);
  nn::optim::CosineWarmup sched(opt, std::min(100L, o.steps / 10 + 1), std::max(o.steps, 1L), o.lr,
                                o.lr / 10);
  std::mt19937_64 rng(static_cast<std::uint64_t>(o.seed));
  auto evaluate = [&] {
    Tensor::NoGradGuard no_grad;
    return examples::validation_loss(val, o.batch, o.context, [&](const auto& x, const auto& y) {
      return loss_of(model, Tensor(x, {o.batch, o.context}, {.device = o.device}),
                     Tensor(y, {o.batch, o.context}, {.device = o.device}))
          .item<float>();
    });
  };
  Progress bar{o.steps};
  double val_loss = NAN;
  for (long step = 1; step <= o.steps; ++step) {
    auto [x, y] = batch_of(train, o.batch, o.context, rng, o.device);
    float l = examples::train_step(model, opt, x, y).item<float>();
    bar.draw(step, l, opt.get_lr());
    if (step % o.eval_every == 0 || step == o.steps) {
      Tensor::TrainingGuard eval(false);
      val_loss = evaluate();
      bar.clear();
      std::printf("step %ld: train loss %.4f, validation loss %.4f\n", step, l, val_loss);
    }
    sched.step();
  }
  bar.clear();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - bar.start).count();
  std::printf("trained in %.1f s (%.1f ms/step)\n", secs,
              o.steps ? 1000 * secs / static_cast<double>(o.steps) : 0.0);
  if (!o.save.empty()) {
    nn::safe_save(nn::get_state_dict(model), o.save,
                  {{"context", std::to_string(o.context)},
                   {"width", std::to_string(o.width)},
                   {"heads", std::to_string(o.heads)},
                   {"blocks", std::to_string(o.blocks)}});
    std::printf("saved %s\n", o.save.c_str());
  }
  if (o.sample > 0)
    std::printf("---- sample ----\n%s\n",
                generate(model, o.sample, o.temperature, o.top_k, o.device).c_str());
  if (o.max_val_loss > 0 && !(val_loss <= o.max_val_loss)) {
    std::fprintf(stderr, "gpt: validation loss %.4f is above %.4f\n", val_loss, o.max_val_loss);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt: %s\n", e.what());
  return 1;
}
