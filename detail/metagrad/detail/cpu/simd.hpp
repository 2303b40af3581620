#pragma once
// The host's vector registers as GCC vector extensions (sized for the compiling ISA), for the kernels
// that are written per vector rather than left to the auto-vectoriser: the matmul tile, and the
// contiguous elementwise loop (eval.hpp) where intrinsics beat what plain C++ lets the compiler
// emit: AVX-512 scalef and roundscale for exp, rcp14 and one Newton step for the sigmoid's
// reciprocal, non-temporal stores for outputs far larger than the caches.
#include <cstddef>
#include <cstring>
#include <utility>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include "metagrad/detail/cpu/gemm_plan.h"  // METAGRAD_GEMM_VECTOR_BYTES

#if defined(__AVX512F__)
#define METAGRAD_CPU_ISA avx512
#elif defined(__AVX__)
#define METAGRAD_CPU_ISA avx
#else
#define METAGRAD_CPU_ISA base
#endif

namespace metagrad::cpu::detail {
// Code whose shape depends on the ISA lives in an ISA-named inline namespace, so TUs built for
// different ISAs never share (ODR-merge) each other's version.
inline namespace METAGRAD_CPU_ISA {

inline constexpr int kVectorBytes = METAGRAD_GEMM_VECTOR_BYTES;

template <class T>
struct simd {
  static constexpr int W = kVectorBytes / static_cast<int>(sizeof(T));  // lanes
  typedef T V __attribute__((vector_size(kVectorBytes)));

  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static V splat(T x) { return V{} + x; }
  // *p in every lane as one broadcast load (V{} + x would add a zero first: an extra ALU op that
  // the compiler may not drop, since -0 + 0 is +0).
  static V broadcast(const T* p) {
#if defined(__AVX512F__)
    if constexpr (sizeof(T) == 4)
      return (V)_mm512_set1_ps(*p);
    else
      return (V)_mm512_set1_pd(*p);
#elif defined(__AVX__)
    if constexpr (sizeof(T) == 4)
      return (V)_mm256_broadcast_ss(p);
    else
      return (V)_mm256_broadcast_sd(p);
#else  // (one initialiser of W lanes: a loop over the lanes became an insert and shuffles per lane in
       // g++'s SSE tile, twice its code and 1% of a header-only MLP step's compile)
    const T x = *p;
    return [x]<std::size_t... I>(std::index_sequence<I...>) { return V{(static_cast<void>(I), x)...}; }
    (std::make_index_sequence<W>{});
#endif
  }

  static V fma(V a, V b, V c) {  // a * b + c, fused where the ISA has it (ISO C++ mode does not contract)
#if defined(__AVX512F__)
    if constexpr (sizeof(T) == 4)
      return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
    else
      return (V)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif defined(__FMA__)
    if constexpr (sizeof(T) == 4)
      return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
    else
      return (V)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
    return a * b + c;
#endif
  }
};

#if defined(__AVX512F__)
inline constexpr bool kVectorMath = true;  // exp and sigmoid per vector (float)
using F16 = simd<float>::V;
// Every lane. The zero-masked forms below compute the same as the plain ones, whose expansion in
// g++ 12's headers trips a false -Wmaybe-uninitialized (_mm512_undefined_ps) in users' code.
inline constexpr __mmask16 kAll = 0xFFFF;

// e^x: n = round(x / ln 2), r = x - n ln 2, e^r by the same polynomial as math::exp, 2^n by scalef
// (which also gives inf past the top and 0 past the bottom). min/max return their second operand
// when either is NaN: the clamps keep NaN.
// e^r 2^n for |r| <= ln 2 / 2: e^r by math::exp's polynomial, 2^n by scalef (exp's and exp2's tail).
inline F16 exp_poly(__m512 r, __m512 n) {
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  for (float k :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f, 1.f, 1.f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  return (F16)_mm512_maskz_scalef_ps(kAll, p, n);
}
// e^(sign c) for c in [-104, 89] (or NaN); sign -1 computes e^-c without negating c first.
template <int Sign = 1>
inline F16 vexp_clamped(__m512 c) {
  __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(c, _mm512_set1_ps(Sign * 1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = Sign > 0 ? _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c)   // c - n ln2_hi
                      : _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693359375f), c);  // -c - n ln2_hi
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  return exp_poly(r, n);
}
inline __m512 clamp(__m512 x, float lo, float hi) {
  return _mm512_maskz_max_ps(kAll, _mm512_set1_ps(lo), _mm512_maskz_min_ps(kAll, _mm512_set1_ps(hi), x));
}
inline F16 vexp(F16 x) { return vexp_clamped(clamp((__m512)x, -104.f, 89.f)); }
// 2^x = 2^n e^(f ln 2), n = round(x) and f = x - n exact: at integers e^0 = 1, so 2^n exactly.
inline F16 vexp2(F16 x) {
  __m512 c = clamp((__m512)x, -152.f, 129.f);
  __m512 n = _mm512_maskz_roundscale_ps(kAll, c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(c, n);
  __m512 r =
      _mm512_fmadd_ps(f, _mm512_set1_ps(0.693359375f), _mm512_mul_ps(f, _mm512_set1_ps(-2.12194440e-4f)));
  return exp_poly(r, n);
}
// 1 / (1 + e^-x) with the reciprocal from rcp14 and one Newton step (~1 ulp).
inline F16 vsigmoid(F16 x) {
  __m512 c = clamp((__m512)x, -87.f, 88.f);  // e^-c stays finite: 1 + e^-c has a reciprocal
  __m512 d = _mm512_add_ps(_mm512_set1_ps(1.f), (__m512)vexp_clamped<-1>(c));
  __m512 r = _mm512_maskz_rcp14_ps(kAll, d);
  __m512 e = _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.f));
  // 0 where e^-x overflows, as math::sigmoid (not-less-than keeps NaN lanes)
  __mmask16 keep = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-88.3762626647949f), _CMP_NLT_UQ);
  return (F16)_mm512_maskz_fmadd_ps(keep, r, e, r);
}
#else
inline constexpr bool kVectorMath = false;
#endif

// Stores that bypass the caches, for outputs much larger than them (the data is not read back soon).
template <class T>
inline void stream(T* p, typename simd<T>::V v) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4)
    _mm512_stream_ps(reinterpret_cast<float*>(p), (__m512)v);
  else
    _mm512_stream_pd(reinterpret_cast<double*>(p), (__m512d)v);
#elif defined(__AVX__)
  if constexpr (sizeof(T) == 4)
    _mm256_stream_ps(reinterpret_cast<float*>(p), (__m256)v);
  else
    _mm256_stream_pd(reinterpret_cast<double*>(p), (__m256d)v);
#else
  simd<T>::store(p, v);
#endif
}
inline void stream_fence() {
#if defined(__AVX__)
  _mm_sfence();
#endif
}

}  // namespace METAGRAD_CPU_ISA
}  // namespace metagrad::cpu::detail
