// Movement ops: every forward against an index-arithmetic reference written here, gradients against
// finite differences, a randomized comparison of subscripts with a naive numpy-slicing reference,
// and the errors bad arguments give.
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "device_scope.hpp"
#include "gradcheck.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::random_tensor;
using metagrad::test::require_close;

namespace {

using Shape = std::vector<std::int64_t>;
constexpr double inf = std::numeric_limits<double>::infinity();

// A row-major array of doubles: the reference every op is checked against.
struct Ref {
  Shape shape;
  std::vector<double> data;
  std::int64_t size() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
  }
  double at(const Shape& idx) const {
    std::int64_t flat = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + idx[i];
    return data[static_cast<std::size_t>(flat)];
  }
};

template <class F>
void for_each_index(const Shape& shape, F f) {
  for (std::int64_t d : shape)
    if (d == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    f(idx);
    std::size_t k = shape.size();
    while (k > 0 && ++idx[k - 1] == shape[k - 1]) idx[--k] = 0;
    if (k == 0) return;
  }
}

template <class F>
Ref build(const Shape& shape, F value) {
  Ref r{shape, {}};
  for_each_index(shape, [&](const Shape& i) { r.data.push_back(value(i)); });
  return r;
}

Shape shape_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end()); }

// 0, 1, 2, ... as float64: every element tells where it came from.
Ref iota_ref(const Shape& shape) {
  Ref r{shape, {}};
  r.data.resize(static_cast<std::size_t>(r.size()));
  std::iota(r.data.begin(), r.data.end(), 0.0);
  return r;
}
Tensor scalar(double v) { return Tensor(std::vector<double>{v}, Dims{}); }
Tensor tensor_of(const Ref& r, bool requires_grad = false) {
  return Tensor(r.data, Dims(r.shape), {.requires_grad = requires_grad});
}

void require_equal(const Tensor& got, const Ref& want, const std::string& what = "") {
  INFO(what);
  REQUIRE(shape_of(got) == want.shape);
  require_close(got.to_vector<double>(), want.data, 0, 0, what);
}

// ---- references for the six movement ops ----
Ref ref_permute(const Ref& x, const Shape& order) {
  Shape s;
  for (std::int64_t o : order) s.push_back(x.shape[static_cast<std::size_t>(o)]);
  return build(s, [&](const Shape& i) {
    Shape src(x.shape.size());
    for (std::size_t k = 0; k < order.size(); ++k) src[static_cast<std::size_t>(order[k])] = i[k];
    return x.at(src);
  });
}
Ref ref_flip(const Ref& x, const Shape& axes) {
  return build(x.shape, [&](const Shape& i) {
    Shape src = i;
    for (std::int64_t a : axes) src[a] = x.shape[a] - 1 - i[a];
    return x.at(src);
  });
}
Ref ref_pad(const Ref& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& p, double value = 0) {
  Shape s;
  for (std::size_t k = 0; k < p.size(); ++k) s.push_back(x.shape[k] + p[k].first + p[k].second);
  return build(s, [&](const Shape& i) {
    Shape src(i.size());
    for (std::size_t k = 0; k < i.size(); ++k) {
      src[k] = i[k] - p[k].first;
      if (src[k] < 0 || src[k] >= x.shape[k]) return value;
    }
    return x.at(src);
  });
}
Ref ref_shrink(const Ref& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& p) {
  Shape s;
  for (auto [b, e] : p) s.push_back(e - b);
  return build(s, [&](const Shape& i) {
    Shape src(i.size());
    for (std::size_t k = 0; k < i.size(); ++k) src[k] = i[k] + p[k].first;
    return x.at(src);
  });
}
Ref ref_expand(const Ref& x, const Shape& s) {
  std::size_t lead = s.size() - x.shape.size();
  return build(s, [&](const Shape& i) {
    Shape src;
    for (std::size_t k = lead; k < s.size(); ++k) src.push_back(x.shape[k - lead] == 1 ? 0 : i[k]);
    return x.at(src);
  });
}
Ref ref_reshape(const Ref& x, const Shape& s) { return Ref{s, x.data}; }

// ---- numpy basic indexing, the naive way: CPython's slice rules, then a gather ----
std::vector<std::int64_t> py_slice(std::int64_t n, const Slice& s) {
  std::int64_t step = s.step.value_or(1);
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  std::int64_t start = adjust(s.start, step < 0 ? n - 1 : 0), stop = adjust(s.stop, step < 0 ? -1 : n);
  std::vector<std::int64_t> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

// For each output position, the input position it reads.
struct Gather {
  Shape shape;
  std::vector<Shape> src;
};
Gather ref_subscript(const Shape& in, const std::vector<Index>& index) {
  std::size_t consuming = 0;
  for (const Index& i : index) consuming += i.index() < 2;
  std::vector<Index> idx;
  bool seen = false;
  for (const Index& i : index) {
    if (std::holds_alternative<EllipsisT>(i)) {
      for (std::size_t k = consuming; k < in.size(); ++k) idx.push_back(Slice{});
      seen = true;
    } else {
      idx.push_back(i);
    }
  }
  if (!seen)
    for (std::size_t k = consuming; k < in.size(); ++k) idx.push_back(Slice{});
  Shape fixed(in.size(), 0);
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> outs;  // (input dim or -1, coords)
  std::size_t d = 0;
  for (const Index& i : idx) {
    if (std::holds_alternative<NewAxisT>(i)) {
      outs.push_back({-1, {0}});
    } else if (const auto* e = std::get_if<std::int64_t>(&i)) {
      fixed[d] = *e < 0 ? *e + in[d] : *e;
      ++d;
    } else {
      outs.push_back({static_cast<std::int64_t>(d), py_slice(in[d], std::get<Slice>(i))});
      ++d;
    }
  }
  Gather g;
  for (auto& o : outs) g.shape.push_back(static_cast<std::int64_t>(o.second.size()));
  for_each_index(g.shape, [&](const Shape& i) {
    Shape src = fixed;
    for (std::size_t k = 0; k < outs.size(); ++k)
      if (outs[k].first >= 0) src[static_cast<std::size_t>(outs[k].first)] = outs[k].second[i[k]];
    g.src.push_back(src);
  });
  return g;
}

std::string describe(const std::vector<Index>& index) {
  std::ostringstream os;
  auto opt = [&](std::optional<std::int64_t> v) {
    if (v) os << *v;
  };
  os << "[";
  for (std::size_t k = 0; k < index.size(); ++k) {
    if (k) os << ", ";
    const Index& i = index[k];
    if (const auto* e = std::get_if<std::int64_t>(&i)) os << *e;
    if (const auto* s = std::get_if<Slice>(&i)) {
      opt(s->start), os << ":", opt(s->stop);
      if (s->step) os << ":" << *s->step;
    }
    if (std::holds_alternative<NewAxisT>(i)) os << "None";
    if (std::holds_alternative<EllipsisT>(i)) os << "...";
  }
  os << "]";
  return os.str();
}

Index I(std::int64_t i) { return Index{i}; }
Index S(std::optional<std::int64_t> a = {}, std::optional<std::int64_t> b = {},
        std::optional<std::int64_t> c = {}) {
  return Index{Slice{a, b, c}};
}

Ref ref_gather(const Ref& x, const Gather& g) {
  Ref r{g.shape, {}};
  for (const Shape& s : g.src) r.data.push_back(x.at(s));
  return r;
}

}  // namespace

