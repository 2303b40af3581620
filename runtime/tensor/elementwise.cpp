// Elementwise Tensor ops: broadcasting and promotion, the mlop wrappers, and the hlops built on them.
#include <cmath>
#include <numbers>

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
Tensor Tensor::pow(double y) const { return pow(scalar_for(*this, y, std::floor(y) == y)); }
Tensor Tensor::maximum(const Tensor& y) const {
  auto [a, b] = broadcasted(y);
  return mlops::Maximum::apply(a, b);
}
Tensor Tensor::maximum(double y) const { return maximum(scalar_for(*this, y, false)); }
Tensor Tensor::minimum(const Tensor& y) const { return -((-*this).maximum(-y)); }
Tensor Tensor::minimum(double y) const { return minimum(scalar_for(*this, y, false)); }

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

// cond * x + (1 - cond) * y: an inf or NaN in the branch not taken still reaches the result.
Tensor Tensor::where(const Tensor& x, const Tensor& y) const {
  auto [a, b] = x.broadcasted(y);
  Tensor c = cast(a.dtype());
  return c * a + (1 - c) * b;
}
Tensor Tensor::where(double x, double y) const { return where(scalar_like(x), scalar_like(y)); }

Tensor Tensor::neg() const { return *this * -1; }
Tensor Tensor::log() const { return mlops::Log::apply(*this); }
Tensor Tensor::exp() const { return mlops::Exp::apply(*this); }
Tensor Tensor::relu() const { return mlops::Relu::apply(*this); }
Tensor Tensor::sin() const { return mlops::Sin::apply(*this); }
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

}  // namespace metagrad
