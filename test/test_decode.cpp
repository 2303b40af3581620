// Decoding: attention over a key/value cache (nn::KVCache, nn::cached_attention and
// MultiheadAttention's cached call) against the full-prefix forward, position by position, for a
// prompt as one pass and one token at a time after it; the cache's errors. Low precision on the
// dynamic path: Q8_0 / Q4_0 weights (Tensor::quantize, nn::linear, Linear::quantize) and bf16 x bf16
// products on every host device against float64 references, and their errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gradcheck.hpp"
#include "metagrad/cpu/narrow.hpp"
#include "metagrad/nn.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::random_tensor;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

Tensor f32(const Dims& shape, std::uint64_t seed) {
  return random_tensor(shape, seed, -1, 1).cast(dtypes::float32);
}

// A small pre-LayerNorm decoder: embeddings, blocks of causal self-attention and an MLP, a head.
struct Decoder {
  i64 vocab = 13, width = 16, heads = 4;
  nn::Embedding wte{vocab, width}, wpe{96, width};
  std::vector<nn::LayerNorm> ln{nn::LayerNorm(width), nn::LayerNorm(width)};
  std::vector<nn::MultiheadAttention> attn{nn::MultiheadAttention(width, heads, 0, true, true),
                                           nn::MultiheadAttention(width, heads, 0, true, true)};
  nn::Linear fc{width, width}, head{width, vocab};
  Decoder() {  // non-zero biases, so that a misplaced one shows
    for (auto& a : attn) a.in_proj_bias = f32({3 * width}, 7), a.out_proj.bias = f32({width}, 8);
  }
  // idx (N, T) int64 at positions [start, start + T); caches one per block, or none (the full causal
  // forward).
  Tensor operator()(const Tensor& idx, i64 start, std::vector<nn::KVCache>* caches) const {
    i64 t = idx.shape()[1];
    Tensor x = wte(idx) + wpe(Tensor::arange(static_cast<double>(start), static_cast<double>(start + t), 1,
                                             {.dtype = dtypes::int64}));
    for (std::size_t i = 0; i < attn.size(); ++i) {
      Tensor h = ln[i](x);
      x = x + (caches ? attn[i](h, (*caches)[i]) : attn[i](h, true));
      x = x + fc(x).gelu();
    }
    return head(x);
  }
  // The same step with the position as data (nn::DecodeJit's form): start_pos (1) int64.
  Tensor operator()(const Tensor& idx, const Tensor& start_pos, i64 span,
                    std::vector<nn::KVCache>& caches) const {
    i64 t = idx.shape()[1];
    Tensor x =
        wte(idx) + wpe(start_pos + Tensor::arange(0, t, 1, {.device = idx.device(), .dtype = dtypes::int64}));
    for (std::size_t i = 0; i < attn.size(); ++i) {
      x = x + attn[i](ln[i](x), caches[i], start_pos, span);
      x = x + fc(x).gelu();
    }
    return head(x);
  }
};

// The host devices built here: quantised and bf16 products run on each.
std::vector<std::string> host_devices() {
  std::vector<std::string> d;
  for (const std::string& n : Device::available())
    if (n == "CPU" || n == "CLANG" || n == "LLVM") d.push_back(n);
  return d;
}

// y (m x n) = x (m x k) w^T (n x k), in double.
std::vector<double> product(const std::vector<double>& x, const std::vector<double>& w, i64 m, i64 n, i64 k) {
  std::vector<double> y(static_cast<std::size_t>(m * n));
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j)
      for (i64 p = 0; p < k; ++p)
        y[static_cast<std::size_t>(i * n + j)] +=
            x[static_cast<std::size_t>(i * k + p)] * w[static_cast<std::size_t>(j * k + p)];
  return y;
}

Tensor tokens(i64 n, i64 t, std::uint64_t seed) {
  std::vector<double> r = test::random_values(n * t, seed, 0, 13);
  std::vector<std::int64_t> v;
  for (double x : r) v.push_back(static_cast<std::int64_t>(x) % 13);
  return Tensor(v, {n, t});
}

}  // namespace