TEST_CASE("the six movement mlops match index references, on contiguous and non-contiguous inputs",
          "[movement]") {
  Ref base = iota_ref({2, 3, 4});
  Tensor t = tensor_of(base);
  // non-contiguous inputs: a permuted, a flipped and a padded view
  std::vector<std::pair<Tensor, Ref>> inputs = {
      {t, base},
      {t.permute({2, 0, 1}), ref_permute(base, {2, 0, 1})},
      {t.flip({0, 2}), ref_flip(base, {0, 2})},
      {t.pad({{0, 1}, {1, 0}, {0, 0}}), ref_pad(base, {{0, 1}, {1, 0}, {0, 0}})},
  };
  for (auto& [x, r] : inputs) {
    INFO("input shape " << to_string(x.shape()));
    Shape s = r.shape;
    require_equal(x.reshape({-1}), ref_reshape(r, {r.size()}), "reshape -1");
    require_equal(x.reshape({s[2], -1, s[0]}), ref_reshape(r, {s[2], s[1], s[0]}), "reshape");
    require_equal(x.permute({1, 2, 0}), ref_permute(r, {1, 2, 0}), "permute");
    require_equal(x.permute({-1, 0, -2}), ref_permute(r, {2, 0, 1}), "permute negative");
    require_equal(x.flip(1), ref_flip(r, {1}), "flip 1");
    require_equal(x.flip({-1, 0}), ref_flip(r, {2, 0}), "flip -1 0");
    require_equal(x.flip(AllAxes), ref_flip(r, {0, 1, 2}), "flip all");
    require_equal(x.flip({}), r, "flip no axes");
    require_equal(x.pad({{1, 2}, {0, 0}, {3, 1}}), ref_pad(r, {{1, 2}, {0, 0}, {3, 1}}), "pad");
    require_equal(x.shrink({{1, 2}, {0, s[1]}, {1, 3}}), ref_shrink(r, {{1, 2}, {0, s[1]}, {1, 3}}),
                  "shrink");
    require_equal(x.shrink({{0, 0}, {0, s[1]}, {1, 3}}), ref_shrink(r, {{0, 0}, {0, s[1]}, {1, 3}}),
                  "shrink to empty");
    Tensor one = x.shrink({{0, s[0]}, {1, 2}, {0, s[2]}});
    require_equal(one.expand({2, s[0], 5, s[2]}),
                  ref_expand(ref_shrink(r, {{0, s[0]}, {1, 2}, {0, s[2]}}), {2, s[0], 5, s[2]}), "expand");
    require_equal(one.expand({-1, 3, -1}),
                  ref_expand(ref_shrink(r, {{0, s[0]}, {1, 2}, {0, s[2]}}), {s[0], 3, s[2]}), "expand -1");
  }
  // size-0 and 0-d
  Tensor e = Tensor::zeros({0, 3});
  REQUIRE(shape_of(e.reshape({3, -1, 5})) == Shape{3, 0, 5});
  REQUIRE(shape_of(e.permute({1, 0})) == Shape{3, 0});
  REQUIRE(shape_of(e.pad({{1, 1}, {0, 0}})) == Shape{2, 3});
  require_close(e.pad({{1, 1}, {0, 0}}).to_vector<double>(), std::vector<double>(6, 0.0));
  Tensor s = scalar(5.0);
  REQUIRE(shape_of(s.reshape({1, 1})) == Shape{1, 1});
  REQUIRE(shape_of(s.expand({2, 3})) == Shape{2, 3});
  require_close(s.expand({2, 3}).to_vector<double>(), std::vector<double>(6, 5.0));
  REQUIRE(s.permute({}).item<double>() == 5.0);
}

TEST_CASE("pad with a value keeps the inside exact and the border at the value", "[movement]") {
  Ref r{{2, 3}, {1, -2, inf, -inf, 0.5, 7}};
  Tensor x = tensor_of(r);
  for (double v : {0.0, 3.5, -inf, inf}) {
    INFO("value " << v);
    auto p = std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {2, 1}};
    require_equal(x.pad(p, v), ref_pad(r, p, v));
    require_equal(x.pad({{0, 0}, {0, 3}}, v), ref_pad(r, {{0, 0}, {0, 3}}, v));
    require_equal(x.flip(0).pad({{1, 0}, {0, 0}}, v), ref_pad(ref_flip(r, {0}), {{1, 0}, {0, 0}}, v));
  }
  // the value is in the tensor's dtype
  Tensor i = Tensor(std::vector<std::int32_t>{1, 2}, {2});
  Tensor pi = i.pad({{1, 1}}, 7);
  REQUIRE(pi.dtype() == dtypes::int32);
  REQUIRE(pi.to_vector<std::int32_t>() == std::vector<std::int32_t>{7, 1, 2, 7});
  // no padding is the tensor itself
  REQUIRE(x.pad({{0, 0}, {0, 0}}, 9).lazydata.get() == x.lazydata.get());
}

