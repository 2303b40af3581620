#pragma once
// Elementary functions written so that the host compiler vectorises loops over them (no libm call
// in the loop body, no -ffast-math needed). float: Cephes' expf polynomial, about 1 ulp; double
// goes to libm.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace metagrad::fixed::math {

inline float exp(float x) {
  constexpr float hi = 88.3762626647949f, lo = -87.3365447505531f, magic = 12582912.f;  // 1.5 * 2^23
  float c = x > hi ? hi : (x < lo ? lo : x);   // NaN passes through both
  float t = c * 1.44269504088896341f + magic;  // round(c / ln 2) in t's low bits
  float n = t - magic;
  float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;  // c - n ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  std::int32_t k = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(magic);
  float scale = std::bit_cast<float>((k + 127) << 23);
  float y = p * scale;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  return x < lo ? 0.f : y;
}
inline double exp(double x) { return std::exp(x); }

}  // namespace metagrad::fixed::math
