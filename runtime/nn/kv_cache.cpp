// The key/value cache of decoding: attention of new positions over the ones already seen.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <vector>

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

// x (N, H, L, hd) written at positions [at, at + L) of c (N, H, S, hd), both contiguous on the host.
void write_rows(RawMallocBuffer& c, const Tensor& x, std::int64_t at) {
  Tensor src = x.cast(c.dtype).contiguous().realize();
  std::vector<std::byte> b(src.lazydata.get()->base()->realized->nbytes());
  src.lazydata.get()->base()->realized->copyout(b.data());
  std::int64_t nh = x.shape()[0] * x.shape()[1], l = x.shape()[2], hd = x.shape()[3];
  auto row = static_cast<std::size_t>(hd * c.dtype.itemsize);
  auto s = static_cast<std::int64_t>(c.size) / (nh * hd);
  auto* out = static_cast<std::byte*>(c.data());
  for (std::int64_t i = 0; i < nh; ++i)
    std::memcpy(out + static_cast<std::size_t>(i * s + at) * row,
                b.data() + static_cast<std::size_t>(i * l) * row, static_cast<std::size_t>(l) * row);
}
}  // namespace

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
  std::int64_t l = q.ndim() == 4 ? q.shape()[2] : 0, end = cache.len + l;
  if (q.ndim() != 4 || q.shape() != k.shape() || k.shape() != v.shape() || q.shape()[0] != c[0] ||
      q.shape()[1] != c[1] || q.shape()[3] != c[3] || l < 1 || end > c[2])
    throw std::invalid_argument(cat("cached_attention: q ", to_string(q.shape()), ", k ",
                                    to_string(k.shape()), " and v ", to_string(v.shape()),
                                    " must be (N, H, L, hd) = (", str(c[0]), ", ", str(c[1]), ", L, ",
                                    str(c[3]), ") with L >= 1 new positions fitting ", "the cache (",
                                    str(cache.len), " of ", str(c[2]), " written)"));
  RawMallocBuffer *hk = host_buffer(cache.k), *hv = host_buffer(cache.v);
  bool in_place = hk && hv && (Tensor::no_grad || !q.requires_grad.get().value_or(false));
  if (in_place) {
    write_rows(*hk, k, cache.len), write_rows(*hv, v, cache.len);
  } else {
    std::vector<Index> at{Slice{}, Slice{}, Slice{cache.len, end}};
    cache.k = cache.k.index_put(at, k.cast(cache.k.dtype())).realize();
    cache.v = cache.v.index_put(at, v.cast(cache.v.dtype())).realize();
  }
  std::int64_t s = std::min(c[2], (end + kBucket - 1) / kBucket * kBucket);
  // Query i (position cache.len + i) sees positions j <= cache.len + i; the mask is data, so each
  // bucket's kernels compile once whatever cache.len is.
  std::vector<float> mask(static_cast<std::size_t>(l * s), 0.f);
  for (std::int64_t i = 0; i < l; ++i)
    for (std::int64_t j = cache.len + i + 1; j < s; ++j)
      mask[static_cast<std::size_t>(i * s + j)] = -INFINITY;
  std::vector<std::pair<std::int64_t, std::int64_t>> span{{0, c[0]}, {0, c[1]}, {0, s}, {0, c[3]}};
  Tensor o = q.scaled_dot_product_attention(cache.k.shrink(span).cast(q.dtype()),
                                            cache.v.shrink(span).cast(q.dtype()),
                                            Tensor(mask, {l, s}, {.device = q.device(), .dtype = q.dtype()}));
  cache.len = end;
  // The next write changes the cache's bytes in place: nothing may still read them lazily.
  return in_place ? o.realize() : o;
}

Tensor MultiheadAttention::operator()(const Tensor& x, KVCache& cache) const {
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
  Tensor o = cached_attention(qkv[0], qkv[1], qkv[2], cache);
  Tensor y = out_proj(o.transpose(1, 2).reshape({n, l, embed_dim}));
  return !batched ? y.reshape({l, embed_dim}) : batch_first ? y : y.transpose(0, 1);
}

KVCache MultiheadAttention::make_cache(std::int64_t batch, std::int64_t max_len) const {
  return KVCache(batch, num_heads, max_len, embed_dim / num_heads,
                 {.device = in_proj_weight.device(), .dtype = in_proj_weight.dtype()});
}

}  // namespace metagrad::nn
