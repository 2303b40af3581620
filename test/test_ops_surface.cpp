// Issue 40's op surface beyond the seed's: products and scans (prod, cumprod, logcumsumexp, cummax,
// cummin), sort and argsort, the scatter family, masked_select and nonzero, einsum. Each against a
// float64 loop written here, its gradient against finite differences, its bad arguments by name. The
// tags put them in the device suites ([reduce], [movement], [processing]).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "device_scope.hpp"
#include "gradcheck.hpp"
#include "kernel_sources.hpp"
#include "metagrad/jit.hpp"
#include "reference.hpp"

using namespace metagrad;
using namespace metagrad::test;
using Catch::Matchers::Contains;
using i64 = std::int64_t;

namespace {

Tensor tensor_of(const Host& h, DType dt = dtypes::float64) {
  return Tensor(h.v, Dims(h.shape), {.dtype = dt});
}

// f over each row of h along axis (a row: the values at one index of the other axes), in place.
template <class F>
Host along(Host h, i64 axis, F f) {
  std::vector<i64> outer = h.shape;
  i64 n = h.shape[static_cast<std::size_t>(axis)];
  outer[static_cast<std::size_t>(axis)] = 1;
  for_each_index(outer, [&](std::vector<i64> idx) {
    std::vector<double> row;
    for (i64 k = 0; k < n; ++k) idx[static_cast<std::size_t>(axis)] = k, row.push_back(at(h, idx));
    f(row);
    for (i64 k = 0; k < n; ++k)
      idx[static_cast<std::size_t>(axis)] = k, h.v[static_cast<std::size_t>(offset(h.shape, idx))] = row[k];
  });
  return h;
}

// Random values with some zeros and repeats, so products and extremes meet their edge cases.
Host rough(std::vector<i64> shape, std::uint64_t seed) {
  Host h{shape, random_values(numel_of(shape), seed, -1.5, 1.5)};
  for (std::size_t i = 0; i < h.v.size(); ++i) {
    if (i % 7 == 3) h.v[i] = 0;
    if (i % 5 == 1) h.v[i] = std::round(h.v[i]);
  }
  return h;
}

}  // namespace

// ---- products and scans --------------------------------------------------------------------------

TEST_CASE("prod, cumprod, logcumsumexp against loops, every axis, long rows in blocks", "[reduce]") {
  Sampler sample;
  for (std::vector<i64> s : std::vector<std::vector<i64>>{{7}, {3, 5}, {2, 3, 4}, {2, 37}, {1}, {4, 0}}) {
    Host h = rough(s, 7 + s.size());
    for (i64 a = 0; a < i64(s.size()); ++a) {
      if (!sample()) continue;
      INFO("shape " << to_string(Dims(s)) << ", axis " << a);
      Host cp = along(h, a, [](std::vector<double>& r) {
        for (std::size_t i = 1; i < r.size(); ++i) r[i] *= r[i - 1];
      });
      Host lc = along(h, a, [](std::vector<double>& r) {
        double acc = -kInf;
        for (double& x : r)
          acc = std::max(acc, x) + std::log(std::exp(std::min(acc, x) - std::max(acc, x)) + 1), x = acc;
      });
      require_close(tensor_of(h).cumprod(a).to_vector<double>(), cp.v, 1e-12, 1e-12, "cumprod");
      require_close(tensor_of(h).logcumsumexp(a).to_vector<double>(), lc.v, 1e-12, 1e-12, "logcumsumexp");
      Tensor p = tensor_of(h).prod(a, true);
      std::vector<double> want;
      std::vector<i64> ks = s;
      ks[static_cast<std::size_t>(a)] = 1;
      for_each_index(ks, [&](std::vector<i64> idx) {
        double x = 1;
        for (i64 k = 0; k < s[static_cast<std::size_t>(a)]; ++k)
          idx[static_cast<std::size_t>(a)] = k, x *= at(h, idx);
        want.push_back(x);
      });
      REQUIRE(p.shape() == Dims(ks));
      require_close(p.to_vector<double>(), want, 1e-12, 1e-12, "prod");
    }
  }
  Host h{{3, 4, 2}, random_values(24, 5, 0.5, 1.5)};
  double all = 1;
  for (double x : h.v) all *= x;
  CHECK(tensor_of(h).prod().item<double>() == Approx(all).epsilon(1e-12));
  require_close(
      tensor_of(h).prod({0, 2}).to_vector<double>(),
      [&] {
        std::vector<double> w(4, 1);
        for_each_index(h.shape, [&](const std::vector<i64>& i) { w[std::size_t(i[1])] *= at(h, i); });
        return w;
      }(),
      1e-12, 1e-12, "prod over (0, 2)");
  // Integers multiply in int64; the empty product is 1; inf, -inf and NaN pass as in a loop.
  Tensor ints(std::vector<std::int32_t>{3, -2, 1000, 1000, 7}, {5});
  CHECK(ints.prod().dtype() == dtypes::int64);
  CHECK(ints.prod().item<std::int64_t>() == -42000000);
  CHECK(ints.cumprod().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{3, -6, -6000, -6000000, -42000000});
  CHECK(Tensor::zeros({2, 0}).prod(1).to_vector<float>() == std::vector<float>{1, 1});
  require_close(Tensor(std::vector<double>{2, kInf, 0, 3}, {4}).cumprod().to_vector<double>(),
                {2, kInf, kNaN, kNaN});
  require_close(
      Tensor(std::vector<double>{-kInf, -kInf, 1000, -1000, kInf}, {5}).logcumsumexp().to_vector<double>(),
      {-kInf, -kInf, 1000, 1000, kInf});
  CHECK(Tensor(std::vector<double>{2.5}, {}).cumprod().item<double>() == 2.5);
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).cumprod(2), Contains("cumprod") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).logcumsumexp(-3), Contains("logcumsumexp") && Contains("(2, 3)"));
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).prod(4), Contains("prod") && Contains("(2, 3)"));
}

TEST_CASE("prod, cumprod, logcumsumexp: gradients, zeros included", "[reduce]") {
  Tensor z = tensor_of(rough({3, 6}, 41));  // zeros at 3, 10, 17: one row has one, one has two
  for (i64 a : {0, 1}) {
    if (a == 0 && !Sampler{}.all) continue;  // (sampled runs: axis 1 only)
    check_gradients([a](const std::vector<Tensor>& x) { return x[0].cumprod(a); }, {z});
    check_gradients([a](const std::vector<Tensor>& x) { return x[0].prod(a); }, {z});
    check_gradients([a](const std::vector<Tensor>& x) { return x[0].logcumsumexp(a); }, {z});
  }
  check_gradients([](const std::vector<Tensor>& x) { return x[0].cumprod(1); },
                  {random_tensor({2, 20}, 3, 0.8, 1.2)});
  check_gradients([](const std::vector<Tensor>& x) { return x[0].logcumsumexp(0); },
                  {random_tensor({40}, 4, -30, 30)});
}

TEST_CASE("cummax, cummin: values and indices by PyTorch's rule (the last of ties, NaN sticks)", "[reduce]") {
  // The rule, as a loop: an element >= (<=) the running one, or a NaN, takes over; after a NaN only a NaN.
  auto ref = [](const std::vector<double>& r, bool max) {
    std::vector<double> v, i;
    double best = r[0];
    i64 k = 0;
    for (std::size_t j = 0; j < r.size(); ++j) {
      if (std::isnan(r[j]) || (!std::isnan(best) && (max ? r[j] >= best : r[j] <= best)))
        best = r[j], k = i64(j);
      v.push_back(best), i.push_back(double(k));
    }
    return std::pair{v, i};
  };
  std::vector<double> row = {1, 3, 3, 2, 5, 5, -1, kNaN, 7, kNaN, 0};
  auto [mv, mi] = Tensor(row, {11}).cummax(0);
  CHECK(mi.dtype() == dtypes::int64);
  CHECK(mi.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 2, 4, 5, 5, 7, 7, 9, 9});
  require_close(mv.to_vector<double>(), {1, 3, 3, 3, 5, 5, 5, kNaN, kNaN, kNaN, kNaN});
  auto [nv, ni] = Tensor(row, {11}).cummin(0);
  CHECK(ni.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 0, 0, 0, 0, 6, 7, 7, 9, 9});
  for (std::vector<i64> s : std::vector<std::vector<i64>>{{3, 5}, {2, 3, 4}, {2, 33}})
    for (i64 a = 0; a < i64(s.size()); ++a)
      for (bool max : {true, false}) {
        INFO("shape " << to_string(Dims(s)) << ", axis " << a << (max ? " cummax" : " cummin"));
        Host h = rough(s, 90 + a);
        Host wv = along(h, a, [&](std::vector<double>& r) { r = ref(r, max).first; });
        Host wi = along(h, a, [&](std::vector<double>& r) { r = ref(r, max).second; });
        auto [v, i] = max ? tensor_of(h).cummax(a) : tensor_of(h).cummin(a);
        require_close(v.to_vector<double>(), wv.v, 0, 0);
        require_close(i.cast(dtypes::float64).to_vector<double>(), wi.v, 0, 0);
      }
  // Integer tensors keep their dtype; the gradient goes to the element each output took.
  Tensor ints(std::vector<std::int32_t>{4, 1, 4, 9}, {4});
  CHECK(ints.cummin(0).first.dtype() == dtypes::int32);
  CHECK(ints.cummax(0).second.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 2, 3});
  for (i64 a : {0, 1}) {
    check_gradients([a](const std::vector<Tensor>& x) { return x[0].cummax(a).first; },
                    {random_tensor({4, 5}, 8)});
    check_gradients([a](const std::vector<Tensor>& x) { return x[0].cummin(a).first; },
                    {random_tensor({4, 5}, 9)});
  }
  Tensor x(std::vector<double>{2, 1, 2, 3}, {4}, {.requires_grad = true});
  x.cummax(0).first.sum().backward();
  CHECK(x.grad->to_vector<double>() == std::vector<double>{2, 0, 1, 1});  // the tie goes to the later 2
  CHECK(Tensor(std::vector<double>{4}, {}).cummax(0).second.shape() == Dims{});
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).cummax(2), Contains("cummax") && Contains("(2, 3)"));
}

// ---- sort ------------------------------------------------------------------------------------------

