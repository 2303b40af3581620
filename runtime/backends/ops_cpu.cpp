// The CPU device: Interpreted, RawMallocBuffer-backed, one plain C++ function per op. It is the
// reference every other device is tested against, so it is exact and boring: float dtypes compute
// in double and round to their dtype after each op (float16 and bfloat16 to float32, as compiled
// devices compute them), integers wrap to their width. uint64 values are held as their bits in int64
// and read unsigned where that differs: division, powers, max, and conversions to and from float.
#include <cmath>
#include <limits>

#include "metagrad/device.hpp"

namespace metagrad {

namespace {

// float16 and bfloat16 compute in float32, as on every device: they round to 16 bits only where
// stored (write_from_double) and where cast to (narrow).
double round_to(DType dt, double v) {
  if (dt == dtypes::float32 || dt == dtypes::float16 || dt == dtypes::bfloat16) return static_cast<float>(v);
  return v;
}
double narrow(DType dt, double v) {
  if (dt == dtypes::float16) return static_cast<float>(half(static_cast<float>(v)));
  if (dt == dtypes::bfloat16) return static_cast<float>(bf16(static_cast<float>(v)));
  return v;
}

std::int64_t wrap_to(DType dt, std::int64_t v) {
  switch (dt.priority) {
    case dtypes::bool_.priority:
      return v != 0;
    case dtypes::int8.priority:
      return static_cast<std::int8_t>(v);
    case dtypes::uint8.priority:
      return static_cast<std::uint8_t>(v);
    case dtypes::int16.priority:
      return static_cast<std::int16_t>(v);
    case dtypes::uint16.priority:
      return static_cast<std::uint16_t>(v);
    case dtypes::int32.priority:
      return static_cast<std::int32_t>(v);
    case dtypes::uint32.priority:
      return static_cast<std::uint32_t>(v);
    default:
      return v;
  }
}

// Float to an integer dtype, the one rule every device follows (docs/design-changes.md): truncate
// toward zero, saturate to the dtype's range, NaN gives 0 (Rust's `as`, LLVM's fptosi.sat).
std::int64_t saturate_to(DType dt, double v) {
  if (std::isnan(v)) return 0;
  double lo = dtypes::min_value(dt), hi_excl = dtypes::limit(dt);  // int8: [-128, 128)
  if (v <= lo) return static_cast<std::int64_t>(lo);
  if (dt == dtypes::uint64)  // [2^63, 2^64) has no int64: the bits of the uint64
    return static_cast<std::int64_t>(v >= hi_excl ? ~std::uint64_t{0} : static_cast<std::uint64_t>(v));
  if (v >= hi_excl)
    return dt == dtypes::int64 ? std::numeric_limits<std::int64_t>::max()
                               : static_cast<std::int64_t>(hi_excl) - 1;
  return static_cast<std::int64_t>(v);
}
std::int64_t to_int(double v) { return saturate_to(dtypes::int64, v); }

Values make_values(DType dt, std::size_t n) {
  Values v{dt, {}, {}};
  (dtypes::is_float(dt) ? v.f.resize(n) : v.i.resize(n));
  return v;
}

using I = std::int64_t;
using U = std::uint64_t;

// out[k] = f(x[k]) (or f(x[k], y[k])), computed in double when `dt` is a float, else in int64, or by
// fu on uint64 sources (the same as fi where signedness makes no difference).
template <class FF, class FI, class FU>
Values map_values(DType dt, const std::vector<Values>& src, FF ff, FI fi, FU fu) {
  std::size_t n = src[0].size();
  Values out = make_values(dt, n);
  bool fl = dtypes::is_float(src[0].dtype), u64 = src[0].dtype == dtypes::uint64;
  for (std::size_t k = 0; k < n; ++k) {
    auto f = [&](const Values& x) {
      return fl ? x.f[k] : u64 ? static_cast<double>(static_cast<U>(x.i[k])) : static_cast<double>(x.i[k]);
    };
    auto i = [&](const Values& x) { return fl ? to_int(x.f[k]) : x.i[k]; };
    auto u = [&](const Values& x) { return static_cast<U>(x.i[k]); };
    if (dtypes::is_float(dt)) {
      out.f[k] = round_to(dt, src.size() == 1 ? ff(f(src[0]), 0.0) : ff(f(src[0]), f(src[1])));
    } else if (fl) {  // float inputs, integer result (CMPEQ, CAST); to bool is != 0, so NaN is true
      double v = src.size() == 1 ? ff(f(src[0]), 0.0) : ff(f(src[0]), f(src[1]));
      out.i[k] = dt == dtypes::bool_ ? v != 0 : saturate_to(dt, v);
    } else if (u64) {
      out.i[k] = wrap_to(dt, static_cast<I>(src.size() == 1 ? fu(u(src[0]), 0) : fu(u(src[0]), u(src[1]))));
    } else {
      out.i[k] = wrap_to(dt, src.size() == 1 ? fi(i(src[0]), 0) : fi(i(src[0]), i(src[1])));
    }
  }
  return out;
}
template <class FF, class FI>
Values map_values(DType dt, const std::vector<Values>& src, FF ff, FI fi) {
  return map_values(dt, src, ff, fi,
                    [fi](U a, U b) { return static_cast<U>(fi(static_cast<I>(a), static_cast<I>(b))); });
}

// c ? x : y, elementwise; a float condition is true where it is non-zero (NaN too).
Values where(const LazyOp&, const std::vector<Values>& src, const Dims&) {
  const Values &c = src.at(0), &x = src.at(1), &y = src.at(2);
  std::size_t n = x.size();
  Values out = make_values(x.dtype, n);
  bool cf = dtypes::is_float(c.dtype), xf = dtypes::is_float(x.dtype);
  for (std::size_t k = 0; k < n; ++k) {
    bool take = cf ? c.f[k] != 0 : c.i[k] != 0;
    if (xf)
      out.f[k] = take ? x.f[k] : y.f[k];
    else
      out.i[k] = take ? x.i[k] : y.i[k];
  }
  return out;
}

std::uint64_t upow(std::uint64_t x, std::uint64_t e) {
  std::uint64_t r = 1;
  for (; e; e >>= 1, x *= x)
    if (e & 1) r *= x;
  return r;
}
std::int64_t ipow(std::int64_t b, std::int64_t e) {
  if (e < 0) return b == 1 ? 1 : (b == -1 ? (e % 2 ? -1 : 1) : 0);
  return static_cast<std::int64_t>(upow(static_cast<std::uint64_t>(b), static_cast<std::uint64_t>(e)));
}

// Wrapping integer arithmetic without signed-overflow UB.
I wadd(I a, I b) { return static_cast<I>(static_cast<U>(a) + static_cast<U>(b)); }
I wsub(I a, I b) { return static_cast<I>(static_cast<U>(a) - static_cast<U>(b)); }
I wmul(I a, I b) { return static_cast<I>(static_cast<U>(a) * static_cast<U>(b)); }
I idiv(I a, I b) { return b == 0 ? 0 : (b == -1 ? wsub(0, a) : a / b); }  // C truncation; x/0 is 0
U udiv(U a, U b) { return b == 0 ? 0 : a / b; }
U umax(U a, U b) { return std::max(a, b); }

// Reduce src (of src_shape) to the op's output shape; `init` and `f` fold one value in.
template <class T, class F>
std::vector<T> reduce_into(const std::vector<T>& src, const Dims& src_shape, const Dims& out_shape, T init,
                           F f) {
  std::vector<T> out(static_cast<std::size_t>(prod(out_shape)), init);
  Dims ostride = Dims::filled(out_shape.size(), 0);
  for (std::size_t d = out_shape.size(), acc = 1; d-- > 0;) {
    ostride[d] = out_shape[d] == 1 ? 0 : static_cast<std::int64_t>(acc);
    acc *= static_cast<std::size_t>(out_shape[d]);
  }
  std::int64_t n = prod(src_shape);
  Dims pos = Dims::filled(src_shape.size(), 0);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t o = 0;
    for (std::size_t d = 0; d < pos.size(); ++d) o += pos[d] * ostride[d];
    out[static_cast<std::size_t>(o)] = f(out[static_cast<std::size_t>(o)], src[static_cast<std::size_t>(k)]);
    for (std::size_t d = src_shape.size(); d-- > 0;) {
      if (++pos[d] < src_shape[d]) break;
      pos[d] = 0;
    }
  }
  return out;
}

// fu folds uint64 values (their bits in int64), from 0 for a max.
template <class FF, class FI, class FU>
Interpreted::Fxn reduction(double finit, I iinit, FF ff, FI fi, FU fu) {
  return [=](const LazyOp& op, const std::vector<Values>& src, const Dims& src_shape) {
    const Dims& out_shape = std::get<Dims>(op.arg);
    Values x = src[0];
    if (op.op == FusedOps::MULACC) x = map_values(src[0].dtype, src, std::multiplies<double>(), wmul);
    Values out{x.dtype, {}, {}};
    if (dtypes::is_float(x.dtype)) {
      out.f = reduce_into(x.f, src_shape, out_shape, finit, ff);
      for (double& v : out.f) v = round_to(x.dtype, v);
    } else if (x.dtype == dtypes::uint64) {
      out.i = reduce_into(x.i, src_shape, out_shape, I{0}, [fu](I a, I b) {
        return static_cast<I>(fu(static_cast<U>(a), static_cast<U>(b)));
      });
    } else {
      out.i = reduce_into(x.i, src_shape, out_shape, iinit, fi);
      for (I& v : out.i) v = wrap_to(x.dtype, v);
    }
    return out;
  };
}

std::unique_ptr<Backend> make_cpu_backend() {
  auto same = [](auto ff, auto fi) {
    return Interpreted::Fxn([ff, fi](const LazyOp&, const std::vector<Values>& src, const Dims&) {
      return map_values(src[0].dtype, src, ff, fi);
    });
  };
  auto same_u = [](auto ff, auto fi, auto fu) {
    return Interpreted::Fxn([ff, fi, fu](const LazyOp&, const std::vector<Values>& src, const Dims&) {
      return map_values(src[0].dtype, src, ff, fi, fu);
    });
  };
  auto nan_max = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); };
  std::unordered_map<Op, Interpreted::Fxn, Interpreted::OpHash> fxn_for_op = {
      {UnaryOps::NOOP, same([](double a, double) { return a; }, [](I a, I) { return a; })},
      {UnaryOps::EXP2, same([](double a, double) { return std::exp2(a); }, [](I a, I) { return a; })},
      {UnaryOps::LOG2, same([](double a, double) { return std::log2(a); }, [](I a, I) { return a; })},
      {UnaryOps::SIN, same([](double a, double) { return std::sin(a); }, [](I a, I) { return a; })},
      {UnaryOps::CAST,
       [](const LazyOp& op, const std::vector<Values>& src, const Dims&) {
         DType to = std::get<DType>(op.arg);
         Values v = map_values(
             to, src, [](double a, double) { return a; }, [](I a, I) { return a; });
         for (double& x : v.f) x = narrow(to, x);
         return v;
       }},
      {BinaryOps::ADD, same(std::plus<double>(), wadd)},
      {BinaryOps::SUB, same(std::minus<double>(), wsub)},
      {BinaryOps::MUL, same(std::multiplies<double>(), wmul)},
      {BinaryOps::DIV, same_u(std::divides<double>(), idiv, udiv)},
      {BinaryOps::POW, same_u([](double a, double b) { return std::pow(a, b); }, ipow, upow)},
      {BinaryOps::MAX, same_u(
                           nan_max, [](I a, I b) { return std::max(a, b); }, umax)},
      {BinaryOps::CMPEQ,
       [](const LazyOp&, const std::vector<Values>& src, const Dims&) {
         return map_values(
             dtypes::bool_, src, [](double a, double b) { return double(a == b); },
             [](I a, I b) { return I(a == b); });
       }},
      {TernaryOps::WHERE, where},
      {ReduceOps::SUM, reduction(0.0, 0, std::plus<double>(), wadd, std::plus<U>())},
      {ReduceOps::MAX,
       reduction(
           -INFINITY, std::numeric_limits<I>::min(), nan_max, [](I a, I b) { return std::max(a, b); }, umax)},
      {FusedOps::MULACC, reduction(0.0, 0, std::plus<double>(), wadd, std::plus<U>())},
  };
  return std::make_unique<Interpreted>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); },
      std::move(fxn_for_op));
}

[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kCpu{"CPU", 40,
                                                                                   make_cpu_backend};

}  // namespace

}  // namespace metagrad
