// The character GPT of examples/gpt (2 blocks, width 128, 4 heads, context 64, vocabulary 96) trained
// on the static path: the model as fx expressions cut at the values read more than once (fx::cut),
// its gradients from fx::grad, gradient clipping at 1 and AdamW with decay groups written as fx
// expressions (one fx::assign pass per parameter). Beside it the dynamic path's TinyJit step of the
// same model (examples/gpt_model.hpp) from the same weights on the same batches (random tokens, batch
// 4), the two taking turns of eight steps: ms/step of each (median and fastest step), and how far the
// losses are apart.
//
//   bench_static_gpt [--steps=N] [--check] [--static-only | --dynamic-only]
//
// --check: 4 steps, exit status 1 where a loss differs from the dynamic path's by more than 1e-5
// relative (the ctest bench_static_gpt_losses). --static-only, --dynamic-only: one path alone (for a
// profiler).
// THREADS sets both paths' threads (default: all).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../examples/gpt_model.hpp"
#include "../examples/static_gpt.hpp"
#include "metagrad/device/threadpool.hpp"
#include "metagrad/fixed.hpp"

namespace {

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::Tensor;
constexpr index_t B = 4, T = 64, C = 128, H = 4, D = C / H, V = examples::kVocab, N = 2;
constexpr double kLr = 1e-3, kB1 = 0.9, kB2 = 0.99, kEps = 1e-8, kDecay = 0.1;

using Block = examples::static_gpt::Block<C>;
using Model = examples::static_gpt::Model<C, T, V, N>;
using examples::static_gpt::head;
using examples::static_gpt::in_proj;
using examples::static_gpt::layernorm;
using examples::static_gpt::linear;

// True above the diagonal: the positions a query may not attend.
const fx::Tensor<bool, T, T>& causal() {
  static const fx::Tensor<bool, T, T> m = [] {
    fx::Tensor<bool, T, T> t;
    for (index_t i = 0; i < T; ++i)
      for (index_t j = 0; j < T; ++j) t(i, j) = j > i;
    return t;
  }();
  return m;
}

// Each block's softmax shift (the rows' maxima of the scores): evaluated into tensors of their own,
// which fx::grad reads as constants.
struct Shifts {
  fx::Tensor<float, B, H, T, 1> at[N];
};

template <class X>
auto block(const X& x, const Block& p, fx::Tensor<float, B, H, T, 1>& shift) {
  auto h = fx::cut(layernorm(x, p.ln1));
  // q, k and v one packed product, cut: the attention reads each several times (the softmax's max,
  // sum and output, and their backward), which would otherwise recompute the projection each time;
  // the heads are views of it.
  auto qkv = fx::cut(in_proj(h, p.attn));
  auto q = head<0, H>(qkv), k = head<1, H>(qkv), v = head<2, H>(qkv);
  // fx::scaled_dot_product_attention<true> written out: q k^T cut (read by the softmax's max and
  // exp), its exp cut (read by the sum, the numerator and their backward, which would otherwise
  // recompute it), the probabilities cut (read by the product with v and by its backward), and the
  // softmax's shift a constant, as the dynamic path's detached max: softmax does
  // not depend on it, and fx's softmax would differentiate through its max (a comparison, a count
  // and two sums more, of a gradient that is zero but for rounding).
  auto qk = fx::cut(fx::matmul(q, k.transpose()));
  auto s = fx::masked_fill(qk * float(1 / std::sqrt(double(D))), causal(), -INFINITY);
  shift = s.template max<-1>(fx::keepdim);
  auto e = fx::cut((s - shift).exp());
  auto probs = fx::cut(e / e.template sum<-1>(fx::keepdim));
  // the heads' outputs cut, as the (B, T, C) the projection reads: read again by its weight's
  // gradient, which would otherwise compute the product (and its transposing copy) once more
  auto o = fx::cut(fx::matmul(probs, v).template permute<0, 2, 1, 3>().template reshape<B, T, C>());
  auto x2 = fx::cut(x + linear(o, p.attn.out_proj));
  auto h2 = fx::cut(layernorm(x2, p.ln2));
  auto f = fx::cut(linear(h2, p.fc));  // read by gelu and by its backward
  // gelu's value cut: read by the product and again by the product's weight gradient, each of
  // which would otherwise evaluate it into a temporary of its own
  auto a = fx::cut(f.gelu());
  return fx::cut(x2 + linear(a, p.proj));
}

template <class Idx, class Lab>
auto loss_of(const Model& m, Shifts& sh, const Idx& idx, const Lab& labels) {
  auto x = fx::cut(fx::embedding(m.wte.weight, idx) + m.wpe.weight);
  auto y = block(block(x, m.blocks[0], sh.at[0]), m.blocks[1], sh.at[1]);
  auto logits = fx::matmul(layernorm(y, m.ln_f), m.head.weight.template permute<1, 0>());
  return fx::sparse_categorical_crossentropy(logits, labels);
}

// One training step on the static path: the loss (before the update). The gradients of the whole
// model (fx::grad_into over its reflected struct), their global norm clipped at 1 (the coefficient
// fused into the update) and AdamW with decay groups (fx::AdamW: matrices decay), each parameter's
// update one fx::assign pass.
template <class Idx, class Lab>
double static_step(Model& model, Model& grads, fx::AdamW<Model>& opt, Shifts& sh, const Idx& idx,
                   const Lab& labels) {
  fx::Tape tape;
  const double loss = fx::grad_into(grads, loss_of(model, sh, idx, labels), model);
  opt.step(model, grads, static_cast<float>(std::min(1.0, 1.0 / (fx::global_norm(grads) + 1e-6))));
  return loss;
}

// The static model's weights from the dynamic one's state dict.
void copy_weights(const examples::GPT& dyn, Model& m) {
  std::map<std::string, std::vector<float>> sd;
  for (const auto& [name, t] : metagrad::nn::get_state_dict(dyn)) sd[name] = t.to_vector<float>();
  examples::static_gpt::copy_weights(sd, m);
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 12;
  bool check = false, static_only = false, dynamic_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0)
      steps = std::max(4, std::atoi(argv[i] + 8));
    else if (std::strcmp(argv[i], "--check") == 0)
      check = true, steps = 4;
    else if (std::strcmp(argv[i], "--static-only") == 0)
      static_only = true;
    else if (std::strcmp(argv[i], "--dynamic-only") == 0)
      dynamic_only = true;
    else
      return std::fprintf(stderr,
                          "usage: bench_static_gpt [--steps=N] [--check] [--static-only | --dynamic-only]\n"),
             2;
  }
  std::mt19937_64 g(7);
  std::uniform_int_distribution<std::int64_t> tok(0, V - 1);
  std::vector<std::vector<std::int64_t>> xs(static_cast<std::size_t>(steps)), ys(xs.size());
  for (std::size_t s = 0; s < xs.size(); ++s)
    for (index_t i = 0; i < B * T; ++i) xs[s].push_back(tok(g)), ys[s].push_back(tok(g));

  // The dynamic path: TinyJit on the default device.
  Tensor::manual_seed(1337);
  examples::GPT dyn(T, C, H, N);
  auto model = std::make_unique<Model>();
  copy_weights(dyn, *model);
  metagrad::nn::optim::AdamW opt(metagrad::nn::optim::decay_groups(metagrad::nn::get_parameters(dyn), kDecay),
                                 kLr, kB1, kB2, kEps);
  std::function<Tensor(Tensor, Tensor)> run = [&](Tensor x, Tensor y) {
    return examples::train_step(dyn, opt, x, y);
  };
  metagrad::TinyJit<std::function<Tensor(Tensor, Tensor)>> jit(run);
  std::vector<double> dyn_loss, dyn_ms;
  auto dyn_step = [&](std::size_t s) {
    auto t0 = Clock::now();
    Tensor x(xs[s], {B, T}), y(ys[s], {B, T});
    dyn_loss.push_back(jit(x, y).item<double>());
    dyn_ms.push_back(ms_since(t0));
  };

  // The static path, from the same weights on the same batches.
  auto grads = std::make_unique<Model>();
  fx::AdamW<Model> adamw(
      {.lr = kLr, .b1 = kB1, .b2 = kB2, .eps = kEps, .weight_decay = kDecay, .decay_vectors = false});
  auto shifts = std::make_unique<Shifts>();
  auto idx = std::make_unique<fx::Tensor<std::int64_t, B, T>>();
  auto labels = std::make_unique<fx::Tensor<std::int64_t, B, T>>();
  std::vector<double> st_loss, st_ms;
  auto static_step_at = [&](std::size_t s) {
    auto t0 = Clock::now();
    std::copy(xs[s].begin(), xs[s].end(), idx->begin());
    std::copy(ys[s].begin(), ys[s].end(), labels->begin());
    st_loss.push_back(static_step(*model, *grads, adamw, *shifts, *idx, *labels));
    st_ms.push_back(ms_since(t0));
  };
  // The two paths take turns, kTurn steps each (each warm in its turn): on a shared machine a spell
  // of load then slows both, not one of them.
  constexpr std::size_t kTurn = 8;
  for (std::size_t b = 0; b < xs.size(); b += kTurn) {
    const std::size_t e = std::min(xs.size(), b + kTurn);
    for (std::size_t s = b; s < e && !static_only; ++s) dyn_step(s);
    for (std::size_t s = b; s < e && !dynamic_only; ++s) static_step_at(s);
  }

  if (static_only) {  // the fastest step too: on a shared machine the least disturbed
    std::vector<double> warm(st_ms.begin() + 1, st_ms.end());
    std::printf("static path (fx::grad) %.2f ms/step, fastest %.2f\n", median(warm),
                *std::min_element(warm.begin(), warm.end()));
    return 0;
  }
  if (dynamic_only) {
    std::printf("dynamic TinyJit on %s %.2f ms/step\n", metagrad::Device::DEFAULT.c_str(),
                median(std::vector<double>(dyn_ms.begin() + 3, dyn_ms.end())));
    return 0;
  }
  double worst = 0;
  if (metagrad::getenv_int("DEBUG") >= 1)
    for (std::size_t s = 0; s < xs.size(); ++s)
      std::printf("step %zu: static %.9f dynamic %.9f\n", s, st_loss[s], dyn_loss[s]);
  for (std::size_t s = 0; s < xs.size(); ++s)
    worst = std::max(worst, std::abs(st_loss[s] - dyn_loss[s]) / std::abs(dyn_loss[s]));
  std::vector<double> dyn_warm(dyn_ms.begin() + 3, dyn_ms.end()), st_warm(st_ms.begin() + 1, st_ms.end());
  std::printf("GPT %ld blocks, width %ld, %ld heads, context %ld, batch %ld; %d steps, %d threads\n", long{N},
              long{C}, long{H}, long{T}, long{B}, steps, metagrad::thread_count());
  std::printf("  static path (fx::grad)      %8.2f ms/step\n", median(st_warm));
  std::printf("  dynamic TinyJit on %-7s  %8.2f ms/step   static/dynamic speed-up %.2fx\n",
              metagrad::Device::DEFAULT.c_str(), median(dyn_warm), median(dyn_warm) / median(st_warm));
  // the fastest step of each: on a shared machine the least disturbed by other processes
  const double st_best = *std::min_element(st_warm.begin(), st_warm.end()),
               dyn_best = *std::min_element(dyn_warm.begin(), dyn_warm.end());
  std::printf("  fastest step: static %.2f, dynamic %.2f ms   static/dynamic speed-up %.2fx\n", st_best,
              dyn_best, dyn_best / st_best);
  std::printf("  losses %.5f .. %.5f; static vs dynamic at most %.2g relative (want <= 1e-5)\n",
              dyn_loss.front(), dyn_loss.back(), worst);
  return check && !(worst <= 1e-5) ? 1 : 0;
}