TEST_CASE("sort, argsort: stable along any dim, both directions, NaN largest, gradient", "[movement]") {
  for (std::vector<i64> s : std::vector<std::vector<i64>>{{9}, {4, 6}, {3, 2, 5}})
    for (i64 a = 0; a < i64(s.size()); ++a)
      for (bool desc : {false, true}) {
        INFO("shape " << to_string(Dims(s)) << ", dim " << a << (desc ? " descending" : ""));
        Host h = rough(s, 60 + a);
        for (std::size_t i = 0; i < h.v.size(); i += 11) h.v[i] = kNaN;
        auto key = [&](double x, double y) {  // NaN above everything
          if (std::isnan(x) || std::isnan(y))
            return desc ? std::isnan(x) && !std::isnan(y) : !std::isnan(x) && std::isnan(y);
          return desc ? x > y : x < y;
        };
        Host wi = along(h, a, [&](std::vector<double>& r) {
          std::vector<i64> o(r.size());
          std::iota(o.begin(), o.end(), 0);
          std::stable_sort(o.begin(), o.end(),
                           [&](i64 p, i64 q) { return key(r[std::size_t(p)], r[std::size_t(q)]); });
          std::vector<double> out;
          for (i64 k : o) out.push_back(double(k));
          r = out;
        });
        Host wv = along(h, a, [&](std::vector<double>& r) { std::stable_sort(r.begin(), r.end(), key); });
        auto [v, i] = tensor_of(h).sort(a, desc);
        require_close(v.to_vector<double>(), wv.v, 0, 0);
        require_close(i.cast(dtypes::float64).to_vector<double>(), wi.v, 0, 0);
        CHECK(tensor_of(h).argsort(a - i64(s.size()), desc).to_vector<std::int64_t>() ==
              i.to_vector<std::int64_t>());
      }
  for (i64 a : {0, 1})
    check_gradients([a](const std::vector<Tensor>& x) { return x[0].sort(a, a == 1).first; },
                    {random_tensor({3, 4}, 5)});
  CHECK(Tensor(std::vector<std::int32_t>{3, -1, 2}, {3}).sort().first.to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-1, 2, 3});
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).sort(2), Contains("(2, 3)"));
}

// ---- scatter ---------------------------------------------------------------------------------------

namespace {
// PyTorch's scatter family as a loop: slot index[i][j] (dim 0) of self receives src[i][j].
Host scatter_ref(const Host& self, i64 dim, const std::vector<i64>& ishape, const std::vector<i64>& idx,
                 const Host& src, const std::string& reduce, bool include_self) {
  Host out = self;
  std::vector<std::vector<double>> got(self.v.size());
  std::size_t e = 0;
  for_each_index(ishape, [&](std::vector<i64> i) {
    double v = at(src, i);
    i[static_cast<std::size_t>(dim)] = idx[e++];
    got[static_cast<std::size_t>(offset(self.shape, i))].push_back(v);
  });
  for (std::size_t o = 0; o < got.size(); ++o) {
    std::vector<double> g = got[o];
    if (g.empty()) continue;
    if (reduce == "none") {
      out.v[o] = g.back();
      continue;
    }
    if (include_self) g.insert(g.begin(), self.v[o]);
    double r = g[0];
    for (std::size_t k = 1; k < g.size(); ++k)
      r = reduce == "sum" || reduce == "mean" ? r + g[k]
          : reduce == "prod"                  ? r * g[k]
          : reduce == "amax"                  ? std::max(r, g[k])
                                              : std::min(r, g[k]);
    out.v[o] = reduce == "mean" ? r / double(g.size()) : r;
  }
  return out;
}
}  // namespace

TEST_CASE("scatter, scatter_add, scatter_reduce against loops, and their gradients", "[movement]") {
  // self (4, 5); index (3, 4) smaller than src (3, 5) and, off dim, than self; repeated slots.
  for (i64 dim : {0, 1}) {
    Host self = rough({4, 5}, 31), src = rough({3, 5}, 32);
    std::vector<i64> ishape = {3, 4}, idx;
    std::mt19937 rng(40 + dim);
    for (int k = 0; k < 12; ++k) idx.push_back(i64(rng() % (dim == 0 ? 4 : 5)));
    Tensor index(idx, Dims(ishape));
    for (std::string r : {"none", "sum", "prod", "mean", "amax", "amin"})
      for (bool incl : {true, false}) {
        if (r == "none" && !incl) continue;
        INFO("dim " << dim << ", " << r << (incl ? "" : ", include_self = false"));
        Host want = scatter_ref(self, dim, ishape, idx, src, r, incl);
        Tensor got = r == "none" ? tensor_of(self).scatter(dim, index, tensor_of(src))
                                 : tensor_of(self).scatter_reduce(dim, index, tensor_of(src), r, incl);
        require_close(got.to_vector<double>(), want.v, 1e-12, 1e-12);
        if (r == "sum" && incl)
          require_close(tensor_of(self).scatter_add(dim, index, tensor_of(src)).to_vector<double>(), want.v,
                        1e-12, 1e-12);
        if (r == "prod") continue;
        // Distinct values, so that amax and amin have no ties for the finite differences.
        check_gradients(
            [&](const std::vector<Tensor>& x) {
              return r == "none" ? x[0].scatter(dim, index, x[1])
                                 : x[0].scatter_reduce(dim, index, x[1], r, incl);
            },
            {random_tensor({4, 5}, 50), random_tensor({3, 5}, 51)});
      }
  }
  // A value; integers; ties in amax share the gradient.
  Tensor ix(std::vector<i64>{2, 0}, {2});
  CHECK(Tensor::zeros({3}).scatter(0, ix, 1.5).to_vector<float>() == std::vector<float>{1.5, 0, 1.5});
  Tensor iv(std::vector<std::int32_t>{1, 2, 3}, {3});
  CHECK(iv.scatter_add(0, ix, Tensor(std::vector<std::int32_t>{10, 20}, {2})).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{21, 2, 13});
  Tensor a(std::vector<double>{1, 5}, {2}, {.requires_grad = true}),
      b(std::vector<double>{5, 2}, {2}, {.requires_grad = true});
  a.scatter_reduce(0, Tensor(std::vector<i64>{1, 0}, {2}), b, "amax").sum().backward();
  CHECK(a.grad->to_vector<double>() == std::vector<double>{0, 0.5});  // slot 1: a's 5 and b's 5 tie
  CHECK(b.grad->to_vector<double>() == std::vector<double>{0.5, 1});
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(x.scatter(0, Tensor(std::vector<i64>{2}, {1, 1}), Tensor::ones({1, 1})),
                    Contains("scatter") && Contains("(2, 3)") && Contains("out of range"));
  CHECK_THROWS_WITH(x.scatter_add(0, Tensor(std::vector<i64>{0, 1, 1, 0}, {1, 4}), Tensor::ones({1, 4})),
                    Contains("scatter_add") && Contains("(1, 4)"));
  CHECK_THROWS_WITH(x.scatter_reduce(0, Tensor(std::vector<i64>{0}, {1, 1}), Tensor::ones({1, 1}), "median"),
                    Contains("scatter_reduce") && Contains("median"));
  CHECK_THROWS_WITH(x.scatter(0, Tensor::zeros({1, 1}), Tensor::ones({1, 1})), Contains("integer"));
}

TEST_CASE("masked_select and nonzero: data-dependent shapes, in order", "[movement]") {
  Host h = rough({3, 4}, 70);
  Tensor m = tensor_of(h) > 0.2;
  std::vector<double> want;
  std::vector<std::int64_t> coords;
  for_each_index(h.shape, [&](const std::vector<i64>& i) {
    if (at(h, i) > 0.2) want.push_back(at(h, i)), coords.insert(coords.end(), i.begin(), i.end());
  });
  Tensor sel = tensor_of(h).masked_select(m);
  REQUIRE(sel.shape() == Dims{i64(want.size())});
  require_close(sel.to_vector<double>(), want, 0, 0);
  Tensor nz = m.nonzero();
  CHECK(nz.dtype() == dtypes::int64);
  CHECK(nz.shape() == Dims{i64(want.size()), 2});
  CHECK(nz.to_vector<std::int64_t>() == coords);
  // The mask broadcasts (a row mask picks columns of every row); the gradient scatters back.
  Tensor cols = Tensor(std::vector<std::int32_t>{1, 0, 0, 1}, {4}).cast(dtypes::bool_);
  check_gradients([&](const std::vector<Tensor>& x) { return x[0].masked_select(cols); }, {tensor_of(h)});
  CHECK(Tensor::ones({2, 2}).masked_select(Tensor::zeros({2, 2}, {.dtype = dtypes::bool_})).shape() ==
        Dims{0});
  CHECK(Tensor(std::vector<double>{0, kNaN, -0.0, 2}, {4}).nonzero().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{1, 3});
  CHECK(Tensor(std::vector<double>{3}, {}).nonzero().shape() == Dims{1, 0});
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).masked_select(Tensor::ones({2, 3})),
                    Contains("masked_select") && Contains("bool"));
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).masked_select(cols),
                    Contains("masked_select") && Contains("(2, 3)"));
}

// ---- einsum ----------------------------------------------------------------------------------------

namespace {
// einsum by definition: every assignment of the letters, the product of the operands summed into the
// output (letters only, explicit output).
Host einsum_ref(const std::string& eq, const std::vector<Host>& ops) {
  std::size_t arrow = eq.find("->");
  std::vector<std::string> terms(1);
  for (char c : eq.substr(0, arrow))
    if (c == ',')
      terms.emplace_back();
    else
      terms.back().push_back(c);
  std::string out = eq.substr(arrow + 2);
  std::map<char, i64> size;
  for (std::size_t k = 0; k < terms.size(); ++k)
    for (std::size_t i = 0; i < terms[k].size(); ++i) size[terms[k][i]] = ops[k].shape[i];
  std::string letters;
  std::vector<i64> all;
  for (auto [c, n] : size) letters += c, all.push_back(n);
  std::vector<i64> oshape;
  for (char c : out) oshape.push_back(size[c]);
  Host o{oshape, std::vector<double>(std::size_t(numel_of(oshape)), 0)};
  for_each_index(all, [&](const std::vector<i64>& v) {
    auto pick = [&](const std::string& t) {
      std::vector<i64> i;
      for (char c : t) i.push_back(v[letters.find(c)]);
      return i;
    };
    double p = 1;
    for (std::size_t k = 0; k < terms.size(); ++k) p *= at(ops[k], pick(terms[k]));
    o.v[std::size_t(offset(oshape, pick(out)))] += p;
  });
  return o;
}
}  // namespace

