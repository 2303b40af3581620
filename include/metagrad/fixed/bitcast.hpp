#pragma once
// fixed::bitcast<U>(x): x's elements read as U, bit pattern for bit pattern, into a new tensor of
// x's shape (Tensor::bitcast on the dynamic path). U and x's element type must be one size, and
// neither may be bool (it has no bit pattern of its own): both checked at compile time.
#include <cstring>
#include <type_traits>

#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

template <class U, Operand E>
auto bitcast(const E& x) {
  using X = expr_t<E>;
  using T = typename X::value_type;
  static_assert(!std::is_same_v<T, bool> && !std::is_same_v<U, bool>,
                "fixed: bitcast: bool has no bit pattern of its own (cast<T>() it)");
  static_assert(sizeof(T) == sizeof(U), "fixed: bitcast: the element types differ in size");
  static_assert(std::is_trivially_copyable_v<U>, "fixed: bitcast: the new element type is not plain data");
  return [&]<index_t... D>(Shape<D...>) {
    Tensor<T, D...> values = x;
    Tensor<U, D...> out;
    std::memcpy(out.data(), values.data(), sizeof(T) * static_cast<std::size_t>(Shape<D...>::size));
    return out;
  }
  (typename X::shape{});
}

}  // namespace metagrad::fixed
