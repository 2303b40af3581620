// The AVX-512 low-precision kernels (flags set in CMakeLists.txt: AVX-512 with BF16 and VNNI):
// bf16 products by vdpbf16ps, int8 products by vpdpbusd, the quantised GEMV. Called only where
// CPUID reports those extensions (lowp.cpp).
#include <immintrin.h>

// g++ 12 warns falsely inside its own AVX-512 conversions and reductions (_mm512_undefined_*, a
// self-initialised register): "maybe" at -O3, "is used uninitialized" at the sanitizer copy's -O1.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "lowp_blocked.hpp"
#include "lowp_isa.hpp"

namespace metagrad::cpu::lowp::avx512 {
namespace {

// A strip of 14 rows packed by groups: out[g * 14 + i] = the 32 bits at row i's byte g * step
// (rows `ld_bytes` apart), xor `flip`; one gather a group, the rows read in order.
void gather_strip(const char* a, i64 ld_bytes, i64 step, i64 groups, std::uint32_t flip, std::uint32_t* out) {
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 13, 13),
                         _mm512_set1_epi32(static_cast<int>(ld_bytes)));
  const __m512i x = _mm512_set1_epi32(static_cast<int>(flip));
  for (i64 g = 0; g < groups; ++g, a += step, out += 14) {
    const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0x3fff, idx, a, 1);
    _mm512_mask_storeu_epi32(out, 0x3fff, _mm512_xor_si512(v, x));
  }
}

__m512 add(__m512 v, const float* p) { return _mm512_add_ps(v, _mm512_loadu_ps(p)); }
__m512i add(__m512i v, const std::int32_t* p) { return _mm512_add_epi32(v, _mm512_loadu_si512(p)); }

// A 14 x 32 tile's store (two vectors a row): C (+)= acc (+ bias).
template <class V, class T, int MR>
void store(V (&acc)[MR][2], T* c, i64 ldc, int rows, int cols, bool load, const T* bias) {
  constexpr int NR = 32;
  if (cols == NR) {
    for (int i = 0; i < rows; ++i)
      for (int h = 0; h < 2; ++h) {
        V v = acc[i][h];
        if (load) v = add(v, c + i * ldc + 16 * h);
        if (bias) v = add(v, bias + 16 * h);
        std::memcpy(c + i * ldc + 16 * h, &v, sizeof v);
      }
    return;
  }
  alignas(64) T t[MR * NR];
  for (int i = 0; i < MR; ++i)
    std::memcpy(t + i * NR, &acc[i][0], sizeof(V)), std::memcpy(t + i * NR + 16, &acc[i][1], sizeof(V));
  store_tile<T, NR>(t, c, ldc, rows, cols, load, bias);
}

// k in pairs: a packed B strip is, per pair, 32 columns of (B[2p][j], B[2p+1][j]); A's pair of a
// row is one 32-bit broadcast.
struct Bf16Kernel {
  using TA = std::uint16_t;
  using TB = std::uint16_t;
  using TC = float;
  using PA = std::uint32_t;
  using PB = std::uint16_t;
  static constexpr int MR = 14, NR = 32, KG = 2;  // 28 accumulators of 32 registers

  static void pack_a(const TA* a, i64 lda, i64 rows, i64 kc, PA* out) {
    const i64 pairs = (kc + 1) / 2;
    if (rows == MR && kc % 2 == 0 && lda < (i64{1} << 26)) {  // one gather a pair: the rows stream in order
      gather_strip(reinterpret_cast<const char*>(a), 2 * lda, 4, pairs, 0, out);
      return;
    }
    for (i64 i = 0; i < MR; ++i) {
      const TA* r = a + i * lda;
      if (i >= rows) {
        for (i64 p = 0; p < pairs; ++p) out[p * MR + i] = 0;
        continue;
      }
      for (i64 p = 0; p < kc / 2; ++p) std::memcpy(out + p * MR + i, r + 2 * p, 4);
      if (kc % 2) out[(pairs - 1) * MR + i] = r[kc - 1];
    }
  }
  static void pack_b(const TB* b, i64 ldb, i64 pc, i64 jc, i64 kc, i64 nc, PB* out) {
    pack_pairs<NR>(b + pc * ldb + jc, ldb, kc, nc, out, [](const TB* r0, const TB* r1, PB* o) {
      for (int j = 0; j < NR; j += 8) {  // 8 columns of two rows interleaved per pair of unpacks
        const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + j));
        const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + j));
        _mm_store_si128(reinterpret_cast<__m128i*>(o + 2 * j), _mm_unpacklo_epi16(x0, x1));
        _mm_store_si128(reinterpret_cast<__m128i*>(o + 2 * j + 8), _mm_unpackhi_epi16(x0, x1));
      }
    });
  }
  static void tile(i64 pairs, const PA* ap, const PB* bp, TC* c, i64 ldc, int rows, int cols, bool load,
                   const TC* bias) {
    __m512 acc[MR][2];
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    if (load)  // C's tile is read at the end: ask for it now
      for (int i = 0; i < rows; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0),
            _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
    for (i64 p = 0; p < pairs; ++p, ap += MR, bp += 2 * NR) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + NR);
