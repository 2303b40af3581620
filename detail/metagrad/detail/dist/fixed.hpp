#pragma once
// The internals of dist/fixed.hpp.
#include <string>

#include "metagrad/fixed/tensor.hpp"
#include "metagrad/helpers.hpp"
#include "metagrad/shape/view.hpp"

namespace metagrad::dist {

namespace detail {
// A fixed::Tensor's shape and element type as the ranks compare them: "(2, 3) float".
template <class T, fixed::index_t... D>
std::string describe(const fixed::Tensor<T, D...>&) {
  return metagrad::detail::cat(to_string(fixed::Tensor<T, D...>::shape::dims), " ", dtype_of<T>.name);
}
}  // namespace detail

}  // namespace metagrad::dist
