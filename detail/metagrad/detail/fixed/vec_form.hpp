#pragma once
// The static path's own vector forms of the elementwise functions, for its inline evaluation
// (eval.hpp). Each function's definition (name, arity, scalar form, backward rule, lowering) is its
// FnTraits entry in metagrad/functions.hpp, shared with the dynamic path; what only the contiguous
// loop needs is here: the vector forms of the expensive functions on AVX-512 and on AVX2 with FMA
// (simd.hpp), and the cost from which the loop writes them out by hand.
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "metagrad/detail/fixed/cpu.hpp"
#include "metagrad/functions.hpp"

namespace metagrad::fixed::detail {

// FnTraits::cost from which the contiguous loop writes a function's vector form out by hand.
inline constexpr int kVectorCost = 10;

// VecForm<F>::vec(v): F on a whole vector register, where simd.hpp has one (else scalar() runs
// lane by lane, or on GCC vectors where FnTraits<F>::vector).
template <fn::Fn F>
struct VecForm {
  static constexpr bool has = false;
};
#if defined(METAGRAD_CPU_VECTOR_MATH)
// F by f on the ISA's float vectors (simd.hpp); on others (double) by F's scalar form, lane by lane.
template <fn::Fn F, FV (*f)(FV)>
struct FloatForm {
  static constexpr bool has = true;
  template <class V>
  static V vec(V x) {
    if constexpr (std::is_same_v<V, FV>) {
      return f(x);
    } else {
      for (std::size_t i = 0; i < sizeof(V) / sizeof(x[0]); ++i) x[i] = fn::FnTraits<F>::scalar(double(x[i]));
      return x;
    }
  }
};
// GELU's tanh form as its scalar form computes it, x sigmoid(2u), with the sigmoid per vector.
inline FV vgelu(FV x) {
  using G = fn::FnTraits<fn::Fn::GELU>;
  return x * vsigmoid(float(2 * G::k) * x * (1.f + float(G::c) * x * x));
}
template <>
struct VecForm<fn::Fn::EXP> : FloatForm<fn::Fn::EXP, vexp> {};
template <>
struct VecForm<fn::Fn::EXP2> : FloatForm<fn::Fn::EXP2, vexp2> {};
template <>
struct VecForm<fn::Fn::SIGMOID> : FloatForm<fn::Fn::SIGMOID, vsigmoid> {};
template <>
struct VecForm<fn::Fn::GELU> : FloatForm<fn::Fn::GELU, vgelu> {};
#endif
#if defined(__AVX__)
// The ISA's square root, correctly rounded as std::sqrt is: the same results (AdamW's update).
template <>
struct VecForm<fn::Fn::SQRT> {
  static constexpr bool has = true;
  template <class V>
  static V vec(V x) {
    constexpr bool f = sizeof(x[0]) == 4;
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) {  // zero-masked: the plain form trips g++ 12 (simd.hpp's kAll)
      if constexpr (f)
        return (V)_mm512_maskz_sqrt_ps(__mmask16(0xFFFF), (__m512)x);
      else
        return (V)_mm512_maskz_sqrt_pd(__mmask8(0xFF), (__m512d)x);
    }
#endif
    if constexpr (sizeof(V) == 32) {
      if constexpr (f)
        return (V)_mm256_sqrt_ps((__m256)x);
      else
        return (V)_mm256_sqrt_pd((__m256d)x);
    } else {
      for (std::size_t i = 0; i < sizeof(V) / sizeof(x[0]); ++i) x[i] = std::sqrt(x[i]);
      return x;
    }
  }
};
#endif
// F runs on vectors: by its scalar form, or a vector form of its own.
template <fn::Fn F>
inline constexpr bool vector_fn = fn::FnTraits<F>::vector || VecForm<F>::has;

}  // namespace metagrad::fixed::detail