TEST_CASE("einsum: any subscripts against the definition, implicit output, diagonals, gradients",
          "[processing]") {
  struct Case {
    std::string eq, explicit_eq;  // as given, and with its output spelled out for the reference
    std::vector<std::vector<i64>> shapes;
  };
  std::vector<Case> cases = {
      {"ij,jk->ik", "ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ij,jk", "ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ji,jk", "ji,jk->ik", {{4, 3}, {4, 5}}},
      {"ij->ji", "ij->ji", {{3, 4}}},
      {"ij", "ij->ij", {{3, 4}}},
      {"ba", "ba->ab", {{3, 4}}},
      {"ii->i", "ii->i", {{4, 4}}},
      {"ii", "ii->", {{4, 4}}},
      {"iij->j", "iij->j", {{3, 3, 2}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"i,i->", "i,i->", {{6}, {6}}},
      {"i,j->ij", "i,j->ij", {{3}, {4}}},
      {"ij,ij->i", "ij,ij->i", {{3, 4}, {3, 4}}},
      {"abc,cd,de->abe", "abc,cd,de->abe", {{2, 3, 4}, {4, 5}, {5, 2}}},
      {"ijk,kji->", "ijk,kji->", {{2, 3, 4}, {4, 3, 2}}},
      {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"ij,kl->", "ij,kl->", {{2, 3}, {3, 2}}},
      {"i,i,i->i", "i,i,i->i", {{5}, {5}, {5}}},
      {"ij,jk->", "ij,jk->", {{0, 4}, {4, 5}}},
  };
  std::uint64_t seed = 200;
  for (const Case& c : cases) {
    INFO(c.eq);
    std::vector<Host> hs;
    std::vector<Tensor> ts;
    for (const auto& s : c.shapes)
      hs.push_back({s, random_values(numel_of(s), seed++)}), ts.push_back(tensor_of(hs.back()));
    Host want = einsum_ref(c.explicit_eq, hs);
    Tensor got = Tensor::einsum(c.eq, ts);
    REQUIRE(got.shape() == Dims(want.shape));
    require_close(got.to_vector<double>(), want.v, 1e-12, 1e-12);
    if (got.numel() > 0 && c.shapes.size() <= 3)
      check_gradients([&](const std::vector<Tensor>& x) { return Tensor::einsum(c.eq, x); }, ts);
  }
  // "..." broadcasts as matmul does; float32 operands stay float32.
  Tensor a = random_tensor({2, 1, 3, 4}, 7).cast(dtypes::float32),
         b = random_tensor({5, 4, 2}, 8).cast(dtypes::float32);
  Tensor e = Tensor::einsum("...ij,...jk->...ik", {a, b}), m = a.matmul(b);
  REQUIRE(e.shape() == m.shape());
  CHECK(e.dtype() == dtypes::float32);
  require_close(e.to_vector<double>(), m.to_vector<double>(), 1e-5, 1e-5);
  require_close(Tensor::einsum("...ij->...ji", {a}).to_vector<double>(),
                a.transpose(-1, -2).to_vector<double>(), 0, 0);
  require_close(Tensor::einsum("i...->...", {b}).to_vector<double>(), b.sum(0).to_vector<double>(), 1e-6,
                1e-6);
  Tensor x = Tensor::ones({2, 3});
  CHECK_THROWS_WITH(Tensor::einsum("ij,jk->ik", {x}),
                    Contains("einsum") && Contains("2 subscripts for 1 operands"));
  CHECK_THROWS_WITH(Tensor::einsum("ijk->i", {x}),
                    Contains("einsum") && Contains("(2, 3)") && Contains("rank 2"));
  CHECK_THROWS_WITH(Tensor::einsum("ij,jk->ik", {x, x}), Contains("einsum") && Contains("sizes 3 and 2"));
  CHECK_THROWS_WITH(Tensor::einsum("ij->iz", {x}), Contains("'z' is in no input"));
  CHECK_THROWS_WITH(Tensor::einsum("ii->i", {x}), Contains("sizes 2 and 3"));
  CHECK_THROWS_WITH(Tensor::einsum("i1->i", {x}), Contains("'1' is not a letter"));
}

TEST_CASE("einsum: a contraction is one GEMM on the host devices", "[gemm]") {
  for (const char* dev : {"CLANG", "LLVM"}) {
    if (!available(dev)) continue;
    Tensor a = Tensor::rand({4, 64, 48}).to(dev), b = Tensor::rand({4, 40, 48}).to(dev);
    for (const char* eq : {"bij,bkj->bik", "bij,bkj->bki", "bij,bkj->ik"}) {
      INFO(dev << " " << eq);
      Tensor got = Tensor::einsum(eq, {a, b});
      std::vector<std::string> src = kernel_sources(got);
      bool gemm = false;
      for (const auto& s : src) gemm |= s.rfind("// gemm_", 0) == 0;
      CHECK(gemm);
    }
  }
}

// ---- padding modes and interpolation ---------------------------------------------------------------

TEST_CASE("pad modes reflect, replicate, circular against index maps, and gradients", "[movement]") {
  // Where output index o of an axis of size n padded by b in front reads from.
  auto source = [](const std::string& mode, i64 o, i64 b, i64 n) {
    i64 j = o - b;
    if (j < 0) return mode == "reflect" ? -j : mode == "replicate" ? 0 : j + n;
    if (j >= n) return mode == "reflect" ? 2 * (n - 1) - j : mode == "replicate" ? n - 1 : j - n;
    return j;
  };
  Host h = rough({3, 4, 5}, 80);
  std::vector<std::pair<i64, i64>> p = {{0, 2}, {3, 1}, {2, 4}};
  for (std::string mode : {"reflect", "replicate", "circular"}) {
    INFO(mode);
    const std::vector<std::pair<i64, i64>>& q = p;  // each pad below its axis: reflect's limit
    std::vector<i64> os;
    for (std::size_t d = 0; d < 3; ++d) os.push_back(h.shape[d] + q[d].first + q[d].second);
    Host want = gather(os, [&](const std::vector<i64>& o) {
      std::vector<i64> i(3);
      for (std::size_t d = 0; d < 3; ++d) i[d] = source(mode, o[d], q[d].first, h.shape[d]);
      return at(h, i);
    });
    Tensor got = tensor_of(h).pad(q, mode);
    REQUIRE(got.shape() == Dims(os));
    require_close(got.to_vector<double>(), want.v, 0, 0);
    check_gradients(
        [&](const std::vector<Tensor>& x) {
          return x[0].pad({{1, 0}, {0, 2}}, mode);
        },
        {random_tensor({2, 3}, 81)});
  }
  Tensor x = Tensor::ones({2, 3});
  CHECK(x.pad({{1, 1}, {0, 0}}, "constant").to_vector<float>() ==
        Tensor::ones({2, 3}).pad({{1, 1}, {0, 0}}).to_vector<float>());
  CHECK_THROWS_WITH(x.pad({{2, 0}, {0, 0}}, "reflect"), Contains("(2, 3)") && Contains("reflect"));
  CHECK_THROWS_WITH(x.pad({{0, 0}, {0, 4}}, "circular"), Contains("(2, 3)") && Contains("circular"));
  CHECK_THROWS_WITH(x.pad({{0, 0}, {0, 1}}, "mirror"), Contains("mode must be"));
  CHECK_THROWS_WITH(x.pad({{0, 1}}, "replicate"), Contains("one (before, after) per dimension"));
}

TEST_CASE("interpolate: nearest and (bi)linear, align_corners, PyTorch's values, gradients", "[processing]") {
  Tensor sq(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});
  require_close(sq.interpolate({4, 4}, "bilinear").to_vector<double>(),
                {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}, 1e-12, 0);
  require_close(sq.interpolate({3, 3}, "bilinear", true).to_vector<double>(),
                {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}, 1e-12, 0);
  require_close(sq.interpolate({3, 4}).to_vector<double>(), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4}, 0, 0);
  Tensor line(std::vector<double>{0, 10}, {1, 1, 2});
  require_close(line.interpolate({5}, "linear").to_vector<double>(), {0, 1, 5, 9, 10}, 1e-12, 0);
  require_close(line.interpolate({5}, "linear", true).to_vector<double>(), {0, 2.5, 5, 7.5, 10}, 1e-12, 0);
  Tensor five(std::vector<double>{0, 1, 2, 3, 4}, {1, 1, 5});
  require_close(five.interpolate({2}).to_vector<double>(), {0, 2}, 0, 0);
  require_close(five.interpolate({2}, "linear").to_vector<double>(), {0.75, 3.25}, 1e-12, 0);
  // A loop for a larger case: every output pixel from the four around its source point.
  Host h = rough({2, 3, 4, 5}, 90);
  for (bool ac : {false, true}) {
    INFO("align_corners " << ac);
    auto src = [&](i64 i, i64 in, i64 out) {
      return ac ? double(i) * double(in - 1) / double(out - 1)
                : std::max((i + 0.5) * double(in) / double(out) - 0.5, 0.0);
    };
    Host want = gather({2, 3, 7, 3}, [&](const std::vector<i64>& o) {
      double y = src(o[2], 4, 7), x = src(o[3], 5, 3);
      i64 y0 = i64(y), x0 = i64(x), y1 = std::min<i64>(y0 + 1, 3), x1 = std::min<i64>(x0 + 1, 4);
      double wy = y - double(y0), wx = x - double(x0);
      auto v = [&](i64 a, i64 b) { return at(h, {o[0], o[1], a, b}); };
      return (1 - wy) * ((1 - wx) * v(y0, x0) + wx * v(y0, x1)) +
             wy * ((1 - wx) * v(y1, x0) + wx * v(y1, x1));
    });
    require_close(tensor_of(h).interpolate({7, 3}, "bilinear", ac).to_vector<double>(), want.v, 1e-12, 1e-12);
    check_gradients(
        [ac](const std::vector<Tensor>& x) {
          return x[0].interpolate({5, 3}, "bilinear", ac);
        },
        {random_tensor({1, 2, 3, 4}, 91)});
  }
  check_gradients(
      [](const std::vector<Tensor>& x) {
        return x[0].interpolate({3, 7});
      },
      {random_tensor({1, 1, 2, 4}, 92)});
  CHECK(Tensor::ones({1, 1, 2, 2}, {.dtype = dtypes::int32}).interpolate({3, 3}).dtype() == dtypes::int32);
  CHECK_THROWS_WITH(sq.interpolate({4}), Contains("interpolate") && Contains("(1, 1, 2, 2)"));
  CHECK_THROWS_WITH(sq.interpolate({4, 4}, "linear"), Contains("bilinear for 4-D"));
  CHECK_THROWS_WITH(sq.interpolate({4, 4}, "cubic"), Contains("mode must be"));
  CHECK_THROWS_WITH(sq.interpolate({4, 0}), Contains("positive"));
}

// ---- rounding division, remainders, bitwise ------------------------------------------------------

