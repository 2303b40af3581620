#pragma once
// A decoding step replayed by TinyJit (issue 62): token n replays the kernels captured for its
// span of the cache with position n as data, with no scheduling and no graph. The step is written
// once over (tokens, start_pos, span), its attention through MultiheadAttention's
// (x, cache, start_pos, span) call; DecodeJit keeps one TinyJit per tokens' shape and span (the
// position rounded up to 64, KVCache::span), so a step is captured at its second call in a span and
// replayed from the third:
//
//   nn::DecodeJit decode([&](const Tensor& tok, const Tensor& pos, std::int64_t span) {
//     Tensor x = wte(tok) + wpe(pos + Tensor::arange(tok.shape()[1], ...));
//     for (...) x = x + attn(ln1(x), caches[i], pos, span), ...;
//     return head(ln_f(x));
//   }, /*max_len=*/1024);
//   Tensor logits = decode(Tensor(tokens, {1, t}), /*pos=*/n);   // overwritten by the next call
//
// The step's rules are TinyJit's (jit.hpp). The caches' `len` is the caller's: a replay runs no host
// code. On an interpreted device (CPU) every call runs the step as it is, with the same kernels' math.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "metagrad/jit.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::nn {

class DecodeJit {
 public:
  // step(tokens (N, L) int64, start_pos (1) int64, span): the step's outputs (logits) for tokens at
  // positions [start_pos, start_pos + L), attending over the caches' first `span` positions.
  using Step = std::function<Tensor(const Tensor& tokens, const Tensor& start_pos, std::int64_t span)>;
  DecodeJit(Step step, std::int64_t max_len);
  // tokens (N, L) int64 at positions [pos, pos + L) of the caches: the step's result, which the next
  // call overwrites where it was replayed.
  Tensor operator()(const Tensor& tokens, std::int64_t pos);
  // Calls replayed so far (the rest ran the step: the first two of each tokens' shape and span).
  std::int64_t replays() const { return replays_; }

 private:
  using Jit = TinyJit<std::function<Tensor(const Tensor&, const Tensor&)>>;
  Step step_;
  std::int64_t max_len_, replays_ = 0;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::unique_ptr<Jit>> jits_;
};

}  // namespace metagrad::nn
