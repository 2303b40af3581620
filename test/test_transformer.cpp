// The transformer's pieces on the dynamic path: three-state requires_grad, gather / index_select and
// the Embedding built on them, masked_fill and where with a scalar, scaled dot-product attention and
// MultiheadAttention, gelu's forms, topk / multinomial / sampling, and the training utilities. Each
// forward against a loop written here, each backward against finite differences, bad input by name.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "device_scope.hpp"
#include "gradcheck.hpp"
#include "metagrad/jit.hpp"
#include "metagrad/nn.hpp"
#include "reference.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::random_tensor;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
Tensor ints(const std::vector<i64>& v, const Dims& s) { return Tensor(v, s); }
std::vector<i64> random_ints(std::size_t n, i64 lo, i64 hi, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<i64> d(lo, hi - 1);
  std::vector<i64> v(n);
  for (i64& x : v) x = d(g);
  return v;
}

}  // namespace

// ---- the silent bug: an expression of unset tensors stays unset, and an optimizer trains it ----

TEST_CASE("requires_grad has three states, and a parameter built from an expression trains", "[nn]") {
  Tensor w = Tensor::randn({4, 3}) * 0.02;
  REQUIRE_FALSE(w.requires_grad.get().has_value());  // unset, as tinygrad's None
  Tensor off = Tensor::ones({2}, {.requires_grad = false});
  REQUIRE((off * 2).requires_grad.get() == std::optional<bool>(false));
  Tensor on = Tensor::ones({2}, {.requires_grad = true});
  REQUIRE((on * off).requires_grad.get() == std::optional<bool>(true));
  REQUIRE_FALSE((on.detach() * 3 + Tensor::ones({2})).requires_grad.get().has_value());

  struct Model {
    Tensor w = Tensor::randn({4, 3}) * 0.02, b = Tensor::zeros({3}) + 0.5;
    Tensor running = Tensor::zeros({3}, {.requires_grad = false}) + 1;  // false stays false: a buffer
    nn::StateDict state_dict() const { return nn::state_dict({{"w", w}, {"b", b}, {"running", running}}); }
  } m;
  nn::optim::SGD opt(nn::get_parameters(m), 0.1);
  REQUIRE(opt.params.size() == 2);
  REQUIRE(opt.buffers.size() == 1);
  std::vector<double> w0 = vals(m.w), b0 = vals(m.b);
  Tensor x = Tensor::ones({5, 4});
  opt.zero_grad();
  x.matmul(m.w).add(m.b).square().sum().backward();
  opt.step();
  std::vector<double> w1 = vals(m.w), b1 = vals(m.b);
  for (std::size_t i = 0; i < w0.size(); ++i) REQUIRE(w1[i] != w0[i]);
  for (std::size_t i = 0; i < b0.size(); ++i) REQUIRE(b1[i] != b0[i]);
}

// ---- gather and index_select ----

