// Division with a rounding mode, fmod and remainder (Python's %), and the bitwise ops. Floats are
// kernels from the true quotient (differentiable: d/dx 1, d/dy minus the rounded quotient, as
// PyTorch's). Integers are exact, so they run on the host in int64 (the kernel language has no
// integer division, remainder or bit operation; uint64 as its bits, read unsigned where that
// differs): both sides are realized, the values computed eagerly and stored in the promoted dtype,
// wrapping as C++ does; a 0 divisor is an error here, at the call, rather than a trap in a kernel.
// bitcast reads the bytes as another dtype.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {

std::string operands(const Tensor& x, const Tensor& y) {
  return detail::cat(x.dtype().name, " ", to_string(x.shape()), " and ", y.dtype().name, " ",
                     to_string(y.shape()));
}

// f on every pair of elements of x and y (broadcast, promoted to an integer or bool dtype) as int64;
// the results narrowed to that dtype (bool: non-zero).
Tensor on_host(const char* who, const Tensor& x, const Tensor& y,
               const std::function<std::int64_t(std::int64_t, std::int64_t, DType)>& f) {
  auto [a, b] = x.broadcasted(y);
  DType dt = a.dtype();
  if (dtypes::is_float(dt) && dtypes::is_int(x.dtype()) && dtypes::is_int(y.dtype()))
    throw std::invalid_argument(
        detail::cat(who, ": ", operands(x, y), " promote to ", dt.name,
                    " (uint64 and a signed integer have no common integer): cast one"));
  if (dtypes::is_float(dt))
    throw std::invalid_argument(detail::cat(who, ": needs integer or bool tensors, got ", operands(x, y)));
  if (CaptureLog::active)
    throw std::logic_error(detail::cat(who, ": computed on the host, which a TinyJit step cannot replay (",
                                       operands(x, y), ")"));
  std::vector<std::int64_t> va = a.cast(dtypes::int64).to_vector<std::int64_t>(),
                            vb = b.cast(dtypes::int64).to_vector<std::int64_t>();
  for (std::size_t i = 0; i < va.size(); ++i) va[i] = f(va[i], vb[i], dt);
  auto as = [&]<class T>(T) {
    std::vector<T> out(va.size());
    for (std::size_t i = 0; i < va.size(); ++i) out[i] = static_cast<T>(va[i]);
    return Tensor(out, a.shape(), {.device = x.device()});
  };
  if (dt == dtypes::int8) return as(std::int8_t{});
  if (dt == dtypes::uint8) return as(std::uint8_t{});
  if (dt == dtypes::int16) return as(std::int16_t{});
  if (dt == dtypes::uint16) return as(std::uint16_t{});
  if (dt == dtypes::int32) return as(std::int32_t{});
  if (dt == dtypes::uint32) return as(std::uint32_t{});
  if (dt == dtypes::uint64) return as(std::uint64_t{});  // its bits, from the int64 they were held in
  if (dt == dtypes::bool_) return as(std::uint8_t{}).cast(dtypes::bool_);
  return as(std::int64_t{});
}

int bits(DType dt) { return dt == dtypes::bool_ ? 1 : static_cast<int>(dt.itemsize) * 8; }

// The quotient rounded toward 0 and toward -inf, and the two remainders; INT64_MIN / -1 wraps.
std::int64_t trunc_div(std::int64_t a, std::int64_t b) {
  return b == -1 ? static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(a)) : a / b;
}
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = trunc_div(a, b);
  return b != -1 && a % b != 0 && ((a < 0) != (b < 0)) ? q - 1 : q;
}
std::int64_t trunc_mod(std::int64_t a, std::int64_t b) { return b == -1 ? 0 : a % b; }
std::int64_t floor_mod(std::int64_t a, std::int64_t b) {
  std::int64_t r = trunc_mod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

// An integer op whose divisor must not be 0. uint64 (its bits in int64) divides unsigned, where
// truncating and flooring agree; `mod` says which of quotient and remainder f is.
Tensor divide(const char* who, const Tensor& x, const Tensor& y,
              std::int64_t (*f)(std::int64_t, std::int64_t), bool mod) {
  return on_host(who, x, y, [&](std::int64_t a, std::int64_t b, DType dt) {
    if (b == 0)
      throw std::invalid_argument(detail::cat(who, ": integer division by zero (", operands(x, y), ")"));
    if (dt == dtypes::uint64) {
      auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
      return static_cast<std::int64_t>(mod ? ua % ub : ua / ub);
    }
    return f(a, b);
  });
}

bool integral(const Tensor& x, const Tensor& y) {
  return !dtypes::is_float(x.dtype()) && !dtypes::is_float(y.dtype());
}

}  // namespace