TEST_CASE("div with rounding modes, fmod, remainder: floats against std::, integers exact", "[math]") {
  std::vector<double> x = random_values(40, 11, -9, 9), y = random_values(40, 12, -3, 3);
  x.insert(x.end(), {7, -7, 7, -7, 0, -0.0, 5.5, 1});
  y.insert(y.end(), {2, 2, -2, -2, 3, 3, 0, 0});
  auto n = static_cast<i64>(x.size());
  Tensor tx(x, {n}), ty(y, {n});
  auto ref = [&](auto f) {
    std::vector<double> o;
    for (std::size_t i = 0; i < x.size(); ++i) o.push_back(f(x[i], y[i]));
    return o;
  };
  auto py_mod = [](double a, double b) {  // Python's: the sign of b
    double r = a - std::floor(a / b) * b;
    return r;
  };
  require_close(tx.div(ty, "trunc").to_vector<double>(),
                ref([](double a, double b) { return std::trunc(a / b); }), 0, 0);
  require_close(tx.div(ty, "floor").to_vector<double>(),
                ref([](double a, double b) { return std::floor(a / b); }), 0, 0);
  require_close(tx.floor_divide(ty).to_vector<double>(),
                ref([](double a, double b) { return std::floor(a / b); }), 0, 0);
  require_close(tx.fmod(ty).to_vector<double>(), ref([](double a, double b) { return std::fmod(a, b); }),
                1e-12, 1e-12);
  require_close((tx % ty).to_vector<double>(), ref(py_mod), 1e-12, 1e-12);
  std::vector<double> signs = (tx % ty).to_vector<double>();
  for (std::size_t i = 0; i + 2 < x.size(); ++i)
    if (signs[i] != 0) CHECK(std::signbit(signs[i]) == std::signbit(y[i]));
  check_gradients([](const std::vector<Tensor>& v) { return v[0].fmod(v[1]); },
                  {random_tensor({2, 3}, 13, 1, 5), random_tensor({2, 3}, 14, 0.7, 1.3)});
  check_gradients([](const std::vector<Tensor>& v) { return v[0].remainder(v[1]); },
                  {random_tensor({2, 3}, 15, -5, 5), random_tensor({2, 3}, 16, 0.7, 1.3)});
  // float32 exactly as C's fmod (and Python's % from it), quotients up to 1e8 included; an infinite y.
  std::vector<float> fx, fy;
  for (double v : random_values(300, 17, -1, 1)) fx.push_back(float(v * std::pow(10, 1 + std::abs(v) * 7)));
  for (double v : random_values(300, 18, -1, 1)) fy.push_back(float(v * 3));
  fx.insert(fx.end(), {1, -1, 5, 2.5f, -0.3f}),
      fy.insert(fy.end(), {float(kInf), float(kInf), float(-kInf), 0.1f, 0.1f});
  std::vector<float> gm = Tensor(fx, {305}).fmod(Tensor(fy, {305})).to_vector<float>(),
                     gr = (Tensor(fx, {305}) % Tensor(fy, {305})).to_vector<float>();
  // Floor division agrees with % (PyTorch's, Python's): the floor of the exact quotient (long double
  // holds a float32 quotient's distance to the next integer), 1.0f // 0.1f = 9 where floor(1.0f / 0.1f) = 10.
  std::vector<float> gq = Tensor(fx, {305}).floor_divide(Tensor(fy, {305})).to_vector<float>();
  for (std::size_t i = 0; i < fx.size(); ++i) {
    INFO(fx[i] << " // " << fy[i]);
    if (std::isinf(fy[i]))  // Python's: x // inf is 0 or -1, as % makes x or inf (-1 // inf is -1)
      CHECK(gq[i] == ((fx[i] < 0) != (fy[i] < 0) ? -1 : 0));
    else
      CHECK(gq[i] == float(std::floor(static_cast<long double>(fx[i]) / fy[i])));
  }
  CHECK(
      Tensor(std::vector<float>{1}, {1}).floor_divide(Tensor(std::vector<float>{0.1f}, {1})).item<float>() ==
      9);
  Tensor gx(std::vector<double>{7, -3}, {2}, {.requires_grad = true}),
      gy(std::vector<double>{2, 0}, {2}, {.requires_grad = true});
  (gx.div(gy, "floor") * Tensor(std::vector<double>{1, 0}, {2})).sum().backward();
  CHECK(gx.grad->to_vector<double>() == std::vector<double>{0, 0});  // 0, as PyTorch's, also beside -3 // 0
  CHECK(gy.grad->to_vector<double>() == std::vector<double>{0, 0});
  CHECK(Tensor(std::vector<float>{1, -1, 0}, {3}).div(Tensor::zeros({3}), "floor").to_vector<float>()[0] ==
        INFINITY);
  for (std::size_t i = 0; i < fx.size(); ++i) {
    float m = std::fmod(fx[i], fy[i]), r = m != 0 && (m < 0) != (fy[i] < 0) ? m + fy[i] : m;
    INFO(fx[i] << " fmod " << fy[i] << " = " << gm[i] << ", want " << m << "; % " << gr[i] << ", want " << r);
    CHECK(gm[i] == m);
    CHECK(gr[i] == r);
  }
  // Integers: int32 stays int32, C's truncation for trunc and fmod, Python's floor for floor and %.
  std::vector<std::int32_t> a = {7, -7, 7, -7, 0, 9, -9, 2147483647, -2147483647 - 1, -2147483647 - 1, 5},
                            b = {2, 2, -2, -2, 5, 3, -3, 10, 7, -1, 1};
  Tensor ia(a, {11}), ib(b, {11});
  auto iref = [&](auto f) {
    std::vector<std::int32_t> o;
    for (std::size_t i = 0; i < a.size(); ++i) o.push_back(f(std::int64_t(a[i]), std::int64_t(b[i])));
    return o;
  };
  auto fdiv = [](std::int64_t p, std::int64_t q) { return std::int32_t(std::floor(double(p) / double(q))); };
  CHECK(ia.div(ib, "trunc").dtype() == dtypes::int32);
  CHECK(ia.div(ib, "trunc").to_vector<std::int32_t>() ==
        iref([](std::int64_t p, std::int64_t q) { return std::int32_t(p / q); }));
  CHECK(ia.div(ib, "floor").to_vector<std::int32_t>() == iref(fdiv));
  CHECK(ia.fmod(ib).to_vector<std::int32_t>() ==
        iref([](std::int64_t p, std::int64_t q) { return std::int32_t(p % q); }));
  CHECK((ia % ib).to_vector<std::int32_t>() ==
        iref([&](std::int64_t p, std::int64_t q) { return std::int32_t(p - std::int64_t(fdiv(p, q)) * q); }));
  CHECK((ia % 3).dtype() == dtypes::int32);
  CHECK((ia % 2.5).dtype() == dtypes::float32);
  CHECK_THROWS_WITH(ia.div(Tensor::zeros({11}, {.dtype = dtypes::int32}), "floor"),
                    Contains("div") && Contains("division by zero") && Contains("(11,)"));
  CHECK_THROWS_WITH(ia % 0, Contains("remainder") && Contains("division by zero"));
  CHECK_THROWS_WITH(tx.div(ty, "round"), Contains("rounding_mode"));
}

