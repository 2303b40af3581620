#pragma once
// The internals of fixed/nn.hpp.
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

namespace detail {
// 0, 1, ..., C - 1 as a tensor that lives as long as the program: a leaf for one-hot comparisons.
template <class T, index_t C>
const Tensor<T, C>& arange() {
  static const Tensor<T, C> r = [] {
    Tensor<T, C> t;
    for (index_t i = 0; i < C; ++i) t[i] = T(i);
    return t;
  }();
  return r;
}
}  // namespace detail

}  // namespace metagrad::fixed