TEST_CASE("pad2d pads and crops the trailing dims, (left, right, top, bottom)", "[movement]") {
  Ref r = iota_ref({2, 3, 4});
  Tensor x = tensor_of(r);
  require_equal(x.pad2d({1, 2}), ref_pad(r, {{0, 0}, {0, 0}, {1, 2}}));
  require_equal(x.pad2d({1, 0, 0, 2}, -1), ref_pad(r, {{0, 0}, {0, 2}, {1, 0}}, -1));
  require_equal(x.pad2d({1, 1, 1, 1, 1, 1}), ref_pad(r, {{1, 1}, {1, 1}, {1, 1}}));
  // negative entries crop
  require_equal(x.pad2d({-1, 2, 0, -2}, 9),
                ref_pad(ref_shrink(r, {{0, 2}, {0, 1}, {1, 4}}), {{0, 0}, {0, 0}, {0, 2}}, 9));
  require_equal(x.pad2d({-4, 0}), ref_shrink(r, {{0, 2}, {0, 3}, {4, 4}}));
  require_equal(
      x.permute({0, 2, 1}).pad2d({1, -1}),
      ref_pad(ref_shrink(ref_permute(r, {0, 2, 1}), {{0, 2}, {0, 4}, {0, 2}}), {{0, 0}, {0, 0}, {1, 0}}));
}

TEST_CASE("subscripts: integers, slices, steps, NewAxis and Ellipsis", "[movement]") {
  Ref r = iota_ref({3, 4, 5});
  Tensor x = tensor_of(r);
  auto check = [&](const std::vector<Index>& idx, const Shape& want_shape) {
    INFO(describe(idx));
    Tensor y = x[idx];
    Gather g = ref_subscript(r.shape, idx);
    REQUIRE(g.shape == want_shape);
    require_equal(y, ref_gather(r, g), describe(idx));
  };
  check({I(1)}, {4, 5});
  check({I(-1)}, {4, 5});
  check({I(2), I(-4), I(4)}, {});
  check({S(), I(1)}, {3, 5});
  check({S(1, -1)}, {1, 4, 5});
  check({S(-100, 100)}, {3, 4, 5});  // clamps like Python
  check({S(5, 10)}, {0, 4, 5});
  check({S(2, 1)}, {0, 4, 5});
  check({S({}, {}, -1)}, {3, 4, 5});
  check({S({}, {}, 2), S(3, 0, -2), S({}, {}, 3)}, {2, 2, 2});
  check({S(-1, -5, -3)}, {1, 4, 5});
  check({S(), S(), S({}, {}, -2)}, {3, 4, 3});
  check({Index{Ellipsis}, I(0)}, {3, 4});
  check({I(0), Index{Ellipsis}}, {4, 5});
  check({I(0), Index{Ellipsis}, I(1)}, {4});
  check({Index{NewAxis}, I(1), Index{NewAxis}, S({}, {}, 2)}, {1, 1, 2, 5});
  check({Index{Ellipsis}, Index{NewAxis}}, {3, 4, 5, 1});
  check({Index{NewAxis}, Index{Ellipsis}, Index{NewAxis}, I(-1)}, {1, 3, 4, 1});
  check({S(), Index{Ellipsis}, S(1, 2), S(4, {}, -4)}, {3, 1, 2});
  check(std::vector<Index>{}, {3, 4, 5});
  // hand-checked values
  REQUIRE(x[{I(1), I(2), I(3)}].item<double>() == 1 * 20 + 2 * 5 + 3);
  REQUIRE(x[{I(-1), I(-1), S({}, {}, -2)}].to_vector<double>() == std::vector<double>{59, 57, 55});
  REQUIRE(x[1][2].to_vector<double>() == std::vector<double>{30, 31, 32, 33, 34});
  // a non-contiguous input
  Tensor xp = x.permute({2, 0, 1}).flip(1);
  Ref rp = ref_flip(ref_permute(r, {2, 0, 1}), {1});
  std::vector<Index> idx = {S(1, {}, 3), I(-1), S({}, {}, -3)};
  require_equal(xp[idx], ref_gather(rp, ref_subscript(rp.shape, idx)), "permuted and flipped input");
  // 0-d tensors take only NewAxis and Ellipsis
  Tensor s = scalar(2.0);
  REQUIRE(shape_of(s[std::vector<Index>{}]) == Shape{});  // s[{}] would be s[0]
  REQUIRE(shape_of(s[{Index{Ellipsis}}]) == Shape{});
  REQUIRE(shape_of(s[{Index{NewAxis}, Index{NewAxis}}]) == Shape{1, 1});
  // size-0 dims
  Tensor e = Tensor::zeros({2, 0, 3});
  REQUIRE(shape_of(e[{I(1), S({}, {}, -1), S(1)}]) == Shape{0, 2});
}

TEST_CASE("subscripts are views of the input: no copy, no kernel", "[movement]") {
  Tensor x = tensor_of(iota_ref({6, 7})).realize();
  GlobalCounters::reset();
  for (const auto& idx : std::vector<std::vector<Index>>{
           {I(2)}, {S(1, -1, 2), S({}, {}, -3)}, {Index{NewAxis}, Index{Ellipsis}, I(0)}, {S(5, 1, -1)}}) {
    INFO(describe(idx));
    Tensor y = x[idx];
    REQUIRE(y.lazydata->base() == x.lazydata->base());
  }
  REQUIRE(GlobalCounters::kernel_count == 0);
  Tensor c = x.transpose().flatten().unsqueeze(0).squeeze().repeat({2});
  REQUIRE(c.lazydata->base() == x.lazydata->base());
}

