// The product of few rows (gemv.hpp): each element of C a dot product of a row of A with a row of the
// weight, so the product runs at the memory's read bandwidth.
#include "gemv.hpp"

#include <immintrin.h>

// g++ 12 warns falsely inside its own AVX-512 conversions (_mm512_undefined_*), as in lowp_avx512.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <bit>
#include <vector>

#include "metagrad/cpu/parallel.hpp"

namespace metagrad::gemm {

namespace {
inline float widen(float v) { return v; }
inline float widen(std::uint16_t bf16) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16);
}

// Columns [j0, j1) of C (m x n, row stride ldc) = A (m x k, contiguous) W^T, W's rows ldw apart: 16
// independent sums a dot product vectorises without reassociation.
template <class W>
[[gnu::always_inline]] inline void columns_body(std::int64_t m, std::int64_t k, const float* a, const W* w,
                                                std::int64_t ldw, float* c, std::int64_t ldc, std::int64_t j0,
                                                std::int64_t j1) {
  for (std::int64_t j = j0; j < j1; ++j) {
    const W* b = w + j * ldw;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* x = a + i * k;
      float acc[16] = {};
      std::int64_t q = 0;
      for (; q + 16 <= k; q += 16)
        for (int l = 0; l < 16; ++l) acc[l] += x[q + l] * widen(b[q + l]);
      float s = 0;
      for (; q < k; ++q) s += x[q] * widen(b[q]);
      for (float v : acc) s += v;
      c[i * ldc + j] = s;
    }
  }
}
// One copy per ISA (the AVX2 one in gemv_avx2.cpp), chosen by isa() as the GEMM's are (not target_clones: its
// IFUNC resolvers run while the library is relocated, before a sanitizer's runtime has started, and crash
// under TSan), in the ISA namespaces test/isa_isolation.cmake looks for.
namespace avx512 {
// 16 weights as floats: f32 loaded, bf16 widened by a shift; `mask` the lanes inside the row.
[[gnu::target("avx512f,avx512bw,avx512vl")]] inline __m512 load16(const float* p, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, p);
}
[[gnu::target("avx512f,avx512bw,avx512vl")]] inline __m512 load16(const std::uint16_t* p, __mmask16 mask) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}
// One element of C: a row of A against a row of W, with 4 accumulators (the adds overlap), a masked
// last step instead of a scalar tail and one reduction (with a short k, attention's 64, the previous
// loop's 16 scalar adds were most of its time). W's rows are read one after another: one stream
// through the whole weight, which the prefetcher follows (4 rows side by side were 4 short streams
// each, and a quarter to half slower from memory).
template <class W>
[[gnu::target("avx512f,avx512bw,avx512vl")]] inline float dot(std::int64_t k, const float* x, const W* b) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  std::int64_t q = 0;
  for (; q + 64 <= k; q += 64)
    for (int t = 0; t < 4; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(x + q + 16 * t), load16(b + q + 16 * t, 0xffff), acc[t]);
  for (; q + 16 <= k; q += 16)
    acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + q), load16(b + q, 0xffff), acc[0]);
  if (q < k) {
    const auto mask = static_cast<__mmask16>((1u << (k - q)) - 1);
    acc[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + q), load16(b + q, mask), acc[1]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}
template <class W>
[[gnu::target("avx512f,avx512bw,avx512vl")]] void columns(std::int64_t m, std::int64_t k, const float* a,
                                                          const W* w, std::int64_t ldw, float* c,
                                                          std::int64_t ldc, std::int64_t j0,
                                                          std::int64_t j1) {
  for (std::int64_t j = j0; j < j1; ++j)
    for (std::int64_t i = 0; i < m; ++i) c[i * ldc + j] = dot(k, a + i * k, w + j * ldw);
}
}  // namespace avx512

template <class W>
void product(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const W* w, std::int64_t ldw,
             float* c, std::int64_t ldc, Isa isa) {
  using Columns = void (*)(std::int64_t, std::int64_t, const float*, const W*, std::int64_t, float*,
                           std::int64_t, std::int64_t, std::int64_t);
  const Columns columns = isa == Isa::avx512 ? &avx512::columns<W>
                          : isa == Isa::avx2 ? static_cast<Columns>(&avx::gemv_columns)
                                             : &columns_body<W>;
  cpu::parallel_for(n, 16, std::max<std::int64_t>(16, (std::int64_t{1} << 16) / k),
                    [&](std::int64_t j0, std::int64_t j1) { columns(m, k, a, w, ldw, c, ldc, j0, j1); });
}
}  // namespace

bool gemv_fits(const Problem& p) {
  // (attention's scores at batch 1, 1 x 576 x 64 a head, included: the blocked GEMM packed each
  // head's keys to use them once)
  return p.m <= 4 && p.brs == 1 && !p.gather_b && p.n * p.k >= 1024;
}

void gemv(const Problem& p, Isa isa) {
  std::vector<float> a(static_cast<std::size_t>(p.m * p.k));  // A's rows, contiguous
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t q = 0; q < p.k; ++q)
      a[static_cast<std::size_t>(i * p.k + q)] = p.a[i * p.ars + q * p.acs];
  product(p.m, p.n, p.k, a.data(), p.b, p.bcs, p.c, p.ldc, isa);
}

void gemv_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const std::uint16_t* w,
               float* y, Isa isa) {
  product(m, n, k, x, w, k, y, n, isa);
}

}  // namespace metagrad::gemm