#pragma GCC unroll 14
      for (int i = 0; i < MR; ++i) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i]));
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
      }
    }
    store(acc, c, ldc, rows, cols, load, bias);
  }
};

// acc + the dot products of a's unsigned and b's signed byte fours. In asm: g++ 12's intrinsic
// moved each accumulator through a low register and spilled it to the stack every step (a third
// of the kernel's time); vdpbf16ps's has no such trouble.
inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// k in fours: a packed B strip is, per four, 32 columns of B[4q..4q+3][j] (signed bytes); A's four
// of a row, offset by 128 to unsigned bytes, is one 32-bit broadcast.
struct S8Kernel {
  using TA = std::int8_t;
  using TB = std::int8_t;
  using TC = std::int32_t;
  using PA = std::uint32_t;
  using PB = std::int8_t;
  static constexpr int MR = 14, NR = 32, KG = 4;

  static void pack_a(const TA* a, i64 lda, i64 rows, i64 kc, PA* out) {
    const i64 quads = (kc + 3) / 4;
    if (rows == MR && kc % 4 == 0 && lda < (i64{1} << 26)) {
      gather_strip(reinterpret_cast<const char*>(a), lda, 4, quads, 0x80808080, out);
      return;
    }
    for (i64 i = 0; i < MR; ++i) {
      const TA* r = a + i * lda;
      if (i >= rows) {
        for (i64 q = 0; q < quads; ++q) out[q * MR + i] = 0;
        continue;
      }
      for (i64 q = 0; q < kc / 4; ++q) {
        std::uint32_t x;
        std::memcpy(&x, r + 4 * q, 4);
        out[q * MR + i] = x ^ 0x80808080u;
      }
      if (kc % 4) {
        std::uint32_t x = 0;
        for (i64 t = 0; t < kc % 4; ++t)
          x |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(r[kc / 4 * 4 + t]) ^ 0x80u) << (8 * t);
        out[(quads - 1) * MR + i] = x;
      }
    }
  }
  static void pack_b(const TB* b, i64 ldb, i64 pc, i64 jc, i64 kc, i64 nc, PB* out) {
    b += pc * ldb + jc;  // (rows read whole: docs/gemm.md, "Packing")
    const i64 quads = (kc + 3) / 4, strip = quads * 4 * NR;
    for (i64 q = 0; q < quads; ++q) {
      const TB* r = b + 4 * q * ldb;
      const i64 have = std::min<i64>(4, kc - 4 * q);
      for (i64 j0 = 0; j0 < nc; j0 += NR) {
        PB* o = out + (j0 / NR) * strip + q * 4 * NR;
        if (have == 4 && j0 + NR <= nc) {  // 16 columns of four rows interleaved per 8 unpacks
          for (int j = 0; j < NR; j += 16) {
            __m128i x[4];
            for (int t = 0; t < 4; ++t)
              x[t] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + t * ldb + j0 + j));
            const __m128i t0 = _mm_unpacklo_epi8(x[0], x[1]), t1 = _mm_unpackhi_epi8(x[0], x[1]);
            const __m128i t2 = _mm_unpacklo_epi8(x[2], x[3]), t3 = _mm_unpackhi_epi8(x[2], x[3]);
            __m128i* d = reinterpret_cast<__m128i*>(o + 4 * j);
            _mm_store_si128(d, _mm_unpacklo_epi16(t0, t2));
            _mm_store_si128(d + 1, _mm_unpackhi_epi16(t0, t2));
            _mm_store_si128(d + 2, _mm_unpacklo_epi16(t1, t3));
            _mm_store_si128(d + 3, _mm_unpackhi_epi16(t1, t3));
          }
        } else {
          for (i64 j = 0; j < NR; ++j)
            for (i64 t = 0; t < 4; ++t) o[4 * j + t] = j0 + j < nc && t < have ? r[t * ldb + j0 + j] : 0;
        }
      }
    }
  }
  static void tile(i64 quads, const PA* ap, const PB* bp, TC* c, i64 ldc, int rows, int cols, bool load,
                   const TC* bias) {
    __m512i acc[MR][2];
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    for (i64 q = 0; q < quads; ++q, ap += MR, bp += 4 * NR) {
      const __m512i b0 = _mm512_load_si512(bp), b1 = _mm512_load_si512(bp + 2 * NR);
#pragma GCC unroll 14
      for (int i = 0; i < MR; ++i) {
        const __m512i x = _mm512_set1_epi32(static_cast<int>(ap[i]));
        acc[i][0] = dpbusd(acc[i][0], x, b0);
        acc[i][1] = dpbusd(acc[i][1], x, b1);
      }
    }
    store(acc, c, ldc, rows, cols, load, bias);
  }
};

