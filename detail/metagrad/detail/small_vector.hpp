#pragma once
// A fixed-capacity vector usable in constant expressions. Members are public so that a type built
// from it stays structural (usable as a template argument by the static-shape path).
#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace metagrad::detail {

template <class T, std::size_t N>
struct small_vector {
  T items[N]{};  // (a plain array: each element read in a constant expression is one call, not three)
  std::size_t count = 0;

  constexpr small_vector() = default;
  constexpr small_vector(std::initializer_list<T> init) {
    for (const T& x : init) push_back(x);
  }
  template <class Range>
  requires requires(const Range& r) {
    r.begin();
    r.end();
  }
  constexpr explicit small_vector(const Range& r) {
    for (const auto& x : r) push_back(static_cast<T>(x));
  }
  static constexpr small_vector filled(std::size_t n, const T& value) {
    small_vector v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(value);
    return v;
  }

  constexpr void push_back(const T& x) {
    if (count == N) too_many();
    items[count++] = x;
  }
  constexpr void pop_back() { --count; }
  // (a shape's capacity is METAGRAD_MAX_DIMS; ops that know their result's rank check it first)
  [[noreturn]] static void too_many() {
    throw std::length_error("metagrad: a shape of more than " + std::to_string(N) +
                            " dimensions (the build's METAGRAD_MAX_DIMS)");
  }
  constexpr void insert(std::size_t pos, const T& x) {
    push_back(x);
    for (std::size_t i = count - 1; i > pos; --i) std::swap(items[i], items[i - 1]);
  }
  constexpr void erase(std::size_t pos) {
    for (std::size_t i = pos; i + 1 < count; ++i) items[i] = items[i + 1];
    --count;
  }
  constexpr void clear() { count = 0; }

  constexpr std::size_t size() const { return count; }
  constexpr bool empty() const { return count == 0; }
  static constexpr std::size_t capacity() { return N; }
  constexpr T& operator[](std::size_t i) { return items[i]; }
  constexpr const T& operator[](std::size_t i) const { return items[i]; }
  constexpr T& back() { return items[count - 1]; }
  constexpr const T& back() const { return items[count - 1]; }
  constexpr T* begin() { return items; }
  constexpr T* end() { return items + count; }
  constexpr const T* begin() const { return items; }
  constexpr const T* end() const { return items + count; }

  friend constexpr bool operator==(const small_vector& a, const small_vector& b) {
    if (a.count != b.count) return false;
    for (std::size_t i = 0; i < a.count; ++i)
      if (!(a.items[i] == b.items[i])) return false;
    return true;
  }
};

}  // namespace metagrad::detail
