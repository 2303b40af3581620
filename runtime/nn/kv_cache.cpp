// The key/value cache of decoding: attention of new positions over the ones already seen.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/nn.hpp"

namespace metagrad::nn {

using metagrad::detail::cat;

namespace {
constexpr std::int64_t kBucket = 64;  // scores span the written positions rounded up to this

std::string str(std::int64_t x) { return std::to_string(x); }

// The host buffer a realized, contiguous tensor owns, or null (a view, unrealized, another device).
RawMallocBuffer* host_buffer(const Tensor& t) {
  const std::shared_ptr<LazyBuffer>& lb = t.lazydata.get();
  return lb->realized ? dynamic_cast<RawMallocBuffer*>(lb->realized.get()) : nullptr;
}

// x (N, H, L, hd) written into the cache c (N, H, S, hd) at positions [p, p + L), p read from pos
// (int64, one element) when the load runs: a replayable custom load, so that a TinyJit replay writes
// at its own call's position. Its result is the new end, p + L. Realize it before anything reads c.
Tensor write_at(const Tensor& c, const Tensor& x, const Tensor& pos) {
  Tensor src = x.cast(c.dtype()).contiguous();
  std::int64_t nh = x.shape()[0] * x.shape()[1], l = x.shape()[2], s = c.shape()[2];
  auto row = static_cast<std::size_t>(x.shape()[3] * c.dtype().itemsize);
  auto arg = std::make_shared<const CustomArg>(
      CustomArg{ReplayableFill{[nh, l, s, row](RawBuffer& out, const std::vector<RawBuffer*>& in) {
        auto* from = static_cast<const std::byte*>(dynamic_cast<RawMallocBuffer&>(*in[0]).data());
        std::int64_t p = *static_cast<const std::int64_t*>(dynamic_cast<RawMallocBuffer&>(*in[1]).data());
        auto* to = static_cast<std::byte*>(dynamic_cast<RawMallocBuffer&>(*in[2]).data());
        if (p < 0 || p + l > s)
          throw std::out_of_range(cat("cached_attention: positions [", str(p), ", ", str(p + l),
                                      ") do not fit the cache of ", str(s)));
        for (std::int64_t i = 0; i < nh; ++i)
          std::memcpy(to + static_cast<std::size_t>(i * s + p) * row,
                      from + static_cast<std::size_t>(i * l) * row, static_cast<std::size_t>(l) * row);
        *static_cast<std::int64_t*>(dynamic_cast<RawMallocBuffer&>(out).data()) = p + l;
      }}});
  return Tensor(LazyBuffer::loadop(
                    LoadOps::CUSTOM, {1}, dtypes::int64, x.device(), arg,
                    {src.lazydata.get()->contiguous(), pos.lazydata.get()->contiguous(), c.lazydata.get()}),
                false);
}

// Query i, at position p + i, sees positions j <= p + i: 0 there, -inf elsewhere, (L, S) computed
// from pos in a kernel (data, not a constant: each span's kernels compile once whatever p is).
Tensor causal_mask(const Tensor& pos, std::int64_t l, std::int64_t s, DType dtype) {
  TensorOptions o{.device = pos.device(), .dtype = dtypes::int64};
  Tensor i = Tensor::arange(0, l, 1, o).reshape({l, 1}) + pos.reshape({1, 1});
  Tensor j = Tensor::arange(0, s, 1, o).reshape({1, s});
  return (j > i).where(-INFINITY, 0.0).cast(dtype);
}

// Attention of q over the cache's first s positions under mask.
Tensor attend(const Tensor& q, const KVCache& cache, std::int64_t s, const Tensor& mask) {
  Dims c = cache.k.shape();
  std::vector<std::pair<std::int64_t, std::int64_t>> span{{0, c[0]}, {0, c[1]}, {0, s}, {0, c[3]}};
  return q.scaled_dot_product_attention(cache.k.shrink(span).cast(q.dtype()),
                                        cache.v.shrink(span).cast(q.dtype()), mask);
}

void check(const Tensor& q, const Tensor& k, const Tensor& v, const KVCache& cache, const std::string& at) {
  Dims c = cache.k.shape();
  if (q.ndim() != 4 || q.shape() != k.shape() || k.shape() != v.shape() || q.shape()[0] != c[0] ||
      q.shape()[1] != c[1] || q.shape()[3] != c[3] || q.shape()[2] < 1)
    throw std::invalid_argument(cat("cached_attention: q ", to_string(q.shape()), ", k ",
                                    to_string(k.shape()), " and v ", to_string(v.shape()),
                                    " must be (N, H, L, hd) = (", str(c[0]), ", ", str(c[1]), ", L, ",
                                    str(c[3]), ") with L >= 1 new positions ", at));
}
}  // namespace

std::int64_t KVCache::span(std::int64_t end, std::int64_t max_len) {
  return std::min(max_len, (end + kBucket - 1) / kBucket * kBucket);
}

KVCache::KVCache(std::int64_t batch, std::int64_t num_heads, std::int64_t max_len, std::int64_t head_dim,
                 TensorOptions opts) {
  if (batch < 1 || num_heads < 1 || max_len < 1 || head_dim < 1)
    throw std::invalid_argument(cat("KVCache: batch ", str(batch), ", num_heads ", str(num_heads),
                                    ", max_len ", str(max_len), " and head_dim ", str(head_dim),
                                    " must be positive"));
  Tensor::NoGradGuard no_grad;
  opts.requires_grad = false;
  Dims shape{batch, num_heads, max_len, head_dim};
  k = Tensor::zeros(shape, opts).contiguous().realize();
  v = Tensor::zeros(shape, opts).contiguous().realize();
}

Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, KVCache& cache) {
  Dims c = cache.k.shape();
  check(q, k, v, cache, cat("fitting the cache (", str(cache.len), " of ", str(c[2]), " written)"));
  std::int64_t l = q.shape()[2], end = cache.len + l;
  if (end > c[2])
    throw std::invalid_argument(cat("cached_attention: q ", to_string(q.shape()), ": ", str(l),
                                    " new positions do not fit the cache (", str(cache.len), " of ",
                                    str(c[2]), " written)"));
  Tensor pos(std::vector<std::int64_t>{cache.len}, {1}, {.device = q.device(), .dtype = dtypes::int64});
  bool in_place = host_buffer(cache.k) && host_buffer(cache.v) &&
                  (Tensor::no_grad || !q.requires_grad.get().value_or(false));
  Tensor o;
  if (in_place) {  // the form a TinyJit step replays, with this call's position
    o = cached_attention(q, k, v, cache, pos, KVCache::span(end, c[2]));
  } else {
    std::vector<Index> at{Slice{}, Slice{}, Slice{cache.len, end}};
    cache.k = cache.k.index_put(at, k.cast(cache.k.dtype())).realize();
    cache.v = cache.v.index_put(at, v.cast(cache.v.dtype())).realize();
    std::int64_t s = KVCache::span(end, c[2]);
    o = attend(q, cache, s, causal_mask(pos, l, s, q.dtype()));
  }
  cache.len = end;
  return o;
}

Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, KVCache& cache,
                        const Tensor& start_pos, std::int64_t span) {
  Dims c = cache.k.shape();
  check(q, k, v, cache, cat("and a span of at least L (", str(span), " of the cache's ", str(c[2]), ")"));
  std::int64_t l = q.shape()[2];
  if (span < l || span > c[2])
    throw std::invalid_argument(cat("cached_attention: span ", str(span), " must be at least L = ", str(l),
                                    " and at most the cache's ", str(c[2]), " positions"));
  if (start_pos.numel() != 1 || start_pos.dtype() != dtypes::int64 || start_pos.device() != q.device())
    throw std::invalid_argument(cat("cached_attention: start_pos ", to_string(start_pos),
                                    " must be one int64 on q's device ", q.device()));
  if (!host_buffer(cache.k) || !host_buffer(cache.v) ||
      (!Tensor::no_grad && q.requires_grad.get().value_or(false)))
    throw std::invalid_argument(cat("cached_attention: the position as data needs the cache (",
                                    to_string(cache.k), ") realized on a host device (CPU, CLANG, LLVM) ",
                                    "and no gradient"));
  Tensor pos = start_pos.reshape({1});
  // The writes run before any kernel reads the cache (a capture records them in that order).
  write_at(cache.k, k, pos).realize();
  write_at(cache.v, v, pos).realize();
  // The next write changes the cache's bytes in place: nothing may still read them lazily.
  return attend(q, cache, span, causal_mask(pos, l, span, q.dtype())).realize();
}

