// Elementwise Tensor math: every unary op and activation, the binary ops with broadcasting and
// scalars on either side, comparisons and where, against references computed here in double with
// std:: functions, on contiguous, empty, size-1 and non-contiguous (permuted, flipped, padded,
// expanded, shrunk) inputs; dtype rules; inf and NaN; every gradient against finite differences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "device_scope.hpp"
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

Host host_permute(const Host& h, const std::vector<i64>& order) {
  std::vector<i64> s;
  for (i64 a : order) s.push_back(h.shape[static_cast<std::size_t>(a)]);
  return gather(s, [&](const std::vector<i64>& idx) {
    std::vector<i64> in(idx.size());
    for (std::size_t d = 0; d < order.size(); ++d) in[static_cast<std::size_t>(order[d])] = idx[d];
    return at(h, in);
  });
}
Host host_flip(const Host& h, std::size_t axis) {
  return gather(h.shape, [&](std::vector<i64> idx) {
    idx[axis] = h.shape[axis] - 1 - idx[axis];
    return at(h, idx);
  });
}
Host host_pad(const Host& h, const std::vector<std::pair<i64, i64>>& p, double value) {
  std::vector<i64> s = h.shape;
  for (std::size_t d = 0; d < s.size(); ++d) s[d] += p[d].first + p[d].second;
  return gather(s, [&](std::vector<i64> idx) {
    for (std::size_t d = 0; d < idx.size(); ++d) {
      idx[d] -= p[d].first;
      if (idx[d] < 0 || idx[d] >= h.shape[d]) return value;
    }
    return at(h, idx);
  });
}
// numpy broadcasting of a to `shape`.
Host host_broadcast(const Host& a, const std::vector<i64>& shape) {
  return gather(shape, [&](const std::vector<i64>& idx) {
    std::vector<i64> in(a.shape.size());
    std::size_t off = shape.size() - a.shape.size();
    for (std::size_t d = 0; d < in.size(); ++d) in[d] = a.shape[d] == 1 ? 0 : idx[d + off];
    return at(a, in);
  });
}
std::vector<i64> broadcast_shape(std::vector<i64> a, std::vector<i64> b) {
  while (a.size() < b.size()) a.insert(a.begin(), 1);
  while (b.size() < a.size()) b.insert(b.begin(), 1);
  std::vector<i64> s(a.size());
  for (std::size_t d = 0; d < a.size(); ++d) s[d] = a[d] == 1 ? b[d] : a[d];
  return s;
}

Tensor tensor_of(const Host& h, std::optional<DType> dt = {}) {
  return Tensor(h.v, Dims(h.shape), {.dtype = dt});
}
std::vector<i64> shape_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// One input as the library sees it (possibly a strided view) and as the reference sees it (dense).
struct Layout {
  std::string name;
  Tensor t;
  Host h;
};

// Random inputs in [lo, hi) in many layouts; `pad` is the value padding brings in (inside the op's
// domain or on its edge).
std::vector<Layout> layouts(std::uint64_t seed, double lo, double hi, double pad = 0,
                            DType dt = dtypes::float64) {
  std::vector<Layout> out;
  auto base = [&](std::vector<i64> s) {
    Host h{s, random_values(numel_of(s), seed++, lo, hi)};
    if (dt == dtypes::float32)
      for (double& x : h.v) x = static_cast<float>(x);
    return h;
  };
  for (std::vector<i64> s : std::vector<std::vector<i64>>{{}, {1}, {7}, {0}, {3, 0}, {2, 1, 3}, {4, 5}}) {
    Host h = base(s);
    out.push_back({"contiguous " + to_string(Dims(s)), tensor_of(h, dt), h});
  }
  {
    Host h = base({3, 4, 2});
    out.push_back(
        {"permuted (3, 4, 2) -> (2, 0, 1)", tensor_of(h, dt).permute({2, 0, 1}), host_permute(h, {2, 0, 1})});
  }
  {
    Host h = base({4, 5});
    out.push_back(
        {"flipped (4, 5) on both axes", tensor_of(h, dt).flip({0, 1}), host_flip(host_flip(h, 0), 1)});
  }
  {
    Host h = base({2, 3});
    std::vector<std::pair<i64, i64>> p{{1, 0}, {0, 2}};
    out.push_back({"padded (2, 3)", tensor_of(h, dt).pad(p, pad), host_pad(h, p, pad)});
  }
  {
    Host h = base({3, 1});
    out.push_back({"expanded (3, 1) -> (3, 4)", tensor_of(h, dt).expand({3, 4}), host_broadcast(h, {3, 4})});
  }
  {
    Host h = base({5, 6});
    Host s = gather({3, 3}, [&](const std::vector<i64>& idx) { return at(h, {idx[0] + 1, idx[1] + 2}); });
    out.push_back({"shrunk (5, 6) -> [1:4, 2:5]", tensor_of(h, dt).shrink({{1, 4}, {2, 5}}), s});
  }
  return out;
}

double sig(double x) { return 1 / (1 + std::exp(-x)); }

struct Unary {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // a domain where the op is smooth (gradients are checked there)
};

