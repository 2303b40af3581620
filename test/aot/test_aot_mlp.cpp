// The AOT-compiled MLP (gen_mlp.cpp -> aot_mlp.c) against the static model evaluated inline and
// the dynamic path on the CPU reference device, for random weights and data: forward values, and
// the loss and weights over SGD steps.
#include <aot_mlp.h>

#include <catch2/catch.hpp>
#include <random>

#include "mlp_model.hpp"

using namespace metagrad;
using namespace aot_mlp;

namespace {

std::vector<float> randn(std::mt19937& rng, std::int64_t n, float scale = 1) {
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Float32 kernels in another order of summation: agreement to a few ulps of the operands' scale.
void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-5).epsilon(1e-4));
}

struct HostWeights {
  std::vector<float> w1, b1, w2, b2;
  explicit HostWeights(std::mt19937& rng)
      : w1(randn(rng, kIn * kHidden, 0.5f)),
        b1(randn(rng, kHidden, 0.1f)),
        w2(randn(rng, kHidden * kOut, 0.5f)),
        b2(randn(rng, kOut, 0.1f)) {}
};

Tensor host_tensor(const std::vector<float>& v, const Dims& shape, bool grad = false) {
  return Tensor(v, shape, {.device = "CPU", .requires_grad = grad});
}

}  // namespace

TEST_CASE("AOT forward equals the inline static forward and the dynamic forward on CPU", "[aot]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    HostWeights w(rng);
    std::vector<float> x = randn(rng, kBatch * kIn), out(static_cast<std::size_t>(kBatch * kOut));
    aot_mlp_forward(x.data(), w.w1.data(), w.b1.data(), w.w2.data(), w.b2.data(), out.data());
    Tensor want =
        forward(host_tensor(x, {kBatch, kIn}), host_tensor(w.w1, {kIn, kHidden}),
                host_tensor(w.b1, {kHidden}), host_tensor(w.w2, {kHidden, kOut}), host_tensor(w.b2, {kOut}));
    check_close(out, want.to_vector<float>());
    // The static model, evaluated inline on the same weights.
    aot_mlp::Weights sw{
        fx::Tensor<float, kIn, kHidden>::from(w.w1.data()), fx::Tensor<float, kHidden>::from(w.b1.data()),
        fx::Tensor<float, kHidden, kOut>::from(w.w2.data()), fx::Tensor<float, kOut>::from(w.b2.data())};
    fx::Tensor<float, kBatch, kOut> inline_out = forward(fx::Tensor<float, kBatch, kIn>::from(x.data()), sw);
    check_close(out, std::vector<float>(inline_out.begin(), inline_out.end()));
  }
}

TEST_CASE("AOT SGD steps follow the dynamic SGD steps on CPU: loss and every weight", "[aot]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 4; ++trial) {
    HostWeights aot(rng), dyn = aot;
    std::uniform_int_distribution<std::int32_t> label(0, kOut - 1);
    float lr = 0.05f + 0.1f * static_cast<float>(trial);
    for (int step = 0; step < 6; ++step) {
      std::vector<float> x = randn(rng, kBatch * kIn);
      std::vector<std::int32_t> y(static_cast<std::size_t>(kBatch));
      for (auto& v : y) v = label(rng);
      float loss = -1;
      aot_mlp_step(x.data(), y.data(), lr, aot.w1.data(), aot.b1.data(), aot.w2.data(), aot.b2.data(), &loss);

      Tensor w1 = host_tensor(dyn.w1, {kIn, kHidden}, true), b1 = host_tensor(dyn.b1, {kHidden}, true),
             w2 = host_tensor(dyn.w2, {kHidden, kOut}, true), b2 = host_tensor(dyn.b2, {kOut}, true);
      Tensor l = forward(host_tensor(x, {kBatch, kIn}), w1, b1, w2, b2)
                     .sparse_categorical_crossentropy(Tensor(y, {kBatch}, {.device = "CPU"}));
      l.backward();
      REQUIRE(loss == Approx(l.item<float>()).epsilon(1e-4));
      std::vector<float>* dst[] = {&dyn.w1, &dyn.b1, &dyn.w2, &dyn.b2};
      Tensor* src[] = {&w1, &b1, &w2, &b2};
      for (int i = 0; i < 4; ++i) *dst[i] = (*src[i] - lr * *src[i]->grad).to_vector<float>();
      check_close(aot.w1, dyn.w1);
      check_close(aot.b1, dyn.b1);
      check_close(aot.w2, dyn.w2);
      check_close(aot.b2, dyn.b2);
    }
  }
}
