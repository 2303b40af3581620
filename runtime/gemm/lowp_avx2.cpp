// The AVX2 int8 kernel (flags set in CMakeLists.txt): k in pairs widened to int16, vpmaddwd, exact
// (vpmaddubsw's int16 sums would saturate at 255 x 127 x 2). Called only where CPUID reports AVX2.
#include <immintrin.h>

#include "lowp_blocked.hpp"
#include "lowp_isa.hpp"

namespace metagrad::cpu::lowp::avx {
namespace {

// A packed B strip is, per pair, 16 columns of (B[2p][j], B[2p+1][j]) as int16; A's pair of a row
// is one 32-bit broadcast of two int16.
struct S8PairKernel {
  using TA = std::int8_t;
  using TB = std::int8_t;
  using TC = std::int32_t;
  using PA = std::uint32_t;
  using PB = std::int16_t;
  static constexpr int MR = 6, NR = 16, KG = 2;  // 12 accumulators of 16 registers

  static std::uint32_t pair(std::int8_t lo, std::int8_t hi) {
    return static_cast<std::uint16_t>(std::int16_t{lo}) |
           static_cast<std::uint32_t>(static_cast<std::uint16_t>(std::int16_t{hi})) << 16;
  }
  static void pack_a(const TA* a, i64 lda, i64 rows, i64 kc, PA* out) {
    const i64 pairs = (kc + 1) / 2;
    for (i64 i = 0; i < MR; ++i) {
      const TA* r = a + i * lda;
      for (i64 p = 0; p < pairs; ++p)
        out[p * MR + i] = i >= rows ? 0 : pair(r[2 * p], 2 * p + 1 < kc ? r[2 * p + 1] : std::int8_t{0});
    }
  }
  static void pack_b(const TB* b, i64 ldb, i64 pc, i64 jc, i64 kc, i64 nc, PB* out) {
    pack_pairs<NR>(b + pc * ldb + jc, ldb, kc, nc, out, [](const TB* r0, const TB* r1, PB* o) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
      _mm256_store_si256(reinterpret_cast<__m256i*>(o), _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(x0, x1)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(o + 16), _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(x0, x1)));
    });
  }
  static void tile(i64 pairs, const PA* ap, const PB* bp, TC* c, i64 ldc, int rows, int cols, bool load,
                   const TC* bias) {
    __m256i acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (i64 p = 0; p < pairs; ++p, ap += MR, bp += 2 * NR) {
      const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bp));
      const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bp + 16));
#pragma GCC unroll 6
      for (int i = 0; i < MR; ++i) {
        const __m256i x = _mm256_set1_epi32(static_cast<int>(ap[i]));
        acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(x, b0));
        acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(x, b1));
      }
    }
    alignas(32) std::int32_t t[MR * NR];
    for (int i = 0; i < MR; ++i) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(t + i * NR), acc[i][0]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(t + i * NR + 8), acc[i][1]);
    }
    store_tile<std::int32_t, NR>(t, c, ldc, rows, cols, load, bias);
  }
};

}  // namespace

void gemm_s8(const S8Args& p) {
  blocked<S8PairKernel>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, nullptr);
}
}  // namespace metagrad::cpu::lowp::avx