TEST_CASE("decoding with a KV cache gives the full forward's logits, token by token", "[decode][nn]") {
  Tensor::NoGradGuard no_grad;
  Decoder m;
  // (prompt, generated, max_len): a short prompt; one whose steps cross a 64-position bucket.
  for (auto [p, g, max_len] : {std::tuple<i64, i64, i64>{4, 5, 16}, {61, 5, 80}, {1, 3, 4}}) {
    INFO("prompt " << p << ", then " << g << " tokens, cache of " << max_len);
    i64 n = 2, t = p + g;
    Tensor idx = tokens(n, t, static_cast<std::uint64_t>(t));
    std::vector<double> full = m(idx, 0, nullptr).to_vector<double>();  // (N, T, vocab)
    std::vector<nn::KVCache> caches;
    for (const auto& a : m.attn) caches.push_back(a.make_cache(n, max_len));
    std::vector<Tensor> steps{m(idx.shrink({{0, n}, {0, p}}), 0, &caches)};  // the prompt, one pass
    for (i64 i = p; i < t; ++i) steps.push_back(m(idx.shrink({{0, n}, {i, i + 1}}), i, &caches));
    REQUIRE(caches[0].len == t);
    require_close(steps[0].cat({steps.begin() + 1, steps.end()}, 1).to_vector<double>(), full, 2e-5, 2e-5);
  }
}

TEST_CASE("decoding replayed by nn::DecodeJit gives the eager logits exactly, across a span's end",
          "[decode][nn]") {
  Tensor::NoGradGuard no_grad;
  const std::string saved = Device::DEFAULT;
  for (const std::string& dev : host_devices()) {
    INFO(dev);
    Device::DEFAULT = dev;
    Decoder m;
    // A prompt of 58, then 10 tokens at positions 58..67: spans 64 and 80 (the cache's end), each
    // captured at its second call and replayed after.
    i64 n = 2, p = 58, g = 10, max_len = 80;
    Tensor idx = tokens(n, p + g, 21).to(dev).realize();
    auto part = [&](i64 a, i64 b) { return idx.shrink({{0, n}, {a, b}}).contiguous().realize(); };
    std::vector<nn::KVCache> eager_caches, jit_caches;
    for (const auto& a : m.attn)
      eager_caches.push_back(a.make_cache(n, max_len)), jit_caches.push_back(a.make_cache(n, max_len));
    nn::DecodeJit decode(
        [&](const Tensor& tok, const Tensor& pos, i64 span) { return m(tok, pos, span, jit_caches); },
        max_len);
    std::vector<float> want = m(part(0, p), 0, &eager_caches).to_vector<float>();
    REQUIRE(decode(part(0, p), 0).to_vector<float>() == want);
    for (i64 i = p; i < p + g; ++i) {
      INFO("position " << i);
      want = m(part(i, i + 1), i, &eager_caches).to_vector<float>();
      REQUIRE(decode(part(i, i + 1), i).to_vector<float>() == want);  // bitwise
    }
    REQUIRE(decode.replays() == (Device::get(dev).compiled() ? (64 - p - 2) + (p + g - 64 - 2) : 0));
    // The caches hold the same keys and values.
    for (std::size_t b = 0; b < m.attn.size(); ++b)
      REQUIRE(jit_caches[b].k.to_vector<float>() == eager_caches[b].k.to_vector<float>());
  }
  Device::DEFAULT = saved;
}

TEST_CASE("cached_attention with gradients writes the cache functionally and agrees", "[decode][nn]") {
  i64 n = 1, h = 2, l = 5, hd = 8;
  Tensor q = f32({n, h, l, hd}, 1).requires_grad_(), k = f32({n, h, l, hd}, 2), v = f32({n, h, l, hd}, 3);
  std::vector<double> want = q.scaled_dot_product_attention(k, v, {}, 0, true).to_vector<double>();
  nn::KVCache c(n, h, 12, hd);
  auto part = [&](const Tensor& t, i64 a, i64 b) { return t.shrink({{0, n}, {0, h}, {a, b}, {0, hd}}); };
  Tensor o1 = nn::cached_attention(part(q, 0, 3), part(k, 0, 3), part(v, 0, 3), c);
  Tensor o2 = nn::cached_attention(part(q, 3, 5), part(k, 3, 5), part(v, 3, 5), c);
  require_close(o1.cat({o2}, 2).to_vector<double>(), want, 1e-5, 1e-5);
  o2.sum().backward();  // the graph goes through the cache's functional writes
  REQUIRE(q.grad);
}

