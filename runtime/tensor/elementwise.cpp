// Elementwise Tensor ops: broadcasting and promotion, the mlop wrappers, and the hlops built on them.
#include <cmath>
#include <numbers>

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/hlops.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

std::pair<Tensor, Tensor> Tensor::broadcasted(const Tensor& y) const {
  Tensor a = *this, b = y;
  if (a.dtype() != b.dtype()) {
    DType t = promote_types(a.dtype(), b.dtype());
    a = a.cast(t), b = b.cast(t);
  }
  if (a.device() != b.device())
    throw std::invalid_argument(detail::cat("broadcast: tensors on ", a.device(), " and ", b.device()));
  if (a.shape() == b.shape()) return {a, b};
  std::size_t n = std::max(a.shape().size(), b.shape().size());
  auto padded = [n](const Dims& s) {
    std::vector<std::int64_t> out(n - s.size(), 1);
    out.insert(out.end(), s.begin(), s.end());
    return out;
  };
  std::vector<std::int64_t> sa = padded(a.shape()), sb = padded(b.shape()), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (sa[i] != sb[i] && sa[i] != 1 && sb[i] != 1)
      throw std::invalid_argument(detail::cat("broadcast: shapes ", to_string(a.shape()), " and ",
                                              to_string(b.shape()), " are incompatible"));
    out[i] = sa[i] == 1 ? sb[i] : sa[i];
  }
  return {a.reshape(sa).expand(out), b.reshape(sb).expand(out)};
}

Tensor scalar_for(const Tensor& like, double value, bool integral) {
  DType dt = like.dtype();
  if (!integral && !dtypes::is_float(dt)) dt = dtypes::float32;
  if (integral && dt == dtypes::bool_) dt = dtypes::int64;
  return Tensor(LazyBuffer::full(Dims::filled(like.shape().size(), 1), value, dt, like.device()), false);
}
Tensor Tensor::scalar_like(double value) const { return scalar_for(*this, value, false); }

Tensor Tensor::add(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  return mlops::Add::apply(a, b);
}
Tensor Tensor::sub(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  return mlops::Sub::apply(a, b);
}
Tensor Tensor::mul(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  return mlops::Mul::apply(a, b);
}
Tensor Tensor::div(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  if (!dtypes::is_float(a.dtype())) a = a.cast(dtypes::float32), b = b.cast(dtypes::float32);
  return mlops::Div::apply(a, b);
}
Tensor Tensor::pow(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  return mlops::Pow::apply(a, b);
}
Tensor Tensor::pow(double y) const { return pow(scalar_for(*this, y, false)); }
Tensor Tensor::rpow(double base) const { return scalar_for(*this, base, false).pow(*this); }
Tensor Tensor::pow_integral(double y) const { return pow(scalar_for(*this, y, true)); }
Tensor Tensor::rpow_integral(double base) const { return scalar_for(*this, base, true).pow(*this); }
Tensor Tensor::maximum(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  return mlops::Maximum::apply(a, b);
}
// -max(-x, -y) for floats (the maximum's tie and NaN rules, mirrored); integers and bool by a
// comparison, where negating INT_MIN would wrap.
Tensor Tensor::minimum(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  if (!dtypes::is_float(a.dtype())) return a.lt(b).where(a, b);
  return -((-a).maximum(-b));
}

// Comparisons are not differentiable: they work on detached data and give bool. With only CMPEQ
// and MAX in the op set, x <= y is max(x, y) == y, and x < y is (x <= y) and not (x == y); both
// are false when either side is NaN.
Tensor Tensor::eq(const Tensor& y) const {
  auto [a, b] = detach().broadcasted(y.detach());
  return mlops::Equal::apply(a, b);
}
Tensor Tensor::ne(const Tensor& y) const { return eq(y).eq(scalar_for(*this, 0, true).cast(dtypes::bool_)); }
Tensor Tensor::le(const Tensor& y) const {
  auto [a, b] = detach().broadcasted(y.detach());
  return a.maximum(b).eq(b);
}
Tensor Tensor::lt(const Tensor& y) const {
  auto [a, b] = detach().broadcasted(y.detach());
  return (a.le(b) * a.ne(b)).cast(dtypes::bool_);
}
Tensor Tensor::gt(const Tensor& y) const { return y.lt(*this); }
Tensor Tensor::ge(const Tensor& y) const { return y.le(*this); }

