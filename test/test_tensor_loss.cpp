// Losses against formulas evaluated by hand in double, their gradients against finite differences,
// and their errors.
#include <cmath>
#include <random>
#include <string>

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

// ---- PyTorch's cross_entropy, nll_loss and the BCE options ----
namespace {
struct CeCase {
  std::vector<std::int64_t> shape;  // (N, C, d...) or (C)
  Vd x, target;                     // target: class indices (shape without C) or probabilities (shape)
  bool probs = false, logits = true;
  Vd weight;  // empty: none
  double ignore = -100, smoothing = 0;
  std::string reduction = "mean";
};

// PyTorch's definitions in float64, element by element over (n, d): log-probabilities along the
// class axis, -w[y] logp[y] and the smoothing term -sum_c w[c] logp[c] (0 where ignored) for
// indices, -sum_c w[c] p'[c] logp[c] for probabilities. Returns the per-element losses for "none".
Vd ref_ce(const CeCase& k) {
  std::size_t axis = k.shape.size() == 1 ? 0 : 1;
  std::size_t N = axis == 0 ? 1 : static_cast<std::size_t>(k.shape[0]);
  auto C = static_cast<std::size_t>(k.shape[axis]);
  std::size_t D = 1;
  for (std::size_t i = axis + 1; i < k.shape.size(); ++i) D *= static_cast<std::size_t>(k.shape[i]);
  auto w = [&](std::size_t c) { return k.weight.empty() ? 1.0 : k.weight[c]; };
  double e = k.smoothing, total_nll = 0, total_smooth = 0, denominator = 0;
  Vd none;
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t d = 0; d < D; ++d) {
      auto at = [&](std::size_t c) { return (n * C + c) * D + d; };
      Vd logp(C);
      double m = -INFINITY, s = 0;
      for (std::size_t c = 0; c < C; ++c) m = std::max(m, k.x[at(c)]);
      for (std::size_t c = 0; c < C; ++c) s += std::exp(k.x[at(c)] - m);
      for (std::size_t c = 0; c < C; ++c) logp[c] = k.logits ? k.x[at(c)] - m - std::log(s) : k.x[at(c)];
      if (k.probs) {
        double l = 0;
        for (std::size_t c = 0; c < C; ++c)
          l -= w(c) * ((1 - e) * k.target[at(c)] + e / static_cast<double>(C)) * logp[c];
        none.push_back(l), total_nll += l, denominator += 1;
        continue;
      }
      double y = k.target[n * D + d];
      if (y == k.ignore) {
        none.push_back(0);
        continue;
      }
      auto yc = static_cast<std::size_t>(y);
      double nll = -w(yc) * logp[yc], smooth = 0;
      for (std::size_t c = 0; c < C; ++c) smooth -= w(c) * logp[c];
      none.push_back((1 - e) * nll + e / static_cast<double>(C) * smooth);
      total_nll += nll, total_smooth += smooth, denominator += w(yc);
    }
  double sum = k.probs ? total_nll : (1 - e) * total_nll + e / static_cast<double>(C) * total_smooth;
  if (k.reduction == "none") return none;
  return {k.reduction == "sum" ? sum : sum / denominator};
}

Tensor run_ce(const CeCase& k, const std::string& op) {
  Tensor x(k.x, Dims(k.shape));
  std::vector<std::int64_t> ts = k.shape;
  if (!k.probs) ts.erase(ts.begin() + (k.shape.size() == 1 ? 0 : 1));
  Tensor t = k.probs ? Tensor(k.target, Dims(ts))
                     : Tensor(std::vector<std::int64_t>(k.target.begin(), k.target.end()), Dims(ts));
  LossOptions o{.ignore_index = static_cast<std::int64_t>(k.ignore),
                .reduction = k.reduction,
                .label_smoothing = k.smoothing};
  if (!k.weight.empty()) o.weight = Tensor(k.weight, {static_cast<std::int64_t>(k.weight.size())});
  return op == "nll_loss" ? x.nll_loss(t, o) : x.cross_entropy(t, o);
}
}  // namespace