// A block's 32 values as floats, in two vectors: q0 values 0-15, q1 values 16-31.
void widen(const BlockQ8_0& x, __m512& q0, __m512& q1) {
  q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs))));
  q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 16))));
}
// Q4_0's nibbles to floats by a table lookup (vpermps reads only an index's low 4 bits): one
// instruction a half block where masking, subtracting 8 and converting took three.
void widen(const BlockQ4_0& x, __m512& q0, __m512& q1) {
  const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs)));
  q0 = _mm512_permutexvar_ps(v, table);
  q1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
}

// One row of A times one quantised row of W: sum over blocks of d * (q . a), four blocks a trip
// into four accumulators, so that the adds do not wait on each other.
template <class Block>
__m512 block_dot(const float* a, const Block& w, __m512 s) {
  __m512 q0, q1;
  widen(w, q0, q1);
  const __m512 t = _mm512_fmadd_ps(q1, _mm512_loadu_ps(a + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(a)));
  return _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(w.d)), t, s);
}
template <class Block>
float dot(const float* a, const Block* w, i64 blocks) {
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  i64 b = 0;
  for (; b + 4 <= blocks; b += 4)
    for (int u = 0; u < 4; ++u) s[u] = block_dot(a + (b + u) * kQuantBlock, w[b + u], s[u]);
  for (; b < blocks; ++b) s[0] = block_dot(a + b * kQuantBlock, w[b], s[0]);
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
}

template <class Block>
void gemv(const GemvArgs& g) {
  const i64 blocks = g.k / kQuantBlock;
  const Block* w = static_cast<const Block*>(g.w);
  for (i64 j = g.n0; j < g.n1; ++j)
    for (i64 i = 0; i < g.m; ++i) {
      const float s = dot(g.a + i * g.lda, w + j * blocks, blocks);
      float& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + s : s;
    }
}

template <QuantType T>
constexpr int kBlockBytes = T == QuantType::q8_0 ? 34 : 18;
// vpermb's and vpermw's indices: Q8_0's values are block o / 32's bytes 2 + o % 32, Q4_0's byte
// 2 + o % 16 (the high nibble in the second half); the scales words 0 and B / 2.
template <QuantType T>
struct Int8Index {
  std::uint8_t q[64];
  std::uint16_t d[32];
  constexpr Int8Index() : q{}, d{} {
    constexpr int B = kBlockBytes<T>;
    for (int o = 0; o < 64; ++o)
      q[o] = static_cast<std::uint8_t>(T == QuantType::q8_0 ? (o < 32 ? 2 + o : 4 + o)
                                                            : o / 32 * B + 2 + o % 16);
    for (int l = 0; l < 32; ++l) d[l] = static_cast<std::uint16_t>(l < 8 ? 0 : B / 2);
  }
};
template <QuantType T>
alignas(64) constexpr Int8Index<T> kInt8Index{};

