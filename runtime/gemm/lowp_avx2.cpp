// The AVX2 low-precision kernels (flags set in CMakeLists.txt: AVX2, FMA, F16C): the int8 GEMM by
// k in pairs widened to int16, vpmaddwd, exact (vpmaddubsw's int16 sums would saturate at
// 255 x 127 x 2, and psignb cannot negate -128); the quantised GEMVs of decoding, f32 and int8
// activations. Called only where CPUID reports AVX2, FMA and F16C (lowp.cpp).
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

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

// bf16 emulated: A and B widened to f32 as they are packed (a shift each), a 6 x 16 f32 tile of FMAs
// (12 accumulators of 16 registers), so no f32 copy of B exists beyond the packed panel.
struct Bf16Kernel {
  using TA = std::uint16_t;
  using TB = std::uint16_t;
  using TC = float;
  using PA = float;
  using PB = float;
  static constexpr int MR = 6, NR = 16, KG = 1;

  static float widen(std::uint16_t v) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(v << 16))); }
  static __m256 widen8(const std::uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static void pack_a(const TA* a, i64 lda, i64 rows, i64 kc, PA* out) {
    for (i64 i = 0; i < MR; ++i) {
      const TA* r = a + i * lda;
      for (i64 p = 0; p < kc; ++p) out[p * MR + i] = i < rows ? widen(r[p]) : 0.0f;
    }
  }
  static void pack_b(const TB* b, i64 ldb, i64 pc, i64 jc, i64 kc, i64 nc, PB* out) {
    b += pc * ldb + jc;
    for (i64 j0 = 0; j0 < nc; j0 += NR) {
      PB* o = out + (j0 / NR) * kc * NR;
      if (j0 + NR <= nc) {
        for (i64 p = 0; p < kc; ++p, o += NR) {
          _mm256_store_ps(o, widen8(b + p * ldb + j0));
          _mm256_store_ps(o + 8, widen8(b + p * ldb + j0 + 8));
        }
        continue;
      }
      for (i64 p = 0; p < kc; ++p, o += NR)
        for (i64 j = 0; j < NR; ++j) o[j] = j0 + j < nc ? widen(b[p * ldb + j0 + j]) : 0.0f;
    }
  }
  static void tile(i64 kc, const PA* ap, const PB* bp, TC* c, i64 ldc, int rows, int cols, bool load,
                   const TC* bias) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (i64 p = 0; p < kc; ++p, ap += MR, bp += NR) {
      const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
      for (int i = 0; i < MR; ++i) {
        const __m256 x = _mm256_broadcast_ss(ap + i);
        acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
      }
    }
    if (rows == MR && cols == NR && !bias) {
      for (int i = 0; i < MR; ++i)
        for (int h = 0; h < 2; ++h) {
          float* cp = c + i * ldc + 8 * h;
          _mm256_storeu_ps(cp, load ? _mm256_add_ps(acc[i][h], _mm256_loadu_ps(cp)) : acc[i][h]);
        }
      return;
    }
    alignas(32) float t[MR * NR];
    for (int i = 0; i < MR; ++i)
      _mm256_store_ps(t + i * NR, acc[i][0]), _mm256_store_ps(t + i * NR + 8, acc[i][1]);
    store_tile<float, NR>(t, c, ldc, rows, cols, load, bias);
  }
};