TEST_CASE("cross_entropy and nll_loss match PyTorch's definitions over random cases", "[loss]") {
  std::mt19937_64 gen(40);
  const std::vector<std::vector<std::int64_t>> shapes{{5, 4}, {3, 4, 2}, {2, 3, 2, 3}, {6}, {1, 1}};
  int cases = 0, skipped = 0;
  metagrad::test::Sampler sample;  // a third of the cases on PoCL (gradcheck.hpp)
  for (const auto& shape : shapes)
    for (bool probs : {false, true})
      for (int options = 0; options < 12; ++options) {
        if (!sample()) {
          ++skipped;
          continue;
        }
        CeCase k;
        k.shape = shape;
        k.probs = probs;
        k.reduction = std::vector<std::string>{"none", "mean", "sum"}[static_cast<std::size_t>(options % 3)];
        std::size_t axis = shape.size() == 1 ? 0 : 1;
        auto C = shape[axis];
        k.x = metagrad::test::random_values(prod(Dims(shape)), gen(), -4, 4);
        if (options / 3 % 2) k.weight = metagrad::test::random_values(C, gen(), 0.2, 3);
        if (options / 6) k.smoothing = 0.25;
        if (probs) {
          k.target = metagrad::test::random_values(prod(Dims(shape)), gen(), 0, 1);
        } else {
          // In-range ignore_index for some cases (class 0 is then left out), -100 for others.
          if (options % 2 && C > 1) k.ignore = 0;
          std::int64_t rows = prod(Dims(shape)) / C;
          std::uniform_int_distribution<std::int64_t> label(-1, C - 1);
          for (std::int64_t i = 0; i < rows; ++i) {
            std::int64_t y = label(gen);
            k.target.push_back(y < 0 ? k.ignore : static_cast<double>(y));
          }
          if (rows > 1) k.target[0] = C - 1;  // at least one label kept: no 0 / 0
        }
        INFO("shape " << to_string(Dims(shape)) << (probs ? " probabilities" : " indices") << " reduction "
                      << k.reduction << " weight " << !k.weight.empty() << " smoothing " << k.smoothing
                      << " ignore " << k.ignore);
        Tensor got = run_ce(k, "cross_entropy");
        require_close(vals(got), ref_ce(k), 1e-10, 1e-10, "cross_entropy");
        if (!probs && k.smoothing == 0) {  // nll_loss of log-probabilities is the same
          CeCase n = k;
          n.logits = false;
          Tensor logp = Tensor(k.x, Dims(shape)).log_softmax(static_cast<std::int64_t>(axis));
          n.x = vals(logp);
          require_close(vals(run_ce(n, "nll_loss")), ref_ce(k), 1e-10, 1e-10, "nll_loss");
          require_close(vals(run_ce(n, "nll_loss")), ref_ce(n), 1e-10, 1e-10,
                        "nll_loss of log-probabilities");
        }
        ++cases;
      }
  REQUIRE(cases + skipped == 120);
  REQUIRE(cases >= 40);
}

TEST_CASE("cross_entropy: the mean with weights divides by the kept targets' weights", "[loss]") {
  // Hand-computed: logits with log-softmax rows l0 = log_softmax(0, 0) = (-ln 2, -ln 2), target 1
  // weighted 3, target 0 ignored (ignore_index 0): the mean is 3 ln 2 / 3 = ln 2, whatever row 1 holds.
  Tensor x({{0, 0}, {5, -5}});
  Tensor y(std::vector<std::int64_t>{1, 0}, {2});
  LossOptions o{.weight = Tensor({1, 3}), .ignore_index = 0};
  REQUIRE(x.cross_entropy(y, o).item<double>() == Approx(std::log(2.0)).epsilon(1e-6));
  o.reduction = "sum";
  REQUIRE(x.cross_entropy(y, o).item<double>() == Approx(3 * std::log(2.0)).epsilon(1e-6));
  o.reduction = "none";
  require_close(vals(x.cross_entropy(y, o)), {3 * std::log(2.0), 0}, 1e-6, 1e-6);
  // Every target ignored: 0 / 0, as PyTorch.
  REQUIRE(std::isnan(x.cross_entropy(Tensor(std::vector<std::int64_t>{-100, -100}, {2})).item<double>()));
  // The defaults are PyTorch's: the mean, ignore_index -100, and cross_entropy(x, y) = nll_loss(log_softmax).
  Tensor z = random_tensor({3, 5, 2}, 41), t(std::vector<std::int64_t>{0, 4, -100, 2, 1, 3}, {3, 2});
  REQUIRE(z.cross_entropy(t).item<double>() ==
          Approx(z.log_softmax(1).nll_loss(t).item<double>()).epsilon(1e-12));
  // float32 and an integer (int32) target on the default device.
  Tensor z32 = z.cast(dtypes::float32);
  Tensor loss32 = z32.cross_entropy(t.cast(dtypes::int32), {.label_smoothing = 0.1});
  REQUIRE(loss32.dtype() == dtypes::float32);
  REQUIRE(loss32.item<double>() ==
          Approx(z.cross_entropy(t, {.label_smoothing = 0.1}).item<double>()).epsilon(1e-5));
}