std::vector<Unary> unary_ops() {
  return {
      {"neg", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -3, 3},
      {"log", [](const Tensor& x) { return x.log(); }, [](double x) { return std::log(x); }, 0.1, 5},
      {"log2", [](const Tensor& x) { return x.log2(); }, [](double x) { return std::log2(x); }, 0.1, 5},
      {"exp", [](const Tensor& x) { return x.exp(); }, [](double x) { return std::exp(x); }, -3, 3},
      {"exp2", [](const Tensor& x) { return x.exp2(); }, [](double x) { return std::exp2(x); }, -3, 3},
      {"relu", [](const Tensor& x) { return x.relu(); }, [](double x) { return std::max(x, 0.0); }, -3, 3},
      {"sin", [](const Tensor& x) { return x.sin(); }, [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return x.cos(); }, [](double x) { return std::cos(x); }, -4, 4},
      {"tan", [](const Tensor& x) { return x.tan(); }, [](double x) { return std::tan(x); }, -1.2, 1.2},
      {"ceil", [](const Tensor& x) { return x.ceil(); }, [](double x) { return std::ceil(x); }, -5, 5},
      {"floor", [](const Tensor& x) { return x.floor(); }, [](double x) { return std::floor(x); }, -5, 5},
      {"sqrt", [](const Tensor& x) { return x.sqrt(); }, [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"rsqrt", [](const Tensor& x) { return x.rsqrt(); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"square", [](const Tensor& x) { return x.square(); }, [](double x) { return x * x; }, -3, 3},
      {"clip", [](const Tensor& x) { return x.clip(-0.5, 1.2); },
       [](double x) { return std::min(std::max(x, -0.5), 1.2); }, -3, 3},
      {"abs", [](const Tensor& x) { return x.abs(); }, [](double x) { return std::abs(x); }, -3, 3},
      {"sign", [](const Tensor& x) { return x.sign(); }, [](double x) { return double((x > 0) - (x < 0)); },
       -3, 3},
      {"reciprocal", [](const Tensor& x) { return x.reciprocal(); }, [](double x) { return 1 / x; }, 0.2, 3},
      {"sigmoid", [](const Tensor& x) { return x.sigmoid(); }, sig, -6, 6},
      {"elu", [](const Tensor& x) { return x.elu(1.3); },
       [](double x) { return x > 0 ? x : 1.3 * (std::exp(x) - 1); }, -3, 3},
      {"celu", [](const Tensor& x) { return x.celu(0.7); },
       [](double x) { return std::max(0.0, x) + std::min(0.0, 0.7 * (std::exp(x / 0.7) - 1)); }, -3, 3},
      {"swish", [](const Tensor& x) { return x.swish(); }, [](double x) { return x * sig(x); }, -5, 5},
      {"silu", [](const Tensor& x) { return x.silu(); }, [](double x) { return x * sig(x); }, -5, 5},
      {"relu6", [](const Tensor& x) { return x.relu6(); },
       [](double x) { return std::min(std::max(x, 0.0), 6.0); }, -9, 9},
      {"hardswish", [](const Tensor& x) { return x.hardswish(); },
       [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }, -5, 5},
      {"tanh", [](const Tensor& x) { return x.tanh(); }, [](double x) { return std::tanh(x); }, -4, 4},
      {"hardtanh", [](const Tensor& x) { return x.hardtanh(-0.7, 0.9); },
       [](double x) { return std::min(std::max(x, -0.7), 0.9); }, -2, 2},
      {"gelu", [](const Tensor& x) { return x.gelu(); },
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
       },
       -4, 4},
      {"quick_gelu", [](const Tensor& x) { return x.quick_gelu(); },
       [](double x) { return x * sig(1.702 * x); }, -4, 4},
      {"leakyrelu", [](const Tensor& x) { return x.leakyrelu(0.05); },
       [](double x) { return x > 0 ? x : 0.05 * x; }, -3, 3},
      {"leakyrelu(negative slope)", [](const Tensor& x) { return x.leakyrelu(-0.3); },
       [](double x) { return x > 0 ? x : -0.3 * x; }, -3, 3},
      {"mish", [](const Tensor& x) { return x.mish(); },
       [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, -4, 4},
      {"softplus", [](const Tensor& x) { return x.softplus(1.5); },
       [](double x) { return std::log1p(std::exp(1.5 * x)) / 1.5; }, -4, 4},
      {"softplus(negative beta)", [](const Tensor& x) { return x.softplus(-0.5); },
       [](double x) { return std::log1p(std::exp(-0.5 * x)) / -0.5; }, -4, 4},
      {"softsign", [](const Tensor& x) { return x.softsign(); },
       [](double x) { return x / (1 + std::abs(x)); }, -3, 3},
      {"hardsigmoid", [](const Tensor& x) { return x.hardsigmoid(); },
       [](double x) { return std::min(std::max(x / 6 + 0.5, 0.0), 1.0); }, -5, 5},
      {"logsigmoid", [](const Tensor& x) { return x.logsigmoid(); },
       [](double x) { return -std::log1p(std::exp(-x)); }, -5, 5},
      {"selu", [](const Tensor& x) { return x.selu(); },
       [](double x) { return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x)); }, -3, 3},
      {"log10", [](const Tensor& x) { return x.log10(); }, [](double x) { return std::log10(x); }, 0.1, 5},
      {"sinh", [](const Tensor& x) { return x.sinh(); }, [](double x) { return std::sinh(x); }, -3, 3},
      {"cosh", [](const Tensor& x) { return x.cosh(); }, [](double x) { return std::cosh(x); }, -3, 3},
      {"asinh", [](const Tensor& x) { return x.asinh(); }, [](double x) { return std::asinh(x); }, -3, 3},
      {"acosh", [](const Tensor& x) { return x.acosh(); }, [](double x) { return std::acosh(x); }, 1.1, 5},
      {"atanh", [](const Tensor& x) { return x.atanh(); }, [](double x) { return std::atanh(x); }, -0.9, 0.9},
      {"asin", [](const Tensor& x) { return x.asin(); }, [](double x) { return std::asin(x); }, -0.95, 0.95},
      {"acos", [](const Tensor& x) { return x.acos(); }, [](double x) { return std::acos(x); }, -0.95, 0.95},
      {"atan", [](const Tensor& x) { return x.atan(); }, [](double x) { return std::atan(x); }, -5, 5},
      {"trunc", [](const Tensor& x) { return x.trunc(); }, [](double x) { return std::trunc(x); }, -5, 5},
      {"round", [](const Tensor& x) { return x.round(); }, [](double x) { return std::nearbyint(x); }, -5, 5},
  };
}

std::vector<double> map(const std::vector<double>& v, const std::function<double(double)>& f) {
  std::vector<double> o;
  for (double x : v) o.push_back(f(x));
  return o;
}

}  // namespace

// ---- unary ops -----------------------------------------------------------------------------------

TEST_CASE("unary ops: float64 forward in every layout", "[math]") {
  std::uint64_t seed = 100;
  Sampler sample;
  for (const Unary& u : unary_ops()) {
    // pad with a value inside the domain (its lower end), so log and sqrt see no 0 they were not meant to
    for (const Layout& l : layouts(seed += 20, u.lo, u.hi, u.lo)) {
      if (!sample()) continue;
      INFO(u.name << " on " << l.name);
      Tensor y = u.op(l.t);
      REQUIRE(shape_of(y) == l.h.shape);
      REQUIRE(y.dtype() == dtypes::float64);
      require_close(y.to_vector<double>(), map(l.h.v, u.ref), 1e-12, 1e-12);
    }
  }
}

TEST_CASE("unary ops: float32 forward rounds like float32", "[math]") {
  std::uint64_t seed = 900;
  for (const Unary& u : unary_ops()) {
    INFO(u.name);
    std::vector<double> v = random_values(12, seed++, u.lo, u.hi);
    for (double& x : v) x = static_cast<float>(x);
    Tensor y = u.op(Tensor(v, {3, 4}, {.dtype = dtypes::float32}));
    REQUIRE(y.dtype() == dtypes::float32);
    require_close(y.to_vector<double>(), map(v, u.ref), 2e-6, 2e-6);
  }
}