namespace {
// r non-zero and of the other sign than s (by comparisons: a product of tiny values would underflow).
Tensor opposite(const Tensor& r, const Tensor& s) {
  Tensor zero = r.scalar_like(0);
  return (r.lt(zero).ne(s.lt(zero)).cast(dtypes::int32) * r.ne(zero).cast(dtypes::int32)).cast(dtypes::bool_);
}
// x - trunc(x / y) y for floats, exact for float32 and float16 while |x / y| < 2^29: in float64 the
// product and the difference are then exact, and where x / y rounded up across an integer (the
// remainder's sign then differs from x's) one |y| goes back. float64 has no wider type: its remainder
// is within an ulp of x. An infinite y leaves a finite x, as C's fmod.
Tensor float_fmod(const Tensor& x_, const Tensor& y_) {
  auto [x0, y0] = x_.broadcasted(y_);
  bool wide = x0.dtype() != dtypes::float64;
  Tensor x = x0.cast(dtypes::float64), y = y0.cast(dtypes::float64);
  Tensor r = x - (x / y).trunc() * y;
  if (wide) r = opposite(r, x).where(r + y.abs() * x.sign(), r);
  r = (y.isinf() * x.isfinite()).cast(dtypes::bool_).where(x, r);
  return r.cast(x0.dtype());
}
// PyTorch's floor division of floats: (x - fmod(x, y)) / y, one less where fmod's sign is not y's,
// rounded to the nearest integer, so that it agrees with %: 1.0f // 0.1f is 9 (floor(x / y) gives 10,
// x / y rounding up to 10). x / 0 is inf or NaN. The gradient is 0, as PyTorch's: computed on detached
// values, then tied to x and y by terms that are 0 (a select, so no inf * 0).
Tensor floor_quotient(const Tensor& x_, const Tensor& y_) {
  auto [a, b] = x_.detach().broadcasted(y_.detach());
  Tensor m = float_fmod(a, b).cast(dtypes::float64), x = a.cast(dtypes::float64), y = b.cast(dtypes::float64);
  Tensor q = (x - m) / y;
  q = opposite(m, y).where(q - 1, q).round();
  q = y.eq(y.scalar_like(0)).where(x / y, q).cast(a.dtype());
  auto zero = [](const Tensor& t) { return t.isfinite().where(t * 0, 0.0); };
  return q + zero(x_) + zero(y_);
}
}  // namespace

Tensor Tensor::div(const Tensor& y, std::string_view rounding_mode) const {
  bool trunc = rounding_mode == "trunc";
  if (!trunc && rounding_mode != "floor")
    throw std::invalid_argument(detail::cat("div: rounding_mode must be \"trunc\" or \"floor\", got \"",
                                            std::string(rounding_mode), "\" (", operands(*this, y), ")"));
  if (integral(*this, y)) return divide("div", *this, y, trunc ? trunc_div : floor_div, false);
  if (trunc) return div(y).trunc();
  return floor_quotient(*this, y);
}
Tensor Tensor::floor_divide(const Tensor& y) const { return div(y, "floor"); }

Tensor Tensor::fmod(const Tensor& y) const {
  if (integral(*this, y)) return divide("fmod", *this, y, trunc_mod, true);
  return float_fmod(*this, y);
}
// fmod moved to y's sign where it differs, as Python's (and PyTorch's) %: -1 % inf is inf.
Tensor Tensor::remainder(const Tensor& y) const {
  if (integral(*this, y)) return divide("remainder", *this, y, floor_mod, true);
  Tensor r = float_fmod(*this, y), b = y.cast(r.dtype());
  return opposite(r, b).where(r + b, r);
}

