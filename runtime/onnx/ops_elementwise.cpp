// Elementwise operators: math, activations, comparison and logic, Cast, Clip, Where, the variadic
// Max/Min/Sum/Mean. Binary arithmetic on host constants stays on the host (shape arithmetic).
#include <cmath>
#include <limits>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

Prepare unary(std::function<Tensor(const Tensor&)> f) {
  return [f](const NodeInfo&) -> Run { return [f](Args& a) -> std::vector<Value> { return {f(a.t(0))}; }; };
}

// Broadcasts two host tensors through f (on int64 for integer dtypes, on double for floating ones).
template <class F>
Host host_binary(const Host& a, const Host& b, DType out, F f) {
  Host r;
  r.dtype = out;
  r.shape = broadcast_shapes(a.shape, b.shape);
  std::int64_t total = 1;
  for (auto d : r.shape) total *= d;
  bool flt = a.is_float() || b.is_float();
  for (std::int64_t k = 0; k < total; ++k) {
    std::int64_t ia = broadcast_offset(r.shape, a.shape, k), ib = broadcast_offset(r.shape, b.shape, k);
    if (flt)
      r.push(static_cast<double>(f(a.at(ia), b.at(ib))));
    else
      r.push(static_cast<double>(f(a.int_at(ia), b.int_at(ib))));
  }
  return r;
}

// Input 0 as `to` (string_dtype for STRING): on the host when it is there, strings always.
Value cast_value(Args& a, DType to) {
  if (to == string_dtype) return a.is_string(0) ? *a.in[0] : Value(to_strings(a.h(0)));
  if (a.is_string(0)) return from_strings(a.str(0), to);
  if (a.is_host(0)) return a.h(0).cast(to);
  return a.t(0).cast(to);
}

// Before opset 7, `broadcast=1` with `axis` aligns the second input's dims at that axis of the first.
Tensor aligned(const Tensor& x, const Tensor& y, std::optional<std::int64_t> axis) {
  if (!axis || y.ndim() == x.ndim()) return y;
  std::int64_t ax = norm_axis(*axis, x.ndim(), "broadcast axis");
  std::vector<std::int64_t> s(y.shape().begin(), y.shape().end());
  while (static_cast<std::int64_t>(s.size()) + ax < x.ndim()) s.push_back(1);
  return y.reshape(s);
}
std::optional<std::int64_t> legacy_axis(const NodeInfo& n) {
  if (n.opset() >= 7 || !n.i("broadcast", 0) || !n.has("axis")) return std::nullopt;
  return n.i("axis", 0);
}

// A binary op: on the host when both inputs are host constants and `hf` is given, else on Tensors.
template <class HF>
Prepare binary(std::function<Tensor(const Tensor&, const Tensor&)> f, HF hf, bool compare = false) {
  return [f, hf, compare](const NodeInfo& n) -> Run {
    auto axis = legacy_axis(n);
    return [f, hf, compare, axis](Args& a) -> std::vector<Value> {
      if (!axis && a.all_host() && a.h(0).numel() <= kHostLimit && a.h(1).numel() <= kHostLimit)
        return {host_binary(a.h(0), a.h(1), compare ? dtypes::bool_ : a.dtype(0), hf)};
      return {f(a.t(0), aligned(a.t(0), a.t(1), axis))};
    };
  };
}

bool is_int(const Tensor& x) { return !dtypes::is_float(x.dtype()); }

// ONNX keeps the first input's type where metagrad would promote (Pow, integer Div).
Tensor as(const Tensor& r, DType d) { return r.dtype() == d ? r : r.cast(d); }