namespace {
// The shape a and b broadcast to, numpy's rule; an error naming op and both shapes if none.
Dims broadcast_shape(const char* op, const Dims& a, const Dims& b) {
  std::size_t n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t x = i + a.size() >= n ? a[i + a.size() - n] : 1,
                 y = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (x != y && x != 1 && y != 1)
      throw std::invalid_argument(
          detail::cat(op, ": shapes ", to_string(a), " and ", to_string(b), " are incompatible"));
    out[i] = x == 1 ? y : x;
  }
  return out;
}
// t with ones in front and expanded to `shape`, which it broadcasts to.
Tensor broadcast_to(const Tensor& t, const Dims& shape) {
  if (t.shape() == shape) return t;
  std::vector<std::int64_t> s(shape.size() - t.shape().size(), 1);
  s.insert(s.end(), t.shape().begin(), t.shape().end());
  return t.reshape(s).expand(std::vector<std::int64_t>(shape.begin(), shape.end()));
}
}  // namespace

// A select (TernaryOps::WHERE): the branch not taken never reaches the result, inf and NaN
// included. x and y promote to one dtype, the three broadcast together, and the condition (true
// where non-zero) is not differentiated.
Tensor Tensor::where(const Tensor& x, const Tensor& y) const {
  auto [a, b] = x.broadcasted(y);
  Tensor c = detach().cast(dtypes::bool_);
  if (c.shape() != a.shape()) {
    Dims s = broadcast_shape("where", c.shape(), a.shape());
    c = broadcast_to(c, s), a = broadcast_to(a, s), b = broadcast_to(b, s);
  }
  return mlops::Where::apply(c, a, b);
}
Tensor Tensor::where(double x, double y) const { return where(scalar_like(x), scalar_like(y)); }
// The scalar takes the tensor branch's dtype where it is float (an integer branch with a fractional
// scalar promotes to float32), so a float16 or float64 branch keeps its dtype.
Tensor Tensor::where(const Tensor& x, double y) const {
  return where(x, scalar_for(x, y, y == std::trunc(y) && !dtypes::is_float(x.dtype())));
}
Tensor Tensor::where(double x, const Tensor& y) const {
  return where(scalar_for(y, x, x == std::trunc(x) && !dtypes::is_float(y.dtype())), y);
}
Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  if (mask.device() != device())
    throw std::invalid_argument(
        detail::cat("masked_fill: the mask is on ", mask.device(), ", the tensor on ", device()));
  bool fits = mask.ndim() <= ndim();
  for (std::size_t i = 0; fits && i < mask.shape().size(); ++i) {
    std::int64_t m = mask.shape()[mask.shape().size() - 1 - i], x = shape()[shape().size() - 1 - i];
    fits = m == x || m == 1;
  }
  if (!fits)
    throw std::invalid_argument(detail::cat("masked_fill: mask ", to_string(mask.shape()),
                                            " does not broadcast to the tensor's shape ",
                                            to_string(shape())));
  return mask.where(value, *this);
}