TEST_CASE("unary ops: gradients match finite differences", "[math]") {
  std::uint64_t seed = 300;
  Sampler sample;
  for (const Unary& u : unary_ops()) {
    INFO(u.name);
    check_gradients([&](const std::vector<Tensor>& x) { return u.op(x[0]); },
                    {random_tensor({2, 3}, seed++, u.lo, u.hi)});
    if (!sample()) continue;
    // and through a non-contiguous view
    check_gradients(
        [&](const std::vector<Tensor>& x) {
          return u.op(x[0].permute({1, 0}).flip(0));
        },
        {random_tensor({2, 3}, seed++, u.lo, u.hi)});
  }
}

TEST_CASE("unary ops: gradients at 0 where the function is smooth there", "[math]") {
  // The smooth activations are split at 0 internally; their gradient at exactly 0 must still be right.
  struct G {
    std::string name;
    std::function<Tensor(const Tensor&)> op;
    double want;
  };
  std::vector<G> cases = {
      {"sigmoid", [](const Tensor& x) { return x.sigmoid(); }, 0.25},
      {"tanh", [](const Tensor& x) { return x.tanh(); }, 1},
      {"swish", [](const Tensor& x) { return x.swish(); }, 0.5},
      {"elu(1)", [](const Tensor& x) { return x.elu(1); }, 1},
      {"celu(0.7)", [](const Tensor& x) { return x.celu(0.7); }, 1},
      {"softplus", [](const Tensor& x) { return x.softplus(); }, 0.5},
      {"softplus(beta 2)", [](const Tensor& x) { return x.softplus(2); }, 0.5},
      {"mish", [](const Tensor& x) { return x.mish(); }, std::tanh(std::log(2.0))},
      {"gelu", [](const Tensor& x) { return x.gelu(); }, 0.5},
      {"softsign", [](const Tensor& x) { return x.softsign(); }, 1},
      {"relu (subgradient 0)", [](const Tensor& x) { return x.relu(); }, 0},
      {"abs (subgradient 0)", [](const Tensor& x) { return x.abs(); }, 0},
  };
  for (const G& g : cases) {
    INFO(g.name);
    Tensor x = Tensor(std::vector<double>{0.0}, {1}, {.requires_grad = true});
    g.op(x).sum().backward();
    REQUIRE(x.grad);
    require_close(x.grad->to_vector<double>(), {g.want}, 1e-12, 1e-12);
  }
}

TEST_CASE("unary ops: inf, NaN and extreme values", "[math]") {
  std::vector<double> v = {kInf, -kInf, kNaN, 1000, -1000, 0, -0.0, 1e-30, -1e-30};
  Tensor x(v, {static_cast<i64>(v.size())});
  auto check = [&](const std::string& name, const Tensor& y, std::vector<double> want) {
    INFO(name);
    require_close(y.to_vector<double>(), want, 1e-12, 1e-12);
  };
  check("sigmoid", x.sigmoid(), {1, 0, kNaN, 1, 0, 0.5, 0.5, 0.5, 0.5});
  check("tanh", x.tanh(), {1, -1, kNaN, 1, -1, 0, 0, 0, 0});
  check("softplus", x.softplus(),
        {kInf, 0, kNaN, 1000, 0, std::log(2.0), std::log(2.0), std::log(2.0), std::log(2.0)});
  check("elu", x.elu(), {kInf, -1, kNaN, 1000, -1, 0, 0, 1e-30, -1e-30});
  check("celu", x.celu(2), {kInf, -2, kNaN, 1000, -2, 0, 0, 1e-30, -1e-30});
  check("relu6", x.relu6(), {6, 0, kNaN, 6, 0, 0, 0, 1e-30, 0});
  check("hardtanh", x.hardtanh(), {1, -1, kNaN, 1, -1, 0, 0, 1e-30, -1e-30});
  check("abs", x.abs(), {kInf, kInf, kNaN, 1000, 1000, 0, 0, 1e-30, 1e-30});
  check("sign", x.sign(), {1, -1, kNaN, 1, -1, 0, 0, 1, -1});
  check("leakyrelu", x.leakyrelu(0.1), {kInf, -kInf, kNaN, 1000, -100, 0, 0, 1e-30, -1e-31});
  check("exp", x.exp(), {kInf, 0, kNaN, kInf, 0, 1, 1, 1, 1});
  check("sqrt", x.sqrt(), {kInf, kNaN, kNaN, std::sqrt(1000.0), kNaN, 0, 0, 1e-15, kNaN});
  check("rsqrt", x.rsqrt(), {0, kNaN, kNaN, 1 / std::sqrt(1000.0), kNaN, kInf, -kInf, 1e15, kNaN});
  check("log", x.log(), {kInf, kNaN, kNaN, std::log(1000.0), kNaN, -kInf, -kInf, std::log(1e-30), kNaN});
  check("reciprocal", x.reciprocal(), {0, -0.0, kNaN, 1e-3, -1e-3, kInf, -kInf, 1e30, -1e30});
  check("floor", x.floor(), {kInf, -kInf, kNaN, 1000, -1000, 0, 0, 0, -1});
  check("ceil", x.ceil(), {kInf, -kInf, kNaN, 1000, -1000, 0, 0, 1, 0});
  check("clip", x.clip(-2, 3), {3, -2, kNaN, 3, -2, 0, 0, 1e-30, -1e-30});

  // The gradients stay finite where a naive exp would overflow (float32 overflows at 88).
  for (DType dt : {dtypes::float32, dtypes::float64}) {
    Tensor big =
        Tensor(std::vector<double>{1000, -1000, 100, -100}, {4}, {.dtype = dt, .requires_grad = true});
    auto grads = [&](const std::function<Tensor(const Tensor&)>& f) {
      big.grad = std::nullopt;
      f(big).sum().backward();
      return big.grad->to_vector<double>();
    };
    INFO(dt.name);
    require_close(grads([](const Tensor& t) { return t.sigmoid(); }), {0, 0, 0, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.tanh(); }), {0, 0, 0, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.softplus(); }), {1, 0, 1, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.elu(); }), {1, 0, 1, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.celu(0.5); }), {1, 0, 1, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.swish(); }), {1, 0, 1, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.mish(); }), {1, 0, 1, 0}, 1e-30, 0);
    require_close(grads([](const Tensor& t) { return t.gelu(); }), {1, 0, 1, 0}, 1e-30, 0);
  }
}