Tensor MultiheadAttention::cached(
    const Tensor& x, const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& attend) const {
  bool batched = x.ndim() == 3;
  if ((x.ndim() != 2 && x.ndim() != 3) || x.shape().back() != embed_dim)
    throw std::invalid_argument(
        cat("MultiheadAttention(", str(embed_dim), ", ", str(num_heads), "): input ", to_string(x.shape()),
            " must be ", batch_first ? "(N, L, E)" : "(L, N, E)", " or (L, E) with E = ", str(embed_dim)));
  Tensor X = !batched ? x.unsqueeze(0) : batch_first ? x : x.transpose(0, 1);  // (N, L, E)
  std::int64_t n = X.shape()[0], l = X.shape()[1], hd = embed_dim / num_heads;
  std::vector<Tensor> qkv;
  for (const Tensor& y : in_proj(X).chunk(3, -1))
    qkv.push_back(y.reshape({n, l, num_heads, hd}).transpose(1, 2));
  Tensor o = attend(qkv[0], qkv[1], qkv[2]);
  Tensor y = out_proj(o.transpose(1, 2).reshape({n, l, embed_dim}));
  return !batched ? y.reshape({l, embed_dim}) : batch_first ? y : y.transpose(0, 1);
}

Tensor MultiheadAttention::operator()(const Tensor& x, KVCache& cache) const {
  return cached(
      x, [&](const Tensor& q, const Tensor& k, const Tensor& v) { return cached_attention(q, k, v, cache); });
}

Tensor MultiheadAttention::operator()(const Tensor& x, KVCache& cache, const Tensor& start_pos,
                                      std::int64_t span) const {
  return cached(x, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return cached_attention(q, k, v, cache, start_pos, span);
  });
}

KVCache MultiheadAttention::make_cache(std::int64_t batch, std::int64_t max_len) const {
  return KVCache(batch, num_heads, max_len, embed_dim / num_heads,
                 {.device = in_proj_weight.device(), .dtype = in_proj_weight.dtype()});
}

}  // namespace metagrad::nn