TEST_CASE("binary cross-entropy weight, pos_weight and reduction match the formulas", "[loss]") {
  Tensor p = random_tensor({3, 4}, 42, 0.05, 0.95), y = random_tensor({3, 4}, 43, 0, 1);
  Tensor w = random_tensor({4}, 44, 0.5, 2), pw = random_tensor({4}, 45, 0.5, 3);
  Tensor logits = random_tensor({3, 4}, 46, -6, 6);
  Vd pv = vals(p), yv = vals(y), wv = vals(w), pwv = vals(pw), lv = vals(logits);
  Vd bce, bcel, bcel_plain;
  for (std::size_t i = 0; i < 12; ++i) {
    std::size_t c = i % 4;
    bce.push_back(-wv[c] * (yv[i] * std::log(pv[i]) + (1 - yv[i]) * std::log(1 - pv[i])));
    double log_sig = -std::log1p(std::exp(-lv[i])), log_one_minus = -lv[i] + log_sig;
    bcel.push_back(-wv[c] * (pwv[c] * yv[i] * log_sig + (1 - yv[i]) * log_one_minus));
    bcel_plain.push_back(-(yv[i] * log_sig + (1 - yv[i]) * log_one_minus));
  }
  auto sum = [](const Vd& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  };
  require_close(vals(p.binary_crossentropy(y, {.weight = w, .reduction = "none"})), bce, 1e-10, 1e-10);
  REQUIRE(p.binary_crossentropy(y, {.weight = w, .reduction = "sum"}).item<double>() ==
          Approx(sum(bce)).epsilon(1e-12));
  REQUIRE(p.binary_crossentropy(y, {.weight = w}).item<double>() == Approx(sum(bce) / 12).epsilon(1e-12));
  LossOptions o{.weight = w, .reduction = "none", .pos_weight = pw};
  require_close(vals(logits.binary_crossentropy_logits(y, o)), bcel, 1e-10, 1e-10);
  o.reduction = "mean";
  REQUIRE(logits.binary_crossentropy_logits(y, o).item<double>() == Approx(sum(bcel) / 12).epsilon(1e-12));
  REQUIRE(logits.binary_crossentropy_logits(y, {.reduction = "sum"}).item<double>() ==
          Approx(sum(bcel_plain)).epsilon(1e-12));
  // pos_weight 1 is no pos_weight; a (3, 1) weight broadcasts along the rows.
  REQUIRE(logits.binary_crossentropy_logits(y, {.pos_weight = Tensor::ones({4}, {.dtype = dtypes::float64})})
              .item<double>() == Approx(logits.binary_crossentropy_logits(y).item<double>()).epsilon(1e-12));
  Tensor rw = random_tensor({3, 1}, 47, 0.5, 2);
  Vd rwv = vals(rw), rows;
  for (std::size_t i = 0; i < 12; ++i) rows.push_back(bcel_plain[i] * rwv[i / 4]);
  require_close(vals(logits.binary_crossentropy_logits(y, {.weight = rw, .reduction = "none"})), rows, 1e-10,
                1e-10);
  // Large logits with pos_weight stay finite.
  Tensor big(Vd{800, -800}, {2}), by(Vd{1, 1}, {2});
  require_close(vals(big.binary_crossentropy_logits(by, {.reduction = "none", .pos_weight = Tensor({2.0f})})),
                {0, 1600}, 1e-9, 1e-9);
}

