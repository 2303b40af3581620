// Reductions and the hlops on them (sum max min mean std softmax log_softmax argmax cumsum): forward
// against references computed here in double over every axis set with and without keepdim, on
// contiguous, empty, size-1, 0-d and non-contiguous inputs; dtypes; inf and NaN; bad axes; every
// gradient against finite differences (and cumsum's long rows against its closed form).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gradcheck.hpp"

#include "reference.hpp"

using namespace metagrad;
using namespace metagrad::test;  // reference.hpp: Host, at, gather, for_each_index, kInf, kNaN
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::random_tensor;
using metagrad::test::random_values;
using metagrad::test::require_close;
using metagrad::test::Sampler;
using i64 = std::int64_t;

namespace {

// The axes a reduction covers (empty = all), resolved.
std::set<std::size_t> resolve(const std::vector<i64>& axes, std::size_t nd) {
  std::set<std::size_t> s;
  if (axes.empty())
    for (std::size_t d = 0; d < nd; ++d) s.insert(d);
  for (i64 a : axes) s.insert(static_cast<std::size_t>(a < 0 ? a + static_cast<i64>(nd) : a));
  return s;
}
// Folds every group of elements that share the non-reduced indices: f(values) -> one value.
Host host_reduce(const Host& h, const std::vector<i64>& axes, bool keepdim,
                 const std::function<double(const std::vector<double>&)>& f) {
  std::set<std::size_t> r = resolve(axes, h.shape.size());
  std::vector<i64> kept = h.shape;
  for (std::size_t d : r) kept[d] = 1;
  std::vector<std::vector<double>> groups(static_cast<std::size_t>(numel_of(kept)));
  for_each_index(h.shape, [&](const std::vector<i64>& idx) {
    std::vector<i64> k = idx;
    for (std::size_t d : r) k[d] = 0;
    groups[static_cast<std::size_t>(offset(kept, k))].push_back(at(h, idx));
  });
  Host o{{}, {}};
  for (std::size_t d = 0; d < h.shape.size(); ++d)
    if (keepdim || !r.count(d)) o.shape.push_back(kept[d]);
  for (auto& g : groups) o.v.push_back(f(g));
  return o;
}
// Applies f to every line along `axis`: f(values) -> the same number of values.
Host host_along(const Host& h, i64 axis,
                const std::function<std::vector<double>(const std::vector<double>&)>& f) {
  auto a = static_cast<std::size_t>(axis < 0 ? axis + static_cast<i64>(h.shape.size()) : axis);
  Host o = h;
  std::vector<i64> outer = h.shape;
  outer[a] = 1;
  for_each_index(outer, [&](const std::vector<i64>& base) {
    std::vector<double> line;
    std::vector<i64> idx = base;
    for (idx[a] = 0; idx[a] < h.shape[a]; ++idx[a]) line.push_back(at(h, idx));
    std::vector<double> out = f(line);
    for (idx[a] = 0; idx[a] < h.shape[a]; ++idx[a])
      o.v[static_cast<std::size_t>(offset(h.shape, idx))] = out[static_cast<std::size_t>(idx[a])];
  });
  return o;
}

double r_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
double r_max(const std::vector<double>& g) {
  double m = -kInf;
  for (double x : g) m = std::max(m, x);
  return m;
}
double r_min(const std::vector<double>& g) {
  double m = kInf;
  for (double x : g) m = std::min(m, x);
  return m;
}
double r_mean(const std::vector<double>& g) { return r_sum(g) / static_cast<double>(g.size()); }
std::function<double(const std::vector<double>&)> r_std(i64 correction) {
  return [=](const std::vector<double>& g) {
    double m = r_mean(g), s = 0;
    for (double x : g) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(std::max<i64>(static_cast<i64>(g.size()) - correction, 0)));
  };
}
std::vector<double> l_softmax(const std::vector<double>& g) {
  double m = r_max(g), s = 0;
  std::vector<double> o;
  for (double x : g) s += std::exp(x - m);
  for (double x : g) o.push_back(std::exp(x - m) / s);
  return o;
}
std::vector<double> l_log_softmax(const std::vector<double>& g) {
  double m = r_max(g), s = 0;
  std::vector<double> o;
  for (double x : g) s += std::exp(x - m);
  for (double x : g) o.push_back(x - m - std::log(s));
  return o;
}
std::vector<double> l_cumsum(const std::vector<double>& g) {
  std::vector<double> o;
  double s = 0;
  for (double x : g) o.push_back(s += x);
  return o;
}