TEST_CASE("random subscripts match a naive numpy reference, forward and backward", "[movement]") {
  std::mt19937_64 gen(20240611);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  };
  int checked = 0, errors = 0;
  metagrad::test::Sampler sample;  // (errors build no kernel: all of them run)
  for (int trial = 0; trial < 400; ++trial) {
    Shape shape(static_cast<std::size_t>(uni(0, 4)));
    for (auto& d : shape) d = uni(0, 5) == 0 ? uni(0, 1) : uni(1, 5);
    Ref r{shape, metagrad::test::random_values(Ref{shape, {}}.size(), static_cast<std::uint64_t>(trial))};
    // a non-contiguous input half of the time: index a permuted view of x
    Tensor x = tensor_of(r, true);
    Shape order(shape.size());
    std::iota(order.begin(), order.end(), 0);
    if (trial % 2) std::shuffle(order.begin(), order.end(), gen);
    Tensor xv = x.permute(order);
    Ref rv = ref_permute(r, order);

    // integers and slices for some dims, an Ellipsis for the ones in between, NewAxis anywhere
    std::vector<Index> idx;
    auto consuming = static_cast<std::size_t>(uni(0, static_cast<std::int64_t>(shape.size())));
    bool ellipsis = uni(0, 3) == 0, bad = false;
    auto at = ellipsis ? static_cast<std::size_t>(uni(0, static_cast<std::int64_t>(consuming))) : consuming;
    for (std::size_t k = 0; k < consuming; ++k) {
      if (ellipsis && k == at) idx.push_back(Index{Ellipsis});
      std::int64_t n = rv.shape[k < at ? k : rv.shape.size() - (consuming - k)];
      if (uni(0, 4) == 0) idx.push_back(Index{NewAxis});
      if (uni(0, 2) == 0) {
        // now and then out of range (always, on a size-0 dim)
        bool out = n == 0 || uni(0, 30) == 0;
        std::int64_t e = out ? (uni(0, 1) ? n + uni(0, 2) : -n - 1 - uni(0, 2)) : uni(-n, n - 1);
        bad = bad || out;
        idx.push_back(I(e));
      } else {
        auto bound = [&]() -> std::optional<std::int64_t> {
          if (uni(0, 3) == 0) return std::nullopt;
          return uni(-n - 3, n + 3);
        };
        std::optional<std::int64_t> step;
        if (uni(0, 2)) step = uni(0, 1) ? uni(1, 4) : -uni(1, 4);
        idx.push_back(S(bound(), bound(), step));
      }
    }
    if (ellipsis && at == consuming) idx.push_back(Index{Ellipsis});
    if (uni(0, 5) == 0) idx.push_back(Index{NewAxis});
    INFO("shape " << to_string(Dims(rv.shape)) << " index " << describe(idx));
    if (bad) {
      REQUIRE_THROWS_WITH(xv[idx], Contains("out of range") && Contains("index"));
      ++errors;
      continue;
    }
    if (!sample()) continue;
    Gather g = ref_subscript(rv.shape, idx);
    Tensor y = xv[idx];
    require_equal(y, ref_gather(rv, g), "forward");
    // backward: the gradient of sum(y * w) scatters w into the positions y reads
    Ref w{g.shape, metagrad::test::random_values(static_cast<std::int64_t>(g.src.size()),
                                                 7 + static_cast<std::uint64_t>(trial))};
    (y * tensor_of(w)).sum().backward();
    Ref want{rv.shape, std::vector<double>(static_cast<std::size_t>(rv.size()), 0.0)};
    for (std::size_t k = 0; k < g.src.size(); ++k) {
      std::int64_t flat = 0;
      for (std::size_t d = 0; d < rv.shape.size(); ++d) flat = flat * rv.shape[d] + g.src[k][d];
      want.data[static_cast<std::size_t>(flat)] += w.data[k];
    }
    REQUIRE(x.grad);
    require_close(x.grad->permute(order).to_vector<double>(), want.data, 1e-12, 0, "gradient");
    ++checked;
  }
  INFO(checked << " checked, " << errors << " errors");
  REQUIRE(checked > (sample.all ? 300 : 100));
  REQUIRE(errors > 0);
}

TEST_CASE("cat along any dim, negative dims, several pieces, dtype promotion", "[movement]") {
  Ref a = iota_ref({2, 3}), b{{2, 1}, {-1, -2}}, c{{2, 2}, {10, 11, 12, 13}};
  Tensor ta = tensor_of(a), tb = tensor_of(b), tc = tensor_of(c);
  auto cat_ref = [](const std::vector<Ref>& rs, std::size_t dim) {
    Shape s = rs[0].shape;
    s[dim] = 0;
    for (const Ref& x : rs) s[dim] += x.shape[dim];
    return build(s, [&](const Shape& i) {
      Shape src = i;
      for (const Ref& x : rs) {
        if (src[dim] < x.shape[dim]) return x.at(src);
        src[dim] -= x.shape[dim];
      }
      return std::nan("");
    });
  };
  require_equal(ta.cat({tb, tc}, 1), cat_ref({a, b, c}, 1));
  require_equal(ta.cat({tb, tc}, -1), cat_ref({a, b, c}, 1));
  require_equal(ta.cat({ta.flip(0)}, 0), cat_ref({a, ref_flip(a, {0})}, 0));
  require_equal(ta.cat({}, 0), a);
  // a piece with nothing along dim; infinities stay exact
  Ref f{{1, 3}, {inf, -inf, 3}};
  require_equal(ta.cat({Tensor::zeros({0, 3}, {.dtype = dtypes::float64}), tensor_of(f)}, 0),
                cat_ref({a, f}, 0));
  // 3-d, middle dim, non-contiguous pieces
  Ref x = iota_ref({2, 3, 2});
  Tensor tx = tensor_of(x);
  require_equal(tx.cat({tx.flip({0, 2}), tx.shrink({{0, 2}, {1, 2}, {0, 2}})}, 1),
                cat_ref({x, ref_flip(x, {0, 2}), ref_shrink(x, {{0, 2}, {1, 2}, {0, 2}})}, 1));
  // promotion
  Tensor i = Tensor(std::vector<std::int32_t>{1, 2}, {2}), fl = Tensor({0.5f});
  Tensor m = i.cat({fl});
  REQUIRE(m.dtype() == dtypes::float32);
  REQUIRE(m.to_vector<float>() == std::vector<float>{1, 2, 0.5f});
  Tensor bl = Tensor(std::vector<float>{1, 0}, {2}, {.dtype = dtypes::bool_});
  REQUIRE(bl.cat({bl}).dtype() == dtypes::bool_);
  REQUIRE(bl.cat({bl}).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0, 1, 0});
}