TEST_CASE("cross_entropy, nll_loss and pos_weight gradients match finite differences", "[loss]") {
  Tensor t3(std::vector<std::int64_t>{0, 3, -100, 2, 1, 1}, {3, 2});
  // Through the input and the class weight, with ignore_index and label smoothing, every reduction.
  for (const char* r : {"mean", "sum", "none"}) {
    INFO(r);
    check_gradients(
        [&](const std::vector<Tensor>& t) {
          return t[0].cross_entropy(t3, {.weight = t[1], .reduction = r, .label_smoothing = 0.2});
        },
        {random_tensor({3, 4, 2}, 50), random_tensor({4}, 51, 0.5, 2)});
    check_gradients(
        [&](const std::vector<Tensor>& t) { return t[0].nll_loss(t3, {.weight = t[1], .reduction = r}); },
        {random_tensor({3, 4, 2}, 52, -3, 0), random_tensor({4}, 53, 0.5, 2)});
  }
  // Probability targets: the logits, the target and the weight.
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].cross_entropy(t[1], {.weight = t[2], .label_smoothing = 0.1});
      },
      {random_tensor({2, 3, 2}, 54), random_tensor({2, 3, 2}, 55, 0, 1), random_tensor({3}, 56, 0.5, 2)});
  // BCE with logits: the input, target, weight and pos_weight.
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].binary_crossentropy_logits(t[1], {.weight = t[2], .pos_weight = t[3]});
      },
      {Tensor(Vd{0, 1.5, -2, 7, -0.25, 3}, {2, 3}), random_tensor({2, 3}, 57, 0, 1),
       random_tensor({3}, 58, 0.5, 2), random_tensor({3}, 59, 0.5, 2)});
  check_gradients(
      [](const std::vector<Tensor>& t) { return t[0].binary_crossentropy(t[1], {.weight = t[2]}); },
      {random_tensor({2, 3}, 60, 0.1, 0.9), random_tensor({2, 3}, 61, 0, 1),
       random_tensor({2, 1}, 62, 0.5, 2)});
}

TEST_CASE("cross_entropy, nll_loss and BCE options: errors name the op and the shapes", "[loss]") {
  Tensor x = Tensor::ones({3, 4, 2});
  Tensor y(std::vector<std::int64_t>{0, 1, 2, 3, 0, 1}, {3, 2});
  REQUIRE_THROWS_WITH(x.cross_entropy(y, {.reduction = "avg"}),
                      Contains("cross_entropy") && Contains("reduction") && Contains("avg"));
  REQUIRE_THROWS_WITH(x.cross_entropy(y, {.weight = Tensor::ones({3})}),
                      Contains("cross_entropy") && Contains("weight (3,)") && Contains("(3, 4, 2)"));
  REQUIRE_THROWS_WITH(x.nll_loss(Tensor(std::vector<std::int64_t>{0, 1, 2, 4, 0, 1}, {3, 2})),
                      Contains("nll_loss") && Contains("label 4") && Contains("(3, 4, 2)"));
  REQUIRE_THROWS_WITH(
      x.cross_entropy(Tensor(std::vector<std::int64_t>{0, 1, 2}, {3})),
      Contains("cross_entropy") && Contains("(3, 4, 2)") && Contains("(3, 2)") && Contains("(3,)"));
  REQUIRE_THROWS_WITH(x.cross_entropy(Tensor::ones({3, 4, 2}, {.dtype = dtypes::int32})),
                      Contains("cross_entropy") && Contains("probabilities") && Contains("floating"));
  REQUIRE_THROWS_WITH(x.cross_entropy(Tensor::ones({3, 4, 2}), {.ignore_index = 1}),
                      Contains("cross_entropy") && Contains("ignore_index"));
  REQUIRE_THROWS_WITH(x.cross_entropy(y, {.label_smoothing = 1.5}),
                      Contains("cross_entropy") && Contains("label_smoothing") && Contains("1.5"));
  REQUIRE_THROWS_WITH(x.cross_entropy(y, {.pos_weight = Tensor::ones({4})}),
                      Contains("cross_entropy") && Contains("pos_weight"));
  REQUIRE_THROWS_WITH(x.nll_loss(y, {.label_smoothing = 0.1}),
                      Contains("nll_loss") && Contains("label_smoothing"));
  REQUIRE_THROWS_WITH(Tensor::full({}, 1).cross_entropy(Tensor::full({}, 0)), Contains("class axis"));
  REQUIRE_THROWS_WITH(
      Tensor::ones({2, 3}).binary_crossentropy(Tensor::ones({2, 3}), {.weight = Tensor::ones({2})}),
      Contains("binary_crossentropy") && Contains("weight (2,)") && Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(
      Tensor::ones({2, 3}).binary_crossentropy_logits(Tensor::ones({2, 3}),
                                                      {.pos_weight = Tensor::ones({4})}),
      Contains("binary_crossentropy_logits") && Contains("pos_weight (4,)") && Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(
      Tensor::ones({2, 3}).binary_crossentropy(Tensor::ones({2, 3}), {.pos_weight = Tensor::ones({3})}),
      Contains("binary_crossentropy") && Contains("pos_weight"));
  REQUIRE_THROWS_WITH(Tensor::ones({2}).binary_crossentropy(Tensor::ones({2}), {.reduction = "max"}),
                      Contains("binary_crossentropy") && Contains("max"));
}