Tensor tensor_of(const Host& h, std::optional<DType> dt = {}) {
  return Tensor(h.v, Dims(h.shape), {.dtype = dt});
}
std::vector<i64> shape_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }
std::string str(const std::vector<i64>& v) { return to_string(Dims(v)); }

struct Layout {
  std::string name;
  Tensor t;
  Host h;
};
// Inputs of rank 3 (and a few others) in several memory layouts.
std::vector<Layout> layouts(std::uint64_t seed) {
  std::vector<Layout> out;
  auto base = [&](std::vector<i64> s) { return Host{s, random_values(numel_of(s), seed++)}; };
  for (std::vector<i64> s : std::vector<std::vector<i64>>{{2, 3, 4}, {1, 5, 1}, {3, 0, 2}}) {
    Host h = base(s);
    out.push_back({"contiguous " + str(s), tensor_of(h), h});
  }
  {
    Host h = base({4, 2, 3});  // permute (1, 2, 0) -> (2, 3, 4)
    Host p = gather({2, 3, 4}, [&](const std::vector<i64>& i) { return at(h, {i[2], i[0], i[1]}); });
    out.push_back({"permuted (4, 2, 3) -> (2, 3, 4)", tensor_of(h).permute({1, 2, 0}), p});
  }
  {
    Host h = base({2, 3, 4});
    Host f = gather({2, 3, 4}, [&](const std::vector<i64>& i) { return at(h, {i[0], 2 - i[1], 3 - i[2]}); });
    out.push_back({"flipped on axes 1, 2", tensor_of(h).flip({1, -1}), f});
  }
  {
    Host h = base({2, 2, 3});  // pad axis 1 by (0, 1) and axis 2 by (1, 0) with 0.75
    Host p = gather({2, 3, 4}, [&](const std::vector<i64>& i) {
      return i[1] < 2 && i[2] >= 1 ? at(h, {i[0], i[1], i[2] - 1}) : 0.75;
    });
    out.push_back({"padded (2, 2, 3) -> (2, 3, 4)", tensor_of(h).pad({{0, 0}, {0, 1}, {1, 0}}, 0.75), p});
  }
  {
    Host h = base({2, 1, 4});
    Host e = gather({2, 3, 4}, [&](const std::vector<i64>& i) { return at(h, {i[0], 0, i[2]}); });
    out.push_back({"expanded (2, 1, 4) -> (2, 3, 4)", tensor_of(h).expand({2, 3, 4}), e});
  }
  return out;
}

const std::vector<std::vector<i64>> kAxes = {{}, {0}, {1}, {-1}, {0, 2}, {-1, -3}, {2, 0, 1}};

Axes axes_of(const std::vector<i64>& a) { return a.empty() ? Axes(AllAxes) : Axes(a); }

}  // namespace

// ---- sum, max, min, mean, std --------------------------------------------------------------------

TEST_CASE("sum max min mean std: every axis set, keepdim, layout", "[reduce]") {
  struct R {
    std::string name;
    std::function<Tensor(const Tensor&, const Axes&, bool)> op;
    std::function<double(const std::vector<double>&)> ref;
    bool needs_elements;  // max and min of nothing are errors
  };
  std::vector<R> ops = {
      {"sum", [](const Tensor& x, const Axes& a, bool k) { return x.sum(a, k); }, r_sum, false},
      {"max", [](const Tensor& x, const Axes& a, bool k) { return x.max(a, k); }, r_max, true},
      {"min", [](const Tensor& x, const Axes& a, bool k) { return x.min(a, k); }, r_min, true},
      {"mean", [](const Tensor& x, const Axes& a, bool k) { return x.mean(a, k); }, r_mean, false},
      {"std", [](const Tensor& x, const Axes& a, bool k) { return x.std(a, k); }, r_std(1), false},
      {"std(correction 0)", [](const Tensor& x, const Axes& a, bool k) { return x.std(a, k, 0); }, r_std(0),
       false},
      {"std(correction 2)", [](const Tensor& x, const Axes& a, bool k) { return x.std(a, k, 2); }, r_std(2),
       false},
  };
  Sampler sample;
  for (const Layout& l : layouts(10))
    for (const R& r : ops)
      for (const std::vector<i64>& axes : kAxes)
        for (bool keepdim : {false, true}) {
          if (!sample()) continue;
          INFO(r.name << " over " << (axes.empty() ? "all" : str(axes)) << " keepdim " << keepdim << " of "
                      << l.name);
          Host want = host_reduce(l.h, axes, keepdim, r.ref);
          bool empty_groups = numel_of(l.h.shape) == 0 && !want.v.empty();
          if (r.needs_elements && empty_groups) {
            REQUIRE_THROWS_WITH(r.op(l.t, axes_of(axes), keepdim),
                                Contains(r.name) && Contains("no elements"));
            continue;
          }
          Tensor y = r.op(l.t, axes_of(axes), keepdim);
          REQUIRE(shape_of(y) == want.shape);
          REQUIRE(y.dtype() == dtypes::float64);
          require_close(y.to_vector<double>(), want.v, 1e-12, 1e-12);
        }
}

