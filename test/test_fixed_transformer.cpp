// A transformer's pieces on the static path (fixed/transformer.hpp): arange, triu, tril,
// masked_fill, layernorm, scaled_dot_product_attention, gather and embedding, each against the
// dynamic path's op of the same name (float, 1e-4 relative plus 1e-5 absolute) and its gradient
// against central finite differences (double, fixed_grad_check.hpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "fixed_grad_check.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/transformer.hpp"
#include "metagrad/tensor.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::test::check_fd;
using metagrad::test::dyn;
using metagrad::test::random_tensor;
using metagrad::test::same;

namespace {
// A float copy of a double tensor (the dynamic path's reference runs in float).
template <index_t... D>
fx::Tensor<float, D...> to_float(const fx::Tensor<double, D...>& t) {
  return fx::eval(t.template cast<float>());
}
}  // namespace

TEST_CASE("fixed transformer: arange, triu, tril and masked_fill against the dynamic path",
          "[fixed][transformer]") {
  auto r = fx::eval(fx::arange<float, 5>());
  for (index_t i = 0; i < 5; ++i) REQUIRE(r[i] == float(i));
  std::mt19937 rng(1);
  auto x = random_tensor<double, 2, 3, 5>(rng);
  auto w = random_tensor<double, 2, 3, 5>(rng);
  auto xf = to_float(x);
  same(fx::eval(fx::triu(xf)), dyn(xf).triu(0), "triu 0");
  same(fx::eval(fx::triu<2>(xf)), dyn(xf).triu(2), "triu 2");
  same(fx::eval(fx::triu<-1>(xf)), dyn(xf).triu(-1), "triu -1");
  same(fx::eval(fx::tril(xf)), dyn(xf).tril(0), "tril 0");
  same(fx::eval(fx::tril<1>(xf)), dyn(xf).tril(1), "tril 1");
  same(fx::eval(fx::tril<-2>(xf)), dyn(xf).tril(-2), "tril -2");
  check_fd((fx::triu<1>(x) * w).sum(), x);
  check_fd((fx::tril<-1>(x) * w).sum(), x);
  fx::Tensor<bool, 3, 5> m;
  for (index_t i = 0; i < m.size; ++i) m[i] = rng() % 2;
  metagrad::Tensor dm = dyn(fx::eval(m.cast<float>())).cast(metagrad::dtypes::bool_);
  same(fx::eval(fx::masked_fill(xf, m, -3.5)), dyn(xf).masked_fill(dm, -3.5), "masked_fill");
  check_fd((fx::masked_fill(x, m, 2.0) * w).sum(), x);
}

TEST_CASE("fixed transformer: layernorm against the dynamic path and finite differences",
          "[fixed][transformer]") {
  for (int seed = 0; seed < 3; ++seed) {
    std::mt19937 rng(10 + seed);
    auto x = random_tensor<double, 3, 6>(rng);
    auto g = random_tensor<double, 6>(rng, 0.5, 1.5);
    auto b = random_tensor<double, 6>(rng);
    auto r = random_tensor<double, 3, 6>(rng);
    auto xf = to_float(x);
    same(fx::eval(fx::layernorm(xf)), dyn(xf).layernorm(), "layernorm");
    same(fx::eval(fx::layernorm<0>(xf, 1e-3)), dyn(xf).layernorm(0, 1e-3), "layernorm over axis 0");
    same(fx::eval(fx::layernorm(xf, to_float(g), to_float(b))),
         dyn(xf).layernorm() * dyn(to_float(g)) + dyn(to_float(b)), "layernorm with weight and bias");
    check_fd((fx::layernorm(x, g, b) * r).sum(), x, g, b);
  }
}