TEST_CASE("gather: every axis of 1-3-D inputs against a loop, gradients, errors", "[movement]") {
  std::uint64_t seed = 1;
  for (std::vector<i64> shape : {std::vector<i64>{7}, {4, 5}, {3, 4, 5}}) {
    for (i64 dim = 0; dim < static_cast<i64>(shape.size()); ++dim) {
      std::vector<i64> is = shape;  // the index: no larger than the input elsewhere, any size along dim
      for (std::size_t a = 0; a < is.size(); ++a)
        is[a] = static_cast<i64>(a) == dim ? 6 : std::max<i64>(1, is[a] - 1);
      std::vector<i64> idx = random_ints(static_cast<std::size_t>(test::numel_of(is)), 0,
                                         shape[static_cast<std::size_t>(dim)], ++seed);
      Tensor x = random_tensor(Dims(shape), ++seed);
      std::vector<double> xv = vals(x), want;
      test::for_each_index(is, [&](const std::vector<i64>& i) {
        std::vector<i64> s = i;
        s[static_cast<std::size_t>(dim)] = idx[static_cast<std::size_t>(test::offset(is, i))];
        want.push_back(xv[static_cast<std::size_t>(test::offset(shape, s))]);
      });
      INFO("shape " << to_string(Dims(shape)) << " dim " << dim);
      Tensor got = x.gather(dim, ints(idx, Dims(is)));
      REQUIRE(got.shape() == Dims(is));
      require_close(vals(got), want, 0, 0);
      require_close(vals(x.gather(dim - static_cast<i64>(shape.size()), ints(idx, Dims(is)))), want, 0, 0);
      check_gradients([&](const std::vector<Tensor>& in) { return in[0].gather(dim, ints(idx, Dims(is))); },
                      {x});
    }
  }
  // on a view (a permuted input) and with int32 indices
  Tensor x = random_tensor({3, 4}, 77);
  std::vector<double> xv = vals(x);
  Tensor g = x.transpose().gather(1, Tensor(std::vector<std::int32_t>{2, 0, 1, 1}, {4, 1}));
  require_close(vals(g), {xv[2 * 4 + 0], xv[0 * 4 + 1], xv[1 * 4 + 2], xv[1 * 4 + 3]}, 0, 0);

  REQUIRE_THROWS_WITH(x.gather(0, ints({0, 3}, {2, 1})), Contains("gather: index value 3") &&
                                                             Contains("(2, 1)") && Contains("size 3") &&
                                                             Contains("(3, 4)"));
  REQUIRE_THROWS_WITH(x.gather(1, ints({-1}, {1, 1})), Contains("gather: index value -1"));
  REQUIRE_THROWS_WITH(x.gather(0, ints({0, 0}, {2})),
                      Contains("gather: index (2,) must have the rank of input (3, 4)"));
  REQUIRE_THROWS_WITH(x.gather(0, ints({0, 0, 0, 0, 0}, {1, 5})),
                      Contains("gather: index (1, 5) is larger than input (3, 4)"));
  REQUIRE_THROWS_WITH(x.gather(0, Tensor({0.f}).reshape({1, 1})), Contains("must be an integer tensor"));
}

TEST_CASE("index_select: slices along each axis against a loop, gradients with repeats, errors",
          "[movement]") {
  std::vector<i64> shape{3, 4, 5};
  for (i64 dim = 0; dim < 3; ++dim) {
    std::vector<i64> idx =
        random_ints(7, 0, shape[static_cast<std::size_t>(dim)], 10 + static_cast<std::uint64_t>(dim));
    Tensor x = random_tensor({3, 4, 5}, 20 + static_cast<std::uint64_t>(dim));
    std::vector<double> xv = vals(x), want;
    std::vector<i64> os = shape;
    os[static_cast<std::size_t>(dim)] = 7;
    test::for_each_index(os, [&](const std::vector<i64>& i) {
      std::vector<i64> s = i;
      s[static_cast<std::size_t>(dim)] = idx[static_cast<std::size_t>(i[static_cast<std::size_t>(dim)])];
      want.push_back(xv[static_cast<std::size_t>(test::offset(shape, s))]);
    });
    Tensor got = x.index_select(dim, ints(idx, {7}));
    REQUIRE(got.shape() == Dims(os));
    require_close(vals(got), want, 0, 0);
    check_gradients([&](const std::vector<Tensor>& in) { return in[0].index_select(dim, ints(idx, {7})); },
                    {x});
  }
  Tensor x = random_tensor({3, 4}, 5);
  REQUIRE_THROWS_WITH(x.index_select(1, ints({4}, {1})),
                      Contains("index_select: index value 4") && Contains("size 4"));
  REQUIRE_THROWS_WITH(x.index_select(0, ints({0}, {1, 1})),
                      Contains("index_select: index (1, 1) must be 1-D"));
}

TEST_CASE("Embedding is an index_select: rows, gradient as a scatter-add, out of range, TinyJit", "[nn]") {
  Tensor::manual_seed(5);
  nn::Embedding e(11, 6);
  std::vector<double> W = vals(e.weight);
  std::vector<i64> idx{3, 10, 3, 0, 7, 3};
  e.weight.requires_grad_();
  Tensor y = e(ints(idx, {2, 3}));
  REQUIRE(y.shape() == Dims{2, 3, 6});
  std::vector<double> want;
  for (i64 i : idx)
    for (i64 j = 0; j < 6; ++j) want.push_back(W[static_cast<std::size_t>(i * 6 + j)]);
  require_close(vals(y), want, 0, 0);
  // The gradient: each row's count times the upstream row.
  Tensor g = random_tensor({2, 3, 6}, 9).cast(dtypes::float32);
  (y * g).sum().backward();
  std::vector<double> gv = vals(g), gw(11 * 6, 0.0);
  for (std::size_t t = 0; t < idx.size(); ++t)
    for (std::size_t j = 0; j < 6; ++j) gw[static_cast<std::size_t>(idx[t]) * 6 + j] += gv[t * 6 + j];
  require_close(vals(*e.weight.grad), gw, 1e-6, 1e-6);
  REQUIRE_THROWS_WITH(e(ints({1, 11}, {2})), Contains("Embedding(11, 6)") && Contains("index value 11"));
  REQUIRE_THROWS_WITH(e(ints({-2}, {1})), Contains("Embedding(11, 6)"));
}

