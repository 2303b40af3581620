// The AVX2 copy of the few-row product's dot products (gemv.hpp; flags set in CMakeLists.txt: AVX2
// and FMA), as gemv.cpp's AVX-512 one: each element of C a row of A against a row of W, read one
// row after another (one stream the prefetcher follows), four accumulators and one reduction.
#include <immintrin.h>

#include <cstdint>

#include "gemv.hpp"

namespace metagrad::gemm::avx {
namespace {

using i64 = std::int64_t;

// 8 weights as floats: f32 loaded, bf16 widened by a shift.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const std::uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline float widen(float v) { return v; }
inline float widen(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

template <class W>
float dot(i64 k, const float* x, const W* b) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  i64 q = 0;
  for (; q + 32 <= k; q += 32)
    for (int t = 0; t < 4; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(x + q + 8 * t), load8(b + q + 8 * t), acc[t]);
  for (; q + 8 <= k; q += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + q), load8(b + q), acc[0]);
  const __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s = _mm_add_ps(h, _mm_movehl_ps(h, h));
  float r = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  for (; q < k; ++q) r += x[q] * widen(b[q]);  // (fewer than 8: no masked load of 16-bit lanes in AVX2)
  return r;
}

template <class W>
void columns(i64 m, i64 k, const float* a, const W* w, i64 ldw, float* c, i64 ldc, i64 j0, i64 j1) {
  for (i64 j = j0; j < j1; ++j)
    for (i64 i = 0; i < m; ++i) c[i * ldc + j] = dot(k, a + i * k, w + j * ldw);
}

}  // namespace

void gemv_columns(i64 m, i64 k, const float* a, const float* w, i64 ldw, float* c, i64 ldc, i64 j0, i64 j1) {
  columns(m, k, a, w, ldw, c, ldc, j0, j1);
}
void gemv_columns(i64 m, i64 k, const float* a, const std::uint16_t* w, i64 ldw, float* c, i64 ldc, i64 j0,
                  i64 j1) {
  columns(m, k, a, w, ldw, c, ldc, j0, j1);
}

}  // namespace metagrad::gemm::avx