TEST_CASE("stack, repeat and chunk", "[movement]") {
  Ref a = iota_ref({2, 3});
  Ref b{a.shape, {}};
  for (double v : a.data) b.data.push_back(-v);
  Tensor ta = tensor_of(a), tb = tensor_of(b);
  for (std::int64_t dim : {0, 1, 2, -1, -3}) {
    INFO("dim " << dim);
    std::size_t d = static_cast<std::size_t>(dim < 0 ? dim + 3 : dim);
    Shape s = a.shape;
    s.insert(s.begin() + static_cast<std::ptrdiff_t>(d), 2);
    Ref want = build(s, [&](const Shape& i) {
      Shape src = i;
      src.erase(src.begin() + static_cast<std::ptrdiff_t>(d));
      return (i[d] == 0 ? a : b).at(src);
    });
    require_equal(Tensor::stack({ta, tb}, dim), want);
  }
  REQUIRE(shape_of(Tensor::stack({ta})) == Shape{1, 2, 3});
  require_equal(Tensor::stack({ta.permute({1, 0}), tb.permute({1, 0})}, 2),
                build({3, 2, 2}, [&](const Shape& i) {
                  return (i[2] == 0 ? a : b).at({i[1], i[0]});
                }));

  // repeat: out[i] = x[i mod shape], with new leading dims
  auto repeat_ref = [](const Ref& x, const Shape& reps) {
    Shape base(reps.size() - x.shape.size(), 1), s;
    base.insert(base.end(), x.shape.begin(), x.shape.end());
    for (std::size_t k = 0; k < reps.size(); ++k) s.push_back(reps[k] * base[k]);
    std::size_t lead = reps.size() - x.shape.size();
    return build(s, [&](const Shape& i) {
      Shape src;
      for (std::size_t k = lead; k < s.size(); ++k) src.push_back(i[k] % base[k]);
      return x.at(src);
    });
  };
  require_equal(ta.repeat({2, 3}), repeat_ref(a, {2, 3}));
  require_equal(ta.repeat({1, 1}), a);
  require_equal(ta.repeat({2, 1, 2}), repeat_ref(a, {2, 1, 2}));
  require_equal(ta.flip(1).repeat({3, 2}), repeat_ref(ref_flip(a, {1}), {3, 2}));
  REQUIRE(shape_of(ta.repeat({0, 2})) == Shape{0, 6});

  // chunk: pieces of ceil(n / chunks), as PyTorch
  Ref x = iota_ref({7, 2});
  Tensor tx = tensor_of(x);
  struct Case {
    std::int64_t n, dim;
    std::vector<std::int64_t> sizes;
  };
  for (const Case& cs : std::vector<Case>{{3, 0, {3, 3, 1}},
                                          {7, 0, {1, 1, 1, 1, 1, 1, 1}},
                                          {10, 0, {1, 1, 1, 1, 1, 1, 1}},
                                          {1, 0, {7}},
                                          {2, -1, {1, 1}},
                                          {4, 0, {2, 2, 2, 1}},
                                          {6, 0, {2, 2, 2, 1}}}) {
    INFO("chunks " << cs.n << " dim " << cs.dim);
    std::vector<Tensor> parts = tx.chunk(cs.n, cs.dim);
    REQUIRE(parts.size() == cs.sizes.size());
    std::int64_t at = 0;
    std::size_t d = cs.dim < 0 ? 1 : 0;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      std::vector<std::pair<std::int64_t, std::int64_t>> range = {{0, 7}, {0, 2}};
      range[d] = {at, at + cs.sizes[k]};
      require_equal(parts[k], ref_shrink(x, range));
      at += cs.sizes[k];
    }
  }
  REQUIRE(Tensor::zeros({0, 2}).chunk(3).size() == 1);
}

TEST_CASE("squeeze, unsqueeze, transpose and flatten", "[movement]") {
  Ref r = iota_ref({1, 3, 1, 2});
  Tensor x = tensor_of(r);
  require_equal(x.squeeze(), ref_reshape(r, {3, 2}));
  require_equal(x.squeeze(0), ref_reshape(r, {3, 1, 2}));
  require_equal(x.squeeze(-2), ref_reshape(r, {1, 3, 2}));
  require_equal(x.squeeze(1), r);  // not size 1: unchanged
  REQUIRE(shape_of(scalar(1.0).squeeze(0)) == Shape{});
  REQUIRE(shape_of(Tensor::ones({1, 1}).squeeze()) == Shape{});
  REQUIRE(shape_of(x.unsqueeze(0)) == Shape{1, 1, 3, 1, 2});
  REQUIRE(shape_of(x.unsqueeze(4)) == Shape{1, 3, 1, 2, 1});
  REQUIRE(shape_of(x.unsqueeze(-1)) == Shape{1, 3, 1, 2, 1});
  REQUIRE(shape_of(x.unsqueeze(-5)) == Shape{1, 1, 3, 1, 2});
  require_equal(x.unsqueeze(2), ref_reshape(r, {1, 3, 1, 1, 2}));
  REQUIRE(shape_of(scalar(1.0).unsqueeze(-1)) == Shape{1});

  Ref m = iota_ref({2, 3, 4});
  Tensor tm = tensor_of(m);
  require_equal(tm.transpose(), ref_permute(m, {1, 0, 2}));
  require_equal(tm.transpose(0, 2), ref_permute(m, {2, 1, 0}));
  require_equal(tm.transpose(-1, -2), ref_permute(m, {0, 2, 1}));
  require_equal(tm.transpose(1, 1), m);
  require_equal(tm.flip(2).transpose(2, 0), ref_permute(ref_flip(m, {2}), {2, 1, 0}));

  require_equal(tm.flatten(), ref_reshape(m, {24}));
  require_equal(tm.flatten(1), ref_reshape(m, {2, 12}));
  require_equal(tm.flatten(0, 1), ref_reshape(m, {6, 4}));
  require_equal(tm.flatten(-2, -1), ref_reshape(m, {2, 12}));
  require_equal(tm.flatten(1, 1), m);
  require_equal(tm.permute({2, 0, 1}).flatten(1), ref_reshape(ref_permute(m, {2, 0, 1}), {4, 6}));
  REQUIRE(shape_of(scalar(3.0).flatten()) == Shape{1});
  REQUIRE(shape_of(Tensor::zeros({2, 0, 3}).flatten(1)) == Shape{2, 0});
  REQUIRE(shape_of(Tensor::zeros({2, 0, 3}).flatten(0, 1)) == Shape{0, 3});
}

TEST_CASE("triu and tril for every diagonal, batched, rectangular, with infinities", "[movement]") {
  for (Shape s : {Shape{4, 4}, Shape{3, 5}, Shape{5, 2}, Shape{2, 3, 4}, Shape{1, 1}, Shape{2, 1, 3}}) {
    Ref r = iota_ref(s);
    for (double& v : r.data) v += 1;
    Tensor x = tensor_of(r);
    std::int64_t rows = s[s.size() - 2], cols = s.back();
    for (std::int64_t k = -rows - 1; k <= cols + 1; ++k) {
      INFO("shape " << to_string(Dims(s)) << " k " << k);
      auto keep = [&](bool upper) {
        return build(s, [&](const Shape& i) {
          std::int64_t d = i[i.size() - 1] - i[i.size() - 2];
          return (upper ? d >= k : d <= k) ? r.at(i) : 0.0;
        });
      };
      require_equal(x.triu(k), keep(true), "triu");
      require_equal(x.tril(k), keep(false), "tril");
    }
  }
  // the causal mask idiom: -inf above the diagonal, 0 elsewhere (no NaN from 0 * inf)
  Tensor mask = Tensor::full({3, 3}, -inf).triu(1);
  REQUIRE(mask.to_vector<double>() == std::vector<double>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0});
  Tensor low = Tensor::full({2, 3}, inf, {.dtype = dtypes::float64}).tril(-1);
  REQUIRE(low.to_vector<double>() == std::vector<double>{0, 0, 0, inf, 0, 0});
  // extreme k, integer dtype, non-contiguous input
  Tensor i = Tensor(std::vector<std::int64_t>{1, 2, 3, 4}, {2, 2});
  REQUIRE(i.triu(std::numeric_limits<std::int64_t>::max()).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, 0, 0, 0});
  REQUIRE(i.tril(std::numeric_limits<std::int64_t>::max()).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{1, 2, 3, 4});
  REQUIRE(i.tril(std::numeric_limits<std::int64_t>::min()).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, 0, 0, 0});
  REQUIRE(i.triu(0).dtype() == dtypes::int64);
  Ref m = iota_ref({3, 4});
  require_equal(tensor_of(m).transpose().triu(), build({4, 3}, [&](const Shape& j) {
                  return j[1] >= j[0] ? m.at({j[1], j[0]}) : 0.0;
                }));
  REQUIRE(shape_of(Tensor::zeros({0, 3}).triu()) == Shape{0, 3});
}