namespace {
// Float math on integer or bool input computes in float32, as PyTorch does (the integer kernels of
// EXP2, LOG2 and SIN are the identity).
// (op: the caller, named in an undefined tensor's error)
Tensor floating(const Tensor& x, const char* op = __builtin_FUNCTION()) {
  return dtypes::is_float(x.dtype(op)) ? x : x.cast(dtypes::float32);
}
// A bound that keeps an integer tensor integer when it is whole (clip(int_x, 0, 6) stays int).
Tensor bound_for(const Tensor& x, double v) {
  bool whole = std::isfinite(v) && std::floor(v) == v && x.dtype() != dtypes::bool_;
  return scalar_for(x, v, whole);
}
// The largest magnitude below which a float dtype has fractions: beyond it every value is whole.
double whole_from(DType dt) {
  return dt == dtypes::float16    ? 0x1p10
         : dt == dtypes::bfloat16 ? 0x1p7
         : dt == dtypes::float32  ? 0x1p23
                                  : 0x1p52;
}
// floor (up = false) or ceil (up = true) of a float tensor, from a truncating cast to int64 and one
// comparison. The cast sees x clipped to +-whole_from (so it never saturates), and x - clip(x) adds
// back what lies beyond: exact for every finite value, inf stays inf, NaN stays NaN. The gradient
// is 0 (1 - 1 through the clip), as in PyTorch, not tinygrad's straight-through 1.
Tensor round_toward(const Tensor& x, bool up) {
  double lim = whole_from(x.dtype());
  Tensor y = x.clip(-lim, lim), yd = y.detach();
  Tensor t = yd.cast(dtypes::int64).cast(x.dtype());
  Tensor r = up ? t + (yd > t).cast(x.dtype()) : t - (yd < t).cast(x.dtype());
  return r + (x - y);
}
}  // namespace

Tensor Tensor::neg() const { return *this * -1; }
Tensor Tensor::log() const { return mlops::Log::apply(floating(*this)); }
Tensor Tensor::log2() const { return hlops::log2(*this); }
Tensor Tensor::exp() const { return mlops::Exp::apply(floating(*this)); }
Tensor Tensor::exp2() const { return mlops::Exp2::apply(floating(*this)); }
Tensor Tensor::relu() const { return mlops::Relu::apply(*this); }
Tensor Tensor::sin() const { return mlops::Sin::apply(floating(*this)); }
Tensor Tensor::cos() const { return hlops::cos(floating(*this)); }
Tensor Tensor::tan() const { return hlops::tan(*this); }
Tensor Tensor::ceil() const { return dtypes::is_float(dtype()) ? round_toward(*this, true) : *this; }
Tensor Tensor::floor() const { return dtypes::is_float(dtype()) ? round_toward(*this, false) : *this; }
// Negative x gives NaN and rsqrt(±0) is ±inf, as in PyTorch (C's pow(-0, -0.5) is +inf: at zero
// rsqrt is 1/x, its sign and its gradient, -inf, as pow's). The max with -1 keeps every negative
// negative but sends -inf, where C's pow gives +inf and +0, to NaN as well.
namespace {
// x with -inf made NaN, the gradient passing through elsewhere (a max with -1 did the same to the
// values but cut the gradient below -1, where PyTorch's is NaN).
Tensor minus_inf_to_nan(const Tensor& x) {
  return x.eq(x.scalar_like(-std::numeric_limits<double>::infinity()))
      .where(x.scalar_like(std::numeric_limits<double>::quiet_NaN()), x);
}
}  // namespace
Tensor Tensor::sqrt() const { return minus_inf_to_nan(floating(*this)).pow(0.5); }
// The power's operand is 1 at zero, so that its gradient there, 0 times inf, does not reach x as
// NaN beside the reciprocal's -inf.
Tensor Tensor::rsqrt() const {
  Tensor x = floating(*this), zero = x.eq(x.scalar_like(0));
  return zero.where(x.reciprocal(), minus_inf_to_nan(zero.where(x.scalar_like(1), x)).pow(-0.5));
}
Tensor Tensor::square() const { return hlops::square(*this); }
// min > max gives max everywhere, as PyTorch's clamp; NaN stays NaN.
// A whole scalar keeps an integer tensor integer (x.maximum(0) of int32 is int32).
Tensor Tensor::maximum(double y) const { return maximum(bound_for(*this, y)); }
Tensor Tensor::minimum(double y) const { return minimum(bound_for(*this, y)); }
// As PyTorch's clamp: the gradient is 1 inside [min, max], bounds included (a max and a min split
// it at a tie); min > max gives max everywhere; NaN stays NaN.
Tensor Tensor::clip(double min, double max) const {
  if (min > max)
    return isnan().where(
        *this, bound_for(*this, max).expand(std::vector<std::int64_t>(shape().begin(), shape().end())));
  Tensor lo = bound_for(*this, min), hi = bound_for(*this, max);
  return lt(lo).where(lo, gt(hi).where(hi, *this));
}
// Unsigned and bool values are their own magnitude (negating them would wrap).
Tensor Tensor::abs() const {
  if (dtypes::is_unsigned(dtype()) || dtype() == dtypes::bool_) return *this;
  return hlops::abs(*this);
}
// From comparisons, so sign(inf) is 1 and tiny values keep their sign (tinygrad's x / (|x| + 1e-10)
// gives NaN and 0 there). NaN passes through a where on x, which also ties the result to x: its
// gradient is 0 everywhere, as in PyTorch.
Tensor Tensor::sign() const {
  if (dtype() == dtypes::bool_) return *this;
  Tensor v = gt(scalar_for(*this, 0, true)).cast(dtype()) - lt(scalar_for(*this, 0, true)).cast(dtype());
  return dtypes::is_float(dtype()) ? isnan().where(*this, v) : v;
}
Tensor Tensor::reciprocal() const { return hlops::reciprocal(*this); }

