#pragma once
// The character GPT of examples/gpt, shared with bench/bench_gpt: token and position embeddings, N
// pre-LayerNorm blocks of causal multi-head self-attention (nn::MultiheadAttention) and a GELU MLP,
// a final LayerNorm and an unbiased head. Names follow PyTorch's modules (wte, wpe, blocks.0.attn...).
// Mixed precision (GPT::bf16): the products with the weights take bf16 copies of the f32 masters
// and bf16 activations, through cpu::gemm_bf16 (f32 sums); their gradients reach the f32 masters.
#include <cstdint>
#include <metagrad/metagrad.hpp>
#include <optional>
#include <vector>

namespace examples {

using metagrad::Tensor;
namespace nn = metagrad::nn;

constexpr int kVocab = 96;  // '\n' is 0, ' '..'~' are 1..95

// x W^T + b with x and W cast to bf16 for the product (f32 sums rounded to bf16), the result back to
// f32: W's gradient flows through the casts to the f32 master.
inline Tensor linear_bf16(const Tensor& x, const Tensor& w, const std::optional<Tensor>& b) {
  using metagrad::dtypes::bfloat16, metagrad::dtypes::float32;
  Tensor y = x.cast(bfloat16).linear(w.cast(bfloat16).transpose()).cast(float32);
  return b ? y + *b : y;
}
inline Tensor linear_bf16(const Tensor& x, const nn::Linear& l) { return linear_bf16(x, l.weight, l.bias); }

struct Block {
  nn::LayerNorm ln1, ln2;
  nn::MultiheadAttention attn;
  nn::Linear fc, proj;
  Block(std::int64_t c, std::int64_t h)
      : ln1(c), ln2(c), attn(c, h, 0, true, true), fc(c, 4 * c), proj(4 * c, c) {}
  Tensor operator()(const Tensor& x, bool bf16 = false) const {
    if (bf16) {
      Tensor y = x + attention_bf16(ln1(x));
      return y + linear_bf16(linear_bf16(ln2(y), fc).gelu(), proj);
    }
    Tensor y = x + attn(ln1(x), true);
    return y + proj(fc(ln2(y)).gelu());
  }
  // attn(x, true), as MultiheadAttention computes it (batch first, no dropout), with its two
  // products with weights in bf16; the scores and their weighted sum stay f32.
  Tensor attention_bf16(const Tensor& x) const {
    std::int64_t n = x.shape()[0], l = x.shape()[1], e = attn.embed_dim, h = attn.num_heads;
    std::vector<Tensor> qkv;
    for (const Tensor& y : linear_bf16(x, attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1))
      qkv.push_back(y.reshape({n, l, h, e / h}).transpose(1, 2));
    Tensor o = qkv[0].scaled_dot_product_attention(qkv[1], qkv[2], {}, 0.0, true);
    return linear_bf16(o.transpose(1, 2).reshape({n, l, e}), attn.out_proj);
  }
  // The same for new positions after those in the block's key/value cache (decoding); attend(h) is
  // the attention's cached call on ln1(x).
  template <class A>
  Tensor cached(const Tensor& x, A attend) const {
    Tensor y = x + attend(ln1(x));
    return y + proj(fc(ln2(y)).gelu());
  }
  nn::StateDict state_dict() const {
    return nn::state_dict({{"ln1", ln1}, {"attn", attn}, {"ln2", ln2}, {"fc", fc}, {"proj", proj}});
  }
};

struct GPT {
  std::int64_t context, vocab;
  bool bf16 = false;  // the products with weights in bf16 (mixed precision), in training and evaluation
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
    for (const Block& b : blocks) x = b(x, bf16);
    return bf16 ? linear_bf16(ln_f(x), head) : head(ln_f(x));
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
    return step(idx, pos, [&](std::size_t i, const Tensor& h) { return blocks[i].attn(h, caches[i]); });
  }
  // The same with the position as data, start_pos (1) int64, the scores spanning `span` positions:
  // nn::DecodeJit's step, which it replays token after token.
  Tensor step(const Tensor& idx, const Tensor& start_pos, std::int64_t span,
              std::vector<nn::KVCache>& caches) const {
    Tensor pos = start_pos + Tensor::arange(static_cast<double>(idx.shape()[1]),
                                            {.device = idx.device(), .dtype = metagrad::dtypes::int64});
    return step(idx, pos, [&](std::size_t i, const Tensor& h) {
      return blocks[i].attn(h, caches[i], start_pos, span);
    });
  }
  // idx at positions pos, attend(i, h) block i's cached attention: the last position's logits.
  template <class A>
  Tensor step(const Tensor& idx, const Tensor& pos, A attend) const {
    std::int64_t t = idx.shape()[1];
    Tensor x = wte(idx) + wpe(pos);
    for (std::size_t i = 0; i < blocks.size(); ++i)
      x = blocks[i].cached(x, [&](const Tensor& h) { return attend(i, h); });
    x = x.shrink({{0, x.shape()[0]}, {t - 1, t}, {0, x.shape()[2]}});
    return head(ln_f(x)).reshape({x.shape()[0], vocab});
  }
  // Every product with a weight in Q8_0 or Q4_0 blocks from now on (inference only; the width a
  // multiple of 32). The embeddings stay f32: they are looked up, not multiplied.
  void quantize(metagrad::cpu::QuantType type) {
    for (Block& b : blocks) b.attn.quantize(type), b.fc.quantize(type), b.proj.quantize(type);
    head.quantize(type);
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
