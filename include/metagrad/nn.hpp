#pragma once
// Layers (tinygrad's nn/__init__.py): Linear, Conv2d, BatchNorm2d, LayerNorm, Embedding. Each holds
// its parameters as public Tensors (tinygrad's names and shapes, PyTorch's initialisation), is called
// like a function, and names its state for nn/state.hpp's protocol:
//
//   A model is any type with `nn::StateDict state_dict() const`; Tensor, StateDict, std::optional
//   and std::vector of models are models too. A composite lists its members with nn::state_dict,
//   and nested names join with dots, as in PyTorch:
//
//     struct Net {
//       nn::Conv2d c1{1, 8, 3};
//       std::vector<nn::Linear> fc{{8 * 26 * 26, 32}, {32, 10}};
//       Tensor operator()(const Tensor& x) const { return fc[1](fc[0](c1(x).relu().flatten(1)).relu()); }
//       nn::StateDict state_dict() const { return nn::state_dict({{"c1", c1}, {"fc", fc}}); }
//     };
//     Net net;
//     nn::get_state_dict(net);          // c1.weight, c1.bias, fc.0.weight, fc.0.bias, fc.1.weight, fc.1.bias
//     nn::optim::SGD opt(nn::get_parameters(net), 0.01);
//     nn::safe_save(nn::get_state_dict(net), "net.safetensors");
//     nn::load_state_dict(net, nn::safe_load("net.safetensors"));
//
//   A StateDict holds Tensor handles: its entries are the model's tensors, not copies.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "metagrad/nn/decode_jit.hpp"
#include "metagrad/nn/optim.hpp"
#include "metagrad/nn/quantized.hpp"
#include "metagrad/nn/state.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::nn {

// A size given once for every spatial axis or once per axis: Conv2d(3, 8, 3) or Conv2d(3, 8, {3, 5}).
struct Sizes {
  std::vector<std::int64_t> v;
  Sizes(std::int64_t x) : v{x} {}  // NOLINT: implicit, like Python's int-or-tuple
  Sizes(std::initializer_list<std::int64_t> l) : v(l) {}
  Sizes(std::vector<std::int64_t> l) : v(std::move(l)) {}  // NOLINT
};

// y = x @ weight^T + bias. weight (out, in) and bias (out,) are uniform in +-1/sqrt(in), as PyTorch
// (kaiming_uniform with a = sqrt(5)).
class Linear {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Tensor operator()(const Tensor& x) const;
  StateDict state_dict() const;
  // Products with the weight in Q8_0 or Q4_0 blocks from now on (nn/quantized.hpp): inference only;
  // `weight` stays the float master copy, which state_dict saves.
  Linear& quantize(cpu::QuantType type);

  Tensor weight;
  std::optional<Tensor> bias;
  std::optional<QuantizedTensor> qweight;  // set by quantize
};

// 2-D convolution of (N, in, H, W). weight (out, in/groups, kh, kw) and bias (out,) are uniform in
// +-1/sqrt(in/groups * kh * kw). padding is 1, 2 (h, w) or 4 (left, right, top, bottom) values.
class Conv2d {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Sizes kernel_size, Sizes stride = 1,
         Sizes padding = 0, Sizes dilation = 1, std::int64_t groups = 1, bool bias = true);
  Tensor operator()(const Tensor& x) const;
  StateDict state_dict() const;

  std::vector<std::int64_t> kernel_size, stride, padding, dilation;
  std::int64_t groups;
  Tensor weight;
  std::optional<Tensor> bias;
};

// Batch normalisation of (N, C, H, W) over (N, H, W). With Tensor::training it normalises by the
// batch's statistics and (track_running_stats) moves running_mean and running_var (unbiased) by
// `momentum` towards them; otherwise it uses the running statistics. Without track_running_stats
// there are none and the batch's statistics are always used, as in PyTorch.
class BatchNorm2d {
 public:
  explicit BatchNorm2d(std::int64_t sz, double eps = 1e-5, bool affine = true,
                       bool track_running_stats = true, double momentum = 0.1);
  Tensor operator()(const Tensor& x) const;
  StateDict state_dict() const;

  std::int64_t sz;
  double eps, momentum;
  bool track_running_stats;
  std::optional<Tensor> weight, bias;  // ones and zeros, with affine
  // zeros, ones and zeros(1), requires_grad = false; with track_running_stats
  std::optional<Tensor> running_mean, running_var, num_batches_tracked;
};

// Normalises over the last normalized_shape.size() axes, then * weight + bias (elementwise_affine).
class LayerNorm {
 public:
  LayerNorm(Sizes normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  // LayerNorm({3, 4}) would otherwise be ambiguous with the copy constructor.
  LayerNorm(std::initializer_list<std::int64_t> normalized_shape, double eps = 1e-5,
            bool elementwise_affine = true)
      : LayerNorm(Sizes(normalized_shape), eps, elementwise_affine) {}
  Tensor operator()(const Tensor& x) const;
  StateDict state_dict() const;

  std::vector<std::int64_t> normalized_shape;
  double eps;
  std::optional<Tensor> weight, bias;  // ones and zeros of normalized_shape
};

// Rows of weight (vocab_size, embed_size) picked by integer indices of any shape: the result has the
// indices' shape plus embed_size. The lookup is weight.index_select(0, idx): forward and backward cost
// O(indices x embed_size) (the backward a scatter-add), and an index outside [0, vocab_size) throws,
// in a TinyJit step's replays too.
class Embedding {
 public:
  Embedding(std::int64_t vocab_size, std::int64_t embed_size);
  Tensor operator()(const Tensor& idx) const;
  StateDict state_dict() const;