TEST_CASE("floor and ceil: exact on halves, integers, huge values and every float dtype", "[math]") {
  std::vector<double> v = {-2.5,
                           -2.0,
                           -1.5,
                           -0.5,
                           0.5,
                           1.5,
                           2.0,
                           2.5,
                           1e20,
                           -1e20,
                           4503599627370497.0,
                           -4503599627370497.0,
                           9007199254740993.0 - 1};
  for (DType dt : {dtypes::float64, dtypes::float32, dtypes::float16}) {
    INFO(dt.name);
    std::vector<double> in;
    for (double x : v) {  // what the dtype can hold
      double r = dt == dtypes::float64   ? x
                 : dt == dtypes::float32 ? double(float(x))
                                         : double(float(half(float(x))));
      in.push_back(r);
    }
    Tensor x(in, {static_cast<i64>(in.size())}, {.dtype = dt});
    REQUIRE(x.floor().dtype() == dt);
    require_close(x.floor().to_vector<double>(), map(in, [](double a) { return std::floor(a); }), 0, 0);
    require_close(x.ceil().to_vector<double>(), map(in, [](double a) { return std::ceil(a); }), 0, 0);
  }
  // float32 values just below 2^23 still have halves
  Tensor f(std::vector<float>{8388607.5f, -8388607.5f, 8388608.0f}, {3});
  require_close(f.floor().to_vector<double>(), {8388607, -8388608, 8388608}, 0, 0);
  require_close(f.ceil().to_vector<double>(), {8388608, -8388607, 8388608}, 0, 0);
}

TEST_CASE("unary ops: integer and bool inputs", "[math]") {
  std::vector<std::int32_t> iv = {-7, -2, -1, 0, 1, 3, 8};
  std::vector<double> dv(iv.begin(), iv.end());
  Tensor xi(iv, {7});
  REQUIRE(xi.dtype() == dtypes::int32);
  SECTION("integer-preserving ops stay int32") {
    auto same = [&](const std::string& name, const Tensor& y, const std::function<double(double)>& f) {
      INFO(name);
      REQUIRE(y.dtype() == dtypes::int32);
      require_close(y.to_vector<double>(), map(dv, f), 0, 0);
    };
    same("neg", -xi, [](double a) { return -a; });
    same("relu", xi.relu(), [](double a) { return std::max(a, 0.0); });
    same("abs", xi.abs(), [](double a) { return std::abs(a); });
    same("square", xi.square(), [](double a) { return a * a; });
    same("sign", xi.sign(), [](double a) { return double((a > 0) - (a < 0)); });
    same("floor", xi.floor(), [](double a) { return a; });
    same("ceil", xi.ceil(), [](double a) { return a; });
    same("clip(-2, 3)", xi.clip(-2, 3), [](double a) { return std::min(std::max(a, -2.0), 3.0); });
    same("relu6", xi.relu6(), [](double a) { return std::min(std::max(a, 0.0), 6.0); });
    same("hardtanh(-1, 1)", xi.hardtanh(), [](double a) { return std::min(std::max(a, -1.0), 1.0); });
  }
  SECTION("float math on integers gives float32") {
    auto flt = [&](const std::string& name, const Tensor& y, const std::function<double(double)>& f) {
      INFO(name);
      REQUIRE(y.dtype() == dtypes::float32);
      require_close(y.to_vector<double>(), map(dv, [&](double a) { return double(float(f(a))); }), 1e-6,
                    1e-5);
    };
    flt("sqrt", xi.sqrt(), [](double a) { return std::sqrt(a); });
    flt("rsqrt", xi.rsqrt(), [](double a) { return 1 / std::sqrt(a); });
    flt("exp", xi.exp(), [](double a) { return std::exp(a); });
    flt("exp2", xi.exp2(), [](double a) { return std::exp2(a); });
    flt("log", xi.log(), [](double a) { return std::log(a); });
    flt("log2", xi.log2(), [](double a) { return std::log2(a); });
    flt("sin", xi.sin(), [](double a) { return std::sin(a); });
    flt("cos", xi.cos(), [](double a) { return std::cos(a); });
    flt("tan", xi.tan(), [](double a) { return std::tan(a); });
    flt("reciprocal", xi.reciprocal(), [](double a) { return 1 / a; });
    flt("sigmoid", xi.sigmoid(), sig);
    flt("tanh", xi.tanh(), [](double a) { return std::tanh(a); });
    flt("elu", xi.elu(), [](double a) { return a > 0 ? a : std::exp(a) - 1; });
    flt("swish", xi.swish(), [](double a) { return a * sig(a); });
    flt("softplus", xi.softplus(), [](double a) { return std::log1p(std::exp(a)); });
    flt("softsign", xi.softsign(), [](double a) { return a / (1 + std::abs(a)); });
    flt("leakyrelu", xi.leakyrelu(), [](double a) { return a > 0 ? a : 0.01 * a; });
    flt("hardswish", xi.hardswish(), [](double a) { return a * std::min(std::max(a + 3, 0.0), 6.0) / 6; });
    flt("clip(-1.5, 2.5)", xi.clip(-1.5, 2.5), [](double a) { return std::min(std::max(a, -1.5), 2.5); });
  }
  SECTION("uint8, int64 and bool") {
    Tensor u(std::vector<std::uint8_t>{0, 3, 250}, {3});
    REQUIRE(u.abs().dtype() == dtypes::uint8);
    require_close(u.abs().to_vector<double>(), {0, 3, 250}, 0, 0);
    require_close(u.sign().to_vector<double>(), {0, 1, 1}, 0, 0);
    REQUIRE(u.clip(2, 100).dtype() == dtypes::uint8);
    require_close(u.clip(2, 100).to_vector<double>(), {2, 3, 100}, 0, 0);  // no wrap through -x
    require_close(u.minimum(Tensor(std::vector<std::uint8_t>{1, 1, 1}, {3})).to_vector<double>(), {0, 1, 1},
                  0, 0);
    require_close(u.sqrt().to_vector<double>(), {0, std::sqrt(3.0), std::sqrt(250.0)}, 1e-6, 1e-6);
    Tensor l(std::vector<std::int64_t>{-3000000000LL, 5}, {2});
    REQUIRE(l.square().dtype() == dtypes::int64);
    require_close(l.abs().to_vector<double>(), {3e9, 5}, 0, 0);
    Tensor b(std::vector<float>{1, 0}, {2}, {.dtype = dtypes::bool_});
    REQUIRE(b.sign().dtype() == dtypes::bool_);
    REQUIRE(b.sigmoid().dtype() == dtypes::float32);
    require_close(b.exp().to_vector<double>(), {double(float(std::exp(1.0))), 1}, 1e-6, 1e-6);
  }
}

TEST_CASE("unary ops: bad arguments", "[math]") {
  Tensor x{1.f, 2.f};
  REQUIRE_THROWS_WITH(x.celu(0), Contains("celu") && Contains("alpha"));
  REQUIRE_THROWS_WITH(x.softplus(0), Contains("softplus") && Contains("beta"));
}

// ---- binary ops ----------------------------------------------------------------------------------