Prepare variadic(Tensor (*f)(const Tensor&, const Tensor&), bool mean = false) {
  return [f, mean](const NodeInfo&) -> Run {
    return [f, mean](Args& a) -> std::vector<Value> {
      Tensor r = a.t(0);
      for (std::size_t k = 1; k < a.size(); ++k) r = f(r, a.t(k));
      if (mean) r = r / static_cast<double>(a.size());
      return {r};
    };
  };
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  auto u = [&](const char* name, std::function<Tensor(const Tensor&)> f) { t[name] = unary(std::move(f)); };
  u("Abs", [](const Tensor& x) { return x.abs(); });
  u("Neg", [](const Tensor& x) { return x.neg(); });
  u("Exp", [](const Tensor& x) { return x.exp(); });
  u("Log", [](const Tensor& x) { return x.log(); });
  u("Sqrt", [](const Tensor& x) { return x.sqrt(); });
  u("Reciprocal", [](const Tensor& x) { return x.reciprocal(); });
  u("Floor", [](const Tensor& x) { return x.floor(); });
  u("Ceil", [](const Tensor& x) { return x.ceil(); });
  u("Round", [](const Tensor& x) { return x.round(); });
  u("Sin", [](const Tensor& x) { return x.sin(); });
  u("Cos", [](const Tensor& x) { return x.cos(); });
  u("Tan", [](const Tensor& x) { return x.tan(); });
  u("Asin", [](const Tensor& x) { return x.asin(); });
  u("Acos", [](const Tensor& x) { return x.acos(); });
  u("Atan", [](const Tensor& x) { return x.atan(); });
  u("Sinh", [](const Tensor& x) { return x.sinh(); });
  u("Cosh", [](const Tensor& x) { return x.cosh(); });
  u("Asinh", [](const Tensor& x) { return x.asinh(); });
  u("Acosh", [](const Tensor& x) { return x.acosh(); });
  u("Atanh", [](const Tensor& x) { return x.atanh(); });
  u("Tanh", [](const Tensor& x) { return x.tanh(); });
  u("Sigmoid", [](const Tensor& x) { return x.sigmoid(); });
  u("Relu", [](const Tensor& x) { return x.relu(); });
  u("Erf", [](const Tensor& x) { return x.erf(); });
  u("Sign", [](const Tensor& x) { return as(x.sign(), x.dtype()); });
  u("Not", [](const Tensor& x) { return x.logical_not(); });
  u("IsNaN", [](const Tensor& x) { return x.isnan(); });
  u("Softsign", [](const Tensor& x) { return x.softsign(); });
  u("Softplus", [](const Tensor& x) { return x.softplus(); });
  u("HardSwish", [](const Tensor& x) { return x.hardswish(); });
  u("BitwiseNot", [](const Tensor& x) { return x.bitwise_not(); });

  t["LeakyRelu"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 0.01);
    return [alpha](Args& a) -> std::vector<Value> { return {a.t(0).leakyrelu(alpha)}; };
  };
  t["Elu"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 1.0);
    return [alpha](Args& a) -> std::vector<Value> { return {a.t(0).elu(alpha)}; };
  };
  t["Celu"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 1.0);
    return [alpha](Args& a) -> std::vector<Value> { return {a.t(0).celu(alpha)}; };
  };
  t["Selu"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 1.67326319217681884765625), gamma = n.f("gamma", 1.05070102214813232421875);
    return [alpha, gamma](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      return {(x > 0).where(x, (x.exp() - 1) * alpha) * gamma};
    };
  };
  t["HardSigmoid"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 0.2), beta = n.f("beta", 0.5);
    return [alpha, beta](Args& a) -> std::vector<Value> { return {(a.t(0) * alpha + beta).clip(0, 1)}; };
  };
  t["ThresholdedRelu"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 1.0);
    return [alpha](Args& a) -> std::vector<Value> { return {(a.t(0) > alpha).where(a.t(0), 0.0)}; };
  };
  t["Shrink"] = [](const NodeInfo& n) -> Run {
    double bias = n.f("bias", 0), lambd = n.f("lambd", 0.5);
    return [bias, lambd](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Tensor r = (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0.0));
      return {as(r, x.dtype())};
    };
  };
  t["Gelu"] = [](const NodeInfo& n) -> Run {
    std::string approx = n.s("approximate", "none");
    if (approx != "none" && approx != "tanh") n.unsupported("approximate '" + approx + "'");
    return [approx](Args& a) -> std::vector<Value> { return {a.t(0).gelu(approx)}; };
  };
  t["PRelu"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Tensor slope = a.t(1);
      // Older exporters give a (C,) slope for (N, C, ...): it applies per channel.
      if (slope.ndim() == 1 && x.ndim() > 2 && slope.numel() == x.shape()[1] &&
          slope.numel() != x.shape().back()) {
        std::vector<std::int64_t> s(static_cast<std::size_t>(x.ndim() - 1), 1);
        s[0] = -1;
        slope = slope.reshape(s);
      }
      return {(x < 0).where(x * slope, x)};
    };
  };
  t["IsInf"] = [](const NodeInfo& n) -> Run {
    bool neg = n.i("detect_negative", 1), pos = n.i("detect_positive", 1);
    return [neg, pos](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      double inf = std::numeric_limits<double>::infinity();
      if (neg && pos) return {x.isinf()};
      if (pos) return {x == inf};
      if (neg) return {x == -inf};
      return {Tensor::zeros(x.shape(), {.dtype = dtypes::bool_})};
    };
  };

  t["Add"] =
      binary([](const Tensor& x, const Tensor& y) { return x + y; }, [](auto x, auto y) { return x + y; });
  t["Sub"] =
      binary([](const Tensor& x, const Tensor& y) { return x - y; }, [](auto x, auto y) { return x - y; });
  t["Mul"] =
      binary([](const Tensor& x, const Tensor& y) { return x * y; }, [](auto x, auto y) { return x * y; });
  t["Div"] = binary(
      [](const Tensor& x, const Tensor& y) { return is_int(x) ? as(x.div(y, "trunc"), x.dtype()) : x / y; },
      [](auto x, auto y) {
        if constexpr (std::is_integral_v<decltype(x)>)
          return y == 0 ? decltype(x)(0) : x / y;
        else
          return x / y;
      });
  t["Equal"] = binary([](const Tensor& x, const Tensor& y) { return x == y; },
                      [](auto x, auto y) { return x == y; }, true);
  t["Less"] = binary([](const Tensor& x, const Tensor& y) { return x < y; },
                     [](auto x, auto y) { return x < y; }, true);
  t["LessOrEqual"] = binary([](const Tensor& x, const Tensor& y) { return x <= y; },
                            [](auto x, auto y) { return x <= y; }, true);
  t["Greater"] = binary([](const Tensor& x, const Tensor& y) { return x > y; },
                        [](auto x, auto y) { return x > y; }, true);
  t["GreaterOrEqual"] = binary([](const Tensor& x, const Tensor& y) { return x >= y; },
                               [](auto x, auto y) { return x >= y; }, true);
  t["And"] = binary([](const Tensor& x, const Tensor& y) { return x & y; },
                    [](auto x, auto y) { return x && y; }, true);
  t["Or"] = binary([](const Tensor& x, const Tensor& y) { return x | y; },
                   [](auto x, auto y) { return x || y; }, true);
  t["Xor"] = binary([](const Tensor& x, const Tensor& y) { return x ^ y; },
                    [](auto x, auto y) { return (x != 0) != (y != 0); }, true);
  t["BitwiseAnd"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0) & a.t(1)}; };
  };
  t["BitwiseOr"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0) | a.t(1)}; };
  };
  t["BitwiseXor"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0) ^ a.t(1)}; };
  };
  t["BitShift"] = [](const NodeInfo& n) -> Run {
    std::string dir = n.s("direction", "");
    if (dir != "LEFT" && dir != "RIGHT") n.unsupported("direction '" + dir + "'");
    return [dir](Args& a) -> std::vector<Value> {
      return {dir == "LEFT" ? a.t(0).lshift(a.t(1)) : a.t(0).rshift(a.t(1))};
    };
  };
  t["Pow"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      // A constant exponent (PyTorch's LayerNorm and GELU at opset 13: Pow(x - mean, 2)) as a literal, and 2
      // as x * x: a kernel that reads the exponent from a buffer calls powf per element and does not
      // vectorize (the encoder's variance reductions ran at 0.2 GFLOP/s).
      if (a.is_host(1) && a.h(1).numel() == 1 && a.shape(1).size() <= x.shape().size() &&
          dtypes::is_float(x.dtype())) {
        const double e = a.h(1).at(0);
        if (e == 1) return {x};
        if (e == 2) return {x * x};
        return {x.pow(e)};
      }
      return {as(pow(x, a.t(1).cast(dtypes::is_float(x.dtype()) ? x.dtype() : dtypes::float64)), x.dtype())};
    };
  };
  t["Mod"] = [](const NodeInfo& n) -> Run {
    bool fmod = n.i("fmod", 0);
    return [fmod](Args& a) -> std::vector<Value> {
      const Tensor &x = a.t(0), &y = a.t(1);
      if (!fmod && dtypes::is_float(x.dtype()))
        throw Error("fmod=0 needs integer inputs, they are " + std::string(x.dtype().name));
      return {fmod ? x.fmod(y) : x.remainder(y)};
    };
  };
  t["Max"] = variadic([](const Tensor& x, const Tensor& y) { return x.maximum(y); });
  t["Min"] = variadic([](const Tensor& x, const Tensor& y) { return x.minimum(y); });
  t["Sum"] = variadic([](const Tensor& x, const Tensor& y) { return x + y; });
  t["Mean"] = variadic([](const Tensor& x, const Tensor& y) { return x + y; }, true);

  t["Where"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0).cast(dtypes::bool_).where(a.t(1), a.t(2))}; };
  };
  t["Clip"] = [](const NodeInfo& n) -> Run {
    double inf = std::numeric_limits<double>::infinity();
    double lo = n.f("min", -inf), hi = n.f("max", inf);
    bool attrs = n.opset() < 11;
    return [lo, hi, attrs](Args& a) -> std::vector<Value> {
      Tensor x = a.t(0);
      DType d = x.dtype();
      if (attrs) return {as(x.maximum(lo).minimum(hi), d)};
      if (a.has(1)) x = x.maximum(a.t(1));
      if (a.has(2)) x = x.minimum(a.t(2));
      return {as(x, d)};
    };
  };
  t["Cast"] = [](const NodeInfo& n) -> Run {
    int to = static_cast<int>(n.i("to", 0));
    auto d = to == ::onnx::TensorProto::STRING ? string_dtype : dtype_of_onnx(to);
    if (!d) n.unsupported(std::string("cast to ") + onnx_type_name(to));
    return [d = *d](Args& a) -> std::vector<Value> { return {cast_value(a, d)}; };
  };
  t["CastLike"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {cast_value(a, a.dtype(1))}; };
  };
}

}  // namespace metagrad::onnx::detail
