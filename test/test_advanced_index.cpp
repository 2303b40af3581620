// Advanced indexing (issue 40): subscripts with integer and bool tensors, read through operator[] and
// written through index_put, against an explicit gather written here (PyTorch's rules: the index tensors
// broadcast, their result axes stay in place when adjacent and go first otherwise, integers are basic),
// over random subscripts; gradients against finite differences. Tagged [movement], a device suite.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "reference.hpp"

using namespace metagrad;
using namespace metagrad::test;
using Catch::Matchers::Contains;
using i64 = std::int64_t;
using Shape = std::vector<i64>;

namespace {

// One entry of a subscript, as the test builds it.
struct Ent {
  enum Kind { INT, SLICE, NEW, ELL, IDX, MASK } k;
  i64 i = 0;                                  // INT
  std::optional<i64> start, stop, step;       // SLICE
  Shape shape;                                // IDX, MASK
  std::vector<i64> v;                         // IDX values, MASK 0/1
  bool int32 = false;                         // IDX given as int32
  Ent(Kind k_, i64 i_ = 0) : k(k_), i(i_) {}  // NOLINT
  Ent(Shape s, std::vector<i64> values) : k(IDX), shape(std::move(s)), v(std::move(values)) {}
};

std::vector<Index> to_index(const std::vector<Ent>& es) {
  std::vector<Index> out;
  for (const Ent& e : es) switch (e.k) {
      case Ent::INT:
        out.emplace_back(e.i);
        break;
      case Ent::SLICE:
        out.emplace_back(Slice{e.start, e.stop, e.step});
        break;
      case Ent::NEW:
        out.emplace_back(NewAxis);
        break;
      case Ent::ELL:
        out.emplace_back(Ellipsis);
        break;
      case Ent::IDX:
        out.emplace_back(e.int32 ? Tensor(std::vector<std::int32_t>(e.v.begin(), e.v.end()), Dims(e.shape))
                                 : Tensor(e.v, Dims(e.shape)));
        break;
      case Ent::MASK:
        out.emplace_back(
            Tensor(std::vector<std::int32_t>(e.v.begin(), e.v.end()), Dims(e.shape)).cast(dtypes::bool_));
        break;
    }
  return out;
}

// Python's range(*slice(start, stop, step).indices(n)), written out.
std::vector<i64> slice_positions(const Ent& e, i64 n) {
  i64 step = e.step.value_or(1), lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  auto fix = [&](std::optional<i64> v, i64 dflt) {
    if (!v) return dflt;
    i64 x = *v;
    if (x < 0) return std::max(x + n, lower);
    return std::min(x, upper);
  };
  i64 start = fix(e.start, step > 0 ? lower : upper), stop = fix(e.stop, step > 0 ? upper : lower);
  std::vector<i64> p;
  for (i64 i = start; step > 0 ? i < stop : i > stop; i += step) p.push_back(i);
  return p;
}

// The reference: for every result element, the x multi-index it reads. Basic axes (slices, new axes)
// and the broadcast block B of the advanced indices, B in place when the advanced entries have no basic
// axis between them, else first.
struct RefPlan {
  Shape shape;
  std::vector<std::vector<i64>> src;  // per result element, row-major
};
RefPlan ref_plan(const Shape& xs, std::vector<Ent> es) {
  // Masks become one IDX per axis they cover (their nonzero coordinates); the Ellipsis full slices.
  std::vector<Ent> flat;
  i64 consuming = 0;
  for (const Ent& e : es)
    consuming += e.k == Ent::INT || e.k == Ent::SLICE || e.k == Ent::IDX ? 1
                 : e.k == Ent::MASK                                      ? i64(e.shape.size())
                                                                         : 0;
  std::size_t d = 0;
  for (const Ent& e : es) {
    if (e.k == Ent::ELL) {
      for (i64 k = 0; k < i64(xs.size()) - consuming; ++k, ++d) flat.push_back(Ent(Ent::SLICE));
    } else if (e.k == Ent::MASK) {
      std::vector<std::vector<i64>> cols(e.shape.size());
      for_each_index(e.shape, [&](const std::vector<i64>& ix) {
        if (e.v[std::size_t(offset(e.shape, ix))])
          for (std::size_t a = 0; a < ix.size(); ++a) cols[a].push_back(ix[a]);
      });
      for (auto& c : cols) flat.push_back(Ent(Shape{i64(c.size())}, c)), ++d;
    } else {
      flat.push_back(e);
      d += e.k != Ent::NEW;
    }
  }
  while (d < xs.size()) flat.push_back(Ent(Ent::SLICE)), ++d;
  // Walk: x axis per entry, the basic result axes, the advanced entries and their places.
  struct Basic {
    std::optional<std::size_t> xdim;  // none for a new axis
    std::vector<i64> pos;
  };
  std::vector<Basic> basic;
  std::vector<std::pair<std::size_t, const Ent*>> adv;  // x axis, entry
  std::vector<std::size_t> places;
  std::vector<i64> fixed(xs.size(), 0);
  d = 0;
  for (const Ent& e : flat) {
    if (e.k == Ent::NEW) {
      basic.push_back({{}, {0}});
      continue;
    }
    i64 n = xs[d];
    if (e.k == Ent::INT) fixed[d] = e.i < 0 ? e.i + n : e.i;
    if (e.k == Ent::SLICE) basic.push_back({d, slice_positions(e, n)});
    if (e.k == Ent::IDX) adv.push_back({d, &e}), places.push_back(basic.size());
    ++d;
  }
  Shape B;
  for (auto& [xd, e] : adv) {
    if (e->shape.size() > B.size()) B.insert(B.begin(), e->shape.size() - B.size(), 1);
    for (std::size_t k = 0; k < e->shape.size(); ++k) {
      i64& b = B[B.size() - e->shape.size() + k];
      if (b == 1) b = e->shape[k];  // 1 broadcasts to any size, 0 included
    }
  }
  bool adjacent = std::all_of(places.begin(), places.end(), [&](std::size_t p) { return p == places[0]; });
  std::size_t p = adjacent && !places.empty() ? places[0] : 0;
  RefPlan r;
  for (std::size_t k = 0; k < p; ++k) r.shape.push_back(i64(basic[k].pos.size()));
  r.shape.insert(r.shape.end(), B.begin(), B.end());
  for (std::size_t k = p; k < basic.size(); ++k) r.shape.push_back(i64(basic[k].pos.size()));
  for_each_index(r.shape, [&](const std::vector<i64>& o) {
    std::vector<i64> x = fixed;
    for (std::size_t k = 0; k < basic.size(); ++k) {
      i64 j = o[k < p ? k : k + B.size()];
      if (basic[k].xdim) x[*basic[k].xdim] = basic[k].pos[std::size_t(j)];
    }
    for (auto& [xd, e] : adv) {  // the element of the index at B's position, broadcast
      std::vector<i64> ix;
      for (std::size_t a = 0; a < e->shape.size(); ++a) {
        i64 bj = o[p + B.size() - e->shape.size() + a];
        ix.push_back(e->shape[a] == 1 ? 0 : bj);
      }
      i64 v = e->v[std::size_t(offset(e->shape, ix))];
      x[xd] = v < 0 ? v + xs[xd] : v;
    }
    r.src.push_back(x);
  });
  return r;
}

// A random subscript of x: at least one index tensor (or a mask), the other axes basic.
std::vector<Ent> random_subscript(const Shape& xs, std::mt19937_64& g) {
  auto pick = [&](i64 n) { return i64(g() % std::uint64_t(n)); };
  std::size_t r = xs.size();
  std::vector<Ent> es;
  // The broadcast shape of the index tensors; each one's shape a suffix of it with some 1s.
  Shape B;
  for (i64 k = pick(3); k-- > 0;) B.push_back(1 + pick(3));
  bool mask = r >= 1 && pick(4) == 0;
  std::size_t mask_at = std::size_t(pick(i64(r))),
              mask_len = std::min<std::size_t>(1 + std::size_t(pick(2)), r - mask_at);
  bool ell = pick(3) == 0;
  std::size_t ell_at = std::size_t(pick(i64(r) + 1)), ell_len = std::size_t(pick(2));
  bool any_adv = false;
  for (std::size_t d = 0; d < r;) {
    if (pick(8) == 0) es.push_back(Ent(Ent::NEW));
    if (ell && d == ell_at && d + ell_len <= r && !(mask && d <= mask_at && mask_at < d + ell_len)) {
      es.push_back(Ent(Ent::ELL));
      d += ell_len, ell = false;
      continue;
    }
    i64 n = xs[d];
    if (mask && d == mask_at) {
      Ent e{Ent::MASK};
      e.shape.assign(xs.begin() + i64(d), xs.begin() + i64(d + mask_len));
      for (i64 k = 0; k < numel_of(e.shape); ++k) e.v.push_back(pick(2));
      es.push_back(e), d += mask_len, any_adv = true;
      continue;
    }
    int kind = int(pick(4));
    if (kind == 0 && n > 0) {
      es.push_back(Ent(Ent::INT, pick(2 * n) - n));
    } else if (kind == 1 || n == 0) {
      Ent e{Ent::SLICE};
      auto bound = [&]() -> std::optional<i64> {
        return pick(3) ? std::optional<i64>(pick(2 * n + 3) - n - 1) : std::nullopt;
      };
      e.start = bound(), e.stop = bound();
      if (pick(2)) e.step = std::vector<i64>{-2, -1, 1, 2, 3}[std::size_t(pick(5))];
      es.push_back(e);
    } else {
      Ent e{Ent::IDX};
      if (!mask) {
        std::size_t rank = std::size_t(pick(i64(B.size()) + 1));
        e.shape.assign(B.end() - i64(rank), B.end());
        for (i64& s : e.shape)
          if (pick(3) == 0) s = 1;
      }
      for (i64 k = 0; k < numel_of(e.shape); ++k) e.v.push_back(pick(2 * n) - n);
      e.int32 = pick(4) == 0;
      es.push_back(e), any_adv = true;
    }
    ++d;
  }
  if (!any_adv && r > 0) {  // make the first basic integer or full slice an index tensor
    for (Ent& e : es)
      if (e.k == Ent::INT || e.k == Ent::SLICE) {
        e = Ent(Shape{2}, {0, -1});
        break;
      }
  }
  return es;
}

Host random_host(const Shape& s, std::uint64_t seed) { return Host{s, random_values(numel_of(s), seed)}; }

std::string describe(const std::vector<Ent>& es) {
  std::string s;
  for (const Ent& e : es) {
    s += s.empty() ? "" : ", ";
    auto o = [](std::optional<i64> v) { return v ? std::to_string(*v) : std::string(); };
    switch (e.k) {
      case Ent::INT:
        s += std::to_string(e.i);
        break;
      case Ent::SLICE:
        s += o(e.start) + ":" + o(e.stop) + ":" + o(e.step);
        break;
      case Ent::NEW:
        s += "None";
        break;
      case Ent::ELL:
        s += "...";
        break;
      case Ent::IDX:
      case Ent::MASK: {
        s += e.k == Ent::MASK ? "mask" : "idx";
        s += to_string(Dims(e.shape)) + "[";
        for (i64 v : e.v) s += std::to_string(v) + " ";
        s += "]";
      }
    }
  }
  return s;
}

}  // namespace