TEST_CASE("bitwise and, or, xor, not, shifts on integer dtypes; errors on float", "[math]") {
  std::vector<std::int32_t> a = {0, 1, -1, 12, -12, 255, 0x7fffffff, -2147483647 - 1},
                            b = {3, 5, 7, 10, 6, 1, 2, 1};
  Tensor ia(a, {8}), ib(b, {8});
  auto ref = [&](auto f) {
    std::vector<std::int32_t> o;
    for (std::size_t i = 0; i < a.size(); ++i) o.push_back(std::int32_t(f(a[i], b[i])));
    return o;
  };
  CHECK((ia & ib).to_vector<std::int32_t>() == ref([](std::int32_t p, std::int32_t q) { return p & q; }));
  CHECK((ia | ib).to_vector<std::int32_t>() == ref([](std::int32_t p, std::int32_t q) { return p | q; }));
  CHECK((ia ^ ib).to_vector<std::int32_t>() == ref([](std::int32_t p, std::int32_t q) { return p ^ q; }));
  CHECK((~ia).to_vector<std::int32_t>() == ref([](std::int32_t p, std::int32_t) { return ~p; }));
  CHECK((ia << ib).to_vector<std::int32_t>() ==
        ref([](std::int32_t p, std::int32_t q) { return std::int32_t(std::uint32_t(p) << q); }));  // wraps
  CHECK((ia >> ib).to_vector<std::int32_t>() == ref([](std::int32_t p, std::int32_t q) { return p >> q; }));
  CHECK((ia & 6).dtype() == dtypes::int32);
  CHECK((ia & 6).to_vector<std::int32_t>() == ref([](std::int32_t p, std::int32_t) { return p & 6; }));
  // uint8 shifts right logically and wraps left; bool ops are logical; broadcasting.
  Tensor u(std::vector<std::uint8_t>{200, 3}, {2});
  CHECK((u >> 1).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{100, 1});
  CHECK(u.lshift(Tensor(std::vector<std::uint8_t>{1}, {1})).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{144, 6});
  Tensor t = Tensor(std::vector<std::int32_t>{1, 1, 0, 0}, {4}).cast(dtypes::bool_),
         f = Tensor(std::vector<std::int32_t>{1, 0, 1, 0}, {4}).cast(dtypes::bool_);
  CHECK((t & f).dtype() == dtypes::bool_);
  CHECK((t & f).cast(dtypes::int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0, 0, 0});
  CHECK((t | f).cast(dtypes::int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 1, 1, 0});
  CHECK((t ^ f).cast(dtypes::int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 1, 0});
  CHECK((~t).cast(dtypes::int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 1, 1});
  Tensor col(std::vector<std::int64_t>{1, 2}, {2, 1});
  CHECK((col | Tensor(std::vector<std::int64_t>{4, 8, 16}, {3})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{5, 9, 17, 6, 10, 18});
  CHECK_THROWS_WITH(Tensor::ones({2}) & Tensor::ones({2}),
                    Contains("bitwise_and") && Contains("float32 (2,)"));
  CHECK_THROWS_WITH(~Tensor::ones({2}), Contains("bitwise_not") && Contains("float32"));
  CHECK_THROWS_WITH(ia << 32, Contains("lshift") && Contains("shift by 32"));
  CHECK_THROWS_WITH(ia >> -1, Contains("rshift") && Contains("shift by -1"));
}

TEST_CASE("host-computed ops refuse a TinyJit capture, naming themselves", "[jit]") {
  Tensor x = Tensor::rand({2, 3}), i = Tensor(std::vector<std::int32_t>{1, 2, 0, 1}, {2, 2});
  struct Capture {
    CaptureLog log;
    Capture() { CaptureLog::active = &log; }
    ~Capture() { CaptureLog::active = nullptr; }
  } capture;
  CHECK_THROWS_WITH(x.sort(), Contains("sort") && Contains("TinyJit"));
  CHECK_THROWS_WITH(x.argsort(), Contains("sort") && Contains("TinyJit"));
  CHECK_THROWS_WITH(x.cummax(1), Contains("cummax") && Contains("TinyJit"));
  CHECK_THROWS_WITH(x.scatter_add(1, Tensor::zeros({2, 2}, {.dtype = dtypes::int64}), x),
                    Contains("scatter_add") && Contains("TinyJit"));
  CHECK_THROWS_WITH(x.masked_select(x > 0.5), Contains("masked_select") && Contains("TinyJit"));
  CHECK_THROWS_WITH(x.nonzero(), Contains("nonzero") && Contains("TinyJit"));
  CHECK_THROWS_WITH(i & i, Contains("bitwise_and") && Contains("TinyJit"));
  CHECK_THROWS_WITH(i % i, Contains("remainder") && Contains("TinyJit"));
}

// ---- isclose, allclose, unfold, normalize, sum and mean with a dtype -----------------------------

TEST_CASE("isclose and allclose: PyTorch's rule over random cases with infinities and NaN", "[math]") {
  std::mt19937_64 gen(4300);
  const std::vector<double> special{kInf, -kInf, kNaN, 0.0, -0.0, 1.0};
  auto draw = [&](i64 n, const std::vector<double>& partner) {
    std::vector<double> v = random_values(n, gen(), -3, 3);
    std::uniform_int_distribution<int> kind(0, 5);
    for (std::size_t i = 0; i < v.size(); ++i) {
      int k = kind(gen);
      if (k == 0) v[i] = special[static_cast<std::size_t>(gen() % special.size())];
      if (!partner.empty() && k == 1) v[i] = partner[i % partner.size()];                       // equal
      if (!partner.empty() && k == 2) v[i] = partner[i % partner.size()] * (1 + 3e-6);          // near
      if (!partner.empty() && k == 3) v[i] = partner[i % partner.size()] + 2e-8 * (gen() % 3);  // atol
    }
    return v;
  };
  int cases = 0;
  for (auto [rtol, atol] : std::vector<std::pair<double, double>>{{1e-5, 1e-8}, {0, 0}, {1e-3, 0}, {0, 1e-7}})
    for (bool equal_nan : {false, true}) {
      std::vector<double> bv = draw(4, {}), av = draw(12, bv);
      Tensor a(av, {3, 4}), b(bv, {4});
      std::vector<double> want;
      for (std::size_t i = 0; i < av.size(); ++i) {
        double x = av[i], y = bv[i % 4], e = std::abs(x - y);
        bool close = x == y || (equal_nan && std::isnan(x) && std::isnan(y)) ||
                     (std::isfinite(e) && e <= atol + rtol * std::abs(y));
        want.push_back(close);
      }
      INFO("rtol " << rtol << " atol " << atol << " equal_nan " << equal_nan);
      Tensor got = a.isclose(b, rtol, atol, equal_nan);
      REQUIRE(got.dtype() == dtypes::bool_);
      REQUIRE(got.shape() == Dims{3, 4});
      require_close(got.to_vector<double>(), want, 0, 0);
      bool all = std::all_of(want.begin(), want.end(), [](double c) { return c != 0; });
      REQUIRE(a.allclose(b, rtol, atol, equal_nan) == all);
      ++cases;
    }
  REQUIRE(cases == 8);
  // Fixed points: 1 is not close to inf, inf is close to inf, NaN only with equal_nan; the default
  // tolerances, float32 against float64.
  Tensor x(std::vector<double>{1, kInf, -kInf, kNaN, 1e-9, 100}, {6});
  Tensor y(std::vector<double>{kInf, kInf, kInf, kNaN, 0, 100.0009}, {6});
  require_close(x.isclose(y).to_vector<double>(), {0, 1, 0, 0, 1, 1}, 0, 0);
  require_close(x.isclose(y, 1e-5, 1e-8, true).to_vector<double>(), {0, 1, 0, 1, 1, 1}, 0, 0);
  REQUIRE(x.cast(dtypes::float32).isclose(y).dtype() == dtypes::bool_);
  REQUIRE(Tensor({1.0f, 2.0f}).allclose(Tensor(std::vector<double>{1.000001, 2}, {2})));
  REQUIRE_FALSE(Tensor({1.0f, 2.0f}).allclose(Tensor({1.1f, 2.0f})));
  // Integers: the error |a - b| against atol + rtol |b|.
  Tensor ia(std::vector<std::int32_t>{5, 7, -3, 100}, {4}), ib(std::vector<std::int32_t>{5, 8, -5, 101}, {4});
  require_close(ia.isclose(ib).to_vector<double>(), {1, 0, 0, 0}, 0, 0);
  require_close(ia.isclose(ib, 0, 1).to_vector<double>(), {1, 1, 0, 1}, 0, 0);
  REQUIRE_THROWS_WITH(x.isclose(Tensor::ones({4})), Contains("isclose of (6,) and (4,)"));
  REQUIRE_THROWS_WITH(x.isclose(y, -1), Contains("isclose") && Contains("rtol"));
}

TEST_CASE("unfold: PyTorch's windows along any dim against loops, and its gradient", "[movement]") {
  struct Case {
    std::vector<i64> shape;
    i64 dim, size, step;
  };
  const std::vector<Case> cases{{{7}, 0, 2, 1},        {{7}, 0, 3, 3},       {{7}, -1, 2, 4},
                                {{3, 8}, 1, 3, 2},     {{8, 3}, 0, 4, 1},    {{2, 5, 3}, 1, 5, 1},
                                {{2, 6, 3}, -2, 1, 2}, {{4, 2, 5}, 2, 2, 3}, {{4, 2, 5}, 0, 3, 1}};
  for (const Case& c : cases) {
    INFO("shape " << to_string(Dims(c.shape)) << " dim " << c.dim << " size " << c.size << " step "
                  << c.step);
    Host h{c.shape,
           random_values(numel_of(c.shape), 4400 + static_cast<std::uint64_t>(c.dim + c.size), -2, 2)};
    i64 d = c.dim < 0 ? c.dim + static_cast<i64>(c.shape.size()) : c.dim;
    std::vector<i64> out = c.shape;
    out[static_cast<std::size_t>(d)] = (c.shape[static_cast<std::size_t>(d)] - c.size) / c.step + 1;
    out.push_back(c.size);
    std::vector<double> want;
    for_each_index(out, [&](const std::vector<i64>& idx) {
      std::vector<i64> src(idx.begin(), idx.end() - 1);
      src[static_cast<std::size_t>(d)] = idx[static_cast<std::size_t>(d)] * c.step + idx.back();
      want.push_back(at(h, src));
    });
    Tensor got = tensor_of(h).unfold(c.dim, c.size, c.step);
    REQUIRE(got.shape() == Dims(out));
    require_close(got.to_vector<double>(), want, 0, 0);
  }
  check_gradients([](const std::vector<Tensor>& t) { return t[0].unfold(1, 3, 2); },
                  {random_tensor({2, 7}, 4450)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].unfold(0, 2, 1); },
                  {random_tensor({5, 2}, 4451)});
  Tensor x = Tensor::ones({3, 4});
  REQUIRE_THROWS_WITH(x.unfold(2, 2, 1), Contains("unfold of shape (3, 4)") && Contains("dim 2"));
  REQUIRE_THROWS_WITH(x.unfold(1, 5, 1), Contains("unfold of shape (3, 4)") && Contains("size 5"));
  REQUIRE_THROWS_WITH(x.unfold(1, 2, 0), Contains("unfold of shape (3, 4)") && Contains("step"));
}

TEST_CASE("normalize: p-norms along a dim against loops, eps, zero vectors, gradients", "[processing]") {
  Host h = rough({3, 4, 2}, 4500);
  for (i64 k = 0; k < 4; ++k) h.v[static_cast<std::size_t>(offset(h.shape, {1, k, 0}))] = 0;  // a zero slice
  for (double p : {1.0, 2.0, 3.0, 0.5, kInf})
    for (i64 dim : {1, 0, -1}) {
      INFO("p " << p << " dim " << dim);
      i64 d = dim < 0 ? dim + 3 : dim;
      Host want = along(h, d, [&](std::vector<double>& row) {
        double norm = 0;
        for (double v : row)
          norm = std::isinf(p) ? std::max(norm, std::abs(v)) : norm + std::pow(std::abs(v), p);
        if (!std::isinf(p)) norm = std::pow(norm, 1 / p);
        for (double& v : row) v /= std::max(norm, 1e-12);
      });
      require_close(tensor_of(h).normalize(p, dim).to_vector<double>(), want.v, 1e-12, 1e-10);
    }
  REQUIRE(tensor_of(h).normalize().shape() == Dims{3, 4, 2});
  // A large eps: every slice whose norm is below it is divided by eps instead.
  require_close(Tensor({{3.0f, 4.0f}, {0.3f, 0.4f}}).normalize(2, 1, 1).to_vector<double>(),
                {0.6, 0.8, 0.3, 0.4}, 1e-6, 1e-6);
  for (double p : {2.0, 1.0, 3.0, kInf}) {
    INFO("p " << p);
    check_gradients([p](const std::vector<Tensor>& t) { return t[0].normalize(p, 1); },
                    {random_tensor({2, 3}, 4501, 0.2, 2)});
  }
  // At a zero vector the gradient is finite (1/eps), not 0 * inf.
  Tensor z = Tensor::zeros({2, 3}, {.dtype = dtypes::float64, .requires_grad = true});
  z.normalize(2, 1).sum().backward();
  for (double g : z.grad->to_vector<double>()) REQUIRE(std::isfinite(g));
  REQUIRE_THROWS_WITH(Tensor::ones({2, 3}).normalize(std::nan("")),
                      Contains("normalize of shape (2, 3)") && Contains("p is NaN"));
  REQUIRE_THROWS_WITH(Tensor::ones({2, 3}).normalize(2, 2),
                      Contains("normalize of shape (2, 3)") && Contains("dim 2"));
}

TEST_CASE("integer min over some axes keeps the reduced shape", "[reduce]") {
  // It went through int64 and a select with a constant of the input's rank, which broadcast the
  // result back to that rank: (1, 2, 1, 2).min(-1) was (1, 1, 2, 1).
  Tensor x(std::vector<std::int32_t>{4, -3, 7, 2}, {1, 2, 1, 2});
  for (DType dt : {dtypes::int32, dtypes::int64, dtypes::int8}) {
    INFO(dt.name);
    Tensor m = x.cast(dt).min(-1);
    REQUIRE(m.shape() == Dims{1, 2, 1});
    require_close(m.to_vector<double>(), {-3, 2}, 0, 0);
    REQUIRE(x.cast(dt).min().shape() == Dims{});
    REQUIRE(x.cast(dt).min().item<double>() == -3);
    REQUIRE(x.cast(dt).min({1, 3}, true).shape() == Dims{1, 1, 1, 1});
  }
}

