// Movement Tensor ops: views through the movement mlops (nothing is copied), and what is built on them.
#include "metagrad/tensor.hpp"

namespace metagrad {

std::int64_t Tensor::resolve_axis(std::int64_t axis) const {
  std::int64_t n = ndim();
  std::int64_t a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= std::max<std::int64_t>(n, 1))
    throw std::invalid_argument(
        detail::cat("axis ", std::to_string(axis), " is out of range for shape ", to_string(shape())));
  return a;
}

Tensor Tensor::reshape(const std::vector<std::int64_t>& new_shape) const {
  Dims s;
  std::int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      if (infer >= 0)
        throw std::invalid_argument("reshape: only one dimension can be -1, got " +
                                    to_string(Dims(new_shape)));
      infer = static_cast<std::int64_t>(i);
    } else if (new_shape[i] < 0) {
      throw std::invalid_argument(detail::cat("reshape of ", to_string(shape()), " to ",
                                              to_string(Dims(new_shape)), ": negative size"));
    } else {
      known *= new_shape[i];
    }
    s.push_back(new_shape[i]);
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw std::invalid_argument(detail::cat("reshape of ", to_string(shape()), " to ",
                                              to_string(Dims(new_shape)), ": cannot infer the -1"));
    s[static_cast<std::size_t>(infer)] = numel() / known;
  }
  if (prod(s) != numel())
    throw std::invalid_argument(
        detail::cat("reshape of ", to_string(shape()), " to ", to_string(s), ": element counts differ"));
  return s == shape() ? *this : mlops::Reshape::apply(*this, s);
}

Tensor Tensor::expand(const std::vector<std::int64_t>& new_shape) const {
  if (new_shape.size() < shape().size())
    throw std::invalid_argument(detail::cat("expand of ", to_string(shape()), " to ",
                                            to_string(Dims(new_shape)), ": fewer dimensions"));
  std::vector<std::int64_t> lead(new_shape.size() - shape().size(), 1);
  lead.insert(lead.end(), shape().begin(), shape().end());
  Dims s;
  for (std::size_t i = 0; i < new_shape.size(); ++i) s.push_back(new_shape[i] == -1 ? lead[i] : new_shape[i]);
  Tensor x = reshape(lead);
  return s == x.shape() ? x : mlops::Expand::apply(x, s);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& order) const {
  Dims o;
  for (std::int64_t a : order) o.push_back(a < 0 ? a + ndim() : a);
  return mlops::Permute::apply(*this, o);
}

Tensor Tensor::flip(const Axes& axes) const {
  Dims a;
  if (axes.all)
    for (std::int64_t i = 0; i < ndim(); ++i) a.push_back(i);
  for (std::int64_t x : axes.axes) a.push_back(resolve_axis(x));
  return mlops::Flip::apply(*this, a);
}

Tensor Tensor::pad(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg, double value) const {
  Pairs p;
  for (auto [b, e] : arg) p.push_back({b, e});
  if (p.size() != shape().size())
    throw std::invalid_argument(detail::cat("pad of ", to_string(shape()), " with ", to_string(p),
                                            ": one (before, after) per dimension"));
  Tensor ret = mlops::Pad::apply(*this, p);
  if (value == 0) return ret;
  return ret + (1 - mlops::Pad::apply(Tensor::ones_like(*this), p)) * value;
}

Tensor Tensor::shrink(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg) const {
  Pairs p;
  for (auto [b, e] : arg) p.push_back({b, e});
  bool noop = p.size() == shape().size();
  for (std::size_t i = 0; noop && i < p.size(); ++i) noop = p[i] == Pair{0, shape()[i]};
  return noop ? *this : mlops::Shrink::apply(*this, p);
}

}  // namespace metagrad