TEST_CASE("advanced indexing reads against an explicit gather, random subscripts", "[movement]") {
  std::mt19937_64 g(4040);
  Sampler sample;
  int cases = 0;
  for (int c = 0; c < 120; ++c) {
    Shape xs;
    for (i64 k = 1 + i64(g() % 4); k-- > 0;) xs.push_back(1 + i64(g() % 4));
    std::vector<Ent> es = random_subscript(xs, g);
    if (!sample()) continue;
    ++cases;
    INFO("x " << to_string(Dims(xs)) << "[" << describe(es) << "]");
    Host h = random_host(xs, std::uint64_t(c));
    RefPlan want = ref_plan(xs, es);
    Tensor got = Tensor(h.v, Dims(xs), {.dtype = dtypes::float64})[to_index(es)];
    REQUIRE(got.shape() == Dims(want.shape));
    std::vector<double> wv;
    for (const auto& s : want.src) wv.push_back(at(h, s));
    require_close(got.to_vector<double>(), wv, 0, 0);
  }
  CHECK(cases >= 40);
}

TEST_CASE("advanced indexing: PyTorch's placement, masks, negative indices, errors", "[movement]") {
  Tensor x = Tensor::arange(24).cast(dtypes::float32).reshape({2, 3, 4});
  Tensor i2(std::vector<i64>{1, 0}, {2}), j2(std::vector<i64>{3, -1}, {2});
  auto vals = [](const Tensor& t) { return t.to_vector<float>(); };
  // Separated: B first. Adjacent: B in place. An integer is basic (PyTorch, not numpy): B stays last.
  CHECK(x[{i2, Slice{}, j2}].shape() == Dims{2, 3});
  CHECK(vals(x[{i2, Slice{}, j2}]) == std::vector<float>{15, 19, 23, 3, 7, 11});
  CHECK(x[{Slice{}, i2, j2}].shape() == Dims{2, 2});
  CHECK(vals(x[{Slice{}, i2, j2}]) == std::vector<float>{7, 3, 19, 15});
  CHECK(x[{0, Slice{}, i2}].shape() == Dims{3, 2});
  CHECK(x[{i2, 0, j2}].shape() == Dims{2});  // adjacent once the integer is applied
  CHECK(x[{Ellipsis, i2}].shape() == Dims{2, 3, 2});
  CHECK(x[{NewAxis, i2}].shape() == Dims{1, 2, 3, 4});
  // A 0-d index removes its axis; 2-D indices broadcast with 1-D ones.
  CHECK(x[{Tensor(std::vector<i64>{1}, {}), 2}].shape() == Dims{4});
  Tensor col(std::vector<i64>{0, 2}, {2, 1}), row(std::vector<i64>{1, 3, 0}, {3});
  CHECK(x[{1, col, row}].shape() == Dims{2, 3});
  CHECK(vals(x[{1, col, row}]) == std::vector<float>{13, 15, 12, 21, 23, 20});
  // A bool mask over two axes is their nonzero coordinates.
  Tensor m = x[{0}] > 6;
  CHECK(vals(x[{1, m}]) == std::vector<float>{19, 20, 21, 22, 23});
  CHECK(x[{Slice{}, Tensor(std::vector<std::int32_t>{1, 0, 1}, {3}).cast(dtypes::bool_)}].shape() ==
        Dims{2, 2, 4});
  CHECK(x[{Slice{}, Tensor::zeros({3}, {.dtype = dtypes::bool_})}].shape() == Dims{2, 0, 4});
  // Errors name the op, the index and the shape.
  CHECK_THROWS_WITH((x[{Slice{}, Tensor(std::vector<i64>{0, 3}, {2})}]),
                    Contains("index") && Contains("3") && Contains("out of range") &&
                        Contains("dimension 1") && Contains("(2, 3, 4)"));
  CHECK_THROWS_WITH((x[{Tensor(std::vector<i64>{-3}, {1})}]), Contains("-3") && Contains("out of range"));
  CHECK_THROWS_AS((x[{Tensor(std::vector<i64>{2}, {1})}]), std::out_of_range);
  CHECK_THROWS_WITH((x[{Tensor::zeros({2})}]), Contains("integer or bool") && Contains("float32"));
  CHECK_THROWS_WITH((x[{i2, Tensor(std::vector<i64>{0, 1, 2}, {3})}]),
                    Contains("(2,), (3,)") && Contains("broadcast"));
  CHECK_THROWS_WITH((x[{Tensor::ones({3}, {.dtype = dtypes::bool_})}]), Contains("mask") && Contains("(3,)"));
  CHECK_THROWS_WITH((x[{i2, i2, i2, i2}]), Contains("too many indices"));
}

