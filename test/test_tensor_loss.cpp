// Losses against formulas evaluated by hand in double, their gradients against finite differences,
// and their errors.
#include <cmath>

#include "gradcheck.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::random_tensor;
using metagrad::test::require_close;

namespace {
using Vd = std::vector<double>;

Vd vals(const Tensor& t) { return t.to_vector<double>(); }

// Mean over non-ignored rows of -(x[y] - logsumexp(x)); rows of `classes` logits.
double ref_sparse_ce(const Vd& x, const Vd& y, std::size_t classes, double ignore) {
  double total = 0, count = 0;
  for (std::size_t r = 0; r < y.size(); ++r) {
    if (y[r] == ignore) continue;
    double m = -INFINITY, s = 0;
    for (std::size_t c = 0; c < classes; ++c) m = std::max(m, x[r * classes + c]);
    for (std::size_t c = 0; c < classes; ++c) s += std::exp(x[r * classes + c] - m);
    total += -(x[r * classes + static_cast<std::size_t>(y[r])] - m - std::log(s));
    count += 1;
  }
  return total / count;
}
}  // namespace

TEST_CASE("sparse_categorical_crossentropy matches the formula", "[loss]") {
  SECTION("2-D logits, float labels") {
    Tensor x = random_tensor({5, 4}, 1, -3, 3);
    Tensor y({0, 3, 1, 2, 3});
    Tensor loss = x.sparse_categorical_crossentropy(y);
    REQUIRE(loss.shape() == Dims{});
    REQUIRE(loss.item<double>() == Approx(ref_sparse_ce(vals(x), vals(y), 4, -1)).epsilon(1e-12));
  }
  SECTION("integer labels, ignored labels left out of sum and count") {
    Tensor x = random_tensor({6, 3}, 2, -3, 3);
    Tensor y(std::vector<std::int64_t>{2, -1, 0, 1, -1, 2}, {6});
    REQUIRE(x.sparse_categorical_crossentropy(y).item<double>() ==
            Approx(ref_sparse_ce(vals(x), vals(y), 3, -1)).epsilon(1e-12));
    // Another ignore_index: class 2 is ignored, -1 is now out of range.
    Tensor y2(std::vector<std::int64_t>{2, 1, 0, 1, 0, 2}, {6});
    REQUIRE(x.sparse_categorical_crossentropy(y2, 2).item<double>() ==
            Approx(ref_sparse_ce(vals(x), vals(y2), 3, 2)).epsilon(1e-12));
    // Everything ignored: 0 / 0, as PyTorch.
    REQUIRE(std::isnan(x.sparse_categorical_crossentropy(Tensor::full({6}, -1)).item<double>()));
  }
  SECTION("3-D logits, non-contiguous, float32") {
    Tensor x = random_tensor({4, 3, 2}, 3, -3, 3).permute({2, 1, 0});  // (2, 3, 4)
    Tensor y({{0, 3, 2}, {1, 1, 0}});
    double want = ref_sparse_ce(vals(x), vals(y), 4, -1);
    REQUIRE(x.sparse_categorical_crossentropy(y).item<double>() == Approx(want).epsilon(1e-12));
    Tensor loss32 = x.cast(dtypes::float32).sparse_categorical_crossentropy(y);
    REQUIRE(loss32.dtype() == dtypes::float32);
    REQUIRE(loss32.item<double>() == Approx(want).epsilon(1e-5));
  }
  SECTION("large logits stay finite") {
    Tensor x(Vd{1000, 0, -1000, 500, 501, 502}, {2, 3});
    Tensor y({0, 1});
    double want = ref_sparse_ce(vals(x), vals(y), 3, -1);
    REQUIRE(std::isfinite(want));
    REQUIRE(x.sparse_categorical_crossentropy(y).item<double>() == Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("nll_loss takes log-probabilities", "[loss]") {
  Tensor logp = random_tensor({4, 5}, 10, -4, 0);
  Tensor y({4, 0, 2, 2});
  Vd lv = vals(logp), yv = vals(y);
  double want = 0;
  for (std::size_t r = 0; r < 4; ++r) want -= lv[r * 5 + static_cast<std::size_t>(yv[r])] / 4;
  REQUIRE(logp.nll_loss(y).item<double>() == Approx(want).epsilon(1e-12));
  // On log_softmax'd logits it is the cross-entropy.
  Tensor x = random_tensor({4, 5}, 11);
  Tensor lsm = x - (x.exp().sum(-1, true)).log();
  REQUIRE(lsm.nll_loss(y).item<double>() == Approx(ref_sparse_ce(vals(x), yv, 5, -1)).epsilon(1e-12));
}

TEST_CASE("binary_crossentropy and binary_crossentropy_logits match the formulas", "[loss]") {
  Tensor p = random_tensor({3, 4}, 20, 0.05, 0.95), y = random_tensor({3, 4}, 21, 0, 1);
  Vd pv = vals(p), yv = vals(y);
  double want = 0;
  for (std::size_t i = 0; i < pv.size(); ++i)
    want -= (yv[i] * std::log(pv[i]) + (1 - yv[i]) * std::log(1 - pv[i])) / 12;
  REQUIRE(p.binary_crossentropy(y).item<double>() == Approx(want).epsilon(1e-12));
  // Probabilities of exactly 0 and 1: the logs clamp at -100 (as PyTorch), no NaN.
  Tensor edge({0, 1, 0, 1}), ey({0, 1, 1, 0});
  REQUIRE(edge.binary_crossentropy(ey).item<double>() == Approx(50.0).epsilon(1e-6));

  Tensor logits = random_tensor({3, 4}, 22, -5, 5);
  Vd lv = vals(logits);
  auto ref_logits = [](const Vd& x, const Vd& t) {
    double s = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      s += (std::max(x[i], 0.0) - x[i] * t[i] + std::log1p(std::exp(-std::abs(x[i])))) /
           static_cast<double>(x.size());
    return s;
  };
  REQUIRE(logits.binary_crossentropy_logits(y).item<double>() == Approx(ref_logits(lv, yv)).epsilon(1e-12));
  // Equal to binary_crossentropy of the sigmoid.
  Tensor sig = 1 / (1 + (-logits).exp());
  REQUIRE(logits.binary_crossentropy_logits(y).item<double>() ==
          Approx(sig.binary_crossentropy(y).item<double>()).epsilon(1e-10));
  // Large logits stay finite and exact; an integer target works.
  Tensor big(Vd{800, -800, 100, -100, 0}, {5});
  Tensor by(std::vector<std::int64_t>{0, 1, 1, 0, 1}, {5});
  REQUIRE(big.binary_crossentropy_logits(by).item<double>() ==
          Approx(ref_logits(vals(big), vals(by))).epsilon(1e-12));
  // A non-contiguous input.
  Tensor nc = random_tensor({4, 3}, 23, -5, 5).permute({1, 0});
  REQUIRE(nc.binary_crossentropy_logits(y).item<double>() == Approx(ref_logits(vals(nc), yv)).epsilon(1e-12));
}

TEST_CASE("loss gradients match finite differences", "[loss]") {
  Tensor y({0, 3, 1, 2});
  check_gradients([&](const std::vector<Tensor>& t) { return t[0].sparse_categorical_crossentropy(y); },
                  {random_tensor({4, 4}, 30)});
  Tensor yi({2, -1, 0});
  check_gradients([&](const std::vector<Tensor>& t) { return t[0].sparse_categorical_crossentropy(yi); },
                  {random_tensor({3, 3}, 31)});
  Tensor y3({{0, 2}, {1, 1}});
  check_gradients([&](const std::vector<Tensor>& t) { return t[0].sparse_categorical_crossentropy(y3); },
                  {random_tensor({2, 2, 3}, 32)});
  check_gradients([&](const std::vector<Tensor>& t) { return t[0].nll_loss(y); },
                  {random_tensor({4, 4}, 33)});
  // Both the probabilities and the (soft) targets.
  check_gradients([](const std::vector<Tensor>& t) { return t[0].binary_crossentropy(t[1]); },
                  {random_tensor({2, 3}, 34, 0.1, 0.9), random_tensor({2, 3}, 35, 0, 1)});
  // Logits including exactly 0, where max(x, 0) has its kink: the gradient is still sigmoid(x) - y.
  check_gradients([](const std::vector<Tensor>& t) { return t[0].binary_crossentropy_logits(t[1]); },
                  {Tensor(Vd{0, 1.5, -2, 7, -0.25, 3}, {2, 3}), random_tensor({2, 3}, 36, 0, 1)});
}

TEST_CASE("loss errors name the op, the shapes and the bad label", "[loss]") {
  Tensor x = Tensor::ones({3, 4});
  REQUIRE_THROWS_AS(x.sparse_categorical_crossentropy(Tensor({0, 4, 1})), std::invalid_argument);
  REQUIRE_THROWS_WITH(x.sparse_categorical_crossentropy(Tensor({0, 4, 1})),
                      Contains("sparse_categorical_crossentropy") && Contains("label 4") &&
                          Contains("(3, 4)") && Contains("index 1"));
  REQUIRE_THROWS_WITH(x.sparse_categorical_crossentropy(Tensor({0, -2, 1})), Contains("label -2"));
  REQUIRE_THROWS_WITH(x.sparse_categorical_crossentropy(Tensor({0, 1.5, 1})), Contains("label 1.5"));
  REQUIRE_THROWS_WITH(x.sparse_categorical_crossentropy(Tensor({0, -1, 1}), 3), Contains("label -1"));
  REQUIRE_THROWS_WITH(x.sparse_categorical_crossentropy(Tensor({0, 1})),
                      Contains("(3, 4)") && Contains("(3,)") && Contains("(2,)"));
  REQUIRE_THROWS_WITH(Tensor::full({}, 1).sparse_categorical_crossentropy(Tensor::full({}, 0)),
                      Contains("class axis"));
  REQUIRE_THROWS_WITH(x.nll_loss(Tensor({0, 1, 9})), Contains("nll_loss") && Contains("label 9"));
  REQUIRE_THROWS_WITH(x.nll_loss(Tensor({0, -1, 1})), Contains("label -1"));  // nll_loss ignores nothing
  REQUIRE_THROWS_WITH(Tensor::ones({4, 1}).binary_crossentropy(Tensor::ones({4})),
                      Contains("binary_crossentropy: the input (4, 1) and the target (4,)"));
  REQUIRE_THROWS_WITH(Tensor::ones({4}).binary_crossentropy_logits(Tensor::ones({5})),
                      Contains("binary_crossentropy_logits") && Contains("(4,)") && Contains("(5,)"));
}
