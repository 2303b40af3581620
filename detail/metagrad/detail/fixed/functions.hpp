#pragma once
// The internals of fixed/functions.hpp: the AVX-512 vector forms' helper.
#include <cstddef>
#include <type_traits>

#include "metagrad/detail/fixed/simd.hpp"

namespace metagrad::fixed::detail {
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
}  // namespace metagrad::fixed::detail