// Pair p of a row: blocks 2p and 2p + 1 (a zero block past an odd count), added to acc.
template <QuantType T>
[[gnu::target("avx512vbmi"), gnu::always_inline]] inline __m512 pair_int8(const char* w, i64 blocks, i64 p,
                                                                          const std::int8_t* qa,
                                                                          const std::int32_t* init,
                                                                          const float* da, __m512i iq,
                                                                          __m512i id, __m512 acc) {
  constexpr int B = kBlockBytes<T>;
  const bool two = 2 * p + 1 < blocks;
  const char* at = w + 2 * p * B;
  __m512i z, q;
  if constexpr (T == QuantType::q8_0) {
    z = two ? _mm512_loadu_si512(at) : _mm512_maskz_loadu_epi8((__mmask64{1} << B) - 1, at);
    const __m512i tail = two ? _mm512_maskz_loadu_epi8(0xf, at + 64) : _mm512_setzero_si512();
    q = _mm512_xor_si512(_mm512_permutex2var_epi8(z, iq, tail), _mm512_set1_epi8(-128));
  } else {
    z = _mm512_maskz_loadu_epi8((__mmask64{1} << (two ? 2 * B : B)) - 1, at);
    q = _mm512_permutexvar_epi8(iq, z);
    q = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xff00ff00, q, 4), _mm512_set1_epi8(15));
  }
  const __m512i s = dpbusd(_mm512_loadu_si512(init + 16 * p), q, _mm512_loadu_si512(qa + 64 * p));
  const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(id, z)));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_loadu_ps(da + 16 * p)), acc);
}
// gemv_q_int8: a pair of W's blocks against a pair of A's int8 blocks by one vpdpbusd. W's 64
// values as unsigned bytes (Q8_0's flipped by 128, Q4_0's nibbles as they are; `init` takes the
// offset back) from one or two loads and one vpermb, its two fp16 scales by one vpermw.
template <QuantType T>
[[gnu::target("avx512vbmi")]] float dot_int8(const char* w, i64 blocks, const std::int8_t* qa,
                                             const std::int32_t* init, const float* da) {
  const __m512i iq = _mm512_load_si512(kInt8Index<T>.q), id = _mm512_load_si512(kInt8Index<T>.d);
  const i64 pairs = (blocks + 1) / 2;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();  // two chains: the adds overlap
  i64 p = 0;
  for (; p + 2 <= pairs; p += 2) {
    acc0 = pair_int8<T>(w, blocks, p, qa, init, da, iq, id, acc0);
    acc1 = pair_int8<T>(w, blocks, p + 1, qa, init, da, iq, id, acc1);
  }
  if (p < pairs) acc0 = pair_int8<T>(w, blocks, p, qa, init, da, iq, id, acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// W's quantised rows as B = W^T for a 14 x 32 f32 tile, each block of W dequantised once, as it
// is packed: a packed strip holds, k after k, 32 columns (32 rows of W), so no f32 copy of W
// exists beyond the one panel.
template <class Block>
struct QKernel {
  using TA = float;
  using TB = void;
  using TC = float;
  using PA = std::uint32_t;  // a float's bits
  using PB = float;
  static constexpr int MR = 14, NR = 32, KG = 1;

  static void pack_a(const TA* a, i64 lda, i64 rows, i64 kc, PA* out) {
    if (rows == MR && lda < (i64{1} << 24))
      return gather_strip(reinterpret_cast<const char*>(a), 4 * lda, 4, kc, 0, out);
    for (i64 i = 0; i < MR; ++i)
      for (i64 p = 0; p < kc; ++p) {
        const float x = i < rows ? a[i * lda + p] : 0.0f;
        std::memcpy(out + p * MR + i, &x, 4);
      }
  }
  // W's rows jc.. (row length k), values pc.. (kc a multiple of the block).
  static void pack_b(const TB* w, i64 k, i64 pc, i64 jc, i64 kc, i64 nc, PB* out) {
    const i64 blocks = k / kQuantBlock, strip = kc * NR;
    const Block* rows = static_cast<const Block*>(w);
    if (nc % NR) std::memset(out + nc / NR * strip, 0, static_cast<std::size_t>(strip) * sizeof(float));
    for (i64 j = 0; j < nc; ++j) {
      const Block* r = rows + (jc + j) * blocks + pc / kQuantBlock;
      float* o = out + j / NR * strip + j % NR;
      for (i64 b = 0; b < kc / kQuantBlock; ++b, o += kQuantBlock * NR) {
        __m512 q0, q1;
        widen(r[b], q0, q1);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(r[b].d));
        alignas(64) float x[kQuantBlock];
        _mm512_store_ps(x, _mm512_mul_ps(q0, d));
        _mm512_store_ps(x + 16, _mm512_mul_ps(q1, d));
        for (int e = 0; e < kQuantBlock; ++e) o[e * NR] = x[e];
      }
    }
  }
  static void tile(i64 kc, const PA* ap, const PB* bp, TC* c, i64 ldc, int rows, int cols, bool load,
                   const TC* bias) {
    __m512 acc[MR][2];
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (i64 p = 0; p < kc; ++p, ap += MR, bp += NR) {
      const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 14
      for (int i = 0; i < MR; ++i) {
        const __m512 x = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(ap[i])));
        acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
      }
    }
    store(acc, c, ldc, rows, cols, load, bias);
  }
};

}  // namespace

void gemm_bf16(const GemmArgs<std::uint16_t, std::uint16_t, float>& p) {
  blocked<Bf16Kernel>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, nullptr);
}
void gemm_s8(const GemmArgs<std::int8_t, std::int8_t, std::int32_t>& p, const std::int32_t* bias) {
  blocked<S8Kernel>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, bias);
}
void gemm_q(QuantType t, const QArgs& p) {
  if (t == QuantType::q8_0)
    blocked<QKernel<BlockQ8_0>>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, nullptr);
  else
    blocked<QKernel<BlockQ4_0>>(p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, p.accumulate, nullptr);
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
}  // namespace metagrad::cpu::lowp::avx512
