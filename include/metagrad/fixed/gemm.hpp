#pragma once
// The inline matmul kernel: C = A B for strided A (m x k) and B (k x n), row-major C, blocked as
// GotoBLAS does. Panels of B (KC x NR strips) and A (MC x KC, MR-row strips) are packed into arena
// memory; a register tile of MR rows x NV vectors (simd.hpp) accumulates with FMA.
#include <algorithm>
#include <cstring>

#include "metagrad/fixed/arena.hpp"
#include "metagrad/fixed/parallel.hpp"
#include "metagrad/fixed/shape.hpp"
#include "metagrad/fixed/simd.hpp"

namespace metagrad::fixed::detail {
inline namespace METAGRAD_FIXED_ISA {

// Register tile rows: MR x 2 accumulators in 28 of AVX-512's 32 registers, 12 of AVX's 16.
inline constexpr int kTileRows = kVectorBytes == 64 ? 14 : 6;

template <class T>
struct Gemm {
  using V = typename simd<T>::V;
  static constexpr int W = simd<T>::W;
  static constexpr int MR = kTileRows, NV = 2, NR = NV * W;
  static constexpr index_t KC = 256, MC = MR * (160 / MR), NC = 2048;
  static V fma(V a, V b, V c) { return simd<T>::fma(a, b, c); }

  // One Rows x Nv*W tile of C (+)= packed A strip (kc x MR) times packed B strip (kc x NR); rows x
  // cols of it are stored.
  template <int Rows, int Nv>
  static void tile(index_t kc, const T* a, const T* b, T* c, index_t ldc, index_t rows, index_t cols,
                   bool acc) {
    V sum[Rows][Nv];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) sum[r][v] = V{};
    for (index_t k = 0; k < kc; ++k, a += MR, b += NR) {
      V bv[Nv];
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) bv[v] = *reinterpret_cast<const V*>(b + v * W);
#pragma GCC unroll 32
      for (int r = 0; r < Rows; ++r) {
        V av = V{} + a[r];
#pragma GCC unroll 4
        for (int v = 0; v < Nv; ++v) sum[r][v] = fma(av, bv[v], sum[r][v]);
      }
    }
    if (rows == Rows && cols == Nv * W) {
      for (int r = 0; r < Rows; ++r)
        for (int v = 0; v < Nv; ++v) {
          T* p = c + r * ldc + v * W;
          V cur;
          if (acc) std::memcpy(&cur, p, sizeof(V)), sum[r][v] += cur;
          std::memcpy(p, &sum[r][v], sizeof(V));
        }
      return;
    }
    alignas(kVectorBytes) T part[Rows][Nv * W];
    std::memcpy(part, sum, sizeof(part));
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < cols; ++j) c[r * ldc + j] = acc ? c[r * ldc + j] + part[r][j] : part[r][j];
  }
  // The smallest tile covering rows x cols: edge strips (m or n not a multiple of the tile, as
  // W5's 128 rows and 10 columns) do not pay for a whole one. Each element's sum is the same.
  static void tile(index_t kc, const T* a, const T* b, T* c, index_t ldc, index_t rows, index_t cols,
                   bool acc) {
    constexpr int R2 = (MR + 1) / 2, R4 = (MR + 3) / 4;
    auto by_rows = [&]<int Nv>() {
      if (rows > R2)
        tile<MR, Nv>(kc, a, b, c, ldc, rows, cols, acc);
      else if (rows > R4)
        tile<R2, Nv>(kc, a, b, c, ldc, rows, cols, acc);
      else
        tile<R4, Nv>(kc, a, b, c, ldc, rows, cols, acc);
    };
    if (cols > W)
      by_rows.template operator()<NV>();
    else
      by_rows.template operator()<1>();
  }

  // C (m x n, row stride ldc) = A B; A[i][p] = a[i * ars + p * acs], B[p][j] = b[p * brs + j * bcs].
  // Above kParallelMacs, each B panel is packed by all threads, then the threads compute parts of C's
  // rows (whole MR strips), each part packing its A blocks into its own buffer (from the caller's
  // arena, so a step allocates nothing on any thread once grown): every element is the same sum as
  // on one thread.
  static void run(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                  index_t brs, index_t bcs, T* c, index_t ldc) {
    if (k == 0) {
      for (index_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
      return;
    }
    Arena::Scope scope;
    T* bp = Arena::local().alloc<T>(KC * (std::min(n, NC) + NR));
    constexpr index_t ablock = (MC + MR) * KC;
    const index_t strips = (m + MR - 1) / MR;
    const int parts = m * n * k >= kParallelMacs ? parts_for(strips, 1) : 1;
    T* ap = Arena::local().alloc<T>(parts * ablock);  // each part's A blocks: no worker allocates
    const index_t ks = (k + (k + KC - 1) / KC - 1) / ((k + KC - 1) / KC);  // k in equal steps <= KC
    for (index_t jc = 0; jc < n; jc += NC) {
      index_t nc = std::min(NC, n - jc);
      for (index_t pc = 0; pc < k; pc += ks) {
        index_t kc = std::min(ks, k - pc);
        const T* bsrc = b + pc * brs + jc * bcs;
        if (parts == 1) {
          pack<NR>(bp, kc, nc, bsrc, brs, bcs);  // strips of NR columns, row p then p+1
          rows(0, m, kc, nc, a + pc * acs, ars, acs, bp, ap, c + jc, ldc, pc > 0);
          continue;
        }
        const index_t bstrips = (nc + NR - 1) / NR;
        parallel_parts(parts, [&](int p, int np) {
          index_t s0 = bstrips * p / np, s1 = bstrips * (p + 1) / np;
          if (s0 < s1)
            pack<NR>(bp + s0 * NR * kc, kc, std::min(nc, s1 * NR) - s0 * NR, bsrc + s0 * NR * bcs, brs, bcs);
        });
        parallel_parts(parts, [&](int p, int np) {
          index_t r0 = strips * p / np * MR, r1 = std::min(m, strips * (p + 1) / np * MR);
          if (r0 < r1) rows(r0, r1, kc, nc, a + pc * acs, ars, acs, bp, ap + p * ablock, c + jc, ldc, pc > 0);
        });
      }
    }
  }

  // Rows [r0, r1) of the kc x nc step: A blocks of MC rows packed into ap (strips of MR rows,
  // column p then p+1), each times every packed B strip.
  static void rows(index_t r0, index_t r1, index_t kc, index_t nc, const T* a, index_t ars, index_t acs,
                   const T* bp, T* ap, T* c, index_t ldc, bool acc) {
    for (index_t ic = r0; ic < r1; ic += MC) {
      index_t mc = std::min(MC, r1 - ic);
      pack<MR>(ap, kc, mc, a + ic * ars, acs, ars);
      for (index_t jr = 0; jr < nc; jr += NR)
        for (index_t ir = 0; ir < mc; ir += MR)
          tile(kc, ap + ir * kc, bp + jr * kc, c + (ic + ir) * ldc + jr, ldc, std::min<index_t>(MR, mc - ir),
               std::min<index_t>(NR, nc - jr), acc);
    }
  }

  // dst[strip][p][w] = src[p * step + (strip * Width + w) * across], zero past `count`. A strip whose
  // Width elements are contiguous is copied row by row (a constant-size copy); otherwise each of
  // its columns is read along p, so the source is read in its own order.
  template <int Width>
  static void pack(T* dst, index_t kc, index_t count, const T* src, index_t step, index_t across) {
    for (index_t s = 0; s < count; s += Width, dst += Width * kc) {
      index_t w_end = std::min<index_t>(Width, count - s);
      const T* from = src + s * across;
      if (across == 1 && w_end == Width) {
        for (index_t p = 0; p < kc; ++p)
          for (int w = 0; w < Width; ++w) dst[p * Width + w] = from[p * step + w];
        continue;
      }
      for (index_t w = 0; w < Width; ++w)
        for (index_t p = 0; p < kc; ++p) dst[p * Width + w] = w < w_end ? from[w * across + p * step] : T(0);
    }
  }
};

}  // namespace METAGRAD_FIXED_ISA
}  // namespace metagrad::fixed::detail