namespace {
struct Binary {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;
};
std::vector<Binary> binary_ops() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, std::plus<double>(), -3, 3},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, std::minus<double>(), -3, 3},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, std::multiplies<double>(), -3, 3},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, std::divides<double>(), 0.5, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return a.pow(b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return a.maximum(b); },
       [](double a, double b) { return std::max(a, b); }, -3, 3},
      {"minimum", [](const Tensor& a, const Tensor& b) { return a.minimum(b); },
       [](double a, double b) { return std::min(a, b); }, -3, 3},
      {"logaddexp", [](const Tensor& a, const Tensor& b) { return a.logaddexp(b); },
       [](double a, double b) { return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))); }, -3, 3},
      {"lerp", [](const Tensor& a, const Tensor& b) { return a.lerp(b, 0.3); },
       [](double a, double b) { return a + 0.3 * (b - a); }, -3, 3},
  };
}
struct Compare {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<bool(double, double)> ref;
};
std::vector<Compare> comparisons() {
  return {
      {"eq", [](const Tensor& a, const Tensor& b) { return a.eq(b); }, std::equal_to<double>()},
      {"ne", [](const Tensor& a, const Tensor& b) { return a.ne(b); }, std::not_equal_to<double>()},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; }, std::less<double>()},
      {"le", [](const Tensor& a, const Tensor& b) { return a <= b; }, std::less_equal<double>()},
      {"gt", [](const Tensor& a, const Tensor& b) { return a > b; }, std::greater<double>()},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; }, std::greater_equal<double>()},
  };
}
// Shape pairs that broadcast, with empty and size-1 dims.
const std::vector<std::pair<std::vector<i64>, std::vector<i64>>> kPairs = {
    {{3, 4}, {3, 4}}, {{3, 4}, {4}},    {{2, 1, 3}, {4, 1}}, {{1}, {5}},
    {{}, {2, 3}},     {{0, 3}, {1, 3}}, {{3, 1}, {1, 0}},    {{2, 3}, {}},
};
Host random_host(std::vector<i64> s, std::uint64_t seed, double lo, double hi, bool small_ints = false) {
  Host h{s, random_values(numel_of(s), seed, lo, hi)};
  if (small_ints)  // few distinct values, so comparisons see ties
    for (double& x : h.v) x = std::round(x);
  return h;
}
}  // namespace

TEST_CASE("binary ops: broadcasting forward", "[math]") {
  std::uint64_t seed = 2000;
  for (const Binary& b : binary_ops()) {
    for (auto [sa, sb] : kPairs) {
      Host ha = random_host(sa, seed++, b.lo, b.hi), hb = random_host(sb, seed++, b.lo, b.hi);
      std::vector<i64> s = broadcast_shape(sa, sb);
      Host ea = host_broadcast(ha, s), eb = host_broadcast(hb, s);
      std::vector<double> want;
      for (std::size_t i = 0; i < ea.v.size(); ++i) want.push_back(b.ref(ea.v[i], eb.v[i]));
      INFO(b.name << " of " << to_string(Dims(sa)) << " and " << to_string(Dims(sb)));
      Tensor y = b.op(tensor_of(ha), tensor_of(hb));
      REQUIRE(shape_of(y) == s);
      require_close(y.to_vector<double>(), want, 1e-12, 1e-12);
      Tensor r = b.op(tensor_of(hb), tensor_of(ha));  // and the other way round
      REQUIRE(shape_of(r) == s);
    }
  }
}