TEST_CASE("chains of movement ops on non-contiguous inputs", "[movement]") {
  Ref r = iota_ref({3, 4, 5});
  Tensor x = tensor_of(r);
  // permute -> pad -> flip -> subscript -> reshape -> expand
  Tensor y = x.permute({2, 0, 1}).pad({{1, 0}, {0, 2}, {1, 1}}).flip(1)[{S(1, {}, 2), I(-2), S({}, {}, -3)}];
  Ref ry = ref_flip(ref_pad(ref_permute(r, {2, 0, 1}), {{1, 0}, {0, 2}, {1, 1}}), {1});
  std::vector<Index> idx = {S(1, {}, 2), I(-2), S({}, {}, -3)};
  Ref want = ref_gather(ry, ref_subscript(ry.shape, idx));
  require_equal(y, want, "permute pad flip subscript");
  require_equal(y.reshape({-1}).expand({2, -1}),
                ref_expand(ref_reshape(want, {want.size()}), {2, want.size()}), "then reshape expand");
  // shrink -> transpose -> cat with itself flipped -> repeat -> triu
  Tensor z = x.shrink({{1, 3}, {0, 4}, {2, 5}}).transpose(0, 2);
  Ref rz = ref_permute(ref_shrink(r, {{1, 3}, {0, 4}, {2, 5}}), {2, 1, 0});
  Tensor c = z.cat({z.flip(2)}, 2).repeat({1, 2, 1}).triu(1);
  Ref rc = build({3, 8, 4}, [&](const Shape& i) {
    std::int64_t row = i[1] % 4, col = i[2];
    double v = col < 2 ? rz.at({i[0], row, col}) : rz.at({i[0], row, 3 - col});
    return i[2] - i[1] >= 1 ? v : 0.0;
  });
  require_equal(c, rc, "shrink transpose cat repeat triu");
  // a contiguous copy of a strided view reads the same values
  require_equal(x[{S({}, {}, 2), S({}, {}, -1)}].contiguous().reshape({-1}),
                ref_reshape(ref_gather(r, ref_subscript(r.shape, {S({}, {}, 2), S({}, {}, -1)})), {40}));
}

TEST_CASE("movement gradients match finite differences", "[movement]") {
  using V = std::vector<Tensor>;
  Tensor a = random_tensor({2, 3, 4}, 1), b = random_tensor({2, 1, 4}, 2), m = random_tensor({3, 4}, 3);
  SECTION("reshape, expand, permute, flip, shrink") {
    check_gradients([](const V& x) { return x[0].reshape({4, -1}).permute({1, 0}).flip(0); }, {a});
    check_gradients([](const V& x) { return x[0].expand({3, 2, 5, 4}); }, {b});
    check_gradients([](const V& x) { return x[0].shrink({{1, 2}, {0, 2}, {1, 4}}).flip({0, 2}); }, {a});
  }
  SECTION("pad with a value, pad2d") {
    check_gradients([](const V& x) { return x[0].pad({{1, 0}, {2, 1}, {0, 1}}, -3.5); }, {a});
    check_gradients([](const V& x) { return x[0].pad2d({1, -1, -1, 2}, 2); }, {a});
  }
  SECTION("subscripts with steps, negative steps, NewAxis and Ellipsis") {
    check_gradients([](const V& x) { return x[0][{S({}, {}, -1), I(1), S(3, 0, -2)}]; }, {a});
    check_gradients([](const V& x) { return x[0][{Index{Ellipsis}, Index{NewAxis}, S(1, {}, 2)}]; }, {a});
    check_gradients([](const V& x) { return x[0].permute({2, 0, 1})[{S({}, {}, 3), I(-1)}] * 2; }, {a});
  }
  SECTION("cat, stack, repeat, chunk") {
    check_gradients([](const V& x) { return x[0].cat({x[1], x[0].flip(1)}, 1); }, {a, b});
    check_gradients([](const V& x) { return Tensor::stack({x[0], x[1] * x[0]}, -1); }, {m, m * 0.5 + 1});
    check_gradients([](const V& x) { return x[0].repeat({2, 1, 3}); }, {m});
    check_gradients(
        [](const V& x) {
          auto p = x[0].chunk(3, 1);
          return p[0] * 3 + p[2].pad({{0, 0}, {0, 1}}) - p[1].flip(0);
        },
        {random_tensor({3, 8}, 4)});
  }
  SECTION("squeeze, unsqueeze, transpose, flatten, triu, tril") {
    check_gradients([](const V& x) { return x[0].squeeze(1).unsqueeze(0).transpose(0, 2).flatten(); }, {b});
    check_gradients([](const V& x) { return x[0].triu(1) + x[0].tril(-1) * 2; }, {a});
    check_gradients([](const V& x) { return x[0].transpose().tril(); }, {m});
  }
}

