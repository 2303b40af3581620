#pragma once
// The internals of fixed/functions.hpp: the defaults and families FnTraits entries derive from
// (simple, transcendental, comparison, maximum and minimum), and the AVX-512 vector forms' helper.
#include <cstddef>
#include <type_traits>

#include "metagrad/detail/fixed/simd.hpp"
#include "metagrad/fixed/expr.hpp"

namespace metagrad::fixed::detail {
struct FnDefaults {
  static constexpr bool float_only = false, vector = false;
  static constexpr int cost = 1;
};
// Cheap, exact on vectors as on scalars (GCC vector extensions take the same operators).
struct Simple : FnDefaults {
  static constexpr bool vector = true;
};
struct Transcendental : FnDefaults {
  static constexpr bool float_only = true;
  static constexpr int cost = 20;
};
#if defined(__AVX512F__)
// f on a float vector; other vectors (double) lane by lane with g.
template <class V>
V float_vector(V x, F16 (*f)(F16), double (*g)(double)) {
  if constexpr (std::is_same_v<V, F16>) {
    return f(x);
  } else {
    for (std::size_t i = 0; i < sizeof(V) / sizeof(x[0]); ++i) x[i] = g(x[i]);
    return x;
  }
}
#endif
struct Comparison : FnDefaults {
  template <std::size_t I, class N, class G>
  static none grad(const N&, const G&) {
    return {};
  }
};
// max and min: ties split the gradient equally, as the dynamic path's Maximum.
template <bool IsMax>
struct Extremum : Simple {
  static constexpr const char* name = IsMax ? "maximum" : "minimum";
  template <class X>
  static X scalar(X x, X y) {
    if constexpr (IsMax)
      return X(x < y ? y : x);
    else
      return X(y < x ? y : x);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    using T = typename G::value_type;
    auto out = n.out();
    auto xi = (n.template x<0>() == out).template cast<T>();
    auto yi = (n.template x<1>() == out).template cast<T>();
    if constexpr (I == 0)
      return (xi - xi * yi * T(0.5)) * g;
    else
      return (yi - xi * yi * T(0.5)) * g;
  }
  static auto lower(const auto& x, const auto& y) {
    if constexpr (IsMax)
      return x.maximum(y);
    else
      return x.minimum(y);
  }
};
}  // namespace metagrad::fixed::detail