TEST_CASE("index_select, gather and Embedding inside TinyJit replay their host gathers and scatters",
          "[jit]") {
  test::DeviceScope scope(Device::DEFAULT == "CPU" ? "CLANG" : Device::DEFAULT);
  if (!scope.ok || !Device::get(Device::DEFAULT).compiled()) return;
  std::string dev = Device::DEFAULT;
  // Values: new indices at every call (the first runs eagerly, the second captures, then replays).
  Tensor::manual_seed(6);
  Tensor w = Tensor::randn({9, 4});
  std::vector<double> w0 = vals(w);
  TinyJit pick([&](Tensor i, Tensor j) {
    return ((w.index_select(0, i) * 2).sum(1) + w.gather(1, j).sum(1)).contiguous();
  });
  for (int call = 0; call < 5; ++call) {
    std::vector<i64> idx = random_ints(5, 0, 9, 40 + static_cast<std::uint64_t>(call)),
                     jdx = random_ints(10, 0, 4, 80 + static_cast<std::uint64_t>(call));
    std::vector<double> got = vals(pick(ints(idx, {5}), ints(jdx, {5, 2})));
    for (std::size_t t = 0; t < 5; ++t) {
      double s = w0[t * 4 + static_cast<std::size_t>(jdx[2 * t])] +
                 w0[t * 4 + static_cast<std::size_t>(jdx[2 * t + 1])];
      for (std::size_t c = 0; c < 4; ++c) s += 2 * w0[static_cast<std::size_t>(idx[t]) * 4 + c];
      INFO("call " << call << ", row " << t);
      REQUIRE(std::abs(got[t] - s) < 1e-5);
    }
  }
  // Replayed as host gathers, not rewritten as one-hot products.
  REQUIRE(std::count_if(pick.captured()->kernels.begin(), pick.captured()->kernels.end(),
                        [](const auto& k) { return k.runner.name == "custom"; }) == 2);
  // A replay checks the indices it is given.
  REQUIRE_THROWS_WITH(
      pick(ints({0, 1, 9, 2, 3}, {5}), ints(std::vector<i64>(10, 0), {5, 2})),
      Contains("index_select: index value 9 (element 2) is out of range for dim 0 of size 9"));
  REQUIRE_THROWS_WITH(pick(ints({0, 1, 2, 3, 4}, {5}), ints({0, 0, 0, 0, 0, 0, 0, 0, -1, 0}, {5, 2})),
                      Contains("gather: index value -1"));

  // Training through an Embedding: the weight's gradient a replayed scatter-add; the same weights
  // as the eager steps.
  auto train = [&](bool use_jit) {
    Tensor::manual_seed(12);
    nn::Embedding e(11, 6);
    Tensor target = Tensor::randn({4, 3, 6});
    nn::optim::SGD opt({e.weight}, 0.1);
    Tensor::TrainingGuard training;
    auto step = [&](const Tensor& i) {
      Tensor loss = (e(i) - target).square().mean();
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    TinyJit jit(step);
    std::vector<double> losses;
    for (int s = 0; s < 6; ++s) {
      Tensor i = ints(random_ints(12, 0, 11, 90 + static_cast<std::uint64_t>(s)), {4, 3});
      losses.push_back((use_jit ? jit(i) : step(i)).item<double>());
    }
    std::vector<double> out = vals(e.weight);
    out.insert(out.end(), losses.begin(), losses.end());
    return out;
  };
  std::vector<double> plain = train(false), jitted = train(true);
  require_close(jitted, plain, 1e-6, 1e-5);
}

// ---- masked_fill, where with a scalar, triu / tril, arange ----

TEST_CASE("masked_fill and where with a scalar branch: values, dtypes, gradients, errors", "[math]") {
  Tensor x = random_tensor({3, 4}, 31);
  Tensor mask = Tensor(std::vector<bool>{true, false, false, true}, {4});
  std::vector<double> xv = vals(x), want = xv;
  for (std::size_t r = 0; r < 3; ++r) want[r * 4] = want[r * 4 + 3] = -7.5;
  require_close(vals(x.masked_fill(mask, -7.5)), want, 0, 0);
  Tensor mf = x.cast(dtypes::float32).masked_fill(mask, -INFINITY);
  REQUIRE(mf.dtype() == dtypes::float32);
  REQUIRE(vals(mf)[0] == -INFINITY);
  check_gradients([&](const std::vector<Tensor>& in) { return in[0].masked_fill(mask, 3); }, {x});
  REQUIRE_THROWS_WITH(x.masked_fill(Tensor(std::vector<bool>{true, false, true}, {3}), 0),
                      Contains("masked_fill: mask (3,) does not broadcast to the tensor's shape (3, 4)"));
  REQUIRE_THROWS_WITH(Tensor({1.f, 2.f}).masked_fill(Tensor(std::vector<bool>{true, false}, {2, 1}), 0),
                      Contains("masked_fill"));

  Tensor c = x > 0;
  std::vector<double> w1, w2;
  for (double v : xv) w1.push_back(v > 0 ? v : 0.25), w2.push_back(v > 0 ? -1.0 : v);
  require_close(vals(c.where(x, 0.25)), w1, 0, 0);
  require_close(vals(c.where(-1, x)), w2, 0, 0);
  REQUIRE(c.where(x, 0.25).dtype() == dtypes::float64);
  REQUIRE(c.where(ints({1, 2, 3, 4}, {4}), 0).dtype() == dtypes::int64);
  check_gradients([&](const std::vector<Tensor>& in) { return c.where(in[0], 0.25) + c.where(2.0, in[0]); },
                  {x});
  // triu / tril and arange exist already; the causal mask as the GPT writes it
  std::vector<double> causal = vals(Tensor::ones({3, 3}).tril(0));
  require_close(causal, {1, 0, 0, 1, 1, 0, 1, 1, 1}, 0, 0);
  require_close(vals(Tensor::arange(4)), {0, 1, 2, 3}, 0, 0);
}

// ---- gelu ----

TEST_CASE("gelu: the tanh form by default and by name, and the exact form through erf", "[math]") {
  Tensor x = random_tensor({9}, 41, -4, 4);
  std::vector<double> want;
  for (double v : vals(x))
    want.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  require_close(vals(x.gelu()), want, 1e-12, 1e-9);
  require_close(vals(x.gelu("tanh")), want, 1e-12, 1e-9);
  check_gradients([](const std::vector<Tensor>& in) { return in[0].gelu("tanh"); }, {x});
  std::vector<double> exact;
  for (double v : vals(x)) exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  require_close(vals(x.gelu("none")), exact, 3e-7, 1e-6);  // erf's polynomial: 7e-8 at most
  check_gradients([](const std::vector<Tensor>& in) { return in[0].gelu("none"); }, {x});
  REQUIRE_THROWS_WITH(x.gelu("exact"),
                      Contains("gelu: approximate must be \"none\" or \"tanh\", got \"exact\""));
}

// ---- attention ----

namespace {
// softmax(q k^T / sqrt(E) masked) v for one (L, E) x (S, E) x (S, Ev) head, in double.
std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, i64 L, i64 S, i64 E, i64 Ev,
                                  const std::function<bool(i64, i64)>& allowed) {
  std::vector<double> out(static_cast<std::size_t>(L * Ev), 0.0);
  for (i64 i = 0; i < L; ++i) {
    std::vector<double> s(static_cast<std::size_t>(S), -INFINITY);
    double mx = -INFINITY;
    for (i64 j = 0; j < S; ++j) {
      if (!allowed(i, j)) continue;
      double d = 0;
      for (i64 e = 0; e < E; ++e)
        d += q[static_cast<std::size_t>(i * E + e)] * k[static_cast<std::size_t>(j * E + e)];
      s[static_cast<std::size_t>(j)] = d / std::sqrt(static_cast<double>(E));
      mx = std::max(mx, s[static_cast<std::size_t>(j)]);
    }
    double z = 0;
    for (double& x : s) z += (x = std::exp(x - mx));
    for (i64 j = 0; j < S; ++j)
      for (i64 e = 0; e < Ev; ++e)
        out[static_cast<std::size_t>(i * Ev + e)] +=
            s[static_cast<std::size_t>(j)] / z * v[static_cast<std::size_t>(j * Ev + e)];
  }
  return out;
}
std::vector<double> slice(const std::vector<double>& v, i64 at, i64 n) {
  return {v.begin() + at, v.begin() + at + n};
}
}  // namespace