TEST_CASE("bad movement arguments throw, naming the op, the shape and the argument", "[movement]") {
  Tensor x = Tensor::zeros({2, 3});
  auto fails = [](const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
      f();
      FAIL("no exception");
    } catch (const std::invalid_argument& e) {
      for (const std::string& p : parts) REQUIRE_THAT(e.what(), Contains(p));
    }
  };
  fails([&] { x.reshape({4, -1}); }, {"reshape", "(2, 3)", "(4, -1)"});
  fails([&] { x.reshape({-1, -1}); }, {"reshape", "(2, 3)", "only one"});
  fails([&] { x.reshape({5}); }, {"reshape", "(2, 3)", "(5,)"});
  fails([&] { x.reshape({-2, -3}); }, {"reshape", "negative"});
  fails([&] { x.expand({4, 3}); }, {"expand", "(2, 3)", "(4, 3)", "size-1"});
  fails([&] { x.expand({3}); }, {"expand", "(2, 3)", "(3,)"});
  fails([&] { x.expand({-1, 2, 3}); }, {"expand", "(-1, 2, 3)"});
  fails([&] { x.permute({0, 0}); }, {"permute", "(2, 3)", "(0, 0)", "permutation"});
  fails([&] { x.permute({0}); }, {"permute", "(2, 3)", "(0,)"});
  fails([&] { x.permute({0, 2}); }, {"permute", "(0, 2)"});
  fails([&] { x.permute({0, 1, 2}); }, {"permute", "(0, 1, 2)"});
  fails([&] { x.flip(2); }, {"flip", "(2, 3)", "2"});
  fails([&] { x.flip({0, -2}); }, {"flip", "(2, 3)", "repeats"});
  fails([&] { x.pad({{1, 1}}); }, {"pad", "(2, 3)", "((1, 1),)"});
  fails([&] { x.pad({{1, -1}, {0, 0}}, 3); }, {"pad", "(2, 3)", "(1, -1)", "non-negative"});
  fails([&] { x.pad2d({1, 2, 3}); }, {"pad2d", "(2, 3)", "(1, 2, 3)"});
  fails([&] { x.pad2d({1, 1, 1, 1, 1, 1}); }, {"pad2d", "(2, 3)"});
  fails([&] { x.pad2d({-2, -2}); }, {"pad2d", "(2, 3)", "(-2, -2)"});
  fails([&] { x.shrink({{0, 3}, {0, 3}}); }, {"shrink", "(2, 3)", "((0, 3), (0, 3))"});
  fails([&] { x.shrink({{1, 0}, {0, 3}}); }, {"shrink", "(1, 0)"});
  fails([&] { x.shrink({{0, 1}}); }, {"shrink", "(2, 3)", "((0, 1),)"});
  fails([&] { x.shrink({{0, 1}, {0, 1}, {0, 1}}); }, {"shrink", "(2, 3)"});
  fails([&] { x[{I(2)}]; }, {"shape (2, 3)", "index 2", "out of range", "dimension 0"});
  fails([&] { x[{S(), I(-4)}]; }, {"shape (2, 3)", "index -4", "dimension 1"});
  fails([&] { x[{I(0), I(0), I(0)}]; }, {"shape (2, 3)", "too many indices"});
  fails([&] { x[{Index{Ellipsis}, I(0), Index{Ellipsis}}]; }, {"(2, 3)", "single Ellipsis"});
  fails([&] { x[{S({}, {}, 0)}]; }, {"(2, 3)", "step cannot be 0"});
  fails([&] { scalar(1.0)[0]; }, {"shape ()", "too many"});
  fails([&] { x.cat({Tensor::zeros({3, 3})}, 1); }, {"cat", "(3, 3)", "(2, 3)"});
  fails([&] { x.cat({Tensor::zeros({2, 3, 1})}); }, {"cat", "(2, 3, 1)", "(2, 3)"});
  fails([&] { x.cat({x}, 2); }, {"cat", "(2, 3)", "dim 2"});
  fails([&] { scalar(1.0).cat({}); }, {"cat", "0-d"});
  fails([&] { Tensor::stack({}); }, {"stack", "at least one"});
  fails([&] { Tensor::stack({x, Tensor::zeros({3, 2})}); }, {"stack", "(3, 2)", "(2, 3)"});
  fails([&] { Tensor::stack({x, x}, 3); }, {"unsqueeze", "(2, 3)", "dim 3"});
  fails([&] { x.repeat({2}); }, {"repeat", "(2, 3)", "(2,)"});
  fails([&] { x.repeat({1, -1}); }, {"repeat", "(1, -1)"});
  fails([&] { x.chunk(0); }, {"chunk", "(2, 3)", "0"});
  fails([&] { x.chunk(2, -3); }, {"chunk", "(2, 3)", "dim -3"});
  fails([&] { x.squeeze(2); }, {"squeeze", "(2, 3)", "dim 2"});
  fails([&] { x.unsqueeze(-4); }, {"unsqueeze", "(2, 3)", "dim -4"});
  fails([&] { x.transpose(0, 5); }, {"transpose", "(2, 3)", "dim 5"});
  fails([&] { Tensor::zeros({3}).transpose(); }, {"transpose", "(3,)", "dim 1"});
  fails([&] { x.flatten(1, 0); }, {"flatten", "(2, 3)", "start_dim 1"});
  fails([&] { x.flatten(3); }, {"flatten", "dim 3"});
  fails([&] { Tensor::zeros({3}).triu(); }, {"triu", "(3,)", "2 dims"});
  fails([&] { Tensor::zeros({3}).tril(); }, {"tril", "(3,)"});
}

// Slice{1} leaves stop and step to their defaults; until Slice's members get default member
// initializers (`= {}`), -Wextra calls that a missing field initializer.
TEST_CASE("the README's indexing examples", "[movement]") {
  Tensor x = Tensor::arange(24).reshape({2, 3, 4});
  REQUIRE(shape_of(x[1]) == Shape{3, 4});
  REQUIRE(shape_of(x[{-1, Slice{1}, Slice{{}, {}, 2}}]) == Shape{2, 2});
  REQUIRE(x[{-1, Slice{1}, Slice{{}, {}, 2}}].to_vector<float>() == std::vector<float>{16, 18, 20, 22});
  REQUIRE(shape_of(x[{Slice{{}, {}, -1}}]) == Shape{2, 3, 4});
  REQUIRE(x[{Slice{{}, {}, -1}}].to_vector<float>()[0] == 12);
  REQUIRE(shape_of(x[{Ellipsis, NewAxis, 0}]) == Shape{2, 3, 1});
  REQUIRE(shape_of(x[{NewAxis, Slice{-2, -1}, Ellipsis}]) == Shape{1, 1, 3, 4});
  REQUIRE(shape_of(x[std::vector<Index>{}]) == Shape{2, 3, 4});
  REQUIRE(shape_of(x[{}]) == Shape{2, 3, 4});  // the empty subscript, as x[()]: integers take x[0]
}

// ---- issue 40's movement and creation ops, against loops on the host ----