// Activations; the hlops whose formula the static path shares are in detail/hlops.hpp.
// sigmoid is an mlop: one exp whose overflow is harmless forward, and a backward from its output.
Tensor Tensor::sigmoid() const { return mlops::Sigmoid::apply(floating(*this)); }
Tensor Tensor::erf() const { return mlops::Erf::apply(floating(*this)); }
Tensor Tensor::elu(double alpha) const { return hlops::elu(floating(*this), alpha); }
Tensor Tensor::celu(double alpha) const { return hlops::celu(floating(*this), alpha); }
Tensor Tensor::swish() const { return hlops::swish(*this); }
Tensor Tensor::silu() const { return swish(); }
Tensor Tensor::relu6() const { return hlops::relu6(*this); }
Tensor Tensor::hardswish() const { return hlops::hardswish(*this); }
Tensor Tensor::tanh() const { return hlops::tanh(floating(*this)); }
Tensor Tensor::hardtanh(double min_val, double max_val) const { return clip(min_val, max_val); }
Tensor Tensor::gelu(std::string_view approximate) const {
  if (approximate == "tanh") return mlops::Gelu::apply(floating(*this));
  if (approximate == "none") {  // x * Phi(x), Phi the normal distribution's
    Tensor x = floating(*this);
    return x * 0.5 * ((x * M_SQRT1_2).erf() + 1);
  }
  throw std::invalid_argument(
      detail::cat("gelu: approximate must be \"none\" or \"tanh\", got \"", std::string(approximate), "\""));
}
Tensor Tensor::quick_gelu() const { return hlops::quick_gelu(*this); }
Tensor Tensor::leakyrelu(double neg_slope) const { return hlops::leakyrelu(floating(*this), neg_slope); }
Tensor Tensor::mish() const { return hlops::mish(*this); }
Tensor Tensor::softplus(double beta) const { return hlops::softplus(floating(*this), beta); }
Tensor Tensor::softsign() const { return hlops::softsign(*this); }
Tensor Tensor::hardsigmoid() const { return (floating(*this) / 6 + 0.5).clip(0, 1); }
Tensor Tensor::logsigmoid() const { return -(-floating(*this)).softplus(); }
Tensor Tensor::selu() const {
  return floating(*this).elu(1.6732632423543772848170429916717) * 1.0507009873554804934193349852946;
}
Tensor Tensor::log10() const { return log() * (1 / std::numbers::ln10); }
Tensor Tensor::sinh() const {
  Tensor x = floating(*this);
  return (x.exp() - (-x).exp()) * 0.5;
}
Tensor Tensor::cosh() const {
  Tensor x = floating(*this);
  return (x.exp() + (-x).exp()) * 0.5;
}
namespace {
// Where x^2 would overflow (and x^2 +- 1 is x^2 anyway), asinh and acosh are log(2|x|) = log|x| + log 2.
double square_limit(DType d) { return d == dtypes::float64 ? 1e150 : d == dtypes::float16 ? 64 : 1e18; }
Tensor log_x_plus_root(const Tensor& a, double one) {  // log(a + sqrt(a^2 + one)), a >= 0
  Tensor big = a.gt(a.scalar_like(square_limit(a.dtype())));
  Tensor safe = big.where(a.scalar_like(1), a);
  return big.where(a.log() + std::numbers::ln2, (safe + (safe * safe + one).sqrt()).log());
}
}  // namespace
Tensor Tensor::asinh() const {  // odd: computed on |x|, so large negative x does not cancel
  Tensor x = floating(*this), r = log_x_plus_root(x.abs(), 1);
  return x.lt(x.scalar_like(0)).where(-r, r);
}
// NaN below 1, also where x^2 - 1 would overflow to +inf. The gradient is PyTorch's 1 / sqrt(x^2 - 1)
// everywhere: below 1 it is that of NaN - acosh(-x) (finite below -1, NaN between -1 and 1). Each
// branch reads x only where it is taken (2 or -2 elsewhere), so the other's gradient stays 0.
Tensor Tensor::acosh() const {
  Tensor x = floating(*this), low = x.lt(x.scalar_like(1));
  Tensor below = x.scalar_like(std::numeric_limits<double>::quiet_NaN()) -
                 log_x_plus_root(-low.where(x, x.scalar_like(-2)), -1);
  return low.where(below, log_x_plus_root(low.where(x.scalar_like(2), x), -1));
}
Tensor Tensor::atanh() const {
  Tensor x = floating(*this);
  return ((1 + x) / (1 - x)).log() * 0.5;
}
// One function each (metagrad/functions.hpp): a kernel forward, the exact derivative backward.
Tensor Tensor::asin() const { return mlops::Asin::apply(floating(*this)); }
Tensor Tensor::acos() const { return mlops::Acos::apply(floating(*this)); }
Tensor Tensor::atan() const { return mlops::Atan::apply(floating(*this)); }
Tensor Tensor::trunc() const { return lt(scalar_like(0)).where(ceil(), floor()); }
// floor(x), one more past the half, and at exactly a half the even one of the two.
Tensor Tensor::round() const {
  if (!dtypes::is_float(dtype())) return *this;
  Tensor f = floor(), d = *this - f;
  Tensor odd = (f * 0.5).floor().ne(f * 0.5);
  return d.gt(scalar_like(0.5)).where(f + 1, d.lt(scalar_like(0.5)).where(f, odd.where(f + 1, f)));
}
// The sign bit of y: negative, or -0 (whose reciprocal is -inf).
Tensor Tensor::copysign(const Tensor& y) const {
  Tensor x = floating(*this), s = floating(y), zero = s.scalar_like(0);
  Tensor negative =
      s.lt(zero).where(s.scalar_like(1), s.reciprocal().lt(zero).cast(s.dtype())).cast(dtypes::bool_);
  return negative.where(-x.abs(), x.abs());
}
Tensor Tensor::lerp(const Tensor& end, double weight) const { return *this + (end - *this) * weight; }
Tensor Tensor::lerp(const Tensor& end, const Tensor& weight) const { return *this + (end - *this) * weight; }
// max + log(1 + exp(-|x - y|)); equal arguments (both +-inf among them) give x/2 + y/2 + log 2
// (x, without overflow), whose gradient is PyTorch's there, a half each.
Tensor Tensor::logaddexp(const Tensor& y) const {
  Tensor a = floating(*this), b = floating(y);
  Tensor m = a.maximum(b), d = (a - b).abs();
  Tensor tie = a.eq(b);
  Tensor safe = tie.where(d.scalar_like(0), d);
  return tie.where(a * 0.5 + b * 0.5 + std::numbers::ln2, m + ((-safe).exp() + 1).log());
}
Tensor Tensor::isnan() const {
  return dtypes::is_float(dtype()) ? ne(*this) : Tensor::zeros_like(*this, {.dtype = dtypes::bool_});
}
Tensor Tensor::isinf() const {
  if (!dtypes::is_float(dtype())) return Tensor::zeros_like(*this, {.dtype = dtypes::bool_});
  return abs().eq(scalar_like(std::numeric_limits<double>::infinity()));
}
Tensor Tensor::isfinite() const {
  if (!dtypes::is_float(dtype())) return Tensor::ones_like(*this, {.dtype = dtypes::bool_});
  return (*this - *this).eq(scalar_like(0));
}
Tensor Tensor::logical_not() const { return eq(scalar_like(0)); }

