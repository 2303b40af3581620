#pragma once
// fixed::Tensor<T, Dims...>: a dense row-major array whose shape is part of its type.
// Up to 4 KiB (detail::kInlineBytes) the values live inside the object, as an Eigen fixed-size
// matrix's: no allocation, and small expressions evaluate in a plain loop the compiler unrolls.
// Bigger tensors are on the heap, 64-byte aligned, so they never sit on the stack and a move is a
// pointer swap. Copies are deep either way (value semantics, as Eigen). A training loop keeps its
// tensors and assigns into them (`w = w - lr * g`), which reuses their storage: no allocation per step.
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <new>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "metagrad/detail/fixed/tensor.hpp"
#include "metagrad/detail/format.hpp"
#include "metagrad/fixed/eval.hpp"

namespace metagrad::fixed {

template <class T, index_t... D>
class Tensor : public ExprBase<Tensor<T, D...>> {
 public:
  using value_type = T;
  using shape = Shape<D...>;
  static constexpr std::size_t rank = shape::rank;
  static constexpr index_t size = shape::size;

  Tensor() = default;  // zeros
  Tensor(std::initializer_list<T> values) : s_(detail::uninitialized) {
    if (static_cast<index_t>(values.size()) != size)
      throw std::invalid_argument("fixed::Tensor: " + std::to_string(values.size()) + " values for " +
                                  std::to_string(size) + " elements");
    std::copy(values.begin(), values.end(), data());
  }
  static Tensor full(T value) {
    Tensor t(detail::uninitialized);
    std::fill_n(t.data(), size, value);
    return t;
  }
  static Tensor from(const T* values) {  // `size` values, row-major
    Tensor t(detail::uninitialized);
    std::copy(values, values + size, t.data());
    return t;
  }
  // These two inline wherever they are called, as the evaluation under them does (a big expression's
  // loops are out of line there): else g++ may keep each a call, half of a 2 x 2 sum's time.
  template <Operand E>
  requires(!std::is_same_v<E, Tensor>) METAGRAD_INLINE Tensor(const E& e)  // NOLINT: as Eigen
      : s_(detail::uninitialized) {
    *this = e;
  }
  template <Operand E>
  requires(!std::is_same_v<E, Tensor>) METAGRAD_INLINE Tensor& operator=(const E& e) {
    using X = expr_t<E>;
    constexpr bool same = X::shape::dims == shape::dims;
    METAGRAD_FIXED_SHAPE_CHECK(same || detail::any_failed<X>,
                               "fixed: assignment: the tensor and the expression differ in shape",
                               err::assign, shape, typename X::shape);
    static_assert(std::is_same_v<typename X::value_type, T>,
                  "fixed: assignment: the expression's element type differs from the tensor's: cast<T>() it");
    if constexpr (same && std::is_same_v<typename X::value_type, T>) detail::assign(data(), e.expr());
    return *this;
  }
  template <class E>
  requires BinaryOperands<Tensor, E> Tensor& operator+=(const E& e) { return *this = *this + e; }
  template <class E>
  requires BinaryOperands<Tensor, E> Tensor& operator-=(const E& e) { return *this = *this - e; }
  template <class E>
  requires BinaryOperands<Tensor, E> Tensor& operator*=(const E& e) { return *this = *this * e; }
  template <class E>
  requires BinaryOperands<Tensor, E> Tensor& operator/=(const E& e) { return *this = *this / e; }
  // Where the values are: inside the object (a copy on move), or on the heap.
  static constexpr bool in_object = detail::inline_size<T>(size);

  T* data() { return s_.data(); }
  const T* data() const { return s_.data(); }
  T* begin() { return data(); }
  T* end() { return data() + size; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size; }
  T& operator[](index_t i) { return data()[i]; }  // flat, row-major
  const T& operator[](index_t i) const { return data()[i]; }
  template <class... I>
  requires(sizeof...(I) == rank) T& operator()(I... i) { return data()[flat(i...)]; }
  template <class... I>
  requires(sizeof...(I) == rank) const T& operator()(I... i) const { return data()[flat(i...)]; }

  auto expr() const { return Expr<op::Leaf<T, shape>>(op::Leaf<T, shape>{data()}); }

 private:
  explicit Tensor(detail::uninitialized_t) : s_(detail::uninitialized) {}
  template <class... I>
  static index_t flat(I... i) {
    index_t idx[] = {static_cast<index_t>(i)..., 0}, f = 0;
    for (std::size_t k = 0; k < rank; ++k) f = f * shape::dims[k] + idx[k];
    return f;
  }
  detail::Storage<T, size> s_;
};

// The tensor type an operand evaluates to.
template <Operand E>
using TensorOf = typename detail::tensor_for<typename E::value_type, typename E::shape>::type;

template <Operand E>
TensorOf<E> eval(const E& e) {
  return TensorOf<E>(e);
}
template <class D>
auto ExprBase<D>::eval() const {
  return fixed::eval(self());
}

// Prints the values as the dynamic path's Tensor does (and PyTorch): "tensor([[1.0000, 2.5000]])".
template <class T, index_t... D>
std::ostream& operator<<(std::ostream& os, const Tensor<T, D...>& t) {
  std::vector<double> v(t.data(), t.data() + Tensor<T, D...>::size);
  constexpr std::int64_t dims[] = {static_cast<std::int64_t>(D)..., 0};
  auto kind = std::is_floating_point_v<T> ? metagrad::detail::ValueKind::floating
              : std::is_same_v<T, bool>   ? metagrad::detail::ValueKind::boolean
                                          : metagrad::detail::ValueKind::integer;
  return os << metagrad::detail::format_values(v, std::span(dims, sizeof...(D)), kind, "tensor(") << ')';
}

}  // namespace metagrad::fixed
