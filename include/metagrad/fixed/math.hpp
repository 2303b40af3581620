#pragma once
// Elementary functions written so that the host compiler vectorises loops over them (no libm call
// in the loop body, no -ffast-math needed). float: Cephes' expf polynomial, about 1 ulp; double
// goes to libm.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace metagrad::fixed::math {

// a * b + c, one rounding where the ISA has FMA (ISO C++ mode does not contract on its own).
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// e^x for x already clamped to [kExpLo, kExpHi] (or NaN): 2^n through the exponent bits times
// e^r, r = x - n ln 2 in [-ln2/2, ln2/2], by Cephes' expf polynomial in Horner form (~1 ulp).
inline float exp_clamped(float c) {
  constexpr float magic = 12582912.f;              // 1.5 * 2^23: adding it rounds to an integer
  float t = madd(c, 1.44269504088896341f, magic);  // round(c / ln 2) in t's low bits
  float n = t - magic;
  float r = madd(n, 2.12194440e-4f, madd(n, -0.693359375f, c));  // c - n ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = madd(p, r, 1.3981999507e-3f);
  p = madd(p, r, 8.3334519073e-3f);
  p = madd(p, r, 4.1665795894e-2f);
  p = madd(p, r, 1.6666665459e-1f);
  p = madd(p, r, 5.0000001201e-1f);
  p = madd(p, r, 1.f);
  p = madd(p, r, 1.f);
  std::int32_t k = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(magic);
  return p * std::bit_cast<float>((k + 127) << 23);
}
inline constexpr float kExpHi = 88.3762626647949f, kExpLo = -87.3365447505531f;
// Clamps written as `a < b ? a : b` and `a > b ? a : b`: single min/max instructions that keep NaN.
inline float clamp_exp(float x) {
  float hi = kExpHi < x ? kExpHi : x;
  return kExpLo > hi ? kExpLo : hi;
}

inline float exp(float x) {
  float y = exp_clamped(clamp_exp(x));
  y = x > kExpHi ? std::numeric_limits<float>::infinity() : y;
  return x < kExpLo ? 0.f : y;
}
// 1 / (1 + e^-x): past the clamp, e^-x is so large or small that the result is already 0 or 1.
// Where e^-x overflows, 0 (as 1 / (1 + inf) on the dynamic path), so that -inf * sigmoid(-inf) is
// NaN there as here.
inline float sigmoid(float x) {
  float y = 1.f / (1.f + exp_clamped(clamp_exp(-x)));
  return -x > kExpHi ? 0.f : y;
}
inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double exp(double x) { return std::exp(x); }

// x as a U by the rule every device follows (docs/design-changes.md): a float to an integer
// truncates toward zero, saturates to U's range and gives 0 for NaN, where static_cast is undefined;
// a float to bool is x != 0 (NaN is true); every other conversion is static_cast's (integers wrap).
// The bounds are U's minimum and its maximum + 1, powers of two every float holds exactly.
template <class U, class X>
constexpr U convert(X x) {
  if constexpr (std::is_floating_point_v<X> && std::is_integral_v<U> && !std::is_same_v<U, bool>) {
    using L = std::numeric_limits<U>;
    constexpr X lo = X(L::min()), hi = [] {
      X h = 1;
      for (int i = 0; i < L::digits; ++i) h *= 2;
      return h;
    }();
    return x != x ? U(0) : x <= lo ? L::min() : x >= hi ? L::max() : static_cast<U>(x);
  } else if constexpr (std::is_same_v<X, bool>) {
    // Through int, which g++ vectorises with AVX2 and AVX-512; static_cast<float>(bool) it did not,
    // nor x ? 1 : 0 under AVX2 (a branch per element). A ReLU's gradient mask, 128 x 512 of them,
    // took 6% of the static W5 step as scalar code.
    return static_cast<U>(static_cast<int>(x));
  } else {
    return static_cast<U>(x);
  }
}

}  // namespace metagrad::fixed::math