TEST_CASE("scaled_dot_product_attention: no mask, causal, bool and float masks, gradients, errors",
          "[processing]") {
  const i64 B = 2, L = 4, S = 5, E = 3, Ev = 2;
  Tensor q = random_tensor({B, L, E}, 51), k = random_tensor({B, S, E}, 52),
         v = random_tensor({B, S, Ev}, 53);
  std::vector<double> qv = vals(q), kv = vals(k), vv = vals(v);
  auto check = [&](const Tensor& got, const std::function<bool(i64, i64)>& allowed) {
    REQUIRE(got.shape() == Dims{B, L, Ev});
    std::vector<double> g = vals(got);
    for (i64 b = 0; b < B; ++b)
      require_close(slice(g, b * L * Ev, L * Ev),
                    attention_ref(slice(qv, b * L * E, L * E), slice(kv, b * S * E, S * E),
                                  slice(vv, b * S * Ev, S * Ev), L, S, E, Ev, allowed),
                    1e-9, 1e-9);
  };
  check(q.scaled_dot_product_attention(k, v), [](i64, i64) { return true; });
  check(q.scaled_dot_product_attention(k, v, {}, 0, true), [](i64 i, i64 j) { return j <= i; });
  std::vector<bool> m(static_cast<std::size_t>(L * S));
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = (i * 7) % 3 != 0 || i % S == 0;
  Tensor bm(m, {L, S});
  check(q.scaled_dot_product_attention(k, v, bm),
        [&](i64 i, i64 j) { return m[static_cast<std::size_t>(i * S + j)]; });
  check(q.scaled_dot_product_attention(k, v, bm.where(0.0, -INFINITY)),
        [&](i64 i, i64 j) { return m[static_cast<std::size_t>(i * S + j)]; });
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return in[0].scaled_dot_product_attention(in[1], in[2], {}, 0, true);
      },
      {q, k, v});
  REQUIRE_THROWS_WITH(q.scaled_dot_product_attention(random_tensor({B, S, 4}, 1), v),
                      Contains("scaled_dot_product_attention: query and key must end in one size E") &&
                          Contains("query (2, 4, 3), key (2, 5, 4)"));
  REQUIRE_THROWS_WITH(
      q.scaled_dot_product_attention(k, v, Tensor::ones({3, 5}).cast(dtypes::bool_)),
      Contains("the mask does not broadcast to the scores (2, 4, 5)") && Contains("attn_mask (3, 5)"));
  REQUIRE_THROWS_WITH(q.scaled_dot_product_attention(k, v, bm, 0, true), Contains("exclusive"));
}