TEST_CASE("advanced indexing: gradients scatter-add into the source", "[movement]") {
  Tensor rep(std::vector<i64>{0, 2, 0, -1}, {2, 2}), c(std::vector<i64>{1, 1}, {2});
  Tensor m = Tensor(std::vector<std::int32_t>{1, 0, 1}, {3}).cast(dtypes::bool_);
  check_gradients(
      [&](const std::vector<Tensor>& x) {
        return x[0][{rep, Slice{}, c}];
      },
      {random_tensor({3, 2, 4}, 1)});
  check_gradients(
      [&](const std::vector<Tensor>& x) {
        return x[0][{Slice{{}, {}, -1}, m, 2}];
      },
      {random_tensor({2, 3, 4}, 2)});
  // Repeated elements: each read adds its gradient.
  Tensor x = Tensor(std::vector<double>{1, 2, 3}, {3}, {.requires_grad = true});
  x[{Tensor(std::vector<i64>{2, 2, 0, 2}, {4})}].sum().backward();
  CHECK(x.grad->to_vector<double>() == std::vector<double>{1, 0, 3});
}

TEST_CASE("index_put against explicit writes, accumulate or not, and its gradients", "[movement]") {
  std::mt19937_64 g(4041);
  Sampler sample;
  for (int c = 0; c < 60; ++c) {
    Shape xs;
    for (i64 k = 1 + i64(g() % 3); k-- > 0;) xs.push_back(1 + i64(g() % 4));
    std::vector<Ent> es = random_subscript(xs, g);
    bool acc = g() % 2;
    if (!sample()) continue;
    INFO("x " << to_string(Dims(xs)) << "[" << describe(es) << "] " << (acc ? "+=" : "="));
    Host h = random_host(xs, std::uint64_t(c));
    RefPlan plan = ref_plan(xs, es);
    // values of the indexed shape's trailing axes, broadcast over the rest
    Shape vs(plan.shape.begin() + i64(plan.shape.size() / 2), plan.shape.end());
    Host v = random_host(vs, std::uint64_t(c) + 99);
    Host want = h;
    for (std::size_t e = 0; e < plan.src.size(); ++e) {
      std::size_t vi = e % v.v.size();  // row-major: the trailing axes' offset
      double& slot = want.v[std::size_t(offset(xs, plan.src[e]))];
      slot = acc ? slot + v.v[vi] : v.v[vi];
    }
    Tensor got = Tensor(h.v, Dims(xs)).index_put(to_index(es), Tensor(v.v, Dims(vs)), acc);
    require_close(got.to_vector<double>(), want.v, 1e-12, 1e-12);
  }
  // Gradients: values from the writes that stay, the source where not overwritten (accumulate: both whole).
  Tensor rows(std::vector<i64>{2, 0, 2}, {3}), cols(std::vector<i64>{1, 1, 1}, {3});
  for (bool acc : {false, true})
    check_gradients(
        [&](const std::vector<Tensor>& x) {
          return x[0].index_put({rows, cols}, x[1], acc);
        },
        {random_tensor({3, 4}, 5), random_tensor({3}, 6)});
  check_gradients(
      [&](const std::vector<Tensor>& x) {
        return x[0].index_put({Slice{}, Tensor(std::vector<i64>{0, 2}, {2})}, x[1]);
      },
      {random_tensor({2, 3}, 7), random_tensor({2, 1}, 8)});
  Tensor y = Tensor(std::vector<double>{0, 0, 0}, {3}, {.requires_grad = true});
  Tensor w = Tensor(std::vector<double>{1, 2}, {2}, {.requires_grad = true});
  y.index_put({Tensor(std::vector<i64>{1, 1}, {2})}, w).sum().backward();
  CHECK(w.grad->to_vector<double>() == std::vector<double>{0, 1});  // the last write stays
  CHECK(y.grad->to_vector<double>() == std::vector<double>{1, 0, 1});
  // Errors.
  Tensor z = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(z.index_put({Tensor(std::vector<i64>{0, 1}, {2})}, Tensor::ones({2, 2})),
                    Contains("index_put") && Contains("(2, 2)") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(z.index_put({Tensor(std::vector<i64>{5}, {1})}, Tensor::ones({1})),
                    Contains("index_put") && Contains("5") && Contains("out of range"));
}

TEST_CASE("index_put_: in place through every copy of the handle, values differentiable", "[movement]") {
  Tensor x = Tensor::zeros({2, 3}), alias = x;
  Tensor v = Tensor(std::vector<float>{4, 5}, {2}, {.requires_grad = true});
  x.index_put_({Tensor(std::vector<i64>{1, 0}, {2}), Tensor(std::vector<i64>{2, 0}, {2})}, v);
  CHECK(alias.to_vector<float>() == std::vector<float>{5, 0, 0, 0, 0, 4});
  x.index_put_({Ellipsis, 1}, Tensor(std::vector<float>{1}, {1}), true);  // basic subscripts too
  CHECK(alias.to_vector<float>() == std::vector<float>{5, 1, 0, 0, 1, 4});
  (alias * 3).sum().backward();  // through both writes
  CHECK(v.grad->to_vector<float>() == std::vector<float>{3, 3});
  Tensor p = Tensor::zeros({2}, {.requires_grad = true});
  CHECK_THROWS_WITH(p.index_put_({0}, Tensor::ones({})), Contains("index_put_") && Contains("requires grad"));
}