TEST_CASE("split, roll, unflatten, diagonal, repeat_interleave against loops, with gradients", "[movement]") {
  std::vector<double> v(60);
  std::iota(v.begin(), v.end(), 0.0);
  for (const char* dev : {"CPU", "CLANG", "LLVM"}) {
    if (!metagrad::test::available(dev)) continue;  // (sanitizer builds have no LLVM)
    INFO(dev);
    Tensor x = Tensor(v, {3, 4, 5}, {.device = dev});
    auto at = [&](std::int64_t i, std::int64_t j, std::int64_t k) {
      return v[static_cast<std::size_t>(i * 20 + j * 5 + k)];
    };
    // split: sizes and a size
    auto parts = x.split(Shape{1, 3}, 1);
    REQUIRE(parts.size() == 2);
    CHECK(parts[1].shape() == Dims{3, 3, 5});
    CHECK(parts[1].to_vector<double>()[0] == at(0, 1, 0));
    auto even = x.split(2, 2);
    REQUIRE(even.size() == 3);
    CHECK(even[2].shape() == Dims{3, 4, 1});
    CHECK_THROWS_WITH(x.split(Shape{1, 2}, 1), Contains("sum to 4"));
    // roll: out[i] = x[(i - shift) mod n], along two dims at once, negative shifts too
    for (auto [s1, s2] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {-1, 7}, {4, 0}}) {
      std::vector<double> got = x.roll(Shape{s1, s2}, Shape{1, -1}).to_vector<double>(), want;
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < 4; ++j)
          for (std::int64_t k = 0; k < 5; ++k)
            want.push_back(at(i, ((j - s1) % 4 + 4) % 4, ((k - s2) % 5 + 5) % 5));
      CHECK(got == want);
    }
    // unflatten
    CHECK(x.unflatten(1, Shape{2, -1}).shape() == Dims{3, 2, 2, 5});
    CHECK_THROWS_WITH(x.unflatten(1, Shape{3, 2}), Contains("multiply to 4"));
    // diagonal of every (dim1, dim2) pair at several offsets
    for (std::int64_t off : {-3, -1, 0, 2, 4, 6})
      for (auto [d1, d2] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {2, 0}, {0, 1}}) {
        INFO("offset " << off << " dims " << d1 << ", " << d2);
        Tensor d = x.diagonal(off, d1, d2);
        Shape sh{3, 4, 5};
        std::int64_t other = 3 - d1 - d2, rows = sh[static_cast<std::size_t>(d1)],
                     cols = sh[static_cast<std::size_t>(d2)];
        std::vector<double> want;
        for (std::int64_t o = 0; o < sh[static_cast<std::size_t>(other)]; ++o)
          for (std::int64_t t = 0; t < std::max<std::int64_t>(0, std::min(rows, cols)); ++t) {
            std::int64_t r = t + std::max<std::int64_t>(-off, 0), c = t + std::max<std::int64_t>(off, 0);
            if (r >= rows || c >= cols) continue;
            std::int64_t idx[3];
            idx[other] = o, idx[d1] = r, idx[d2] = c;
            want.push_back(at(idx[0], idx[1], idx[2]));
          }
        CHECK(d.to_vector<double>() == want);
      }
    // repeat_interleave
    std::vector<double> ri = Tensor(std::vector<double>{1, 2, 3, 4}, {2, 2}, {.device = dev})
                                 .repeat_interleave(2, 1)
                                 .to_vector<double>();
    CHECK(ri == std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4});
    CHECK(Tensor(std::vector<double>{1, 2}, {2}, {.device = dev}).repeat_interleave(3).to_vector<double>() ==
          std::vector<double>{1, 1, 1, 2, 2, 2});
  }
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].roll(Shape{1, -2}, Shape{0, 1}) * t[0];
      },
      {random_tensor({3, 4}, 1)});
  check_gradients(
      [](const std::vector<Tensor>& t) { return t[0].diagonal(1) * 2 + t[0].diagonal(-1, 1, 0).sum(); },
      {random_tensor({4, 5}, 2)});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].split(Shape{2, 1}, 0)[0] * 3;
      },
      {random_tensor({3, 2}, 3)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].repeat_interleave(2, 0); },
                  {random_tensor({3, 2}, 4)});
}

TEST_CASE("linspace, eye(n, m), meshgrid, one_hot", "[movement]") {
  std::vector<double> l = Tensor::linspace(-1, 2, 7, {.dtype = dtypes::float64}).to_vector<double>();
  REQUIRE(l.size() == 7);
  for (std::size_t i = 0; i < 7; ++i) CHECK(l[i] == Approx(-1 + 0.5 * static_cast<double>(i)).margin(1e-15));
  CHECK(l.back() == 2);  // the end is exact
  CHECK(Tensor::linspace(3, 9, 1).to_vector<double>() == std::vector<double>{3});
  CHECK(Tensor::linspace(0, 1, 0).numel() == 0);
  CHECK(Tensor::linspace(0, 1, 4).dtype() == dtypes::float32);
  CHECK(Tensor::eye(2, 3).to_vector<double>() == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(Tensor::eye(3, 1).to_vector<double>() == std::vector<double>{1, 0, 0});
  Tensor a(std::vector<double>{1, 2, 3}, {3}), b(std::vector<double>{10, 20}, {2});
  auto ij = Tensor::meshgrid({a, b});
  CHECK(ij[0].shape() == Dims{3, 2});
  CHECK(ij[0].to_vector<double>() == std::vector<double>{1, 1, 2, 2, 3, 3});
  CHECK(ij[1].to_vector<double>() == std::vector<double>{10, 20, 10, 20, 10, 20});
  auto xy = Tensor::meshgrid({a, b}, "xy");
  CHECK(xy[0].shape() == Dims{2, 3});
  CHECK(xy[0].to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(xy[1].to_vector<double>() == std::vector<double>{10, 10, 10, 20, 20, 20});
  CHECK_THROWS_WITH(Tensor::meshgrid({a}, "ji"), Contains("indexing"));
  Tensor idx(std::vector<std::int32_t>{2, 0, 1, 2}, {2, 2});
  Tensor oh = idx.one_hot(3);
  CHECK(oh.dtype() == dtypes::int64);
  CHECK(oh.shape() == Dims{2, 2, 3});
  CHECK(oh.to_vector<double>() == std::vector<double>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK_THROWS_WITH(idx.one_hot(2), Contains("[0, 2)"));
  CHECK_THROWS_WITH(Tensor(std::vector<double>{1}, {1}).one_hot(2), Contains("integer"));
}
