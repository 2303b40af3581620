#pragma once
// Helpers of the static-path tests: random fixed tensors, element-by-element comparison with a
// reference computed in double, row-major unravelling, and the same data as a dynamic CPU Tensor.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "metagrad/fixed.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::test {

namespace fx = metagrad::fixed;
using fx::index_t;

template <class T, index_t... D>
fx::Tensor<T, D...> random_tensor(std::mt19937& rng, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  fx::Tensor<T, D...> t;
  for (T& x : t) x = static_cast<T>(u(rng));
  return t;
}

inline bool close(double got, double want, double rel = 1e-5, double abs = 1e-6) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= abs + rel * std::abs(want);
}

// Every element of t equals want(flat index), within tolerance.
template <class Tn, class F>
void check_all(const Tn& t, F want, double rel = 1e-5, double abs = 1e-6) {
  for (index_t i = 0; i < Tn::size; ++i) {
    double w = want(i);
    INFO("flat index " << i << ": got " << double(t[i]) << ", want " << w);
    REQUIRE(close(double(t[i]), w, rel, abs));
  }
}

// Row-major multi-index of a flat index.
template <std::size_t R>
std::array<index_t, R> unravel(index_t i, const std::array<index_t, R>& shape) {
  std::array<index_t, R> idx{};
  for (std::size_t d = R; d-- > 0;) idx[d] = i % shape[d], i /= shape[d];
  return idx;
}

// The same values as a dynamic Tensor on the CPU device (the reference).
template <class Tn>
metagrad::Tensor dynamic(const Tn& t) {
  std::vector<float> v(t.begin(), t.end());
  return metagrad::Tensor(v, Tn::shape::dims, {.device = "CPU"});
}

}  // namespace metagrad::test
