// Reductions over any set of axes, built on the Sum and Max mlops.
#include <algorithm>

#include "metagrad/tensor.hpp"

namespace metagrad {

Dims Tensor::reduced_shape(const Axes& axis) const {
  Dims out = shape();
  if (axis.all) {
    for (auto& d : out) d = 1;
    return out;
  }
  for (std::int64_t a : axis.axes) out[static_cast<std::size_t>(resolve_axis(a))] = 1;
  return out;
}

namespace {
// The result shape without the reduced axes, unless keepdim.
std::vector<std::int64_t> squeezed(const Dims& full, const Dims& reduced, const Axes& axis,
                                   std::int64_t ndim) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < ndim; ++i) {
    bool gone = axis.all || std::any_of(axis.axes.begin(), axis.axes.end(),
                                        [&](std::int64_t a) { return (a < 0 ? a + ndim : a) == i; });
    if (!gone) out.push_back(reduced[static_cast<std::size_t>(i)]);
  }
  (void)full;
  return out;
}
}  // namespace

Tensor Tensor::sum(const Axes& axis, bool keepdim) const {
  Dims r = reduced_shape(axis);
  Tensor ret = mlops::Sum::apply(*this, r);
  return keepdim ? ret : ret.reshape(squeezed(shape(), r, axis, ndim()));
}

Tensor Tensor::max(const Axes& axis, bool keepdim) const {
  Dims r = reduced_shape(axis);
  Tensor ret = mlops::Max::apply(*this, r);
  return keepdim ? ret : ret.reshape(squeezed(shape(), r, axis, ndim()));
}

Tensor Tensor::min(const Axes& axis, bool keepdim) const { return -((-*this).max(axis, keepdim)); }

Tensor Tensor::mean(const Axes& axis, bool keepdim) const {
  Tensor s = sum(axis, keepdim);
  std::int64_t n = s.numel() == 0 ? 1 : numel() / std::max<std::int64_t>(s.numel(), 1);
  return s.cast(dtypes::is_float(dtype()) ? dtype() : dtypes::float32) *
         (1.0 / static_cast<double>(std::max<std::int64_t>(n, 1)));
}

}  // namespace metagrad