// A block's fp16 scale in 8 lanes (one broadcast and one conversion).
inline __m256 scale8(const void* block) {
  std::uint16_t d;
  std::memcpy(&d, block, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(d)));
}
inline float sum8(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// gemv_q: a block's 32 values widened to f32 in four vectors of 8 (Q4_0's nibbles less 8 as bytes
// first), dotted with A's 32 and scaled once.
inline __m256 block_dot(const float* a, const BlockQ8_0& w, __m256 s) {
  __m256 t = _mm256_setzero_ps();
  for (int h = 0; h < 4; ++h) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.qs + 8 * h));
    t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_loadu_ps(a + 8 * h), t);
  }
  return _mm256_fmadd_ps(scale8(&w.d), t, s);
}
// Q4_0 without crossing the vector's halves (the byte widenings did, six shuffles a block on the
// two pipes that shuffle): the 16 bytes in both halves, byte i of a half moved to a 32-bit lane by
// one vpshufb, its low nibble (value i) by an and, its high one (value i + 16) by a shift. The
// values are q, not q - 8: `off` starts the sum at -8 times the block's sum of A, lane by lane
// (offsets(), once a row of A).
inline __m256 block_dot(const float* a, const BlockQ4_0& w, const float* off, __m256 s) {
  constexpr char z = -128;  // vpshufb: a zero byte
  const __m256i idx0 = _mm256_setr_epi8(0, z, z, z, 1, z, z, z, 2, z, z, z, 3, z, z, z,  //
                                        4, z, z, z, 5, z, z, z, 6, z, z, z, 7, z, z, z);
  const __m256i idx1 = _mm256_add_epi8(idx0, _mm256_set1_epi32(8));
  const __m256i m15 = _mm256_set1_epi32(15);
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs)));
  const __m256i b0 = _mm256_shuffle_epi8(v, idx0), b1 = _mm256_shuffle_epi8(v, idx1);
  const __m256i q[4] = {_mm256_and_si256(b0, m15), _mm256_and_si256(b1, m15),  // values 0-7, 8-15
                        _mm256_srli_epi32(b0, 4), _mm256_srli_epi32(b1, 4)};   // 16-23, 24-31
  __m256 t = _mm256_loadu_ps(off);
  for (int h = 0; h < 4; ++h) t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[h]), _mm256_loadu_ps(a + 8 * h), t);
  return _mm256_fmadd_ps(scale8(&w.d), t, s);
}
inline __m256 block_dot(const float* a, const BlockQ8_0& w, const float*, __m256 s) {
  return block_dot(a, w, s);
}
// Q4_0's `off` for a row of A: block b's 8 lanes at 8 b.
void offsets(const float* a, i64 blocks, float* off) {
  for (i64 b = 0; b < blocks; ++b, a += kQuantBlock) {
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(a + 8)),
                                   _mm256_add_ps(_mm256_loadu_ps(a + 16), _mm256_loadu_ps(a + 24)));
    _mm256_storeu_ps(off + 8 * b, _mm256_mul_ps(s, _mm256_set1_ps(-8)));
  }
}
template <class Block>
float dot(const float* a, const Block* w, const float* off, i64 blocks) {
  auto at = [&](i64 b) { return std::is_same_v<Block, BlockQ4_0> ? off + 8 * b : nullptr; };
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  i64 b = 0;
  for (; b + 4 <= blocks; b += 4)
    for (int u = 0; u < 4; ++u) s[u] = block_dot(a + (b + u) * kQuantBlock, w[b + u], at(b + u), s[u]);
  for (; b < blocks; ++b) s[0] = block_dot(a + b * kQuantBlock, w[b], at(b), s[0]);
  return sum8(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
}
template <class Block>
void gemv(const GemvArgs& g) {
  const i64 blocks = g.k / kQuantBlock;
  const Block* w = static_cast<const Block*>(g.w);
  constexpr bool q4 = std::is_same_v<Block, BlockQ4_0>;
  std::vector<float> off(q4 ? static_cast<std::size_t>(g.m * blocks * 8) : 0);
  if (q4)
    for (i64 i = 0; i < g.m; ++i) offsets(g.a + i * g.lda, blocks, off.data() + i * blocks * 8);
  for (i64 j = g.n0; j < g.n1; ++j)
    for (i64 i = 0; i < g.m; ++i) {
      const float s =
          dot(g.a + i * g.lda, w + j * blocks, q4 ? off.data() + i * blocks * 8 : nullptr, blocks);
      float& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + s : s;
    }
}

// gemv_q_int8 (ggml's AVX2 scheme): a block of W against A's int8 block by vpmaddubsw (unsigned
// times signed bytes, pairs summed to int16) and vpmaddwd by ones (to int32), converted and scaled
// by W's and A's scales. Q8_0's signed values take A's signs (|w| times sign(w) a: no pair sum
// reaches 2 x 127 x 127, and A has no -128); Q4_0's nibbles are unsigned as they are, `init`
// takes the 8 back. A's block b is qa's bytes 32 b, init's and da's lanes 8 b (lowp_isa.hpp).
template <QuantType T>
inline __m256 block_int8(const char* w, const std::int8_t* qa, const std::int32_t* init, const float* da,
                         __m256 acc) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa)), ones = _mm256_set1_epi16(1);
  __m256i s;
  if constexpr (T == QuantType::q8_0) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
    s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q)), ones);
  } else {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(15));
    s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q, a), ones),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init)));
  }
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(scale8(w), _mm256_loadu_ps(da)), acc);
}
template <QuantType T>
float dot_int8(const char* w, i64 blocks, const std::int8_t* qa, const std::int32_t* init, const float* da) {
  constexpr i64 B = T == QuantType::q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  i64 b = 0;
  for (; b + 4 <= blocks; b += 4)
    for (int u = 0; u < 4; ++u)
      acc[u] =
          block_int8<T>(w + (b + u) * B, qa + 32 * (b + u), init + 8 * (b + u), da + 8 * (b + u), acc[u]);
  for (; b < blocks; ++b) acc[0] = block_int8<T>(w + b * B, qa + 32 * b, init + 8 * b, da + 8 * b, acc[0]);
  return sum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

}  // namespace

void gemm_s8(const S8Args& p) {
  blocked<S8PairKernel>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, nullptr);
}
void gemm_bf16(const Bf16Args& p) {
  blocked<Bf16Kernel>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, nullptr);
}
void gemv_q(QuantType t, const GemvArgs& g) {
  if (t == QuantType::q8_0)
    gemv<BlockQ8_0>(g);
  else
    gemv<BlockQ4_0>(g);
}
void gemv_q_int8(QuantType t, const GemvInt8Args& g) {
  const i64 blocks = g.k / kQuantBlock;
  const std::size_t row = static_cast<std::size_t>(blocks) * (t == QuantType::q8_0 ? 34 : 18);
  for (i64 j = g.n0; j < g.n1; ++j)
    for (i64 i = 0; i < g.m; ++i) {
      const char* w = static_cast<const char*>(g.w) + static_cast<std::size_t>(j) * row;
      const i64 r = i * g.pairs;
      const float s =
          t == QuantType::q8_0
              ? dot_int8<QuantType::q8_0>(w, blocks, g.qa + 64 * r, g.init + 16 * r, g.da + 16 * r)
              : dot_int8<QuantType::q4_0>(w, blocks, g.qa + 64 * r, g.init + 16 * r, g.da + 16 * r);
      float& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + s : s;
    }
}
}  // namespace metagrad::cpu::lowp::avx
