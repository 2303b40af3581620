#pragma once
// The blocked driver of the packed low-precision kernels (lowp_avx512.cpp, lowp_avx2.cpp), BLIS's
// loops as the f32 GEMM's (docs/gemm.md): k in steps of KC, B packed a KC x NC panel at a time into
// strips of NR columns, A a block of MC rows at a time into strips of MR rows, an MR x NR tile of C
// in registers. A kernel K packs k in groups of K::KG (2 for bf16 pairs and int16 pairs, 4 for
// vpdpbusd's bytes) so that one instruction takes a group: a packed B strip holds, group after
// group, NR columns of KG values each (K::PB), a packed A strip MR groups of A's row (K::PA) a group.
// Included by one ISA's file each: every name here is internal to that file.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "metagrad/cpu/caches.hpp"

#if defined(__AVX512F__)
#define METAGRAD_LOWP_ISA avx512
#else
#define METAGRAD_LOWP_ISA avx
#endif

namespace metagrad::cpu::lowp::METAGRAD_LOWP_ISA {
namespace {

using i64 = std::int64_t;

// 64-byte aligned scratch, freed on scope exit.
template <class T>
struct Scratch {
  T* p;
  explicit Scratch(i64 n)
      : p(static_cast<T*>(std::aligned_alloc(
            64, static_cast<std::size_t>(((std::max<i64>(n, 1) * static_cast<i64>(sizeof(T)) + 63) / 64) *
                                         64)))) {
    if (!p) throw std::bad_alloc();
  }
  ~Scratch() { std::free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// Blocking from the host's caches: a KC x NR strip of B takes twice the L1 (it streams from the
// L2, as the f32 GEMM's does; on Zen 4, bf16 at n = 1024 gained 4% over one L1, and one L1 8%
// over half), an MC x KC block of A half the L2 as packed (int8 widened to int16 pairs, bf16 to
// f32, take twice and twice again its bytes), a KC x NC panel of B an eighth of the L3.
template <class K>
void blocking(i64& kc, i64& mc, i64& nc) {
  const CacheSizes& cs = host_caches();
  constexpr i64 a_bytes = std::max<i64>(1, static_cast<i64>(sizeof(typename K::PA)) / K::KG);  // a value of A
  kc = std::clamp<i64>(2 * cs.l1 / (K::NR * static_cast<i64>(sizeof(typename K::PB))), 64, 1024) / 32 * 32;
  mc = std::clamp<i64>(cs.l2 / 2 / (kc * a_bytes), K::MR, 1024) / K::MR * K::MR;
  nc = std::clamp<i64>(cs.l3 / 8 / (kc * static_cast<i64>(sizeof(typename K::PB))), K::NR, 4096) / K::NR *
       K::NR;
}

// C (+)= A B (+ bias[j] once), A m x k (row stride lda), B k x n as K::pack_b reads it (rows
// `ldb` apart; or W's quantised rows, B = W^T). KC is a multiple of 32: a quantised block.
template <class K>
void blocked(i64 m, i64 n, i64 k, const typename K::TA* a, i64 lda, const typename K::TB* b, i64 ldb,
             typename K::TC* c, i64 ldc, bool accumulate, const typename K::TC* bias) {
  using PB = typename K::PB;
  using PA = typename K::PA;
  constexpr i64 MR = K::MR, NR = K::NR, KG = K::KG;
  i64 KC, MC, NC;
  blocking<K>(KC, MC, NC);
  const i64 kc_max = std::min(KC, (k + KG - 1) / KG * KG);
  const i64 nc_max = std::min(NC, (n + NR - 1) / NR * NR), mc_max = std::min(MC, (m + MR - 1) / MR * MR);
  Scratch<PB> bp(kc_max * nc_max);
  Scratch<PA> ap(kc_max / KG * mc_max);
  for (i64 jc = 0; jc < n; jc += NC) {
    const i64 nc = std::min(NC, n - jc);
    for (i64 pc = 0; pc < k || pc == 0; pc += KC) {
      const i64 kc = std::min(KC, k - pc), groups = (kc + KG - 1) / KG;
      K::pack_b(b, ldb, pc, jc, kc, nc, bp.p);
      for (i64 ic = 0; ic < m; ic += MC) {
        const i64 mc = std::min(MC, m - ic);
        for (i64 ir = 0; ir < mc; ir += MR)
          K::pack_a(a + (ic + ir) * lda + pc, lda, std::min(MR, mc - ir), kc, ap.p + ir * groups);
        const bool load = accumulate || pc > 0;
        for (i64 jr = 0; jr < nc; jr += NR)
          for (i64 ir = 0; ir < mc; ir += MR)
            K::tile(groups, ap.p + ir * groups, bp.p + jr * groups * KG, c + (ic + ir) * ldc + jc + jr, ldc,
                    static_cast<int>(std::min(MR, mc - ir)), static_cast<int>(std::min(NR, nc - jr)), load,
                    pc == 0 && bias ? bias + jc + jr : nullptr);
      }
      if (k == 0) break;
    }
  }
}

// B packed for a kernel of k in pairs: per pair, NR columns of (B[2p][j], B[2p+1][j]) (a zero past
// k and n); `full(r0, r1, o)` packs a whole strip's pair of rows, the edges are copied here.
template <int NR, class T, class P, class Full>
void pack_pairs(const T* b, i64 ldb, i64 kc, i64 nc, P* out, Full&& full) {
  const i64 pairs = (kc + 1) / 2, strip = pairs * 2 * NR;
  for (i64 p = 0; p < pairs; ++p) {
    const T* r0 = b + 2 * p * ldb;
    const T* r1 = 2 * p + 1 < kc ? r0 + ldb : nullptr;
    for (i64 j0 = 0; j0 < nc; j0 += NR) {
      P* o = out + (j0 / NR) * strip + p * 2 * NR;
      if (r1 && j0 + NR <= nc) {
        full(r0 + j0, r1 + j0, o);
        continue;
      }
      for (i64 j = 0; j < NR; ++j) {
        const bool in = j0 + j < nc;
        o[2 * j] = in ? r0[j0 + j] : 0;
        o[2 * j + 1] = in && r1 ? r1[j0 + j] : 0;
      }
    }
  }
}

// A tile's store: v (rows x NR, row-major) added to C where `load`, plus bias[j] where given.
template <class T, int NR>
inline void store_tile(const T* v, T* c, i64 ldc, int rows, int cols, bool load, const T* bias) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      T x = v[i * NR + j];
      if (load) x += c[i * ldc + j];
      if (bias) x += bias[j];
      c[i * ldc + j] = x;
    }
}

}  // namespace
}  // namespace metagrad::cpu::lowp::METAGRAD_LOWP_ISA
