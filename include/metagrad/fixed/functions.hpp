#pragma once
// The static path's view of the elementwise functions. Each function's definition (name, arity,
// scalar form, backward rule, lowering) is its FnTraits entry in metagrad/functions.hpp, shared
// with the dynamic path; what only the static path's inline evaluation needs is here: the vector
// forms of the expensive functions on AVX-512 (detail/fixed/simd.hpp) and the cost from which the
// contiguous loop writes them out by hand.
#include "metagrad/detail/fixed/functions.hpp"
#include "metagrad/fixed/expr.hpp"
#include "metagrad/functions.hpp"

namespace metagrad::fixed {

inline constexpr int kVectorCost = 10;

// VecForm<F>::vec(v): F on a whole vector register, where simd.hpp has one (else scalar() runs
// lane by lane, or on GCC vectors where FnTraits<F>::vector).
template <Fn F>
struct VecForm {
  static constexpr bool has = false;
};
#if defined(__AVX512F__)
template <>
struct VecForm<Fn::EXP> {
  static constexpr bool has = true;
  template <class V>
  static V vec(V x) {
    return detail::float_vector<V>(x, detail::vexp, FnTraits<Fn::EXP>::scalar<double>);
  }
};
template <>
struct VecForm<Fn::SIGMOID> {
  static constexpr bool has = true;
  template <class V>
  static V vec(V x) {
    return detail::float_vector<V>(x, detail::vsigmoid, FnTraits<Fn::SIGMOID>::scalar<double>);
  }
};
#endif
// F runs on vectors: by its scalar form, or a vector form of its own.
template <Fn F>
inline constexpr bool vector_fn = FnTraits<F>::vector || VecForm<F>::has;

}  // namespace metagrad::fixed