TEST_CASE("reductions: 0-d, size-1 and empty tensors", "[reduce]") {
  Tensor s(std::vector<double>{2.5}, {});
  for (const Axes& a : {Axes(AllAxes), Axes(0), Axes(-1)}) {
    REQUIRE(shape_of(s.sum(a)) == std::vector<i64>{});
    REQUIRE(s.sum(a).item<double>() == 2.5);
    REQUIRE(s.max(a, true).item<double>() == 2.5);
    REQUIRE(s.min(a).item<double>() == 2.5);
    REQUIRE(s.mean(a).item<double>() == 2.5);
  }
  REQUIRE(std::isnan(s.std().item<double>()));  // one element, correction 1: 0 / 0
  REQUIRE(s.std(AllAxes, false, 0).item<double>() == 0);
  REQUIRE_THROWS_WITH(s.sum(1), Contains("sum") && Contains("axis 1"));

  Tensor e = Tensor::zeros({0, 3}, {.dtype = dtypes::float64});
  REQUIRE(shape_of(e.sum()) == std::vector<i64>{});
  REQUIRE(e.sum().item<double>() == 0);
  require_close(e.sum(0).to_vector<double>(), {0, 0, 0});
  REQUIRE(shape_of(e.sum(1)) == std::vector<i64>{0});
  REQUIRE(shape_of(e.sum(1, true)) == std::vector<i64>{0, 1});
  REQUIRE(std::isnan(e.mean().item<double>()));  // 0 / 0, as in PyTorch
  require_close(e.mean(0).to_vector<double>(), {kNaN, kNaN, kNaN});
  REQUIRE(shape_of(e.max(1)) == std::vector<i64>{0});  // nothing to reduce into: fine
  REQUIRE_THROWS_WITH(e.max(), Contains("max") && Contains("(0, 3)") && Contains("no elements"));
  REQUIRE_THROWS_WITH(e.min(0), Contains("min") && Contains("(0, 3)") && Contains("no elements"));

  Tensor one(std::vector<double>{1, 2, 3}, {1, 3, 1});
  require_close(one.sum({0, 2}).to_vector<double>(), {1, 2, 3});
  REQUIRE(shape_of(one.max({0, 2}, true)) == std::vector<i64>{1, 3, 1});
}

TEST_CASE("reductions: dtypes", "[reduce]") {
  Tensor i32(std::vector<std::int32_t>{2000000000, 2000000000, -5, 7}, {2, 2});
  REQUIRE(i32.sum().dtype() == dtypes::int64);  // accumulates in int64, as PyTorch
  REQUIRE(i32.sum().item<std::int64_t>() == 4000000002LL);
  require_close(i32.sum(1).to_vector<double>(), {4e9, 2}, 0, 0);
  REQUIRE(i32.max().dtype() == dtypes::int32);
  REQUIRE(i32.max().item<std::int32_t>() == 2000000000);
  REQUIRE(i32.min().item<std::int32_t>() == -5);
  REQUIRE(i32.mean().dtype() == dtypes::float32);
  require_close(Tensor(std::vector<std::int32_t>{1, 2, 4, 7}, {2, 2}).mean(0).to_vector<double>(), {2.5, 4.5},
                0, 0);

  Tensor b = Tensor(std::vector<double>{1, 0, 1, 1, 0, 1}, {2, 3}) > 0.5;
  REQUIRE(b.sum().dtype() == dtypes::int64);  // counts, not an "any"
  REQUIRE(b.sum().item<std::int64_t>() == 4);
  require_close(b.sum(0).to_vector<double>(), {2, 0, 2}, 0, 0);
  REQUIRE(b.max().dtype() == dtypes::bool_);
  REQUIRE(b.min().dtype() == dtypes::bool_);
  require_close(b.min(1).to_vector<double>(), {0, 0}, 0, 0);
  require_close(b.max(1).to_vector<double>(), {1, 1}, 0, 0);

  Tensor u8(std::vector<std::uint8_t>{0, 5, 200, 255}, {4});
  REQUIRE(u8.min().dtype() == dtypes::uint8);
  REQUIRE(u8.min().item<int>() == 0);
  REQUIRE(u8.max().item<int>() == 255);
  REQUIRE(u8.sum().item<std::int64_t>() == 460);

  Tensor h(std::vector<double>{1000, 2000, 3000, 60000, 60000}, {5}, {.dtype = dtypes::float16});
  REQUIRE(h.mean().dtype() == dtypes::float16);  // accumulated in float32: the sum would overflow float16
  REQUIRE(h.mean().item<float>() == float(half(25200.0f)));
  REQUIRE(Tensor(std::vector<float>{1, 2}, {2}).std().dtype() == dtypes::float32);
  REQUIRE(i32.std().dtype() == dtypes::float32);
}