Tensor Tensor::bitwise_and(const Tensor& y) const {
  return on_host("bitwise_and", *this, y, [](std::int64_t a, std::int64_t b, DType) { return a & b; });
}
Tensor Tensor::bitwise_or(const Tensor& y) const {
  return on_host("bitwise_or", *this, y, [](std::int64_t a, std::int64_t b, DType) { return a | b; });
}
Tensor Tensor::bitwise_xor(const Tensor& y) const {
  return on_host("bitwise_xor", *this, y, [](std::int64_t a, std::int64_t b, DType) { return a ^ b; });
}
// ~x of a bool is its negation, as PyTorch's.
Tensor Tensor::bitwise_not() const {
  if (dtype() == dtypes::bool_) return logical_not();
  Tensor zero = scalar_for(*this, 0, true);
  return on_host("bitwise_not", *this, zero, [](std::int64_t a, std::int64_t, DType) { return ~a; });
}
namespace {
Tensor shift(const char* who, const Tensor& x, const Tensor& y, bool left) {
  return on_host(who, x, y, [&](std::int64_t a, std::int64_t b, DType dt) {
    bool u64 = dt == dtypes::uint64;  // its bits in int64: a value past 2^63 is no negative shift
    if ((b < 0 && !u64) || static_cast<std::uint64_t>(b) >= static_cast<std::uint64_t>(bits(dt)))
      throw std::invalid_argument(detail::cat(
          who, ": shift by ", u64 ? std::to_string(static_cast<std::uint64_t>(b)) : std::to_string(b),
          " is outside [0, ", std::to_string(bits(dt)), ") (", operands(x, y), ")"));
    // Left: the bits that leave the dtype are dropped (the narrowing wraps); right: the sign repeats,
    // and an unsigned value (zero-extended into int64 here, or uint64's bits) has none.
    if (left) return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) << b);
    return u64 ? static_cast<std::int64_t>(static_cast<std::uint64_t>(a) >> b) : a >> b;
  });
}
}  // namespace
Tensor Tensor::lshift(const Tensor& y) const { return shift("lshift", *this, y, true); }
Tensor Tensor::rshift(const Tensor& y) const { return shift("rshift", *this, y, false); }

Tensor operator%(const Tensor& x, const Tensor& y) { return x.remainder(y); }
Tensor operator&(const Tensor& x, const Tensor& y) { return x.bitwise_and(y); }
Tensor operator|(const Tensor& x, const Tensor& y) { return x.bitwise_or(y); }
Tensor operator^(const Tensor& x, const Tensor& y) { return x.bitwise_xor(y); }
Tensor operator~(const Tensor& x) { return x.bitwise_not(); }
Tensor operator<<(const Tensor& x, const Tensor& y) { return x.lshift(y); }
Tensor operator>>(const Tensor& x, const Tensor& y) { return x.rshift(y); }

// A CUSTOM load copying the realized bytes through the host: no kernel renders a reinterpretation, and the
// bytes are the same on every device (each stores its dtypes as the host does).
Tensor Tensor::bitcast(DType dt) const {
  if (dt.itemsize != dtype().itemsize || dt == dtypes::bool_ || dtype() == dtypes::bool_)
    throw std::invalid_argument(
        detail::cat("bitcast: ", dtype().name, " (", std::to_string(dtype().itemsize),
                    " bytes) cannot be read as ", dt.name, " (", std::to_string(dt.itemsize), " bytes)",
                    dt == dtypes::bool_ || dtype() == dtypes::bool_ ? ": bool has no bit pattern of its own"
                                                                    : ": the sizes differ",
                    ", shape ", to_string(shape())));
  if (dt == dtype()) return detach();
  // (its input's bytes alone: a TinyJit step replays it)
  auto arg = std::make_shared<const CustomArg>(
      CustomArg{ReplayableFill{[](RawBuffer& o, const std::vector<RawBuffer*>& in) {
        std::vector<std::byte> b(in[0]->nbytes());
        in[0]->copyout(b.data());
        o.copyin(b.data());
      }}});
  return Tensor(
      LazyBuffer::loadop(LoadOps::CUSTOM, shape(), dt, device(), arg, {lazydata.get()->contiguous()}), false);
}

}  // namespace metagrad
