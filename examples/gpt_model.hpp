#pragma once
// The character GPT of examples/gpt, shared with bench/bench_gpt: token and position embeddings, N
// pre-LayerNorm blocks of causal multi-head self-attention (nn::MultiheadAttention) and a GELU MLP,
// a final LayerNorm and an unbiased head. Names follow PyTorch's modules (wte, wpe, blocks.0.attn...).
#include <cstdint>
#include <metagrad/metagrad.hpp>
#include <vector>

namespace examples {

using metagrad::Tensor;
namespace nn = metagrad::nn;

constexpr int kVocab = 96;  // '\n' is 0, ' '..'~' are 1..95

struct Block {
  nn::LayerNorm ln1, ln2;
  nn::MultiheadAttention attn;
  nn::Linear fc, proj;
  Block(std::int64_t c, std::int64_t h)
      : ln1(c), ln2(c), attn(c, h, 0, true, true), fc(c, 4 * c), proj(4 * c, c) {}
  Tensor operator()(const Tensor& x) const {
    Tensor y = x + attn(ln1(x), true);
    return y + proj(fc(ln2(y)).gelu());
  }
  // The same for new positions after those in the block's key/value cache (decoding).
  Tensor operator()(const Tensor& x, nn::KVCache& cache) const {
    Tensor y = x + attn(ln1(x), cache);
    return y + proj(fc(ln2(y)).gelu());
  }
  nn::StateDict state_dict() const {
    return nn::state_dict({{"ln1", ln1}, {"attn", attn}, {"ln2", ln2}, {"fc", fc}, {"proj", proj}});
  }
};

struct GPT {
  std::int64_t context, vocab;
  nn::Embedding wte, wpe;
  std::vector<Block> blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
  GPT(std::int64_t ctx, std::int64_t width, std::int64_t heads, std::int64_t n,
      std::int64_t vocab_size = kVocab)
      : context(ctx),
        vocab(vocab_size),
        wte(vocab_size, width),
        wpe(ctx, width),
        blocks(),
        ln_f(width),
        head(width, vocab_size, false) {
    for (std::int64_t i = 0; i < n; ++i) blocks.emplace_back(width, heads);
  }
  // idx (B, T) int64 with T <= context: logits (B, T, vocab).
  Tensor operator()(const Tensor& idx) const {
    std::int64_t t = idx.shape()[1];
    Tensor pos =
        Tensor::arange(static_cast<double>(t), {.device = idx.device(), .dtype = metagrad::dtypes::int64});
    Tensor x = wte(idx) + wpe(pos);
    for (const Block& b : blocks) x = b(x);
    return head(ln_f(x));
  }
  // Decoding: one key/value cache per block, of the whole context, for `batch` sequences.
  std::vector<nn::KVCache> make_caches(std::int64_t batch) const {
    std::vector<nn::KVCache> c;
    for (const Block& b : blocks) c.push_back(b.attn.make_cache(batch, context));
    return c;
  }
  // idx (B, T) at positions [start, start + T) after the `start` cached ones: the last position's
  // logits (B, vocab).
  Tensor step(const Tensor& idx, std::int64_t start, std::vector<nn::KVCache>& caches) const {
    std::int64_t t = idx.shape()[1];
    Tensor pos = Tensor::arange(static_cast<double>(start), static_cast<double>(start + t), 1,
                                {.device = idx.device(), .dtype = metagrad::dtypes::int64});
    Tensor x = wte(idx) + wpe(pos);
    for (std::size_t i = 0; i < blocks.size(); ++i) x = blocks[i](x, caches[i]);
    x = x.shrink({{0, x.shape()[0]}, {t - 1, t}, {0, x.shape()[2]}});
    return head(ln_f(x)).reshape({x.shape()[0], vocab});
  }
  nn::StateDict state_dict() const {
    return nn::state_dict({{"wte", wte}, {"wpe", wpe}, {"blocks", blocks}, {"ln_f", ln_f}, {"head", head}});
  }
};

inline Tensor loss_of(const GPT& m, const Tensor& x, const Tensor& y) {
  return m(x).reshape({-1, m.vocab}).sparse_categorical_crossentropy(y.reshape({-1}));
}

// One training step: the loss of (x, y), its gradients clipped to a norm of 1, the optimizer's step.
template <class Optimizer>
Tensor train_step(const GPT& m, Optimizer& opt, const Tensor& x, const Tensor& y) {
  Tensor::TrainingGuard training;
  Tensor loss = loss_of(m, x, y);
  opt.zero_grad();
  loss.backward();
  nn::optim::clip_grad_norm(opt.params, 1.0);
  opt.step();
  return loss;
}

}  // namespace examples