TEST_CASE("sum and mean with an output dtype", "[reduce]") {
  Tensor i(std::vector<std::int32_t>{2000000000, 2000000000, -7, 5}, {2, 2});
  REQUIRE(i.sum().dtype() == dtypes::int64);  // the default accumulates in int64
  REQUIRE(i.sum().item<std::int64_t>() == 3999999998);
  Tensor s8 = Tensor(std::vector<std::int8_t>{100, 27, -100, -28}, {2, 2}).sum(1, false, dtypes::int32);
  REQUIRE(s8.dtype() == dtypes::int32);  // int8 summed in int32: no int64, no int8 wrap
  require_close(s8.to_vector<double>(), {127, -128}, 0, 0);
  Tensor f = random_tensor({3, 5}, 4600).cast(dtypes::float32);
  std::vector<double> fv = f.to_vector<double>(), want(3, 0);
  for (std::size_t k = 0; k < fv.size(); ++k) want[k / 5] += fv[k];
  Tensor s64 = f.sum(1, true, dtypes::float64);
  REQUIRE(s64.dtype() == dtypes::float64);
  REQUIRE(s64.shape() == Dims{3, 1});
  require_close(s64.to_vector<double>(), want, 1e-13, 1e-13);
  Tensor b = Tensor({1, 0, 1, 1}) > 0;
  REQUIRE(b.sum(AllAxes, false, dtypes::int32).dtype() == dtypes::int32);
  REQUIRE(b.sum(AllAxes, false, dtypes::int32).item<std::int32_t>() == 3);
  Tensor m = i.mean(0, false, dtypes::float64);
  REQUIRE(m.dtype() == dtypes::float64);
  require_close(m.to_vector<double>(), {(2000000000.0 - 7) / 2, (2000000000.0 + 5) / 2}, 0, 0);
  for (std::size_t k = 0; k < 3; ++k) want[k] /= 5;
  require_close(f.mean(1, false, dtypes::float64).to_vector<double>(), want, 1e-13, 1e-13);
  // Differentiable through the cast.
  check_gradients([](const std::vector<Tensor>& t) { return t[0].sum(0, false, dtypes::float64) * 2; },
                  {random_tensor({3, 2}, 4601)});
  REQUIRE_THROWS_WITH(i.mean(0, false, dtypes::int32), Contains("mean of (2, 2)") && Contains("int32"));
}

// ---- var_mean, std_mean ----------------------------------------------------------------------------

TEST_CASE("var_mean and std_mean: PyTorch's pairs with correction, against loops, gradients", "[reduce]") {
  Host h = rough({3, 4, 2}, 80);
  Sampler sample;  // a third of the cases on PoCL (gradcheck.hpp)
  const std::vector<std::vector<i64>> axis_sets{{0, 1, 2}, {1}, {0, 2}, {2}};
  for (std::size_t s = 0; s < axis_sets.size(); ++s)
    for (i64 correction : {0, 1, 2})
      for (bool keepdim : {false, true}) {
        if (!sample()) continue;
        const std::vector<i64>& ax = axis_sets[s];
        INFO("axes set " << s << ", correction " << correction << (keepdim ? ", keepdim" : ""));
        // float64 loops: each element's group is its index with the reduced axes at 0
        std::vector<i64> kept = h.shape;
        for (i64 a : ax) kept[std::size_t(a)] = 1;
        std::vector<double> sum(std::size_t(numel_of(kept))), sq(sum.size());
        i64 n = numel_of(h.shape) / numel_of(kept);
        auto group = [&](std::vector<i64> i) {
          for (i64 a : ax) i[std::size_t(a)] = 0;
          return std::size_t(offset(kept, i));
        };
        for_each_index(h.shape, [&](const std::vector<i64>& i) { sum[group(i)] += at(h, i); });
        for (double& v : sum) v /= double(n);
        for_each_index(h.shape, [&](const std::vector<i64>& i) {
          double d = at(h, i) - sum[group(i)];
          sq[group(i)] += d * d;
        });
        std::vector<double> var, sd;
        for (double q : sq) var.push_back(q / double(n - correction)), sd.push_back(std::sqrt(var.back()));
        Axes axes = s == 0 ? Axes(AllAxes) : Axes(ax);
        auto [v, m] = tensor_of(h).var_mean(axes, keepdim, correction);
        auto [d, m2] = tensor_of(h).std_mean(axes, keepdim, correction);
        Tensor want_shape = tensor_of(h).sum(axes, keepdim);
        CHECK(v.shape() == want_shape.shape());
        CHECK(m.shape() == want_shape.shape());
        CHECK(d.shape() == want_shape.shape());
        require_close(v.to_vector<double>(), var, 1e-12, 1e-12);
        require_close(d.to_vector<double>(), sd, 1e-12, 1e-12);
        require_close(m.to_vector<double>(), sum, 1e-12, 1e-12);
        require_close(m2.to_vector<double>(), sum, 1e-12, 1e-12);
      }
  for (bool use_std : {false, true})
    check_gradients(
        [&](const std::vector<Tensor>& x) {
          auto [a, b] = use_std ? x[0].std_mean({0, 2}, false, 0) : x[0].var_mean({0, 2}, false, 0);
          return Tensor::stack({a, b});
        },
        {random_tensor({3, 4, 2}, 81)});
  CHECK_THROWS_WITH(Tensor::ones({2, 3}).var_mean(2), Contains("var_mean") && Contains("(2, 3)"));
}

// ---- bitcast ---------------------------------------------------------------------------------------

TEST_CASE("bitcast: the same bytes as another dtype of the same size, against bit patterns", "[math]") {
  std::vector<float> f{1.0f, -0.0f, INFINITY, 0.5f, -2.75f, 1e-45f};
  Tensor ft(f, {2, 3});
  std::vector<std::int32_t> bits;
  for (float x : f) bits.push_back(std::bit_cast<std::int32_t>(x));
  CHECK(bits[0] == 0x3f800000);
  Tensor it = ft.bitcast(dtypes::int32);
  CHECK(it.dtype() == dtypes::int32);
  CHECK(it.shape() == Dims{2, 3});
  CHECK(it.to_vector<std::int32_t>() == bits);
  std::vector<float> back = it.bitcast(dtypes::float32).to_vector<float>();
  for (std::size_t i = 0; i < f.size(); ++i) CHECK(std::bit_cast<std::int32_t>(back[i]) == bits[i]);
  // A view is read in its own (logical) order; the input's producer fuses as usual.
  std::vector<std::int32_t> tb;
  for (std::size_t c = 0; c < 3; ++c)
    for (std::size_t r = 0; r < 2; ++r) tb.push_back(std::bit_cast<std::int32_t>(f[r * 3 + c] * 2));
  CHECK((ft * 2).transpose().bitcast(dtypes::int32).to_vector<std::int32_t>() == tb);
  std::vector<double> d{1.0, -3.5, -0.0};
  std::vector<std::int64_t> dbits;
  for (double x : d) dbits.push_back(std::bit_cast<std::int64_t>(x));
  CHECK(Tensor(d, {3}).bitcast(dtypes::int64).to_vector<std::int64_t>() == dbits);
  CHECK(Tensor(std::vector<std::int8_t>{-1, 5, -128}, {3}).bitcast(dtypes::uint8).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{255, 5, 128});
  // float16 -> bfloat16: the 16 bits of 1.0h (0x3c00) read as a bfloat16 are 0x3c00 << 16 as a float32.
  float h = Tensor(std::vector<float>{1}, {1})
                .cast(dtypes::float16)
                .bitcast(dtypes::bfloat16)
                .cast(dtypes::float32)
                .item<float>();
  CHECK(std::bit_cast<std::uint32_t>(h) == 0x3c000000u);
  CHECK_THROWS_WITH(ft.bitcast(dtypes::int64),
                    Contains("bitcast") && Contains("float32") && Contains("int64"));
  CHECK_THROWS_WITH(Tensor::ones({2}, {.dtype = dtypes::bool_}).bitcast(dtypes::uint8),
                    Contains("bitcast") && Contains("bool"));
  // A TinyJit step replays the copy on each call's input.
  if (Device::get(Device::DEFAULT).compiled()) {
    TinyJit step([](const Tensor& x) { return ((x * 2).bitcast(dtypes::int32) + 1).contiguous(); });
    for (int call = 0; call < 4; ++call) {
      std::vector<float> v{1.5f * static_cast<float>(call), -0.25f, 3.0f};
      std::vector<std::int32_t> want;
      for (float x : v) want.push_back(std::bit_cast<std::int32_t>(x * 2) + 1);
      CHECK(step(Tensor(v, {3})).to_vector<std::int32_t>() == want);
    }
  }
}

// ---- int16, uint16, uint32 -------------------------------------------------------------------------

