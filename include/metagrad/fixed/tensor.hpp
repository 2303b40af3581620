#pragma once
// fixed::Tensor<T, Dims...>: a dense row-major array whose shape is part of its type.
// Storage is always on the heap, 64-byte aligned, so big tensors never sit on the stack and a move
// is a pointer swap; copies are deep (value semantics, as Eigen). A training loop keeps its tensors
// and assigns into them (`w = w - lr * g`), which reuses their storage: no allocation per step.
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

  Tensor() : p_(allocate()) { std::fill_n(p_, size, T{}); }  // zeros
  Tensor(std::initializer_list<T> values) : p_(allocate()) {
    if (static_cast<index_t>(values.size()) != size)
      throw std::invalid_argument("fixed::Tensor: " + std::to_string(values.size()) + " values for " +
                                  std::to_string(size) + " elements");
    std::copy(values.begin(), values.end(), p_);
  }
  static Tensor full(T value) {
    Tensor t(uninitialized);
    std::fill_n(t.p_, size, value);
    return t;
  }
  static Tensor from(const T* values) {  // `size` values, row-major
    Tensor t(uninitialized);
    std::copy(values, values + size, t.p_);
    return t;
  }
  template <Operand E>
  requires(!std::is_same_v<E, Tensor>) Tensor(const E& e) : p_(allocate()) {  // NOLINT: as Eigen
    *this = e;
  }

  Tensor(const Tensor& o) : p_(allocate()) { std::copy(o.p_, o.p_ + size, p_); }
  Tensor(Tensor&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Tensor& operator=(const Tensor& o) {
    if (this != &o) std::copy(o.p_, o.p_ + size, p_);
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  template <Operand E>
  requires(!std::is_same_v<E, Tensor>) Tensor& operator=(const E& e) {
    using X = expr_t<E>;
    constexpr bool same = X::shape::dims == shape::dims;
    METAGRAD_FIXED_SHAPE_CHECK(same || detail::any_failed<X>,
                               "fixed: assignment: the tensor and the expression differ in shape",
                               err::assign, shape, typename X::shape);
    static_assert(std::is_same_v<typename X::value_type, T>,
                  "fixed: assignment: the expression's element type differs from the tensor's: cast<T>() it");
    if constexpr (same && std::is_same_v<typename X::value_type, T>) detail::assign(p_, e.expr());
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
  ~Tensor() { ::operator delete (p_, std::align_val_t{64}); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  T* begin() { return p_; }
  T* end() { return p_ + size; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + size; }
  T& operator[](index_t i) { return p_[i]; }  // flat, row-major
  const T& operator[](index_t i) const { return p_[i]; }
  template <class... I>
  requires(sizeof...(I) == rank) T& operator()(I... i) { return p_[flat(i...)]; }
  template <class... I>
  requires(sizeof...(I) == rank) const T& operator()(I... i) const { return p_[flat(i...)]; }

  auto expr() const { return Expr<op::Leaf<T, shape>>(op::Leaf<T, shape>{p_}); }

 private:
  struct uninitialized_t {};
  static constexpr uninitialized_t uninitialized{};
  explicit Tensor(uninitialized_t) : p_(allocate()) {}
  static T* allocate() {
    return static_cast<T*>(::operator new (sizeof(T) * (size ? size : 1), std::align_val_t{64}));
  }
  template <class... I>
  static index_t flat(I... i) {
    index_t idx[] = {static_cast<index_t>(i)..., 0}, f = 0;
    for (std::size_t k = 0; k < rank; ++k) f = f * shape::dims[k] + idx[k];
    return f;
  }
  T* p_;
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
