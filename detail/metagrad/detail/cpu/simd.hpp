#pragma once
// The host's vector registers as GCC vector extensions (sized for the compiling ISA), for the kernels
// that are written per vector rather than left to the auto-vectoriser: the matmul tile, and the
// contiguous elementwise loop (eval.hpp) where intrinsics beat what plain C++ lets the compiler
// emit: exp, 2^x and the sigmoid per vector (AVX-512 or AVX2 with FMA; no libm call per lane),
// non-temporal stores for outputs far larger than the caches.
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
  // x in every lane (V{} + x would add a zero: an extra ALU op, and -0 + 0 is +0, so x * -0.f gave +0).
  static V splat(T x) {
    return [x]<std::size_t... I>(std::index_sequence<I...>) { return V{(static_cast<void>(I), x)...}; }
    (std::make_index_sequence<W>{});
  }
  // *p in every lane as one broadcast load.
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
    return splat(*p);
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

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define METAGRAD_CPU_VECTOR_MATH 1
inline constexpr bool kVectorMath = true;  // exp, 2^x and sigmoid per vector of floats
using FV = simd<float>::V;

// The few operations where AVX-512 and AVX2 differ; exp, exp2 and the sigmoid below are written
// once over them, so both ISAs compute the same polynomial in the same order.
namespace vm {
#if defined(__AVX512F__)
using M = __m512;
// Every lane. The zero-masked forms compute the same as the plain ones, whose expansion in g++ 12's
// headers trips a false -Wmaybe-uninitialized (_mm512_undefined_ps) in users' code.
inline constexpr __mmask16 kAll = 0xFFFF;
inline M set(float x) { return _mm512_set1_ps(x); }
inline M mul(M a, M b) { return _mm512_mul_ps(a, b); }
inline M add(M a, M b) { return _mm512_add_ps(a, b); }
inline M fma(M a, M b, M c) { return _mm512_fmadd_ps(a, b, c); }
inline M fnmadd(M a, M b, M c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
inline M fnmsub(M a, M b, M c) { return _mm512_fnmsub_ps(a, b, c); }  // -(a b) - c
// min and max return their second operand when either is NaN
inline M min(M a, M b) { return _mm512_maskz_min_ps(kAll, a, b); }
inline M max(M a, M b) { return _mm512_maskz_max_ps(kAll, a, b); }
inline M round(M x) {
  return _mm512_maskz_roundscale_ps(kAll, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline M scale(M p, M n) { return _mm512_maskz_scalef_ps(kAll, p, n); }  // p 2^n, one rounding
// 1 / d by rcp14 and one Newton step (~1 ulp); 0 where keep's lane is not at least lo (NaN is kept)
inline M recip_where_nlt(M d, M keep, float lo) {
  M r = _mm512_maskz_rcp14_ps(kAll, d);
  M e = _mm512_fnmadd_ps(d, r, set(1.f));
  return _mm512_maskz_fmadd_ps(_mm512_cmp_ps_mask(keep, set(lo), _CMP_NLT_UQ), r, e, r);
}
#else
using M = __m256;
inline M set(float x) { return _mm256_set1_ps(x); }
inline M mul(M a, M b) { return _mm256_mul_ps(a, b); }
inline M add(M a, M b) { return _mm256_add_ps(a, b); }
inline M fma(M a, M b, M c) { return _mm256_fmadd_ps(a, b, c); }
inline M fnmadd(M a, M b, M c) { return _mm256_fnmadd_ps(a, b, c); }
inline M fnmsub(M a, M b, M c) { return _mm256_fnmsub_ps(a, b, c); }
inline M min(M a, M b) { return _mm256_min_ps(a, b); }
inline M max(M a, M b) { return _mm256_max_ps(a, b); }
inline M round(M x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p 2^n for integral n in [-152, 129] without scalef: two powers of two built in the exponent bits,
// each a normal float, so p 2^(n/2) is exact and the second product rounds once, as scalef does
// (denormal results, overflow to inf); a NaN p stays NaN.
inline M scale(M p, M n) {
  __m256i k = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(k, 1), bias = _mm256_set1_epi32(127);
  M a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  M b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(k, h), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, a), b);
}
// 1 / d, correctly rounded (AVX2's rcp has 12 bits, so a Newton step would leave ~2 ulps)
inline M recip_where_nlt(M d, M keep, float lo) {
  return _mm256_and_ps(_mm256_cmp_ps(keep, set(lo), _CMP_NLT_UQ), _mm256_div_ps(set(1.f), d));
}
#endif
inline M clamp(M x, float lo, float hi) { return max(set(lo), min(set(hi), x)); }  // keeps NaN

// e^r 2^n for |r| <= ln 2 / 2: e^r by math::exp's polynomial (exp's and exp2's tail).
inline M exp_poly(M r, M n) {
  M p = set(1.9875691500e-4f);
  for (float k :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f, 1.f, 1.f})
    p = fma(p, r, set(k));
  return scale(p, n);
}
// e^(sign c) for c in [-104, 89] (or NaN); sign -1 computes e^-c without negating c first.
template <int Sign = 1>
inline M exp_clamped(M c) {
  M n = round(mul(c, set(Sign * 1.44269504088896341f)));
  M r = Sign > 0 ? fnmadd(n, set(0.693359375f), c)   // c - n ln2_hi
                 : fnmsub(n, set(0.693359375f), c);  // -c - n ln2_hi
  return exp_poly(fnmadd(n, set(-2.12194440e-4f), r), n);
}
}  // namespace vm

// e^x: n = round(x / ln 2), r = x - n ln 2, e^r by the same polynomial as math::exp, 2^n exactly
// (inf past the top, 0 past the bottom).
inline FV vexp(FV x) { return (FV)vm::exp_clamped(vm::clamp((vm::M)x, -104.f, 89.f)); }
// 2^x = 2^n e^(f ln 2), n = round(x) and f = x - n exact: at integers e^0 = 1, so 2^n exactly.
inline FV vexp2(FV x) {
  vm::M c = vm::clamp((vm::M)x, -152.f, 129.f), n = vm::round(c), f = vm::add(c, -n);
  return (FV)vm::exp_poly(vm::fma(f, vm::set(0.693359375f), vm::mul(f, vm::set(-2.12194440e-4f))), n);
}
// 1 / (1 + e^-x); 0 where e^-x overflows, as math::sigmoid (NaN stays NaN). Below -kExpHi,
// e^-x is past 2^127.5: clamped there it stays finite, and the lanes below it are set to 0.
inline FV vsigmoid(FV x) {
  constexpr float lo = -88.3762626647949f;  // -math::kExpHi
  vm::M c = vm::clamp((vm::M)x, lo, 88.f);  // (e^-88: 1 + e^-x is 1 above)
  return (FV)vm::recip_where_nlt(vm::add(vm::set(1.f), vm::exp_clamped<-1>(c)), (vm::M)x, lo);
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