TEST_CASE("int16, uint16, uint32: promotion, saturating and wrapping casts, arithmetic, on the device",
          "[math]") {
  // numpy's (and tinygrad's) lattice: a signed and an unsigned integer give the narrowest signed one
  // holding both.
  STATIC_REQUIRE(promote_types(dtypes::uint32, dtypes::int32) == dtypes::int64);
  STATIC_REQUIRE(promote_types(dtypes::uint8, dtypes::int8) == dtypes::int16);
  STATIC_REQUIRE(promote_types(dtypes::uint16, dtypes::int16) == dtypes::int32);
  STATIC_REQUIRE(promote_types(dtypes::int16, dtypes::uint8) == dtypes::int16);
  STATIC_REQUIRE(promote_types(dtypes::uint32, dtypes::uint8) == dtypes::uint32);
  STATIC_REQUIRE(promote_types(dtypes::int64, dtypes::uint32) == dtypes::int64);
  STATIC_REQUIRE(promote_types(dtypes::uint32, dtypes::float16) == dtypes::float16);
  STATIC_REQUIRE(promote_types(dtypes::bool_, dtypes::uint16) == dtypes::uint16);
  STATIC_REQUIRE(promote_types(dtypes::int16, dtypes::int32) == dtypes::int32);
  using u32 = std::uint32_t;
  Tensor u(std::vector<u32>{0, 1, 4294967295u, 2147483648u, 7}, {5});
  CHECK(u.dtype() == dtypes::uint32);
  CHECK(u.to_vector<u32>() == std::vector<u32>{0, 1, 4294967295u, 2147483648u, 7});
  CHECK((u + 0).to_vector<double>() == std::vector<double>{0, 1, 4294967295.0, 2147483648.0, 7});
  // Floats saturate to the range, truncating, NaN giving 0 (the rule every device follows).
  Tensor f(std::vector<float>{-1.5f, NAN, 3.7f, 5e9f, INFINITY, 65535.9f, -40000, 40000}, {8});
  CHECK((f + 0).cast(dtypes::uint32).to_vector<u32>() ==
        std::vector<u32>{0, 0, 3, 4294967295u, 4294967295u, 65535, 0, 40000});
  CHECK((f + 0).cast(dtypes::uint16).to_vector<std::uint16_t>() ==
        std::vector<std::uint16_t>{0, 0, 3, 65535, 65535, 65535, 0, 40000});
  CHECK((f + 0).cast(dtypes::int16).to_vector<std::int16_t>() ==
        std::vector<std::int16_t>{-1, 0, 3, 32767, 32767, 32767, -32768, 32767});
  // Integers wrap, as C's conversions.
  Tensor w(std::vector<std::int64_t>{-1, 65536 + 5, (std::int64_t(1) << 32) + 7, 40000}, {4});
  CHECK((w + 0).cast(dtypes::uint32).to_vector<u32>() == std::vector<u32>{4294967295u, 65541, 7, 40000});
  CHECK((w + 0).cast(dtypes::uint16).to_vector<std::uint16_t>() ==
        std::vector<std::uint16_t>{65535, 5, 7, 40000});
  CHECK((w + 0).cast(dtypes::int16).to_vector<std::int16_t>() == std::vector<std::int16_t>{-1, 5, 7, -25536});
  // Arithmetic wraps modulo 2^32, comparisons and max are unsigned, sums accumulate in int64.
  Tensor a(std::vector<u32>{4294967295u, 3, 2147483648u}, {3}), b(std::vector<u32>{1, 5, 2}, {3});
  CHECK((a + b).dtype() == dtypes::uint32);
  CHECK((a + b).to_vector<u32>() == std::vector<u32>{0, 8, 2147483650u});
  CHECK((b - a).to_vector<u32>() == std::vector<u32>{2, 2, 2147483650u});
  CHECK((a * b).to_vector<u32>() == std::vector<u32>{4294967295u, 15, 0});
  CHECK((a > b).cast(dtypes::int32).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 0, 1});
  CHECK(a.max().item<double>() == 4294967295.0);
  CHECK(a.min().item<double>() == 3.0);
  CHECK(a.sum().dtype() == dtypes::int64);
  CHECK(a.sum().item<std::int64_t>() == 4294967295ll + 3 + 2147483648ll);
  CHECK((a + Tensor(std::vector<std::int32_t>{-1, 0, 0}, {3})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{4294967294ll, 3, 2147483648ll});
  CHECK(a.div(b, "floor").to_vector<u32>() == std::vector<u32>{4294967295u, 0, 1073741824u});
  CHECK((a >> 31).to_vector<u32>() == std::vector<u32>{1, 0, 1});
  Tensor s(std::vector<std::int16_t>{-32768, 32767, 5}, {3}), t(std::vector<std::int16_t>{-1, 1, 7}, {3});
  CHECK((s + t).to_vector<std::int16_t>() == std::vector<std::int16_t>{32767, -32768, 12});
  CHECK((s * t).to_vector<std::int16_t>() == std::vector<std::int16_t>{-32768, 32767, 35});
  Tensor h(std::vector<std::uint16_t>{65535, 2, 300}, {3});
  CHECK((h + h).to_vector<std::uint16_t>() == std::vector<std::uint16_t>{65534, 4, 600});
  // (a C uint16 product is an int one: 65535 * 65535 is past INT_MAX; it wraps modulo 2^16 here)
  CHECK((h * h).to_vector<std::uint16_t>() == std::vector<std::uint16_t>{1, 4, 24464});
  CHECK((h * h).cast(dtypes::int64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 4, 24464});
  CHECK(h.max().item<double>() == 65535.0);
  CHECK((h.cast(dtypes::float32) + 0.5f).to_vector<float>() == std::vector<float>{65535.5f, 2.5f, 300.5f});
  // Bit patterns through bitcast.
  Tensor bits = Tensor(std::vector<float>{1.0f, -0.0f, -2.0f}, {3}).bitcast(dtypes::uint32);
  CHECK(bits.to_vector<u32>() == std::vector<u32>{0x3f800000u, 0x80000000u, 0xc0000000u});
  CHECK(bits.bitcast(dtypes::int32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0x3f800000, std::int32_t(0x80000000u), std::int32_t(0xc0000000u)});
  CHECK(Tensor(std::vector<float>{1, -2}, {2})
            .cast(dtypes::float16)
            .bitcast(dtypes::uint16)
            .to_vector<std::uint16_t>() == std::vector<std::uint16_t>{0x3c00, 0xc000});
  CHECK(Tensor(std::vector<std::uint16_t>{0x3c00, 0xc000}, {2})
            .bitcast(dtypes::int16)
            .to_vector<std::int16_t>() == std::vector<std::int16_t>{0x3c00, -16384});
  CHECK_THROWS_WITH(bits.bitcast(dtypes::int16), Contains("uint32") && Contains("int16"));
}

// ---- uint64 --------------------------------------------------------------------------------------

namespace {
using u64 = std::uint64_t;
constexpr u64 kTop = ~u64{0}, kHigh = u64{1} << 63;  // 2^64 - 1, 2^63

// Edge values past 2^63 (where int64 holds them negative), then random 64-bit values.
std::vector<u64> u64_values(std::size_t n, std::uint64_t seed) {
  std::vector<u64> v = {kTop,     kHigh, kHigh + 12345, 3, 0, 0x0123456789abcdefULL, 18446744073709551557ULL,
                        kHigh - 1};
  std::mt19937_64 g(seed);
  while (v.size() < n) v.push_back(g() >> (g() % 4 == 0 ? g() % 64 : 0));
  v.resize(n);
  return v;
}
template <class T>
std::vector<T> host_of(const Tensor& t) {
  return t.to_vector<T>();
}
// Elementwise over two vectors.
template <class F>
auto zip(const std::vector<u64>& a, const std::vector<u64>& b, F f) {
  std::vector<decltype(f(a[0], b[0]))> out;
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]));
  return out;
}
// A float to uint64 as every device converts: toward zero, saturating, NaN giving 0.
u64 saturated(double x) { return std::isnan(x) || x <= 0 ? 0 : x >= 0x1p64 ? kTop : static_cast<u64>(x); }
u64 power(u64 b, u64 e) {  // b^e modulo 2^64, bit by bit from the top of e
  u64 r = 1;
  for (int k = 63; k >= 0; --k) r = r * r * ((e >> k) & 1 ? b : 1);
  return r;
}
}  // namespace

TEST_CASE("uint64: values past 2^63 round-trip, wrap modulo 2^64, divide, compare and shift unsigned",
          "[math]") {
  const i64 n = 40;
  std::vector<u64> av = u64_values(n, 1), bv = u64_values(n, 2);
  std::rotate(bv.begin(), bv.begin() + 3, bv.end());  // edge values meet other edge values
  for (u64& x : bv) x = x == 0 ? 7 : x;               // divisors
  Tensor a(av, {n}), b(bv, {n});
  REQUIRE(a.dtype() == dtypes::uint64);
  CHECK(host_of<u64>(a) == av);
  CHECK(host_of<u64>(a + 0) == av);  // through a kernel's load and store
  CHECK(host_of<u64>(a.reshape({5, 8}).permute({1, 0}).contiguous().permute({1, 0}).reshape({n})) == av);
  // Arithmetic wraps modulo 2^64.
  CHECK(host_of<u64>(a + b) == zip(av, bv, [](u64 x, u64 y) { return x + y; }));
  CHECK(host_of<u64>(a - b) == zip(av, bv, [](u64 x, u64 y) { return x - y; }));
  CHECK(host_of<u64>(a * b) == zip(av, bv, [](u64 x, u64 y) { return x * y; }));
  CHECK(host_of<u64>(-a) == zip(av, av, [](u64 x, u64) { return 0 - x; }));
  CHECK(host_of<u64>(a * 3 + 5) == zip(av, av, [](u64 x, u64) { return x * 3 + 5; }));
  CHECK(host_of<u64>(a.pow(3)) == zip(av, av, [](u64 x, u64) { return x * x * x; }));
  // Exponents past 2^63 are no negative powers.
  std::vector<u64> ev = {kHigh + 1, kTop, 5, kHigh, 2};
  std::vector<u64> bases = {3, 3, kTop - 1, 5, kHigh + 7};
  CHECK(host_of<u64>(Tensor(bases, {5}).pow(Tensor(ev, {5}))) ==
        zip(bases, ev, [](u64 x, u64 e) { return power(x, e); }));
  // Division and remainder are unsigned: (2^64 - 1) / 3, not -1 / 3.
  CHECK(host_of<u64>(a.div(b, "floor")) == zip(av, bv, [](u64 x, u64 y) { return x / y; }));
  CHECK(host_of<u64>(a.div(b, "trunc")) == zip(av, bv, [](u64 x, u64 y) { return x / y; }));
  CHECK(host_of<u64>(a.floor_divide(b)) == zip(av, bv, [](u64 x, u64 y) { return x / y; }));
  CHECK(host_of<u64>(a % b) == zip(av, bv, [](u64 x, u64 y) { return x % y; }));
  CHECK(host_of<u64>(a.fmod(b)) == zip(av, bv, [](u64 x, u64 y) { return x % y; }));
  // The kernels' own integer division and power (BinaryOps::DIV and POW; Tensor::div never emits an
  // integer DIV) are unsigned too; x / 0 is 0 there.
  std::vector<u64> zv = bv;
  zv[1] = zv[9] = 0;
  Tensor z(zv, {n});
  CHECK(host_of<u64>(Tensor(a.lazydata->e(BinaryOps::DIV, z.lazydata), false)) ==
        zip(av, zv, [](u64 x, u64 y) { return y == 0 ? 0 : x / y; }));
  CHECK(host_of<u64>(Tensor(a.lazydata->e(BinaryOps::POW, b.lazydata), false)) ==
        zip(av, bv, [](u64 x, u64 e) { return power(x, e); }));
  CHECK(Tensor(std::vector<u64>{kTop}, {1}).div(Tensor(std::vector<u64>{3}, {1}), "floor").item<u64>() ==
        6148914691236517205ULL);
  // Comparisons, max and min order them unsigned: 2^63 is above 3.
  auto flags = [](const Tensor& t) { return host_of<std::uint8_t>(t.cast(dtypes::uint8)); };
  auto want = [&](auto f) { return zip(av, bv, [f](u64 x, u64 y) { return std::uint8_t(f(x, y)); }); };
  CHECK(flags(a < b) == want([](u64 x, u64 y) { return x < y; }));
  CHECK(flags(a <= b) == want([](u64 x, u64 y) { return x <= y; }));
  CHECK(flags(a > b) == want([](u64 x, u64 y) { return x > y; }));
  CHECK(flags(a >= b) == want([](u64 x, u64 y) { return x >= y; }));
  CHECK(flags(a == b) == want([](u64 x, u64 y) { return x == y; }));
  CHECK(flags(a != a) == std::vector<std::uint8_t>(n, 0));
  CHECK(host_of<u64>(a.maximum(b)) == zip(av, bv, [](u64 x, u64 y) { return std::max(x, y); }));
  CHECK(host_of<u64>(a.minimum(b)) == zip(av, bv, [](u64 x, u64 y) { return std::min(x, y); }));
  CHECK(host_of<u64>((a < b).where(a, b)) == zip(av, bv, [](u64 x, u64 y) { return x < y ? x : y; }));
  CHECK(a.max().item<u64>() == *std::max_element(av.begin(), av.end()));
  CHECK(a.min().item<u64>() == *std::min_element(av.begin(), av.end()));
  Tensor m = a.reshape({5, 8});
  std::vector<u64> col_max(8, 0), col_min(8, kTop), row_sum(5, 0);
  std::vector<i64> col_argmax(8, 0);
  for (std::size_t i = 0; i < av.size(); ++i) {
    if (av[i] > col_max[i % 8]) col_max[i % 8] = av[i], col_argmax[i % 8] = static_cast<i64>(i / 8);
    col_min[i % 8] = std::min(col_min[i % 8], av[i]);
    row_sum[i / 8] += av[i];
  }
  CHECK(host_of<u64>(m.max(0)) == col_max);
  CHECK(host_of<u64>(m.min(0)) == col_min);
  CHECK(host_of<u64>(m.min(1, true)).size() == 5);
  CHECK(host_of<i64>(m.argmax(0)) == col_argmax);
  // Sums wrap modulo 2^64 and stay uint64.
  CHECK(a.sum().dtype() == dtypes::uint64);
  CHECK(a.sum().item<u64>() == std::accumulate(av.begin(), av.end(), u64{0}));
  CHECK(host_of<u64>(m.sum(1)) == row_sum);
  // Shifts are logical, bit operations see all 64 bits.
  CHECK(host_of<u64>(a >> 1) == zip(av, av, [](u64 x, u64) { return x >> 1; }));
  CHECK(host_of<u64>(a << 3) == zip(av, av, [](u64 x, u64) { return x << 3; }));
  std::vector<u64> sv(av.size());
  for (std::size_t i = 0; i < sv.size(); ++i) sv[i] = (i * 7) % 64;
  Tensor s(sv, {n});
  CHECK(host_of<u64>(a >> s) == zip(av, sv, [](u64 x, u64 k) { return x >> k; }));
  CHECK(host_of<u64>(a << s) == zip(av, sv, [](u64 x, u64 k) { return x << k; }));
  CHECK(host_of<u64>(a & b) == zip(av, bv, [](u64 x, u64 y) { return x & y; }));
  CHECK(host_of<u64>(a | b) == zip(av, bv, [](u64 x, u64 y) { return x | y; }));
  CHECK(host_of<u64>(a ^ b) == zip(av, bv, [](u64 x, u64 y) { return x ^ y; }));
  CHECK(host_of<u64>(~a) == zip(av, av, [](u64 x, u64) { return ~x; }));
  // Bad input names the op and the dtypes.
  CHECK_THROWS_WITH(a.div(Tensor::zeros({n}, {.dtype = dtypes::uint64}), "floor"),
                    Contains("div") && Contains("division by zero") && Contains("uint64"));
  CHECK_THROWS_WITH(a >> 64, Contains("rshift") && Contains("shift by 64") && Contains("uint64"));
  CHECK_THROWS_WITH(a << Tensor(std::vector<u64>(n, kTop), {n}),
                    Contains("lshift") && Contains("18446744073709551615"));
  CHECK_THROWS_WITH(a % Tensor(std::vector<std::int64_t>(n, 3), {n}),
                    Contains("remainder") && Contains("uint64") && Contains("int64") && Contains("float32"));
  CHECK_THROWS_WITH(a & Tensor(std::vector<std::int32_t>(n, 3), {n}),
                    Contains("bitwise_and") && Contains("uint64") && Contains("int32"));
}

