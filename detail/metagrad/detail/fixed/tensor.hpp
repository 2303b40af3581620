#pragma once
// The internals of fixed/tensor.hpp: the Tensor type of a value type and Shape (TensorOf), and a
// tensor's storage: in the object up to kInlineBytes, on the heap above; the tensors the library
// keeps (arange) and how a tensor describes itself.
#include <algorithm>
#include <cstddef>
#include <new>
#include <string>
#include <utility>

#include "metagrad/detail/cat.hpp"
#include "metagrad/fixed/shape.hpp"
#include "metagrad/helpers.hpp"

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

// Tensors of at most 4 KiB live inside the object (on the stack, or inside whatever holds them), as
// Eigen's fixed-size matrices do: no allocation, and the compiler sees the whole array. 4 KiB is an
// eighth of a 32 KiB L1d: the two operands and the result of a product or an elementwise op over
// such tensors sit in the L1 together, and a move (a copy, for these) costs about what the heap's
// allocate and free would. Bigger tensors keep the heap (a move is then a pointer swap, and big
// arrays never sit on the stack) and evaluate through the arena and the thread pool.
inline constexpr std::size_t kInlineBytes = 4096;
template <class T>
constexpr bool inline_size(index_t n) {
  return static_cast<std::size_t>(n) * sizeof(T) <= kInlineBytes;
}

struct uninitialized_t {};
inline constexpr uninitialized_t uninitialized{};

template <class T, index_t N, bool Inline = inline_size<T>(N)>
class Storage {  // on the heap, 64-byte aligned; copies are deep, a move takes the pointer
 public:
  explicit Storage(uninitialized_t) : p_(allocate()) {}
  Storage() : p_(allocate()) { std::fill_n(p_, N, T{}); }
  Storage(const Storage& o) : p_(allocate()) { std::copy(o.p_, o.p_ + N, p_); }
  Storage(Storage&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Storage& operator=(const Storage& o) {
    if (this != &o) std::copy(o.p_, o.p_ + N, p_);
    return *this;
  }
  Storage& operator=(Storage&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Storage() { ::operator delete (p_, std::align_val_t{64}); }
  T* data() { return p_; }
  const T* data() const { return p_; }

 private:
  static T* allocate() {
    return static_cast<T*>(::operator new (sizeof(T) * (N ? N : 1), std::align_val_t{64}));
  }
  T* p_;
};

// In the object, aligned to the largest power of two (at most a cache line) that divides its bytes:
// whole vectors where the size allows them, and a 3x3 float as small as Eigen's Matrix3f.
template <class T, index_t N>
class Storage<T, N, true> {
  static constexpr std::size_t bytes = sizeof(T) * static_cast<std::size_t>(N ? N : 1);
  static constexpr std::size_t align = std::max(alignof(T), std::min<std::size_t>(64, bytes&(~bytes + 1)));

 public:
  // Zeroed even when the caller fills it: a few stores the compiler drops where the values are then
  // all written, and g++'s -Wmaybe-uninitialized cannot see that evaluation writes every element.
  explicit Storage(uninitialized_t) : v_{} {}
  Storage() : v_{} {}
  T* data() { return v_; }
  const T* data() const { return v_; }

 private:
  alignas(align) T v_[N ? N : 1];
};

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

// A tensor's shape and element type as errors and the ranks of a collective compare them:
// "(2, 3) float".
template <class T, index_t... D>
std::string shape_and_type(const Tensor<T, D...>&) {
  return metagrad::detail::cat(to_string(Tensor<T, D...>::shape::dims), " ", dtype_of<T>.name);
}
}  // namespace detail

}  // namespace metagrad::fixed
