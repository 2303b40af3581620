#pragma once
// fx::TensorMap<T, Dims...>: a fixed::Tensor's view of memory it does not own (a pointer, a
// std::span of static extent, a row-major std::mdspan of static extents where the library has one,
// a Tensor, or an Eigen object through fixed/eigen.hpp), row-major, read and write, copying nothing:
// an operand like a Tensor (its expression is a Leaf over the user's memory), and assigning an
// expression to it evaluates into that memory, as Eigen::Map. TensorMap<const T, ...> only reads. As with
// expressions, the memory must outlive it.
#include <cstddef>
#include <span>
#include <type_traits>
#if __has_include(<mdspan>)
#include <mdspan>
#endif

#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

template <class T, index_t... D>
class TensorMap : public ExprBase<TensorMap<T, D...>> {
 public:
  using value_type = std::remove_const_t<T>;
  using shape = Shape<D...>;
  static constexpr std::size_t rank = shape::rank;
  static constexpr index_t size = shape::size;

  explicit TensorMap(T* data) : p_(data) {}  // `size` elements, row-major
  template <std::size_t N>
  TensorMap(std::span<T, N> s) : p_(s.data()) {  // NOLINT: a span of the right extent is the memory
    static_assert(N != std::dynamic_extent && static_cast<index_t>(N) == size,
                  "fixed::TensorMap: the span's static extent must be the shape's element count");
  }
#if defined(__cpp_lib_mdspan)
  template <class E, class A>
  TensorMap(std::mdspan<T, E, std::layout_right, A> s) : p_(s.data_handle()) {  // NOLINT: as a span
    static_assert(
        E::rank_dynamic() == 0 && E::rank() == rank &&
            [] {
              constexpr index_t d[] = {D..., 0};
              for (std::size_t i = 0; i < rank; ++i)
                if (static_cast<index_t>(E::static_extent(i)) != d[i]) return false;
              return true;
            }(),
        "fixed::TensorMap: the mdspan's static extents must be the shape");
  }
#endif
  TensorMap(Tensor<value_type, D...>& t) : p_(t.data()) {}  // NOLINT: as Eigen::Ref
  TensorMap(const Tensor<value_type, D...>& t) requires std::is_const_v<T> : p_(t.data()) {}  // NOLINT
  TensorMap(const TensorMap&) = default;

  // Assignment writes through (the values, not the pointer), as Eigen::Map.
  TensorMap& operator=(const TensorMap& o) requires(!std::is_const_v<T>) { return assign(o); }
  template <Operand E>
  requires(!std::is_const_v<T> && !std::is_same_v<E, TensorMap>) TensorMap& operator=(const E& e) {
    return assign(e);
  }
  template <class E>
  requires(!std::is_const_v<T>) TensorMap& operator+=(const E& e) { return assign(*this + e); }
  template <class E>
  requires(!std::is_const_v<T>) TensorMap& operator-=(const E& e) { return assign(*this - e); }
  template <class E>
  requires(!std::is_const_v<T>) TensorMap& operator*=(const E& e) { return assign(*this * e); }

  T* data() const { return p_; }
  T* begin() const { return p_; }
  T* end() const { return p_ + size; }
  T& operator[](index_t i) const { return p_[i]; }

  auto expr() const { return Expr<op::Leaf<value_type, shape>>(op::Leaf<value_type, shape>{p_}); }

 private:
  template <class E>
  TensorMap& assign(const E& e) {
    using X = expr_t<E>;
    constexpr bool same = X::shape::dims == shape::dims;
    METAGRAD_FIXED_SHAPE_CHECK(same || detail::any_failed<X>,
                               "fixed: assignment: the tensor and the expression differ in shape",
                               err::assign, shape, typename X::shape);
    static_assert(std::is_same_v<typename X::value_type, value_type>,
                  "fixed: assignment: the expression's element type differs from the map's: cast<T>() it");
    if constexpr (same && std::is_same_v<typename X::value_type, value_type>) detail::assign(p_, e.expr());
    return *this;
  }
  T* p_;
};

}  // namespace metagrad::fixed
