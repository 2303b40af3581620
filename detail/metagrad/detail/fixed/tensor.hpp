#pragma once
// The internals of fixed/tensor.hpp: the Tensor type of a value type and Shape (TensorOf).
#include "metagrad/fixed/shape.hpp"

namespace metagrad::fixed {

// Declared again, and defined, in fixed/tensor.hpp.
template <class T, index_t... D>
class Tensor;

namespace detail {
template <class T, class S>
struct tensor_for;
template <class T, index_t... D>
struct tensor_for<T, Shape<D...>> {
  using type = Tensor<T, D...>;
};
}  // namespace detail

}  // namespace metagrad::fixed