TEST_CASE("a KV cache names the shapes when new positions do not fit", "[decode][nn]") {
  nn::KVCache c(1, 2, 4, 8);
  Tensor x = f32({1, 2, 3, 8}, 1);
  nn::cached_attention(x, x, x, c);
  REQUIRE_THROWS_WITH(nn::cached_attention(x, x, x, c),
                      Contains("cached_attention") && Contains("(1, 2, 3, 8)") && Contains("3 of 4 written"));
  REQUIRE_THROWS_WITH(nn::cached_attention(f32({1, 3, 1, 8}, 2), x, x, c), Contains("must be (N, H, L, hd)"));
  // The position as data (on a host device): checked where it is read, when the write runs.
  nn::KVCache ch(1, 2, 4, 8, {.device = "CPU"});
  Tensor xh = x.to("CPU"), at2(std::vector<std::int64_t>{2}, {1}, {.device = "CPU", .dtype = dtypes::int64});
  REQUIRE_THROWS_WITH(nn::cached_attention(xh, xh, xh, ch, at2, 4),
                      Contains("cached_attention: positions [2, 5)") && Contains("cache of 4"));
  REQUIRE_THROWS_WITH(nn::cached_attention(xh, xh, xh, ch, at2, 2),
                      Contains("span 2 must be at least L = 3"));
  REQUIRE_THROWS_WITH(
      nn::cached_attention(xh, xh, xh, ch, Tensor(std::vector<float>{2}, {1}, {.device = "CPU"}), 4),
      Contains("start_pos") && Contains("one int64"));
  REQUIRE_THROWS_WITH(nn::KVCache(1, 0, 4, 8), Contains("KVCache") && Contains("num_heads 0"));
  nn::MultiheadAttention a(16, 4);
  nn::KVCache ca = a.make_cache(1, 4);
  REQUIRE_THROWS_WITH(a(f32({2, 1, 8}, 3), ca),
                      Contains("MultiheadAttention(16, 4)") && Contains("(2, 1, 8)"));
}

TEST_CASE("quantised weights: blocks within the format's error, products against float64", "[decode]") {
  Tensor::NoGradGuard no_grad;
  for (const std::string& dev : host_devices())
    for (cpu::QuantType t : {cpu::QuantType::q8_0, cpu::QuantType::q4_0})
      for (auto [m, n, k] : {std::tuple<i64, i64, i64>{1, 40, 96}, {3, 17, 64}, {9, 33, 160}}) {
        INFO(dev << " " << nn::quant_name(t) << " m " << m << " n " << n << " k " << k);
        Tensor w = f32({n, k}, static_cast<std::uint64_t>(n * k)).to(dev);
        nn::QuantizedTensor q = w.quantize(t);
        REQUIRE(q.blocks.dtype() == dtypes::uint8);
        REQUIRE(q.blocks.shape() == Dims{n, static_cast<i64>(cpu::quant_row_bytes(t, k))});
        std::vector<double> wv = w.to_vector<double>(), dq = q.dequantize().to_vector<double>();
        for (i64 b = 0; b < n * k / 32; ++b) {  // each block within its step (half a step for Q8_0)
          auto at = static_cast<std::ptrdiff_t>(b * 32);
          double amax = 0, err = 0;
          for (std::ptrdiff_t i = at; i < at + 32; ++i)
            amax = std::max(amax, std::abs(wv[static_cast<std::size_t>(i)])),
            err = std::max(err, std::abs(wv[static_cast<std::size_t>(i)] - dq[static_cast<std::size_t>(i)]));
          REQUIRE(err <= (t == cpu::QuantType::q8_0 ? amax / 127 / 2 : amax / 8) + amax / 512);  // d in fp16
        }
        Tensor x = f32({m, k}, static_cast<std::uint64_t>(m + 1)).to(dev), bias = f32({n}, 5).to(dev);
        std::vector<double> want = product(x.to_vector<double>(), dq, m, n, k), bv = bias.to_vector<double>();
        for (i64 i = 0; i < m * n; ++i)
          want[static_cast<std::size_t>(i)] += bv[static_cast<std::size_t>(i % n)];
        Tensor y = nn::linear(x.reshape({1, m, k}), q, bias);
        REQUIRE(y.shape() == Dims{1, m, n});
        REQUIRE(y.device() == dev);
        require_close(y.to_vector<double>(), want, 1e-4, 1e-4);
        nn::Linear lin(k, n);
        lin.weight = w, lin.bias = bias;
        require_close(lin.quantize(t)(x).to_vector<double>(), want, 1e-4, 1e-4, "Linear::quantize");
      }
}