// PyTorch's rule: equal, or a finite error within atol + rtol |other| (an infinite one is close only
// when equal, so 1 is not close to inf), or both NaN with equal_nan. Or and and of bools are selects
// with bool branches (c.where(c, d), c.where(d, c)): a scalar branch would promote.
Tensor Tensor::isclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  if (!(rtol >= 0 && atol >= 0))
    throw std::invalid_argument(detail::cat(
        "isclose of ", to_string(shape()), " and ", to_string(other.shape()),
        ": rtol and atol must be non-negative, got ", std::to_string(rtol), " and ", std::to_string(atol)));
  auto bools = [](const Tensor& t) { return t.dtype() == dtypes::bool_ ? t.cast(dtypes::int32) : t; };
  auto [a, b] = [&] {
    try {
      return bools(*this).broadcasted(bools(other));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(
          detail::cat("isclose of ", to_string(shape()), " and ", to_string(other.shape()), ": ", e.what()));
    }
  }();
  Tensor close = a.eq(b);
  Tensor error = (a - b).abs(), bound = b.abs();
  if (!dtypes::is_float(error.dtype()))
    error = error.cast(dtypes::float32), bound = bound.cast(dtypes::float32);
  Tensor finite = error.isfinite(), within = finite.where(error.le(bound * rtol + atol), finite);
  close = close.where(close, within);
  if (equal_nan) {
    Tensor nan = a.isnan(), both = nan.where(b.isnan(), nan);
    close = both.where(both, close);
  }
  return close;
}
bool Tensor::allclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return isclose(other, rtol, atol, equal_nan).all().cast(dtypes::int32).item<std::int32_t>() != 0;
}
Tensor Tensor::cast(DType dt) const { return dt == dtype() ? *this : mlops::Cast::apply(*this, dt); }
Tensor Tensor::contiguous() const { return mlops::Contiguous::apply(*this); }

Tensor operator+(const Tensor& x, const Tensor& y) { return x.add(y); }
Tensor operator-(const Tensor& x, const Tensor& y) { return x.sub(y); }
Tensor operator*(const Tensor& x, const Tensor& y) { return x.mul(y); }
Tensor operator/(const Tensor& x, const Tensor& y) { return x.div(y); }
Tensor operator-(const Tensor& x) { return x.neg(); }
Tensor operator<(const Tensor& x, const Tensor& y) { return x.lt(y); }
Tensor operator<=(const Tensor& x, const Tensor& y) { return x.le(y); }
Tensor operator>(const Tensor& x, const Tensor& y) { return x.gt(y); }
Tensor operator>=(const Tensor& x, const Tensor& y) { return x.ge(y); }
Tensor operator==(const Tensor& x, const Tensor& y) { return x.eq(y); }
Tensor operator!=(const Tensor& x, const Tensor& y) { return x.ne(y); }
Tensor pow(const Tensor& x, const Tensor& y) { return x.pow(y); }
Tensor pow(const Tensor& x, double y) { return x.pow(y); }
Tensor pow(double x, const Tensor& y) { return y.rpow(x); }

}  // namespace metagrad
