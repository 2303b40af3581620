// Layers: tinygrad's nn/__init__.py, with the checks that name the layer when an input does not fit.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "metagrad/detail/cat.hpp"
#include "metagrad/nn.hpp"

namespace metagrad::nn {

using metagrad::detail::cat;

namespace {
using V = std::vector<std::int64_t>;

std::string str(std::int64_t x) { return std::to_string(x); }
std::string str(const V& v) { return to_string(Dims(v)); }

void check_size(const std::string& layer, const char* what, std::int64_t x, std::int64_t min) {
  if (x < min)
    throw std::invalid_argument(cat(layer, ": ", what, " must be at least ", str(min), ", got ", str(x)));
}
V per_axis(const std::string& layer, const char* what, const Sizes& s, std::int64_t min) {
  if (s.v.size() != 1 && s.v.size() != 2)
    throw std::invalid_argument(cat(layer, ": ", what, " ", str(s.v), " needs 1 or 2 values"));
  for (std::int64_t x : s.v) check_size(layer, what, x, min);
  return s.v.size() == 2 ? s.v : V{s.v[0], s.v[0]};
}
// PyTorch's bias init: uniform in +-1/sqrt(fan_in) (0 for an empty fan).
Tensor bias_init(std::int64_t n, std::int64_t fan_in) {
  double bound = fan_in > 0 ? 1 / std::sqrt(static_cast<double>(fan_in)) : 0;
  return Tensor::uniform({n}, -bound, bound);
}
const double kSqrt5 = std::sqrt(5.0);
}  // namespace

// ---- Linear ----

Linear::Linear(std::int64_t in, std::int64_t out, bool b)
    : weight((check_size("Linear", "in_features", in, 0), check_size("Linear", "out_features", out, 0),
              Tensor::kaiming_uniform({out, in}, kSqrt5))) {
  if (b) bias = bias_init(out, in);
}
Tensor Linear::operator()(const Tensor& x) const {
  std::int64_t in = weight.shape()[1];
  if (x.ndim() < 1 || x.shape()[x.shape().size() - 1] != in)
    throw std::invalid_argument(cat("Linear(", str(in), ", ", str(weight.shape()[0]), "): input ",
                                    to_string(x.shape()), " must end in ", str(in), " features"));
  return qweight ? nn::linear(x, *qweight, bias) : x.linear(weight.transpose(), bias);
}
StateDict Linear::state_dict() const { return nn::state_dict({{"weight", weight}, {"bias", bias}}); }
Linear& Linear::quantize(cpu::QuantType type) {
  qweight = weight.quantize(type);
  return *this;
}

// ---- Conv2d ----

namespace {
std::string conv_name(std::int64_t in, std::int64_t out) {
  return cat("Conv2d(", str(in), ", ", str(out), ")");
}
Tensor conv_weight(std::int64_t in, std::int64_t out, const V& k, std::int64_t groups) {
  std::string name = conv_name(in, out);
  check_size(name, "in_channels", in, 1);
  check_size(name, "out_channels", out, 1);
  check_size(name, "groups", groups, 1);
  if (in % groups || out % groups)
    throw std::invalid_argument(
        cat(name, ": in_channels and out_channels must be divisible by groups = ", str(groups)));
  return Tensor::kaiming_uniform({out, in / groups, k[0], k[1]}, kSqrt5);
}
}  // namespace

Conv2d::Conv2d(std::int64_t in, std::int64_t out, Sizes k, Sizes s, Sizes p, Sizes d, std::int64_t g, bool b)
    : kernel_size(per_axis(conv_name(in, out), "kernel_size", k, 1)),
      stride(per_axis(conv_name(in, out), "stride", s, 1)),
      padding(p.v),
      dilation(per_axis(conv_name(in, out), "dilation", d, 1)),
      groups(g),
      weight(conv_weight(in, out, kernel_size, g)) {
  if (padding.size() != 1 && padding.size() != 2 && padding.size() != 4)
    throw std::invalid_argument(
        cat(conv_name(in, out), ": padding ", str(padding), " needs 1, 2 or 4 values"));
  for (std::int64_t x : padding) check_size(conv_name(in, out), "padding", x, 0);
  if (b) bias = bias_init(out, in / g * kernel_size[0] * kernel_size[1]);
}
Tensor Conv2d::operator()(const Tensor& x) const {
  return x.conv2d(weight, bias, groups, stride, dilation, padding);
}
StateDict Conv2d::state_dict() const { return nn::state_dict({{"weight", weight}, {"bias", bias}}); }

// ---- BatchNorm2d ----

BatchNorm2d::BatchNorm2d(std::int64_t sz_, double eps_, bool affine, bool track, double momentum_)
    : sz(sz_), eps(eps_), momentum(momentum_), track_running_stats(track) {
  check_size("BatchNorm2d", "sz", sz, 1);
  if (!(eps >= 0))
    throw std::invalid_argument(cat("BatchNorm2d: eps must be >= 0, got ", std::to_string(eps)));
  if (!(momentum >= 0 && momentum <= 1))
    throw std::invalid_argument(
        cat("BatchNorm2d: momentum must be in [0, 1], got ", std::to_string(momentum)));
  if (affine) weight = Tensor::ones({sz}), bias = Tensor::zeros({sz});
  if (track) {
    running_mean = Tensor::zeros({sz}, {.requires_grad = false});
    running_var = Tensor::ones({sz}, {.requires_grad = false});
    num_batches_tracked = Tensor::zeros({1}, {.requires_grad = false});
  }
}

Tensor BatchNorm2d::operator()(const Tensor& x) const {
  if (x.ndim() != 4 || x.shape()[1] != sz)
    throw std::invalid_argument(
        cat("BatchNorm2d(", str(sz), "): input ", to_string(x.shape()), " must be (N, ", str(sz), ", H, W)"));
  if (!Tensor::training && track_running_stats)
    return x.batchnorm(weight, bias, *running_mean, (*running_var + eps).rsqrt());
  // Two passes over x (mean, then the variance of x - mean): exact where E[x^2] - E[x]^2 cancels.
  Tensor batch_mean = x.mean({0, 2, 3});
  Tensor y = x - batch_mean.reshape({1, -1, 1, 1});
  Tensor batch_var = (y * y).mean({0, 2, 3});
  if (Tensor::training && track_running_stats) {
    std::int64_t n = x.numel() / sz;
    if (n < 2)
      throw std::invalid_argument(cat("BatchNorm2d(", str(sz),
                                      "): training needs more than one value per channel, ", "the input is ",
                                      to_string(x.shape())));
    Tensor rm = *running_mean, rv = *running_var, nbt = *num_batches_tracked;
    double unbias = static_cast<double>(n) / static_cast<double>(n - 1);
    rm.assign(((1 - momentum) * rm + momentum * batch_mean.detach().cast(rm.dtype())).cast(rm.dtype()));
    rv.assign(
        ((1 - momentum) * rv + momentum * unbias * batch_var.detach().cast(rv.dtype())).cast(rv.dtype()));
    nbt.assign(nbt + 1);
  }
  return x.batchnorm(weight, bias, batch_mean, (batch_var + eps).pow(-0.5));
}

StateDict BatchNorm2d::state_dict() const {
  return nn::state_dict({{"weight", weight},
                         {"bias", bias},
                         {"running_mean", running_mean},
                         {"running_var", running_var},
                         {"num_batches_tracked", num_batches_tracked}});
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(Sizes shape, double eps_, bool affine) : normalized_shape(shape.v), eps(eps_) {
  if (normalized_shape.empty()) throw std::invalid_argument("LayerNorm: normalized_shape is empty");
  for (std::int64_t x : normalized_shape) check_size("LayerNorm", "a normalized size", x, 1);
  if (affine) weight = Tensor::ones(Dims(normalized_shape)), bias = Tensor::zeros(Dims(normalized_shape));
}

Tensor LayerNorm::operator()(const Tensor& x) const {
  std::size_t k = normalized_shape.size(), n = x.shape().size();
  if (n < k || !std::equal(normalized_shape.begin(), normalized_shape.end(),
                           x.shape().end() - static_cast<std::ptrdiff_t>(k)))
    throw std::invalid_argument(cat("LayerNorm", str(normalized_shape), ": the last dimensions of input ",
                                    to_string(x.shape()), " must be ", str(normalized_shape)));
  V axes;
  for (std::size_t i = 0; i < k; ++i) axes.push_back(-1 - static_cast<std::int64_t>(i));
  Tensor y = x.layernorm(axes, eps);
  return weight ? y * *weight + *bias : y;
}
StateDict LayerNorm::state_dict() const { return nn::state_dict({{"weight", weight}, {"bias", bias}}); }

// ---- Embedding ----

Embedding::Embedding(std::int64_t vocab, std::int64_t embed)
    : vocab_size(vocab),
      embed_size(embed),
      weight((check_size("Embedding", "vocab_size", vocab, 1),
              check_size("Embedding", "embed_size", embed, 1), Tensor::glorot_uniform({vocab, embed}))) {}

Tensor Embedding::operator()(const Tensor& idx) const {
  if (idx.dtype() == dtypes::bool_)
    throw std::invalid_argument(cat("Embedding: indices ", to_string(idx), " must be integers, not bool"));
  V shape(idx.shape().begin(), idx.shape().end());
  Tensor flat = idx.reshape({-1});
  if (dtypes::is_float(idx.dtype())) flat = flat.cast(dtypes::int64);  // float indices holding integers
  shape.push_back(embed_size);
  try {  // (a TinyJit step replays the gather, which checks each new index itself)
    return weight.index_select(0, flat).reshape(shape);
  } catch (const std::out_of_range& e) {
    throw std::out_of_range(cat("Embedding(", str(vocab_size), ", ", str(embed_size), "): ", e.what()));
  }
}
StateDict Embedding::state_dict() const { return nn::state_dict({{"weight", weight}}); }

// ---- MultiheadAttention ----

namespace {
Tensor mha_in_proj(std::int64_t e, std::int64_t h) {
  check_size("MultiheadAttention", "embed_dim", e, 1);
  check_size("MultiheadAttention", "num_heads", h, 1);
  if (e % h)
    throw std::invalid_argument(
        cat("MultiheadAttention: embed_dim ", str(e), " must be divisible by num_heads ", str(h)));
  return Tensor::glorot_uniform({3 * e, e});
}
}  // namespace

MultiheadAttention::MultiheadAttention(std::int64_t e, std::int64_t h, double p, bool bias, bool bf)
    : embed_dim(e),
      num_heads(h),
      dropout(p),
      batch_first(bf),
      in_proj_weight(mha_in_proj(e, h)),
      out_proj(e, e, bias) {
  if (!(p >= 0 && p <= 1))
    throw std::invalid_argument(
        cat("MultiheadAttention: dropout must be in [0, 1], got ", std::to_string(p)));
  if (bias) in_proj_bias = Tensor::zeros({3 * e}), out_proj.bias = Tensor::zeros({e});
}

Tensor MultiheadAttention::operator()(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const std::optional<Tensor>& attn_mask, bool is_causal) const {
  std::string name = cat("MultiheadAttention(", str(embed_dim), ", ", str(num_heads), ")");
  auto shapes = [&] {
    return cat("query ", to_string(q.shape()), ", key ", to_string(k.shape()), ", value ",
               to_string(v.shape()));
  };
  bool batched = q.ndim() == 3;
  if ((q.ndim() != 2 && q.ndim() != 3) || k.ndim() != q.ndim() || v.ndim() != q.ndim() ||
      q.shape().back() != embed_dim || k.shape().back() != embed_dim || v.shape().back() != embed_dim ||
      k.shape() != v.shape())
    throw std::invalid_argument(cat(name, ": ", shapes(), " must be ",
                                    batch_first ? "(N, L, E)" : "(L, N, E)",
                                    " or (L, E) with E = ", str(embed_dim), ", key and value of one shape"));
  // To (N, L, E), batch first.
  auto bf = [&](const Tensor& t) { return !batched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1); };
  Tensor Q = bf(q), K = bf(k), V_ = bf(v);
  if (Q.shape()[0] != K.shape()[0])
    throw std::invalid_argument(cat(name, ": the batch sizes of ", shapes(), " differ"));
  std::int64_t n = Q.shape()[0], l = Q.shape()[1], s = K.shape()[1], hd = embed_dim / num_heads;
  std::vector<Tensor> w = in_proj_weight.chunk(3, 0);
  std::vector<Tensor> b = in_proj_bias ? in_proj_bias->chunk(3, 0) : std::vector<Tensor>{};
  auto proj = [&](const Tensor& x, int i, std::int64_t len) {
    Tensor y =
        x.linear(w[static_cast<std::size_t>(i)].transpose(),
                 b.empty() ? std::optional<Tensor>{} : std::optional<Tensor>{b[static_cast<std::size_t>(i)]});
    return y.reshape({n, len, num_heads, hd}).transpose(1, 2);  // (N, H, len, hd)
  };
  std::optional<Tensor> mask;
  if (attn_mask) {
    const Tensor& m = *attn_mask;
    bool ok = (m.ndim() == 2 && m.shape() == Dims{l, s}) ||
              (m.ndim() == 3 && m.shape() == Dims{n * num_heads, l, s});
    if (!ok)
      throw std::invalid_argument(cat(name, ": attn_mask ", to_string(m.shape()), " must be (L, S) = ",
                                      to_string(Dims{l, s}), " or (N * num_heads, L, S) for ", shapes()));
    Tensor mm = m.ndim() == 3 ? m.reshape({n, num_heads, l, s}) : m;
    // PyTorch's MultiheadAttention masks where the bool is true; sdpa attends where it is true.
    mask = m.dtype() == dtypes::bool_
               ? mm.eq(Tensor::zeros({}, {.device = m.device(), .dtype = dtypes::bool_}))
               : mm;
  }
  // Self-attention (one tensor for query, key and value) projects once with the whole in_proj
  // weight, as PyTorch does, q, k and v being views of that product: one GEMM forward, one for the
  // input's gradient and one for the weight's, instead of three each.
  std::vector<Tensor> qkv;
  if (q.lazydata.get() == k.lazydata.get() && k.lazydata.get() == v.lazydata.get()) {
    for (const Tensor& y : in_proj(Q).chunk(3, -1))
      qkv.push_back(y.reshape({n, l, num_heads, hd}).transpose(1, 2));
  } else {
    if (in_proj_q)
      throw std::invalid_argument(
          cat(name, ": a quantised in_proj serves self-attention only (", shapes(), ")"));
    qkv = {proj(Q, 0, l), proj(K, 1, s), proj(V_, 2, s)};
  }
  // With a mask, is_causal is only a hint that the mask is causal, as in PyTorch.
  Tensor o = qkv[0].scaled_dot_product_attention(qkv[1], qkv[2], mask, Tensor::training ? dropout : 0.0,
                                                 is_causal && !mask);
  Tensor y = out_proj(o.transpose(1, 2).reshape({n, l, embed_dim}));
  return !batched ? y.reshape({l, embed_dim}) : batch_first ? y : y.transpose(0, 1);
}

Tensor MultiheadAttention::in_proj(const Tensor& x) const {
  return in_proj_q ? nn::linear(x, *in_proj_q, in_proj_bias)
                   : x.linear(in_proj_weight.transpose(), in_proj_bias);
}

MultiheadAttention& MultiheadAttention::quantize(cpu::QuantType type) {
  in_proj_q = in_proj_weight.quantize(type);
  out_proj.quantize(type);
  return *this;
}

StateDict MultiheadAttention::state_dict() const {
  return nn::state_dict(
      {{"in_proj_weight", in_proj_weight}, {"in_proj_bias", in_proj_bias}, {"out_proj", out_proj}});
}

// ---- sampling ----

Tensor sample(const Tensor& logits, double temperature, std::int64_t top_k) {
  if (logits.ndim() < 1)
    throw std::invalid_argument(cat("sample: logits ", to_string(logits.shape()), " need a vocabulary axis"));
  if (!(temperature >= 0))
    throw std::invalid_argument(cat("sample: temperature must be >= 0, got ", std::to_string(temperature)));
  Tensor::NoGradGuard no_grad;
  Tensor x = logits.detach().cast(dtypes::float32);
  if (temperature == 0) return x.argmax(-1);
  std::int64_t vocab = x.shape().back();
  if (top_k > 0 && top_k < vocab) {
    Tensor kth = x.topk(top_k, -1).first[{Ellipsis, Slice{top_k - 1, {}}}];
    x = (x < kth).where(-INFINITY, x);
  }
  Tensor p = (x / temperature).softmax(-1).reshape({-1, vocab});
  V out(logits.shape().begin(), logits.shape().end() - 1);
  return p.multinomial(1, true).reshape(out);
}

}  // namespace metagrad::nn