TEST_CASE("fixed transformer: scaled_dot_product_attention against the dynamic path and finite differences",
          "[fixed][transformer]") {
  for (int seed = 0; seed < 2; ++seed) {
    std::mt19937 rng(20 + seed);
    auto q = random_tensor<double, 2, 4, 3>(rng);
    auto k = random_tensor<double, 2, 5, 3>(rng);
    auto v = random_tensor<double, 2, 5, 2>(rng);
    auto kc = random_tensor<double, 2, 4, 3>(rng);  // causal: square
    auto vc = random_tensor<double, 2, 4, 2>(rng);
    auto add = random_tensor<double, 4, 5>(rng);
    auto r = random_tensor<double, 2, 4, 2>(rng);
    fx::Tensor<bool, 4, 5> m;
    for (index_t i = 0; i < m.size; ++i) m[i] = i % 5 == 0 || rng() % 2;  // every row attends somewhere
    auto [qf, kf, vf, kcf, vcf, addf] =
        std::tuple{to_float(q), to_float(k), to_float(v), to_float(kc), to_float(vc), to_float(add)};
    metagrad::Tensor dm = dyn(fx::eval(m.cast<float>())).cast(metagrad::dtypes::bool_);
    same(fx::eval(fx::scaled_dot_product_attention(qf, kf, vf)),
         dyn(qf).scaled_dot_product_attention(dyn(kf), dyn(vf)), "attention");
    same(fx::eval(fx::scaled_dot_product_attention<true>(qf, kcf, vcf)),
         dyn(qf).scaled_dot_product_attention(dyn(kcf), dyn(vcf), {}, 0, true), "causal attention");
    same(fx::eval(fx::scaled_dot_product_attention(qf, kf, vf, m)),
         dyn(qf).scaled_dot_product_attention(dyn(kf), dyn(vf), dm), "attention, bool mask");
    same(fx::eval(fx::scaled_dot_product_attention(qf, kf, vf, addf)),
         dyn(qf).scaled_dot_product_attention(dyn(kf), dyn(vf), dyn(addf)), "attention, float mask");
    check_fd((fx::scaled_dot_product_attention<true>(q, kc, vc) * r).sum(), q, kc, vc);
    check_fd((fx::scaled_dot_product_attention(q, k, v, m) * r).sum(), q, k, v);
  }
}

TEST_CASE("fixed transformer: gather and embedding against the dynamic path and finite differences",
          "[fixed][transformer]") {
  std::mt19937 rng(30);
  auto x = random_tensor<double, 3, 4, 5>(rng);
  fx::Tensor<std::int32_t, 3, 2, 5> idx;
  for (auto& i : idx) i = std::int32_t(rng() % 4);
  auto r = random_tensor<double, 3, 2, 5>(rng);
  std::vector<std::int32_t> iv(idx.begin(), idx.end());
  metagrad::Tensor di(iv, {3, 2, 5}, {.device = "CPU"});
  same(fx::eval(fx::gather<1>(to_float(x), idx)), dyn(to_float(x)).gather(1, di), "gather along axis 1");
  check_fd((fx::gather<1>(x, idx) * r).sum(), x);
  fx::Tensor<std::int32_t, 3, 4, 2> last;
  for (auto& i : last) i = std::int32_t(rng() % 5);
  std::vector<std::int32_t> lv(last.begin(), last.end());
  same(fx::eval(fx::gather<-1>(to_float(x), last)),
       dyn(to_float(x)).gather(-1, metagrad::Tensor(lv, {3, 4, 2}, {.device = "CPU"})),
       "gather along the last axis");

  auto w = random_tensor<double, 6, 3>(rng);  // a vocabulary of 6, width 3
  fx::Tensor<std::int32_t, 2, 4> tok;
  for (auto& i : tok) i = std::int32_t(rng() % 6);
  auto e = fx::eval(fx::embedding(w, tok));
  for (index_t i = 0; i < 8; ++i)
    for (index_t c = 0; c < 3; ++c) REQUIRE(e[i * 3 + c] == w(tok[i], c));
  auto re = random_tensor<double, 2, 4, 3>(rng);
  check_fd((fx::embedding(w, tok) * re).sum(), w);  // rows picked twice get both gradients
}