TEST_CASE("binary ops: non-contiguous operands", "[math]") {
  std::uint64_t seed = 2500;
  Sampler sample;
  for (const Binary& b : binary_ops()) {
    std::vector<Layout> ls = layouts(seed += 20, b.lo, b.hi, b.lo);
    for (const Layout& l : ls) {
      if (!sample()) continue;
      // the same layout against a fresh contiguous operand of its shape, and against a flipped row
      Host other = random_host(l.h.shape, seed++, b.lo, b.hi);
      INFO(b.name << " on " << l.name);
      std::vector<double> want;
      for (std::size_t i = 0; i < l.h.v.size(); ++i) want.push_back(b.ref(l.h.v[i], other.v[i]));
      require_close(b.op(l.t, tensor_of(other)).to_vector<double>(), want, 1e-12, 1e-12);
      want.clear();
      for (std::size_t i = 0; i < l.h.v.size(); ++i) want.push_back(b.ref(other.v[i], l.h.v[i]));
      require_close(b.op(tensor_of(other), l.t).to_vector<double>(), want, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("binary ops: scalars on either side", "[math]") {
  std::vector<double> v = {0.5, -1.25, 2, 3.5};
  Tensor x(v, {2, 2});
  auto check = [&](const std::string& name, const Tensor& y, const std::function<double(double)>& f) {
    INFO(name);
    REQUIRE(y.dtype() == dtypes::float64);
    REQUIRE(shape_of(y) == std::vector<i64>{2, 2});
    require_close(y.to_vector<double>(), map(v, f), 1e-15, 1e-15);
  };
  check("2 - x", 2 - x, [](double a) { return 2 - a; });
  check("x - 2", x - 2, [](double a) { return a - 2; });
  check("x / 3", x / 3, [](double a) { return a / 3; });
  check("3 / x", 3 / x, [](double a) { return 3 / a; });
  check("1.5 + x", 1.5 + x, [](double a) { return 1.5 + a; });
  check("x * 0.25", x * 0.25, [](double a) { return a * 0.25; });
  check("-x", -x, [](double a) { return -a; });
  check("x.pow(2)", x.pow(2), [](double a) { return a * a; });
  check("x.pow(0.5)", x.pow(0.5), [](double a) { return std::pow(a, 0.5); });
  check("x.maximum(1)", x.maximum(1), [](double a) { return std::max(a, 1.0); });
  check("x.minimum(1)", x.minimum(1), [](double a) { return std::min(a, 1.0); });
  auto cmp = [&](const std::string& name, const Tensor& y, const std::function<bool(double)>& f) {
    INFO(name);
    REQUIRE(y.dtype() == dtypes::bool_);
    require_close(y.to_vector<double>(), map(v, [&](double a) { return double(f(a)); }), 0, 0);
  };
  cmp("x < 2", x < 2, [](double a) { return a < 2; });
  cmp("2 < x", 2 < x, [](double a) { return 2 < a; });
  cmp("x <= 2", x <= 2, [](double a) { return a <= 2; });
  cmp("x > 0.5", x > 0.5, [](double a) { return a > 0.5; });
  cmp("0.5 >= x", 0.5 >= x, [](double a) { return 0.5 >= a; });
  // float16 keeps its dtype with a float scalar, as PyTorch does
  Tensor h(v, {4}, {.dtype = dtypes::float16});
  REQUIRE((h * 0.5).dtype() == dtypes::float16);
  REQUIRE((1 - h).dtype() == dtypes::float16);
}

TEST_CASE("comparisons and where: broadcasting, ties, NaN", "[math]") {
  std::uint64_t seed = 3000;
  for (const Compare& c : comparisons()) {
    for (auto [sa, sb] : kPairs) {
      Host ha = random_host(sa, seed++, -2, 2, true), hb = random_host(sb, seed++, -2, 2, true);
      std::vector<i64> s = broadcast_shape(sa, sb);
      Host ea = host_broadcast(ha, s), eb = host_broadcast(hb, s);
      std::vector<double> want;
      for (std::size_t i = 0; i < ea.v.size(); ++i) want.push_back(c.ref(ea.v[i], eb.v[i]));
      INFO(c.name << " of " << to_string(Dims(sa)) << " and " << to_string(Dims(sb)));
      Tensor y = c.op(tensor_of(ha), tensor_of(hb));
      REQUIRE(y.dtype() == dtypes::bool_);
      REQUIRE(shape_of(y) == s);
      require_close(y.to_vector<double>(), want, 0, 0);
    }
    // NaN compares false except with ne
    Tensor a(std::vector<double>{kNaN, kNaN, 1}, {3}), b(std::vector<double>{kNaN, 1, kNaN}, {3});
    bool ne = c.name == "ne";
    INFO(c.name << " with NaN");
    require_close(c.op(a, b).to_vector<double>(), {double(ne), double(ne), double(ne)}, 0, 0);
  }
  // where, with the condition, x and y broadcasting against each other
  Host cond = random_host({2, 1, 3}, 31, -1, 1), hx = random_host({4, 1}, 32, -5, 5),
       hy = random_host({3}, 33, -5, 5);
  std::vector<i64> s = {2, 4, 3};
  Host ec = host_broadcast(cond, s), ex = host_broadcast(hx, s), ey = host_broadcast(hy, s);
  std::vector<double> want;
  for (std::size_t i = 0; i < ec.v.size(); ++i) want.push_back(ec.v[i] > 0 ? ex.v[i] : ey.v[i]);
  Tensor w = (tensor_of(cond) > 0).where(tensor_of(hx), tensor_of(hy));
  REQUIRE(shape_of(w) == s);
  require_close(w.to_vector<double>(), want, 0, 0);
  Tensor ws = (tensor_of(cond) > 0).where(1.5, -2);
  require_close(ws.to_vector<double>(), map(cond.v, [](double c) { return c > 0 ? 1.5 : -2; }), 0, 0);
}

TEST_CASE("binary ops: dtype promotion", "[math]") {
  Tensor i32(std::vector<std::int32_t>{1, 2, -3}, {3});
  Tensor i64t(std::vector<std::int64_t>{4, 5, 6}, {3});
  Tensor f32(std::vector<float>{0.5f, 1.5f, 2.5f}, {3});
  Tensor f64(std::vector<double>{0.5, 1.5, 2.5}, {3});
  Tensor u8(std::vector<std::uint8_t>{1, 2, 3}, {3});
  Tensor i8(std::vector<std::int8_t>{-1, 2, 3}, {3});
  Tensor b(std::vector<float>{1, 0, 1}, {3}, {.dtype = dtypes::bool_});
  REQUIRE((i32 + f32).dtype() == dtypes::float32);
  REQUIRE((f32 + i32).dtype() == dtypes::float32);
  REQUIRE((i32 + f64).dtype() == dtypes::float64);
  REQUIRE((f32 + f64).dtype() == dtypes::float64);
  REQUIRE((i32 + i64t).dtype() == dtypes::int64);
  REQUIRE((i8 + u8).dtype() == dtypes::int16);
  REQUIRE((b + i32).dtype() == dtypes::int32);
  REQUIRE((i32 * 2).dtype() == dtypes::int32);
  REQUIRE((2 * i32).dtype() == dtypes::int32);
  REQUIRE((i32 - 1).dtype() == dtypes::int32);
  REQUIRE((i32 * 2.5).dtype() == dtypes::float32);
  REQUIRE((i32 < f32).dtype() == dtypes::bool_);
  REQUIRE(i32.eq(i64t).dtype() == dtypes::bool_);
  require_close((i32 * 2).to_vector<double>(), {2, 4, -6}, 0, 0);
  require_close((i32 + f32).to_vector<double>(), {1.5, 3.5, -0.5}, 0, 0);
  require_close((i32 * 2.5).to_vector<double>(), {2.5, 5, -7.5}, 0, 0);
  // true division: int / int is float32
  Tensor q = i32 / Tensor(std::vector<std::int32_t>{2, 4, 2}, {3});
  REQUIRE(q.dtype() == dtypes::float32);
  require_close(q.to_vector<double>(), {0.5, 0.5, -1.5}, 0, 0);
  REQUIRE((i32 / 2).dtype() == dtypes::float32);
  require_close((i32 / 2).to_vector<double>(), {0.5, 1, -1.5}, 0, 0);
  require_close((7 / i32).to_vector<double>(), {7, 3.5, double(float(-7.0 / 3))}, 0, 0);
  REQUIRE(i32.maximum(0).dtype() == dtypes::int32);
  REQUIRE(i32.minimum(-1).dtype() == dtypes::int32);
  REQUIRE(i32.maximum(0.5).dtype() == dtypes::float32);
  require_close(i32.minimum(-1).to_vector<double>(), {-1, -1, -3}, 0, 0);
  // integer pow stays integer
  REQUIRE(i32.pow(2).dtype() == dtypes::int32);
  require_close(i32.pow(2).to_vector<double>(), {1, 4, 9}, 0, 0);
  require_close((u8 * 100).to_vector<double>(), {100, 200, 44}, 0, 0);  // uint8 wraps, as in PyTorch
}

TEST_CASE("binary ops: gradients with broadcasting", "[math]") {
  std::uint64_t seed = 4000;
  Sampler sample;
  for (const Binary& b : binary_ops()) {
    for (auto [sa, sb] : std::vector<std::pair<std::vector<i64>, std::vector<i64>>>{
             {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1}, {1, 3}}, {{}, {2, 2}}}) {
      if (!sample()) continue;
      INFO(b.name << " of " << to_string(Dims(sa)) << " and " << to_string(Dims(sb)));
      check_gradients(
          [&](const std::vector<Tensor>& x) { return b.op(x[0], x[1]); },
          {random_tensor(Dims(sa), seed++, b.lo, b.hi), random_tensor(Dims(sb), seed++, b.lo, b.hi)});
    }
  }
  // scalars on either side, and where
  check_gradients([](const std::vector<Tensor>& x) { return 2 - x[0] / 3 + 1 / x[0] - x[0] * 0.5; },
                  {random_tensor({3}, 50, 0.5, 2)});
  check_gradients([](const std::vector<Tensor>& x) { return (x[0] > 0).where(x[0], x[1]); },
                  {random_tensor({2, 3}, 51), random_tensor({3}, 52)});
}

TEST_CASE("binary ops: shape mismatch errors", "[math]") {
  Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({4});
  REQUIRE_THROWS_AS(a + b, std::invalid_argument);
  REQUIRE_THROWS_WITH(a * b, Contains("(2, 3)") && Contains("(4,)"));
  REQUIRE_THROWS_WITH(a.maximum(b), Contains("(2, 3)") && Contains("(4,)"));
  REQUIRE_THROWS_WITH(a < Tensor::ones({3, 3}), Contains("(2, 3)") && Contains("(3, 3)"));
}

// ---- issue 40's elementwise tests, reductions and rounding, at their edges ----

TEST_CASE("isnan, isinf, isfinite, logical_not, round, trunc, copysign at special values", "[math]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {0.0, -0.0, 1.5, -2.5, 2.5, 0.5, -0.5, inf, -inf, nan, 3e9, -7.49999};
  for (DType dt : {dtypes::float32, dtypes::float64}) {
    INFO(dt.name);
    Tensor x = Tensor(v, {12}).cast(dt);
    std::vector<bool> isnan, isinf, isfin, lnot;
    for (double a : v)
      isnan.push_back(a != a), isinf.push_back(std::isinf(a)), isfin.push_back(std::isfinite(a));
    for (double a : v) lnot.push_back(a == 0);
    auto bools = [](const Tensor& t) {
      REQUIRE(t.dtype() == dtypes::bool_);
      std::vector<bool> out;
      for (double b : t.to_vector<double>()) out.push_back(b != 0);
      return out;
    };
    CHECK(bools(x.isnan()) == isnan);
    CHECK(bools(x.isinf()) == isinf);
    CHECK(bools(x.isfinite()) == isfin);
    CHECK(bools(x.logical_not()) == lnot);
    std::vector<double> r = x.round().to_vector<double>(), t = x.trunc().to_vector<double>();
    for (std::size_t i = 0; i < v.size(); ++i) {
      INFO(v[i]);
      double want_r = std::nearbyint(static_cast<double>(dt == dtypes::float32 ? float(v[i]) : v[i]));
      if (v[i] != v[i]) {
        CHECK(std::isnan(r[i]));
        CHECK(std::isnan(t[i]));
        continue;
      }
      CHECK(r[i] == want_r);  // halves to even: 2.5 -> 2, -2.5 -> -2, 0.5 -> 0
      CHECK(t[i] == std::trunc(dt == dtypes::float32 ? float(v[i]) : v[i]));
    }
    // copysign: -0 and -inf carry the sign, NaN magnitudes stay NaN
    std::vector<double> c = Tensor(std::vector<double>{1, 1, 1, 1, 2}, {5})
                                .cast(dt)
                                .copysign(Tensor(std::vector<double>{-0.0, 0.0, -inf, inf, -3}, {5}).cast(dt))
                                .to_vector<double>();
    CHECK(c == std::vector<double>{-1, 1, -1, 1, -2});
    // copysign forward on random signs, and its gradient (y's is 0: only its sign bit is read)
    std::vector<double> a = random_values(20, 41, -3, 3), s = random_values(20, 42, -3, 3), want;
    for (std::size_t k = 0; k < a.size(); ++k) want.push_back(std::copysign(a[k], s[k]));
    require_close(Tensor(a, {20}).copysign(Tensor(s, {20})).to_vector<double>(), want, 1e-15, 0);
  }
  // Integer tensors: never NaN or inf, round is the identity
  Tensor i = Tensor(std::vector<std::int32_t>{-3, 0, 7}, {3});
  CHECK(i.isnan().to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(i.isfinite().to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(i.round().dtype() == dtypes::int32);
  // asinh and acosh past where x^2 overflows, logaddexp at infinities
  std::vector<double> big =
      Tensor(std::vector<double>{1e30, -1e30}, {2}).cast(dtypes::float32).asinh().to_vector<double>();
  require_close(big, {std::asinh(1e30), std::asinh(-1e30)}, 3e-6, 0);
  CHECK(Tensor(std::vector<double>{1e30}, {1}).cast(dtypes::float32).acosh().item<double>() ==
        Approx(std::acosh(1e30)).epsilon(1e-6));
  CHECK(std::isnan(Tensor(std::vector<double>{0.5}, {1}).acosh().item<double>()));
  std::vector<double> l = Tensor(std::vector<double>{-inf, inf, -inf, 3}, {4})
                              .logaddexp(Tensor(std::vector<double>{-inf, inf, 2, -inf}, {4}))
                              .to_vector<double>();
  CHECK(l == std::vector<double>{-inf, inf, 2, 3});
}

TEST_CASE("var, logsumexp, softmin, any, all, argmin against loops", "[math]") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = random_values(24, 77, -3, 3);
  Tensor x(v, {4, 6});
  auto row = [&](std::size_t r) { return std::vector<double>(v.begin() + r * 6, v.begin() + r * 6 + 6); };
  std::vector<double> var, lse, smin0;
  std::vector<double> amin;
  for (std::size_t r = 0; r < 4; ++r) {
    std::vector<double> w = row(r);
    double m = 0, s = 0, mx = -inf, e = 0;
    for (double a : w) m += a / 6, mx = std::max(mx, a);
    for (double a : w) s += (a - m) * (a - m), e += std::exp(a - mx);
    var.push_back(s / 5), lse.push_back(mx + std::log(e));
    amin.push_back(double(std::min_element(w.begin(), w.end()) - w.begin()));
  }
  require_close(x.var(1).to_vector<double>(), var, 1e-12, 1e-12);
  require_close(
      x.var({1}, false, 0).to_vector<double>(),
      [&] {
        std::vector<double> o;
        for (double a : var) o.push_back(a * 5 / 6);
        return o;
      }(),
      1e-12, 1e-12);
  require_close(x.logsumexp(1).to_vector<double>(), lse, 1e-12, 1e-12);
  CHECK(x.logsumexp(1, true).shape() == Dims{4, 1});
  CHECK(x.argmin(1).to_vector<double>() == amin);
  Tensor sm = x.softmin(1);
  require_close(sm.to_vector<double>(), (-x).softmax(1).to_vector<double>(), 1e-15, 1e-15);
  // logsumexp of large values and of -inf rows
  Tensor big = Tensor(std::vector<double>{1000, 1000, -inf, -inf}, {2, 2});
  require_close(big.logsumexp(1).to_vector<double>(), {1000 + std::log(2.0), -inf}, 1e-12, 0);
  check_gradients([](const std::vector<Tensor>& t) { return t[0].logsumexp(1); },
                  {random_tensor({3, 5}, 5, -2, 2)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].var(0); },
                  {random_tensor({4, 3}, 6, -2, 2)});
  Tensor b = Tensor(std::vector<double>{0, 0, 1, 4, 2, 3}, {2, 3});
  CHECK(b.any(1).to_vector<double>() == std::vector<double>{1, 1});
  CHECK(b.all(1).to_vector<double>() == std::vector<double>{0, 1});
  CHECK(b.any().item<double>() == 1);
  CHECK(b.all().item<double>() == 0);
  CHECK(b.any(1).dtype() == dtypes::bool_);
  // argmin of integers at INT_MIN (-x would wrap)
  Tensor ints = Tensor(std::vector<std::int32_t>{5, std::numeric_limits<std::int32_t>::min(), 3}, {3});
  CHECK(ints.argmin().item<std::int64_t>() == 1);
}

TEST_CASE("copysign: gradient through its magnitude", "[math]") {
  Tensor sgn = Tensor(random_values(6, 43, -3, 3), {2, 3});
  check_gradients([&](const std::vector<Tensor>& t) { return t[0].copysign(sgn); },
                  {random_tensor({2, 3}, 44, 0.2, 3)});
}

TEST_CASE("integer minimum at INT_MIN; sign, sqrt, rsqrt and clip gradients as PyTorch's", "[math]") {
  for (const char* dev : {"CPU", "CLANG", "LLVM"}) {
    if (!metagrad::test::available(dev)) continue;  // (sanitizer builds have no LLVM)
    INFO(dev);
    constexpr std::int32_t lo32 = std::numeric_limits<std::int32_t>::min();
    constexpr std::int64_t lo64 = std::numeric_limits<std::int64_t>::min();
    Tensor a = Tensor(std::vector<std::int32_t>{lo32, 5, -7, lo32}, {4}, {.device = dev});
    Tensor b = Tensor(std::vector<std::int32_t>{3, lo32, -8, lo32}, {4}, {.device = dev});
    CHECK(a.minimum(b).to_vector<std::int64_t>() == std::vector<std::int64_t>{lo32, lo32, -8, lo32});
    CHECK(a.min().item<std::int64_t>() == lo32);
    CHECK(a.maximum(b).to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 5, -7, lo32});
    Tensor c = Tensor(std::vector<std::int64_t>{4, lo64, 9, -2, 3, 1}, {2, 3}, {.device = dev});
    CHECK(c.min().item<std::int64_t>() == lo64);
    CHECK(c.min(1).to_vector<std::int64_t>() == std::vector<std::int64_t>{lo64, -2});
    CHECK(c.minimum(c.scalar_like(0)).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, lo64, 0, -2, 0, 0});
  }
  auto grads = [](const std::function<Tensor(const Tensor&)>& f, const std::vector<double>& v) {
    Tensor x(v, {static_cast<std::int64_t>(v.size())}, {.requires_grad = true});
    f(x).sum().backward();
    return x.grad->to_vector<double>();
  };
  // sign: 0 everywhere (a tie at -1 gave 0.25)
  CHECK(grads([](const Tensor& x) { return x.sign(); }, {-2, -1, -0.5, 0, 1, 3}) ==
        std::vector<double>(6, 0.0));
  // sqrt and rsqrt below 0: NaN, as d sqrt(x) = 1 / (2 sqrt(x)) there (below -1 it was 0)
  for (double g : grads([](const Tensor& x) { return x.sqrt(); }, {-3, -0.5})) CHECK(std::isnan(g));
  for (double g : grads([](const Tensor& x) { return x.rsqrt(); }, {-3, -0.5})) CHECK(std::isnan(g));
  require_close(grads([](const Tensor& x) { return x.sqrt(); }, {4}), {0.25}, 1e-15, 0);
  // clip: 1 inside [min, max], bounds included (0.5 there before), 0 outside; min > max gives max
  CHECK(grads([](const Tensor& x) { return x.clip(-1, 2); }, {-3, -1, 0, 2, 5}) ==
        std::vector<double>{0, 1, 1, 1, 0});
  CHECK(Tensor(std::vector<double>{-5, 0, 5}, {3}).clip(2, 1).to_vector<double>() ==
        std::vector<double>{1, 1, 1});
  CHECK(std::isnan(Tensor(std::vector<double>{std::nan("")}, {1}).clip(0, 1).item<double>()));
}

TEST_CASE("logaddexp, rsqrt and acosh gradients at their special points as PyTorch's", "[math]") {
  constexpr double inf = std::numeric_limits<double>::infinity();
  // PyTorch: d/dx logaddexp(x, y) = 1 / (1 + exp(y - x)), a half each at x = y.
  std::vector<double> v = {-3, 0, 2.5, 1e30};
  Tensor x(v, {4}, {.requires_grad = true}), y(v, {4}, {.requires_grad = true});
  Tensor r = x.logaddexp(y);
  r.sum().backward();
  require_close(r.to_vector<double>(),
                {-3 + std::numbers::ln2, std::numbers::ln2, 2.5 + std::numbers::ln2, 1e30});
  CHECK(x.grad->to_vector<double>() == std::vector<double>(4, 0.5));
  CHECK(y.grad->to_vector<double>() == std::vector<double>(4, 0.5));
  // rsqrt at +0: -0.5 x^-1.5 = -inf, the reciprocal's there (was NaN: 0 times the power's inf).
  Tensor z(std::vector<double>{0, 4}, {2}, {.requires_grad = true});
  z.rsqrt().sum().backward();
  std::vector<double> gz = z.grad->to_vector<double>();
  CHECK(gz[0] == -inf);
  require_close({gz[1]}, {-0.0625}, 1e-15, 1e-12);
  // acosh: PyTorch's 1 / sqrt(x^2 - 1) everywhere: finite below -1 (the value NaN), NaN between -1
  // and 1, inf at 1; above 1 as before.
  Tensor a(std::vector<double>{-3, -1.5, -0.5, 0.5, 1, 2, 1e30}, {7}, {.requires_grad = true});
  Tensor h = a.acosh();
  h.sum().backward();
  std::vector<double> hv = h.to_vector<double>(), g = a.grad->to_vector<double>();
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::isnan(hv[i]));
  require_close({g[0], g[1]}, {1 / std::sqrt(8.0), 1 / std::sqrt(1.25)}, 1e-12, 1e-12);
  CHECK(std::isnan(g[2]));
  CHECK(std::isnan(g[3]));
  CHECK(g[4] == inf);
  require_close({g[5], g[6]}, {1 / std::sqrt(3.0), 1e-30}, 1e-12, 1e-12);
}