TEST_CASE("quantised weights: bad use names the op and the shapes", "[decode]") {
  Tensor w = f32({4, 48}, 1);
  REQUIRE_THROWS_WITH(w.quantize(cpu::QuantType::q8_0),
                      Contains("quantize(q8_0)") && Contains("(4, 48)") && Contains("multiple of 32"));
  REQUIRE_THROWS_WITH(f32({64}, 1).quantize(cpu::QuantType::q4_0),
                      Contains("quantize(q4_0)") && Contains("2-D"));
  nn::QuantizedTensor q = f32({4, 64}, 2).quantize(cpu::QuantType::q4_0);
  REQUIRE_THROWS_WITH(nn::linear(f32({2, 32}, 3), q),
                      Contains("q4_0 weight (4, 64)") && Contains("(2, 32)") && Contains("64 features"));
  Tensor x = f32({2, 64}, 3).requires_grad_();
  REQUIRE_THROWS_WITH(nn::linear(x, q), Contains("q4_0 weight (4, 64)") && Contains("requires grad"));
  std::vector<std::string> all = Device::available();
  if (std::find(all.begin(), all.end(), "OPENCL") != all.end())
    REQUIRE_THROWS_WITH(f32({4, 64}, 2).to("OPENCL").quantize(cpu::QuantType::q8_0),
                        Contains("quantize(q8_0)") && Contains("host devices only"));
}

TEST_CASE("bf16 x bf16 products through the bf16 GEMM agree with float64", "[decode]") {
  Tensor::NoGradGuard no_grad;
  for (const std::string& dev : host_devices())
    for (auto [m, n, k] : {std::tuple<i64, i64, i64>{1, 24, 40}, {5, 7, 33}, {16, 48, 64}}) {
      INFO(dev << " m " << m << " n " << n << " k " << k);
      Tensor x = f32({m, k}, 11).cast(dtypes::bfloat16).to(dev),
             w = f32({n, k}, 12).cast(dtypes::bfloat16).to(dev);
      std::vector<double> want = product(x.to_vector<double>(), w.to_vector<double>(), m, n, k);
      Tensor wk = w.transpose().contiguous().realize();  // (k, n) as it lies, and (n, k) transposed
      x.realize(), w.realize();
      std::int64_t kernels = GlobalCounters::kernel_count;
      x.linear(w.transpose()).realize();  // the GEMM's (or GEMV's): no generated kernel but A^T's copy
      REQUIRE(GlobalCounters::kernel_count - kernels == (m > 4 ? 1 : 0));
      for (const Tensor& y : {x.matmul(wk), x.linear(w.transpose()), x.matmul(w.transpose())}) {
        REQUIRE(y.dtype() == dtypes::bfloat16);
        REQUIRE(y.shape() == Dims{m, n});
        require_close(y.to_vector<double>(), want, 1e-2, 1e-2);  // one bf16 rounding of an f32 sum
      }
    }
}

TEST_CASE("a quantised MultiheadAttention decodes as one holding the dequantised weights", "[decode]") {
  Tensor::NoGradGuard no_grad;
  for (cpu::QuantType t : {cpu::QuantType::q8_0, cpu::QuantType::q4_0}) {
    INFO(nn::quant_name(t));
    nn::MultiheadAttention q(64, 4, 0, true, true), ref = q;
    q.in_proj_bias = ref.in_proj_bias = f32({192}, 3);
    q.quantize(t);
    ref.in_proj_weight = q.in_proj_q->dequantize(), ref.out_proj.weight = q.out_proj.qweight->dequantize();
    Tensor x = f32({2, 5, 64}, 4);
    nn::KVCache cq = q.make_cache(2, 8), cr = ref.make_cache(2, 8);
    require_close(q(x, cq).to_vector<double>(), ref(x, cr).to_vector<double>(), 1e-4, 1e-4);
    require_close(q(x, true).to_vector<double>(), ref(x, true).to_vector<double>(), 1e-4, 1e-4);
    REQUIRE_THROWS_WITH(q(x, f32({2, 5, 64}, 5), x),
                        Contains("quantised in_proj serves self-attention only"));
  }
}
