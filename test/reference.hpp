#pragma once
// Reference arrays for the tensor tests: a dense row-major host array and index loops over it, so
// every expected value is computed by plain loops, independently of the library.
#include <cstdint>
#include <limits>
#include <vector>

namespace metagrad::test {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Host {
  std::vector<std::int64_t> shape;
  std::vector<double> v;
};

inline std::int64_t numel_of(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

// Calls f(index) for every multi-index of `shape`, row-major.
template <class F>
void for_each_index(const std::vector<std::int64_t>& shape, F f) {
  std::int64_t n = numel_of(shape);
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t k = 0; k < n; ++k) {
    f(idx);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Row-major flat offset of a multi-index.
inline std::int64_t offset(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& idx) {
  std::int64_t o = 0;
  for (std::size_t d = 0; d < idx.size(); ++d) o = o * shape[d] + idx[d];
  return o;
}

inline double at(const Host& h, const std::vector<std::int64_t>& idx) {
  return h.v[static_cast<std::size_t>(offset(h.shape, idx))];
}

// out[idx] = src(idx) over out_shape.
template <class F>
Host gather(std::vector<std::int64_t> out_shape, F src) {
  Host o{out_shape, {}};
  for_each_index(out_shape, [&](const std::vector<std::int64_t>& idx) { o.v.push_back(src(idx)); });
  return o;
}

}  // namespace metagrad::test