TEST_CASE("MultiheadAttention: PyTorch's layout against per-head attention, masks, gradients", "[nn]") {
  Tensor::manual_seed(8);
  const i64 N = 2, L = 3, E = 4, H = 2, hd = 2;
  for (bool batch_first : {true, false}) {
    nn::MultiheadAttention mha(E, H, 0, true, batch_first);
    mha.in_proj_bias = random_tensor({3 * E}, 61).cast(dtypes::float32);
    *mha.out_proj.bias = random_tensor({E}, 62).cast(dtypes::float32);
    REQUIRE(nn::get_state_dict(mha).keys() ==
            std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
    Tensor x = random_tensor({N, L, E}, 63).cast(dtypes::float32);  // batch first
    Tensor in = batch_first ? x : x.transpose(0, 1);
    std::vector<double> W = vals(mha.in_proj_weight), Bi = vals(*mha.in_proj_bias),
                        Wo = vals(mha.out_proj.weight), Bo = vals(*mha.out_proj.bias), xv = vals(x);
    for (bool causal : {false, true}) {
      Tensor y = mha(in, causal);
      if (!batch_first) y = y.transpose(0, 1);
      std::vector<double> got = vals(y);
      for (i64 n = 0; n < N; ++n) {
        // projections in double: p[c][t][o] = sum_e x[t][e] W[c*E + o][e] + b
        std::vector<std::vector<double>> p(3, std::vector<double>(static_cast<std::size_t>(L * E)));
        for (i64 c = 0; c < 3; ++c)
          for (i64 t = 0; t < L; ++t)
            for (i64 o = 0; o < E; ++o) {
              double s = Bi[static_cast<std::size_t>(c * E + o)];
              for (i64 e = 0; e < E; ++e)
                s += xv[static_cast<std::size_t>((n * L + t) * E + e)] *
                     W[static_cast<std::size_t>((c * E + o) * E + e)];
              p[static_cast<std::size_t>(c)][static_cast<std::size_t>(t * E + o)] = s;
            }
        std::vector<double> heads(static_cast<std::size_t>(L * E));
        for (i64 h = 0; h < H; ++h) {
          auto part = [&](int c) {
            std::vector<double> r;
            for (i64 t = 0; t < L; ++t)
              for (i64 d = 0; d < hd; ++d)
                r.push_back(p[static_cast<std::size_t>(c)][static_cast<std::size_t>(t * E + h * hd + d)]);
            return r;
          };
          std::vector<double> o = attention_ref(part(0), part(1), part(2), L, L, hd, hd,
                                                [&](i64 i, i64 j) { return !causal || j <= i; });
          for (i64 t = 0; t < L; ++t)
            for (i64 d = 0; d < hd; ++d)
              heads[static_cast<std::size_t>(t * E + h * hd + d)] = o[static_cast<std::size_t>(t * hd + d)];
        }
        for (i64 t = 0; t < L; ++t)
          for (i64 o = 0; o < E; ++o) {
            double s = Bo[static_cast<std::size_t>(o)];
            for (i64 e = 0; e < E; ++e)
              s += heads[static_cast<std::size_t>(t * E + e)] * Wo[static_cast<std::size_t>(o * E + e)];
            INFO("batch_first " << batch_first << " causal " << causal << " n " << n << " t " << t << " o "
                                << o);
            REQUIRE(std::abs(got[static_cast<std::size_t>((n * L + t) * E + o)] - s) < 2e-5);
          }
      }
    }
    // a bool attn_mask true where attention is not allowed is the causal mask
    Tensor upper = Tensor::ones({L, L}).triu(1).cast(dtypes::bool_);
    require_close(vals(mha(in, in, in, upper)), vals(mha(in, true)), 1e-6, 1e-6);
    // three tensors (three projections) and one (one packed projection, q, k and v its views) agree
    Tensor same = in * 1.0;
    REQUIRE(same.lazydata.get() != in.lazydata.get());
    require_close(vals(mha(in, same, same, {}, true)), vals(mha(in, true)), 1e-6, 1e-6);
  }
  nn::MultiheadAttention m(4, 2, 0, true, true);
  REQUIRE_THROWS_WITH(nn::MultiheadAttention(6, 4), Contains("embed_dim 6 must be divisible by num_heads 4"));
  REQUIRE_THROWS_WITH(m(Tensor::ones({2, 3, 5})), Contains("MultiheadAttention(4, 2): query (2, 3, 5)"));
  REQUIRE_THROWS_WITH(
      m(Tensor::ones({2, 3, 4}), Tensor::ones({2, 3, 4}), Tensor::ones({2, 3, 4}), Tensor::ones({2, 2})),
      Contains("attn_mask (2, 2) must be (L, S) = (3, 3)"));
  // float64 parameters, made once: the finite differences need them fixed and exact
  nn::MultiheadAttention a(4, 2, 0, true, true);
  a.in_proj_bias = random_tensor({12}, 73);
  a.out_proj.weight = random_tensor({4, 4}, 74);
  a.out_proj.bias = random_tensor({4}, 75);
  check_gradients(
      [&](const std::vector<Tensor>& in) {
        a.in_proj_weight = in[1];
        return a(in[0], true);
      },
      {random_tensor({1, 3, 4}, 71), random_tensor({12, 4}, 72)});
  check_gradients(  // a query apart from key and value: three projections
      [&](const std::vector<Tensor>& in) {
        a.in_proj_weight = in[1];
        return a(in[0], in[2], in[2], {}, true);
      },
      {random_tensor({1, 3, 4}, 76), random_tensor({12, 4}, 77), random_tensor({1, 3, 4}, 78)});
}

// ---- topk, multinomial, sampling ----

TEST_CASE("topk: values and indices along any axis, ties, gradients, errors", "[processing]") {
  Tensor x = random_tensor({3, 5, 4}, 81);
  std::vector<double> xv = vals(x);
  for (i64 dim = 0; dim < 3; ++dim)
    for (bool largest : {true, false}) {
      std::vector<i64> s{3, 5, 4};
      i64 n = s[static_cast<std::size_t>(dim)], k = 2;
      auto [v, i] = x.topk(k, dim, largest);
      std::vector<i64> os = s;
      os[static_cast<std::size_t>(dim)] = k;
      REQUIRE(v.shape() == Dims(os));
      REQUIRE(i.dtype() == dtypes::int64);
      std::vector<double> gv = vals(v);
      std::vector<i64> gi = i.to_vector<i64>();
      test::for_each_index(os, [&](const std::vector<i64>& at) {
        std::vector<std::pair<double, i64>> row;
        for (i64 j = 0; j < n; ++j) {
          std::vector<i64> a = at;
          a[static_cast<std::size_t>(dim)] = j;
          row.push_back({xv[static_cast<std::size_t>(test::offset(s, a))], j});
        }
        std::sort(row.begin(), row.end(),
                  [&](auto a, auto b) { return largest ? a.first > b.first : a.first < b.first; });
        auto r = static_cast<std::size_t>(at[static_cast<std::size_t>(dim)]);
        REQUIRE(gi[static_cast<std::size_t>(test::offset(os, at))] == row[r].second);
        REQUIRE(gv[static_cast<std::size_t>(test::offset(os, at))] == row[r].first);
      });
    }
  auto [tv, ti] = Tensor({1.f, 3.f, 3.f, 0.f}).topk(3);
  REQUIRE(ti.to_vector<i64>() == std::vector<i64>{1, 2, 0});
  check_gradients([](const std::vector<Tensor>& in) { return in[0].topk(2, 1).first; },
                  {random_tensor({2, 5}, 82)});
  REQUIRE_THROWS_WITH(x.topk(6, 1), Contains("topk: k = 6 is outside [0, 5]") && Contains("(3, 5, 4)"));
}

TEST_CASE("multinomial: frequencies match the weights, with and without replacement; bad weights",
          "[processing]") {
  Tensor::manual_seed(9);
  std::vector<double> w{1, 0, 3, 6};
  Tensor wt = Tensor(w, {4}).cast(dtypes::float32);
  const i64 n = 20000;
  std::vector<i64> s = wt.multinomial(n, true).to_vector<i64>();
  REQUIRE(s.size() == static_cast<std::size_t>(n));
  std::vector<double> count(4, 0);
  for (i64 x : s) count[static_cast<std::size_t>(x)] += 1;
  for (std::size_t j = 0; j < 4; ++j) REQUIRE(std::abs(count[j] / n - w[j] / 10) < 0.015);  // ~4.5 sigma
  // without replacement: distinct, and the first draw follows the weights
  Tensor rows = Tensor(std::vector<double>{1, 0, 3, 6, 2, 2, 2, 2}, {2, 4}).cast(dtypes::float32);
  std::vector<double> first(4, 0);
  for (int t = 0; t < 400; ++t) {
    std::vector<i64> d = rows.multinomial(3, false).to_vector<i64>();
    REQUIRE(d.size() == 6);
    for (int r = 0; r < 2; ++r) {
      std::vector<i64> row(d.begin() + r * 3, d.begin() + r * 3 + 3);
      std::sort(row.begin(), row.end());
      REQUIRE(std::adjacent_find(row.begin(), row.end()) == row.end());
    }
    REQUIRE(d[0] != 1);
    first[static_cast<std::size_t>(d[0])] += 1;
  }
  REQUIRE(std::abs(first[3] / 400 - 0.6) < 0.1);
  REQUIRE_THROWS_WITH(Tensor({1.f, -0.5f}).multinomial(),
                      Contains("multinomial: weight -0.5") && Contains("(2,)"));
  REQUIRE_THROWS_WITH(Tensor({0.f, 0.f}).multinomial(),
                      Contains("multinomial: row 0 of weights (2,) sums to 0"));
  REQUIRE_THROWS_WITH(Tensor({1.f, 2.f}).multinomial(3),
                      Contains("cannot draw 3 samples without replacement"));
}

TEST_CASE("nn::sample: argmax at temperature 0, top_k keeps the k best, draws follow the softmax", "[nn]") {
  Tensor::manual_seed(10);
  Tensor logits = Tensor({{0.f, 2.f, 1.f, -1.f}, {3.f, 0.f, 0.f, 2.9f}});
  REQUIRE(nn::sample(logits, 0).to_vector<i64>() == std::vector<i64>{1, 0});
  for (int t = 0; t < 50; ++t) {
    std::vector<i64> s = nn::sample(logits, 1.0, 2).to_vector<i64>();
    REQUIRE((s[0] == 1 || s[0] == 2));
    REQUIRE((s[1] == 0 || s[1] == 3));
  }
  std::vector<double> c(4, 0);
  Tensor row = Tensor({0.f, 1.f, 2.f, 0.5f}).reshape({1, 4}).expand({2000, 4});
  for (i64 x : nn::sample(row, 2.0).to_vector<i64>()) c[static_cast<std::size_t>(x)] += 1;
  double z = std::exp(0) + std::exp(0.5) + std::exp(1) + std::exp(0.25);
  REQUIRE(std::abs(c[2] / 2000 - std::exp(1) / z) < 0.04);
}

// ---- training utilities ----

TEST_CASE("clip_grad_norm, cosine warm-up schedule and AdamW parameter groups", "[nn]") {
  Tensor a = Tensor({3.f, 0.f}, {.requires_grad = true}), b = Tensor({4.f}, {.requires_grad = true});
  a.grad = Tensor({3.f, 0.f});
  b.grad = Tensor({4.f});
  Tensor norm = nn::optim::clip_grad_norm({a, b}, 1.0);
  REQUIRE(std::abs(norm.item<float>() - 5) < 1e-6);
  require_close(vals(*a.grad), {0.6, 0}, 1e-6, 1e-5);
  require_close(vals(*b.grad), {0.8}, 1e-6, 1e-5);
  REQUIRE(std::abs(nn::optim::clip_grad_norm({a, b}, 10).item<float>() - 1) < 1e-5);  // below: unchanged
  require_close(vals(*b.grad), {0.8}, 1e-6, 1e-5);

  using nn::optim::cosine_lr;
  REQUIRE(cosine_lr(0, 10, 110, 1.0, 0.1) == Approx(0.1));
  REQUIRE(cosine_lr(9, 10, 110, 1.0, 0.1) == Approx(1.0));
  REQUIRE(cosine_lr(10, 10, 110, 1.0, 0.1) == Approx(1.0));
  REQUIRE(cosine_lr(60, 10, 110, 1.0, 0.1) == Approx(0.55));
  REQUIRE(cosine_lr(110, 10, 110, 1.0, 0.1) == Approx(0.1));
  REQUIRE(cosine_lr(500, 10, 110, 1.0, 0.1) == Approx(0.1));

  // Two groups: w (2-D) decays, the bias does not; with zero gradients only decay moves a tensor.
  Tensor w = Tensor::ones({2, 2}) * 2, bias = Tensor::ones({2}) * 2;
  auto groups = nn::optim::decay_groups({w, bias}, 0.5);
  REQUIRE(groups[0].params.size() == 1);
  REQUIRE(groups[1].params.size() == 1);
  nn::optim::AdamW opt(groups, 0.1);
  nn::optim::CosineWarmup sched(opt, 2, 10, 0.1);
  REQUIRE(opt.get_lr() == Approx(0.05));
  w.grad = Tensor::zeros({2, 2});
  bias.grad = Tensor::zeros({2});
  opt.step();
  require_close(vals(w), std::vector<double>(4, 2 - 0.05 * 0.5 * 2), 1e-6, 1e-6);
  require_close(vals(bias), {2, 2}, 0, 0);
  REQUIRE(sched.step() == Approx(0.1));
  REQUIRE(opt.get_lr() == Approx(0.1));
}