TEST_CASE("uint64: casts to and from float32, float64 and int64, promotion, bitcast, safetensors", "[math]") {
  // tinygrad's lattice: uint64 and a signed integer meet in its default float (float32); unsigned and
  // bool join uint64; a float wins.
  STATIC_REQUIRE(promote_types(dtypes::uint64, dtypes::int64) == dtypes::float32);
  STATIC_REQUIRE(promote_types(dtypes::int8, dtypes::uint64) == dtypes::float32);
  STATIC_REQUIRE(promote_types(dtypes::uint64, dtypes::int32) == dtypes::float32);
  STATIC_REQUIRE(promote_types(dtypes::uint64, dtypes::uint32) == dtypes::uint64);
  STATIC_REQUIRE(promote_types(dtypes::uint8, dtypes::uint64) == dtypes::uint64);
  STATIC_REQUIRE(promote_types(dtypes::bool_, dtypes::uint64) == dtypes::uint64);
  STATIC_REQUIRE(promote_types(dtypes::uint64, dtypes::float16) == dtypes::float16);
  STATIC_REQUIRE(promote_types(dtypes::float64, dtypes::uint64) == dtypes::float64);
  STATIC_REQUIRE(dtype_of<std::uint64_t> == dtypes::uint64);
  std::vector<u64> av = u64_values(24, 3);
  Tensor a(av, {24});
  Tensor i(std::vector<std::int64_t>{-1, 5}, {2}), u(std::vector<std::uint32_t>{4294967295u, 1}, {2});
  CHECK((Tensor(std::vector<u64>{kTop, 2}, {2}) + i).dtype() == dtypes::float32);
  CHECK(host_of<float>(Tensor(std::vector<u64>{kTop, 2}, {2}) + i) == std::vector<float>{0x1p64f, 7.0f});
  CHECK(host_of<u64>(Tensor(std::vector<u64>{kTop, 2}, {2}) + u) == std::vector<u64>{4294967294u, 3});
  // To float: the unsigned value, rounded once.
  std::vector<double> as_f64;
  std::vector<float> as_f32;
  for (u64 x : av) as_f64.push_back(static_cast<double>(x)), as_f32.push_back(static_cast<float>(x));
  CHECK(host_of<double>(a.cast(dtypes::float64)) == as_f64);
  CHECK(host_of<float>(a.cast(dtypes::float32)) == as_f32);
  CHECK(host_of<double>((a + 0).cast(dtypes::float64) * 1) == as_f64);
  // From float: toward zero, saturating to [0, 2^64 - 1], NaN giving 0.
  std::vector<double> fv = {-1.5,     NAN,       0.99,    1e19,      0x1p63, 0x1p64, 0x1.fffffffffffffp63,
                            INFINITY, -INFINITY, 12345.7, 0x1p53 + 2};
  std::vector<u64> want;
  for (double x : fv) want.push_back(saturated(x));
  Tensor f64(fv, {static_cast<i64>(fv.size())}, {.dtype = dtypes::float64});
  CHECK(host_of<u64>((f64 * 1).cast(dtypes::uint64)) == want);
  std::vector<float> f32v = {-1.5f, NAN, 3e19f, 0x1p63f, 1.8e19f, INFINITY, 65535.5f};
  want.clear();
  for (float x : f32v) want.push_back(saturated(x));
  CHECK(host_of<u64>((Tensor(f32v, {static_cast<i64>(f32v.size())}) * 1).cast(dtypes::uint64)) == want);
  // To and from int64: the same 64 bits.
  std::vector<std::int64_t> iv;
  for (u64 x : av) iv.push_back(static_cast<std::int64_t>(x));
  CHECK(host_of<std::int64_t>((a + 0).cast(dtypes::int64)) == iv);
  Tensor ti(iv, {24});
  CHECK(host_of<u64>((ti + 0).cast(dtypes::uint64)) == av);
  CHECK(host_of<u64>((ti + 0).cast(dtypes::uint64).cast(dtypes::int64).cast(dtypes::uint64)) == av);
  // Narrower integers wrap (the low bits).
  std::vector<std::uint32_t> lo32;
  for (u64 x : av) lo32.push_back(static_cast<std::uint32_t>(x));
  CHECK(host_of<std::uint32_t>((a + 0).cast(dtypes::uint32)) == lo32);
  // A one-element tensor past 2^53 stays exact where it broadcasts (not folded into a double constant).
  Tensor one(std::vector<u64>{kTop - 2}, {1});
  CHECK(host_of<u64>(a + one) == zip(av, av, [](u64 x, u64) { return x + (kTop - 2); }));
  Tensor big64(std::vector<std::int64_t>{(std::int64_t{1} << 62) + 1}, {1});
  CHECK(host_of<std::int64_t>(Tensor(std::vector<std::int64_t>{0, 2}, {2}) + big64) ==
        std::vector<std::int64_t>{(std::int64_t{1} << 62) + 1, (std::int64_t{1} << 62) + 3});
  // bitcast with float64 and int64.
  std::vector<double> dv = {1.0, -2.5, -0.0, INFINITY, 0x1.fffffffffffffp1023, 5e-324};
  std::vector<u64> dbits;
  for (double x : dv) dbits.push_back(std::bit_cast<u64>(x));
  Tensor d(dv, {6}, {.dtype = dtypes::float64});
  CHECK(host_of<u64>(d.bitcast(dtypes::uint64)) == dbits);
  std::vector<double> dback = host_of<double>(Tensor(dbits, {6}).bitcast(dtypes::float64));
  for (std::size_t k = 0; k < dv.size(); ++k) CHECK(std::bit_cast<u64>(dback[k]) == dbits[k]);
  CHECK(host_of<std::int64_t>(a.bitcast(dtypes::int64)) == iv);
  CHECK(host_of<u64>(ti.bitcast(dtypes::uint64)) == av);
  CHECK_THROWS_WITH(a.bitcast(dtypes::float32),
                    Contains("bitcast") && Contains("uint64") && Contains("float32"));
  // safetensors: U64, all 64 bits.
  std::string path = (std::filesystem::temp_directory_path() /
                      ("metagrad_u64_" + std::to_string(::getpid()) + ".safetensors"))
                         .string();
  nn::safe_save({{"u", a.reshape({4, 6})}}, path);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes.find(R"("dtype":"U64")") != std::string::npos);
  std::string le;
  for (u64 x : av)
    for (int k = 0; k < 8; ++k) le += static_cast<char>((x >> (8 * k)) & 0xff);
  CHECK(bytes.substr(bytes.size() - le.size()) == le);
  nn::StateDict back_sd = nn::safe_load(path);
  std::filesystem::remove(path);
  CHECK(back_sd.at("u").dtype() == dtypes::uint64);
  CHECK(host_of<u64>(back_sd.at("u").reshape({24})) == av);
}