  std::int64_t vocab_size, embed_size;
  Tensor weight;  // glorot_uniform
};

// PyTorch's nn.MultiheadAttention (1.13): query (L, N, E), key and value (S, N, E), or (N, L, E) and
// (N, S, E) with batch_first, or unbatched (L, E). in_proj_weight (3E, E) is glorot_uniform, in_proj_bias
// and out_proj.bias zeros, as PyTorch. attn_mask (L, S) or (N * num_heads, L, S): a bool mask is true
// where attention is NOT allowed (PyTorch's nn.MultiheadAttention convention, the opposite of
// scaled_dot_product_attention's), a float one is added. Returns the output only (need_weights=False).
// Keys and values of the positions a decoder has seen, so that generating a token costs one step over
// them instead of the whole prefix: k and v (N, H, max_len, head_dim), preallocated, the first `len`
// positions written. The caller holds one per attention layer and clears it for a new sequence.
struct KVCache {
  KVCache(std::int64_t batch, std::int64_t num_heads, std::int64_t max_len, std::int64_t head_dim,
          TensorOptions opts = {});
  std::int64_t max_len() const { return k.shape()[2]; }
  void clear() { len = 0; }
  // The positions the scores of a step ending at position `end` span: end rounded up to 64, at most
  // max_len (few spans, so few kernels to compile and few TinyJit captures: nn::DecodeJit).
  static std::int64_t span(std::int64_t end, std::int64_t max_len);

  Tensor k, v;
  std::int64_t len = 0;
};

// Causal attention of L new positions, q, k and v (N, H, L, head_dim), over the cache and themselves:
// query i, at position cache.len + i, attends to positions <= cache.len + i. k and v are written to the
// cache at cache.len, which advances by L (so a prompt runs as one pass, then one token at a time).
// Scores span the written positions rounded up to 64 (few shapes, so few kernels to compile). On a host
// device, without gradients, the cache is written in place and the result realized; else functionally.
Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, KVCache& cache);
// The same with the position as data, so that a TinyJit replay (nn::DecodeJit) writes and attends at
// the position of its call: start_pos is an int64 tensor of one element on q's device, the position
// of the first new row, read when the step runs (a position past the cache throws then); the scores
// span the first `span` positions (KVCache::span of the step's end, at least L). cache.len is left to
// the caller. Host devices (CPU, CLANG, LLVM), without gradients: the cache is written in place and
// the result realized.
Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, KVCache& cache,
                        const Tensor& start_pos, std::int64_t span);

class MultiheadAttention {
 public:
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout = 0, bool bias = true,
                     bool batch_first = false);
  Tensor operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                    const std::optional<Tensor>& attn_mask = {}, bool is_causal = false) const;
  Tensor operator()(const Tensor& x, bool is_causal = false) const { return (*this)(x, x, x, {}, is_causal); }
  // Causal self-attention of x's new positions after those in `cache` (cached_attention), x as above.
  Tensor operator()(const Tensor& x, KVCache& cache) const;
  // The same through the position-as-data cached_attention: the form a TinyJit step replays.
  Tensor operator()(const Tensor& x, KVCache& cache, const Tensor& start_pos, std::int64_t span) const;
  // A cache for this layer: batch sequences of up to max_len positions.
  KVCache make_cache(std::int64_t batch, std::int64_t max_len) const;
  // Self-attention's products with in_proj_weight and out_proj's weight in Q8_0 or Q4_0 blocks from
  // now on (Linear::quantize; inference only, and not for key and value other than the query).
  MultiheadAttention& quantize(cpu::QuantType type);
  StateDict state_dict() const;

  std::int64_t embed_dim, num_heads;
  double dropout;
  bool batch_first;
  Tensor in_proj_weight;
  std::optional<Tensor> in_proj_bias;
  Linear out_proj;
  std::optional<QuantizedTensor> in_proj_q;  // set by quantize

 private:
  Tensor in_proj(const Tensor& x) const;  // x W_in^T + b_in, quantised or not
  // The cached calls: x projected, attend(q, k, v) on (N, H, L, hd), projected back.
  Tensor cached(const Tensor& x,
                const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& attend) const;
};

// The next token from logits (..., vocab): argmax at temperature 0, else a draw from
// softmax(logits / temperature), restricted to the top_k largest logits when top_k > 0. int64 indices
// of the logits' shape without the last axis.
Tensor sample(const Tensor& logits, double temperature = 1.0, std::int64_t top_k = 0);

}  // namespace metagrad::nn