TEST_CASE("reductions: NaN and inf", "[reduce]") {
  Tensor x(std::vector<double>{1, kNaN, 3, kInf, -kInf, 2}, {2, 3});
  require_close(x.sum(1).to_vector<double>(), {kNaN, kNaN});
  require_close(x.max(1).to_vector<double>(), {kNaN, kInf});
  require_close(x.min(1).to_vector<double>(), {kNaN, -kInf});
  require_close(x.max(0).to_vector<double>(), {kInf, kNaN, 3});
  Tensor y(std::vector<double>{kInf, 1, -kInf, 1}, {2, 2});
  require_close(y.sum(1).to_vector<double>(), {kInf, -kInf});
  require_close(y.mean(0).to_vector<double>(), {kNaN, 1});
}

TEST_CASE("reductions: bad axes", "[reduce]") {
  Tensor x = Tensor::ones({2, 3});
  REQUIRE_THROWS_AS(x.sum(2), std::invalid_argument);
  REQUIRE_THROWS_WITH(x.sum(2), Contains("sum") && Contains("axis 2") && Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(x.sum(-3), Contains("sum") && Contains("axis -3") && Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(x.max({0, 5}), Contains("max") && Contains("axis 5"));
  REQUIRE_THROWS_WITH(x.min(7, true), Contains("min") && Contains("axis 7"));
  REQUIRE_THROWS_WITH(x.mean(-4), Contains("mean") && Contains("axis -4"));
  REQUIRE_THROWS_WITH(x.std(3), Contains("std") && Contains("axis 3"));
  REQUIRE_THROWS_WITH(x.sum({1, -1}), Contains("sum") && Contains("appears twice") && Contains("(1, -1)"));
  REQUIRE_THROWS_WITH(x.max({0, 0}), Contains("max") && Contains("appears twice"));
  REQUIRE_THROWS_WITH(x.softmax(2), Contains("softmax") && Contains("axis 2") && Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(x.log_softmax(-3), Contains("log_softmax") && Contains("axis -3"));
  REQUIRE_THROWS_WITH(x.argmax(2), Contains("argmax") && Contains("axis 2"));
  REQUIRE_THROWS_WITH(x.cumsum(-5), Contains("cumsum") && Contains("axis -5"));
  REQUIRE_THROWS_WITH(Tensor::zeros({0}).argmax(), Contains("argmax") && Contains("empty"));
  REQUIRE_THROWS_WITH(Tensor::zeros({2, 0}).argmax(1), Contains("argmax") && Contains("(2, 0)"));
}

TEST_CASE("reductions: gradients", "[reduce]") {
  std::uint64_t seed = 500;
  for (const std::vector<i64>& axes : kAxes)
    for (bool keepdim : {false, true}) {
      INFO("over " << (axes.empty() ? "all" : str(axes)) << " keepdim " << keepdim);
      Axes a = axes_of(axes);
      // random values have no ties, so max and min are differentiable
      check_gradients([&](const std::vector<Tensor>& x) { return x[0].sum(a, keepdim); },
                      {random_tensor({2, 3, 2}, seed++)});
      check_gradients([&](const std::vector<Tensor>& x) { return x[0].max(a, keepdim); },
                      {random_tensor({2, 3, 2}, seed++)});
      check_gradients([&](const std::vector<Tensor>& x) { return x[0].min(a, keepdim); },
                      {random_tensor({2, 3, 2}, seed++)});
      check_gradients([&](const std::vector<Tensor>& x) { return x[0].mean(a, keepdim); },
                      {random_tensor({2, 3, 2}, seed++)});
      check_gradients([&](const std::vector<Tensor>& x) { return x[0].std(a, keepdim); },
                      {random_tensor({2, 3, 2}, seed++)});
      check_gradients([&](const std::vector<Tensor>& x) { return x[0].std(a, keepdim, 0); },
                      {random_tensor({2, 3, 2}, seed++)});
    }
  // through non-contiguous inputs
  check_gradients(
      [](const std::vector<Tensor>& x) {
        return x[0].permute({1, 0}).flip(0).max(1);
      },
      {random_tensor({3, 4}, 90)});
  check_gradients(
      [](const std::vector<Tensor>& x) {
        return x[0].pad({{1, 0}, {0, 2}}, -5).std(0);
      },
      {random_tensor({3, 4}, 91)});
  // ties share the gradient equally, as in PyTorch's max over all elements
  Tensor t(std::vector<double>{1, 3, 3, 2}, {4}, {.requires_grad = true});
  t.max().backward();
  require_close(t.grad->to_vector<double>(), {0, 0.5, 0.5, 0}, 0, 0);
}

// ---- softmax and log_softmax ---------------------------------------------------------------------

TEST_CASE("softmax and log_softmax: every axis and layout", "[reduce]") {
  Sampler sample;
  for (const Layout& l : layouts(40))
    for (i64 axis : {0, 1, 2, -1, -2}) {
      if (!sample()) continue;
      INFO("axis " << axis << " of " << l.name);
      Tensor s = l.t.softmax(axis), ls = l.t.log_softmax(axis);
      REQUIRE(shape_of(s) == l.h.shape);
      REQUIRE(shape_of(ls) == l.h.shape);
      require_close(s.to_vector<double>(), host_along(l.h, axis, l_softmax).v, 1e-12, 1e-12);
      require_close(ls.to_vector<double>(), host_along(l.h, axis, l_log_softmax).v, 1e-12, 1e-12);
    }
  // the default axis is the last
  Tensor x = random_tensor({3, 5}, 41);
  require_close(x.softmax().to_vector<double>(), x.softmax(1).to_vector<double>(), 0, 0);
}

TEST_CASE("softmax and log_softmax: stable for large values, -inf, 0-d, ints", "[reduce]") {
  for (DType dt : {dtypes::float32, dtypes::float64}) {
    INFO(dt.name);
    Tensor big(std::vector<double>{1000, 1001, 1002, -1000, -1001, -kInf}, {2, 3}, {.dtype = dt});
    std::vector<double> sm = l_softmax({0, 1, 2}), lsm = l_log_softmax({0, 1, 2});
    std::vector<double> sm2 = l_softmax({0, -1}), lsm2 = l_log_softmax({0, -1});
    require_close(big.softmax().to_vector<double>(), {sm[0], sm[1], sm[2], sm2[0], sm2[1], 0}, 1e-6, 1e-6);
    require_close(big.log_softmax().to_vector<double>(), {lsm[0], lsm[1], lsm[2], lsm2[0], lsm2[1], -kInf},
                  1e-5, 1e-6);
  }
  // a row of only -inf, or with +inf, is all NaN, as in PyTorch
  Tensor bad(std::vector<double>{-kInf, -kInf, kInf, 1}, {2, 2});
  require_close(bad.softmax().to_vector<double>(), {kNaN, kNaN, kNaN, kNaN});
  // 0-d: one element, probability 1
  Tensor s(std::vector<double>{3}, {});
  REQUIRE(shape_of(s.softmax()) == std::vector<i64>{});
  REQUIRE(s.softmax().item<double>() == 1);
  REQUIRE(s.log_softmax(0).item<double>() == 0);
  // empty along or across the axis
  REQUIRE(shape_of(Tensor::zeros({2, 0}).softmax()) == std::vector<i64>{2, 0});
  REQUIRE(shape_of(Tensor::zeros({0, 3}).log_softmax()) == std::vector<i64>{0, 3});
  // integers give float32
  Tensor i(std::vector<std::int32_t>{1, 2, 3}, {3});
  REQUIRE(i.softmax().dtype() == dtypes::float32);
  require_close(i.softmax().to_vector<double>(), l_softmax({1, 2, 3}), 1e-7, 1e-6);
  require_close(i.log_softmax().to_vector<double>(), l_log_softmax({1, 2, 3}), 1e-6, 1e-6);
}

TEST_CASE("softmax and log_softmax: gradients", "[reduce]") {
  std::uint64_t seed = 700;
  for (i64 axis : {0, 1, -1}) {
    INFO("axis " << axis);
    check_gradients([&](const std::vector<Tensor>& x) { return x[0].softmax(axis); },
                    {random_tensor({3, 2, 4}, seed++)});
    check_gradients([&](const std::vector<Tensor>& x) { return x[0].log_softmax(axis); },
                    {random_tensor({3, 2, 4}, seed++)});
  }
  check_gradients([](const std::vector<Tensor>& x) { return (x[0] * 100).log_softmax(); },
                  {random_tensor({2, 3}, 710)});
  check_gradients(
      [](const std::vector<Tensor>& x) {
        return x[0].permute({1, 0}).softmax(0);
      },
      {random_tensor({2, 3}, 711)});
}

// ---- argmax --------------------------------------------------------------------------------------

namespace {
double first_argmax(const std::vector<double>& g) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<double>(i);
    if (g[i] > g[best]) best = i;
  }
  return static_cast<double>(best);
}
}  // namespace

TEST_CASE("argmax: every axis and layout, ties take the first", "[reduce]") {
  std::uint64_t seed = 60;
  Sampler sample;
  for (const Layout& base : layouts(seed)) {
    // rounded values: many ties
    Host h = base.h;
    for (double& v : h.v) v = std::round(v);
    Tensor t = base.t.floor() + (base.t - base.t.floor() >= 0.5).cast(dtypes::float64);
    for (std::optional<i64> axis :
         {std::optional<i64>{}, std::optional<i64>{0}, std::optional<i64>{1}, std::optional<i64>{-1}})
      for (bool keepdim : {false, true}) {
        if (!sample()) continue;
        INFO("axis " << (axis ? std::to_string(*axis) : "None") << " keepdim " << keepdim << " of "
                     << base.name);
        Host want =
            axis ? host_reduce(h, {*axis}, keepdim, first_argmax) : host_reduce(h, {}, false, first_argmax);
        if (!axis && keepdim) want.shape = std::vector<i64>(h.shape.size(), 1);
        if (want.v.size() > 0 && numel_of(h.shape) == 0) {
          REQUIRE_THROWS_WITH(t.argmax(axis, keepdim), Contains("argmax"));
          continue;
        }
        Tensor y = t.argmax(axis, keepdim);
        REQUIRE(y.dtype() == dtypes::int64);
        REQUIRE(shape_of(y) == want.shape);
        REQUIRE(!y.requires_grad.get().value_or(false));
        require_close(y.to_vector<double>(), want.v, 0, 0);
      }
  }
}

TEST_CASE("argmax: NaN, inf, ints, 0-d", "[reduce]") {
  Tensor x(std::vector<double>{1, kNaN, 5, kNaN, -kInf, -kInf, -kInf, 2, kInf, 3, kInf, kInf}, {3, 4});
  require_close(x.argmax(1).to_vector<double>(), {1, 3, 0}, 0, 0);  // the first NaN counts as the max
  require_close(x.argmax(0).to_vector<double>(), {2, 0, 2, 0}, 0, 0);
  REQUIRE(x.argmax().item<std::int64_t>() == 1);
  Tensor i(std::vector<std::int32_t>{3, 9, 9, -1, 0, 9}, {2, 3});
  require_close(i.argmax(1).to_vector<double>(), {1, 2}, 0, 0);
  REQUIRE(i.argmax().item<std::int64_t>() == 1);
  Tensor u(std::vector<std::uint8_t>{7, 255, 255}, {3});
  REQUIRE(u.argmax().item<std::int64_t>() == 1);
  Tensor s(std::vector<double>{4}, {});
  REQUIRE(shape_of(s.argmax()) == std::vector<i64>{});
  REQUIRE(s.argmax(0).item<std::int64_t>() == 0);
  Tensor r = Tensor::zeros({300});
  REQUIRE(r.pad({{0, 1}}, 1).argmax().item<std::int64_t>() == 300);
}

// ---- cumsum --------------------------------------------------------------------------------------

TEST_CASE("cumsum: every axis and layout", "[reduce]") {
  Sampler sample;
  for (const Layout& l : layouts(80))
    for (i64 axis : {0, 1, 2, -1, -3}) {
      if (!sample()) continue;
      INFO("axis " << axis << " of " << l.name);
      Tensor y = l.t.cumsum(axis);
      REQUIRE(shape_of(y) == l.h.shape);
      REQUIRE(y.dtype() == dtypes::float64);
      require_close(y.to_vector<double>(), host_along(l.h, axis, l_cumsum).v, 1e-12, 1e-12);
    }
}

TEST_CASE("cumsum: long rows (blocked), inf, ints, 0-d", "[reduce]") {
  for (i64 n : {16, 17, 255, 256, 257, 700, 5000}) {  // around the block size (16) and its square
    INFO("n = " << n);
    std::vector<i64> s = {2, n};
    Host h{s, random_values(2 * n, static_cast<std::uint64_t>(n))};
    require_close(tensor_of(h).cumsum(1).to_vector<double>(), host_along(h, 1, l_cumsum).v, 1e-9, 1e-9);
    Host ht = gather({n, 2}, [&](const std::vector<i64>& i) { return at(h, {i[1], i[0]}); });
    require_close(tensor_of(h).permute({1, 0}).cumsum(0).to_vector<double>(), host_along(ht, 0, l_cumsum).v,
                  1e-9, 1e-9);
  }
  // inf stays where it is: no 0 * inf
  Tensor x(std::vector<double>{1, 2, kInf, 3, -kInf, 4}, {6});
  require_close(x.cumsum().to_vector<double>(), {1, 3, kInf, kInf, kNaN, kNaN});
  Tensor y(std::vector<double>{1, -kInf, 3}, {3});
  require_close(y.cumsum().to_vector<double>(), {1, -kInf, -kInf});
  Tensor z(std::vector<double>{kNaN, 1, 2}, {3});
  require_close(z.cumsum().to_vector<double>(), {kNaN, kNaN, kNaN});
  // ints accumulate in int64 exactly; bools count
  Tensor i(std::vector<std::int32_t>{2000000000, 2000000000, -7}, {3});
  REQUIRE(i.cumsum().dtype() == dtypes::int64);
  require_close(i.cumsum().to_vector<double>(), {2e9, 4e9, 4e9 - 7}, 0, 0);
  Tensor b = Tensor(std::vector<double>{1, 0, 1, 1}, {4}) > 0.5;
  require_close(b.cumsum().to_vector<double>(), {1, 1, 2, 3}, 0, 0);
  // 0-d, size-1 and empty
  Tensor s(std::vector<double>{2.5}, {});
  REQUIRE(shape_of(s.cumsum()) == std::vector<i64>{});
  REQUIRE(s.cumsum().item<double>() == 2.5);
  require_close(Tensor(std::vector<double>{1, 2}, {2, 1}).cumsum(1).to_vector<double>(), {1, 2}, 0, 0);
  REQUIRE(shape_of(Tensor::zeros({3, 0}).cumsum(1)) == std::vector<i64>{3, 0});
  REQUIRE(shape_of(Tensor::zeros({0, 4}).cumsum(1)) == std::vector<i64>{0, 4});
}

TEST_CASE("cumsum: gradients", "[reduce]") {
  std::uint64_t seed = 900;
  for (i64 axis : {0, 1, -1}) {
    INFO("axis " << axis);
    check_gradients([&](const std::vector<Tensor>& x) { return x[0].cumsum(axis); },
                    {random_tensor({3, 2, 4}, seed++)});
  }
  check_gradients([](const std::vector<Tensor>& x) { return x[0].flip(0).cumsum(0); },
                  {random_tensor({5}, 910)});
  // long rows: d/dx_i of sum_k w_k cumsum(x)_k is sum_{k >= i} w_k
  for (i64 n : {17, 300, 1000}) {
    INFO("n = " << n);
    Tensor x = Tensor(random_values(n, 920), {n}, {.requires_grad = true});
    std::vector<double> w = random_values(n, 921);
    (x.cumsum() * Tensor(w, {n})).sum().backward();
    std::vector<double> want(static_cast<std::size_t>(n));
    double acc = 0;
    for (std::size_t k = w.size(); k-- > 0;) want[k] = acc += w[k];
    require_close(x.grad->to_vector<double>(), want, 1e-9, 1e-9);
  }
}
