#pragma once
// The internals of cpu/gemm.hpp: the register tiles, the packing and the loops around them, in an
// ISA-named namespace (simd.hpp); the rules they follow (blocking, steps, B in place, the split over
// threads) are gemm_plan.h's, which AOT libraries carry as C.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "metagrad/cpu/caches.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/detail/cpu/arena.hpp"
#include "metagrad/detail/cpu/gemm_plan.h"
#include "metagrad/detail/cpu/simd.hpp"

namespace metagrad::cpu {

// GEMM cache blocking (see Gemm::blocking): rows of A, the reduce and columns of B per block.
struct GemmBlocking {
  std::int64_t mc = 0, kc = 0, nc = 0;
  friend bool operator==(const GemmBlocking&, const GemmBlocking&) = default;
};

namespace detail {
using index_t = std::int64_t;

inline namespace METAGRAD_CPU_ISA {

inline constexpr int kTileRows = METAGRAD_GEMM_MR(kVectorBytes);  // (gemm_plan.h)

template <class T>
struct Gemm {
  using V = typename simd<T>::V;
  static constexpr int W = simd<T>::W;
  static constexpr int MR = kTileRows, NV = METAGRAD_GEMM_NV, NR = NV * W;
  static V fma(V a, V b, V c) { return simd<T>::fma(a, b, c); }

  // One Rows x Nv*W tile of C (+)= packed A strip (kc x MR) times a B strip (kc x NR, row p at
  // b + p * bs: packed, bs = NR, or B's own rows); rows x cols of it are stored. InPlaceA: A's own
  // rows instead of a packed strip, row r at a + r * lda, contiguous along k. Ahead: each k step asks
  // for that row of the next strip (`ahead`, its start). 1, into the L1: B is read in place from
  // memory, its rows down a strip a page or more apart, which no hardware prefetcher follows (without
  // it every line of B was a miss to memory). 2, into the L2: B's packed panel outgrows the L2, and
  // each strip's first tile waited on the L3 (see rows).
  template <int Rows, int Nv, bool InPlaceA = false, int Ahead = 0>
  static void tile(index_t kc, const T* a, const T* b, index_t bs, T* c, index_t ldc, index_t rows,
                   index_t cols, bool acc, index_t lda = 0, const T* ahead = nullptr) {
    const index_t astep = InPlaceA ? 1 : MR;
    V sum[Rows][Nv];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) sum[r][v] = V{};
        // C's tile is read (or written) only after the k loop: ask for its lines now (GotoBLAS's trick)
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
      __builtin_prefetch(c + r * ldc, 1), __builtin_prefetch(c + r * ldc + Nv * W - 1, 1);
    // In place, up to 6 rows (AVX2's tile) are read at a + r * lda, `a` stepping along k, so that g++
    // keeps each r * lda in a register. More rows are read at a5[r / 5] + (r % 5) * lda + k: three
    // bases, each row an index register times 1 or a scale of 4 bytes, as fourteen row pointers do
    // not fit x86's 16 registers (docs/gemm.md, "Measured choices in the code").
    static_assert(Rows <= 15, "Gemm::tile: three row bases of five rows each");
    const T* a5[3] = {a, a + 5 * lda, a + 10 * lda};
    auto step = [&](index_t k) {
      static_assert(Nv == 1 || Nv == 2, "Gemm::tile: one or two vectors of B");
      if constexpr (Ahead) {  // the lines holding the next strip's last element and those before it
        constexpr int line = 64 / sizeof(T), lines = Nv * W > line ? Nv * W / line : 1;
#pragma GCC unroll 4
        for (int l = 0; l < lines; ++l)
          if constexpr (Ahead == 1)
            __builtin_prefetch(ahead + Nv * W - 1 - l * line);
          else
            __builtin_prefetch(ahead + Nv * W - 1 - l * line, 0, 2);
        ahead += bs;
      }
      V b0 = simd<T>::load(b), b1 = Nv == 2 ? simd<T>::load(b + W) : b0;
#if defined(__x86_64__)  // B's vectors stay in registers (else, for 4 rows or fewer, g++ folds the
                         // load into every FMA: twice the loads, 2.4 ns a k step at 4 rows, 1.9 at 8).
                         // Two scalars, not an array: inlined into rows(), g++ also stored an
                         // array's vectors to the stack on every k, two stores a step for nothing.
      asm("" : "+v"(b0), "+v"(b1));
#endif
#pragma GCC unroll 32
      for (int r = 0; r < Rows; ++r) {
        V av = simd<T>::broadcast(!InPlaceA   ? a + r
                                  : Rows <= 6 ? a + r * lda
                                              : a5[r / 5] + k + (r % 5) * lda);
        sum[r][0] = fma(av, b0, sum[r][0]);
        if constexpr (Nv == 2) sum[r][1] = fma(av, b1, sum[r][1]);
      }
      a += astep, b += bs;
    };
    // Four k steps a trip: a step's own instructions (a pointer and five row indices to advance, a
    // compare) were a fifth of AVX2's 6-row step. Fewer rows keep one step a trip under AVX-512:
    // unrolled, g++ rotated their accumulators through extra moves (docs/gemm.md, "The kernel").
#if !defined(__AVX512F__)
#pragma GCC unroll 4
    for (index_t k = 0; k < kc; ++k) step(k);
#else
    constexpr int U = Rows >= 12 ? 4 : 1;  // a template-dependent `#pragma GCC unroll` is an error
    index_t k = 0;
    for (; k + U <= kc; k += U)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) step(k + u);
    for (; k < kc; ++k) step(k);
#endif
    // The accumulators leave by value only: were their address taken, g++ may keep them in memory
    // through the k loop (it did for AVX2: half speed).
    if (rows == Rows && cols == Nv * W) {
#pragma GCC unroll 32
      for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < Nv; ++v) {
          T* p = c + r * ldc + v * W;
          simd<T>::store(p, acc ? sum[r][v] + simd<T>::load(p) : sum[r][v]);
        }
      return;
    }
    alignas(kVectorBytes) T part[Rows][Nv * W];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) simd<T>::store(part[r] + v * W, sum[r][v]);
    for (index_t r = 0; r < rows; ++r) {  // each row's columns contiguous: the copy vectorises
      T* __restrict out = c + r * ldc;
      const T* in = part[r];
      if (acc)
        for (index_t j = 0; j < cols; ++j) out[j] += in[j];
      else
        std::memcpy(out, in, static_cast<std::size_t>(cols) * sizeof(T));
    }
  }
  // The smallest tile covering rows x cols: edge strips (m or n not a multiple of the tile, as
  // 128 rows and 10 columns) do not pay for a whole one. Each element's sum is the same.
  static void tile(index_t kc, const T* a, const T* b, index_t bs, T* c, index_t ldc, index_t rows,
                   index_t cols, bool acc) {
    constexpr int R2 = (MR + 1) / 2, R4 = (MR + 3) / 4;
    auto by_rows = [&]<int Nv>() {
      if (rows > R2)
        tile<MR, Nv>(kc, a, b, bs, c, ldc, rows, cols, acc);
      else if (rows > R4)
        tile<R2, Nv>(kc, a, b, bs, c, ldc, rows, cols, acc);
      else
        tile<R4, Nv>(kc, a, b, bs, c, ldc, rows, cols, acc);
    };
    if (cols > W)
      by_rows.template operator()<NV>();
    else
      by_rows.template operator()<1>();
  }

  // Cache blocking, by default derived from the host's caches (caches.hpp), by gemm_plan.h's rules
  // (docs/gemm.md, "Blocking from the machine it runs on"). BEAM search (runtime/gemm) tunes them
  // per shape.
  static GemmBlocking blocking(const CacheSizes& c = host_caches()) {
    constexpr std::int64_t S = sizeof(T);
    GemmBlocking b;
    b.mc = METAGRAD_GEMM_MC(c.l2, S, MR);
    b.kc = METAGRAD_GEMM_KC(c.l2, kVectorBytes);
    b.nc = METAGRAD_GEMM_NC(c.l3, b.kc, S, NR);
    return b;
  }
  static const GemmBlocking& host_blocking() {
    static const GemmBlocking b = blocking();
    return b;
  }

  // C (m x n, row stride ldc) = A B; A[i][p] = a[i * ars + p * acs], B[p][j] = b[p * brs + j * bcs].
  // Above kParallelMacs the work of each KC step is cut into parts (kPartsPerThread a pool thread)
  // over C's row strips or its column strips (by_rows below); each part packs its A blocks into its
  // own buffer (from the caller's arena, so no worker allocates). Every element is the same sum
  // whatever the split.
  static void run(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                  index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk = host_blocking());
  // run on this copy whatever the CPU (run itself may hand the product to a wider copy: below).
  static void run_here(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk);

  // A product whose k dwarfs m and n (a conv's weight gradient: 6 x 25 outputs over 36864 terms)
  // with both operands contiguous along k is mn dot products: each DI x DJ block of C sums vectors
  // of A's rows times vectors of B's columns, nothing packed (packing would write B's k x NR panel,
  // read once), then one horizontal sum per element.
  static constexpr index_t kDotDepth = 16;
  // 6 x 4 accumulators of AVX-512's 32 registers; 4 x 3 of AVX2's 16 (with 3 of B, 1 of A)
  static constexpr int DI = kVectorBytes == 64 ? 6 : 4, DJ = kVectorBytes == 64 ? 4 : 3;
  static void dots(index_t m, index_t n, index_t k, const T* a, index_t ars, const T* b, index_t bcs, T* c,
                   index_t ldc) {
    const index_t bi = (m + DI - 1) / DI, bj = (n + DJ - 1) / DJ;
    // Blocks run along the longer side: the shorter operand's rows (16 x 4096 of a conv's gradient,
    // 256 KiB) stay in L2 while the longer one's (150 x 4096, from L3) are read once, not bi times.
    const bool along_j = m <= n;
    auto block = [&](index_t blk) {
      const index_t i0 = (along_j ? blk % bi : blk / bj) * DI, j0 = (along_j ? blk / bi : blk % bj) * DJ;
      const T* ar[DI];
      const T* br[DJ];
      for (int i = 0; i < DI; ++i)
        ar[i] = a + std::min(i0 + i, m - 1) * ars;  // past the edge: a repeat, dropped
      for (int j = 0; j < DJ; ++j) br[j] = b + std::min(j0 + j, n - 1) * bcs;
      V sum[DI][DJ] = {};
      index_t p = 0;
      for (; p + W <= k; p += W) {
        V bv[DJ];
#pragma GCC unroll 4
        for (int j = 0; j < DJ; ++j) bv[j] = simd<T>::load(br[j] + p);
#pragma GCC unroll 6
        for (int i = 0; i < DI; ++i) {
          V av = simd<T>::load(ar[i] + p);
#pragma GCC unroll 4
          for (int j = 0; j < DJ; ++j) sum[i][j] = fma(av, bv[j], sum[i][j]);
        }
      }
      for (int i = 0; i < DI && i0 + i < m; ++i)
        for (int j = 0; j < DJ && j0 + j < n; ++j) {
          T t = 0;
          for (int l = 0; l < W; ++l) t += sum[i][j][l];
          for (index_t q = p; q < k; ++q) t += ar[i][q] * br[j][q];
          c[(i0 + i) * ldc + j0 + j] = t;
        }
    };
    const int parts = m * n * k >= kParallelMacs ? parts_for(bi * bj, 1) : 1;
    if (parts <= 1) {
      for (index_t blk = 0; blk < bi * bj; ++blk) block(blk);
      return;
    }
    parallel_parts(parts, [&](int q, int np) {
      for (index_t blk = bi * bj * q / np; blk < bi * bj * (q + 1) / np; ++blk) block(blk);
    });
  }

  // One or two rows of A (batch 1: a vector times a matrix) times a B whose rows are contiguous: C's
  // rows are sums of B's rows, four at a time, B read once along its rows in runs of kFewCols (no
  // packing; a B strip, packed or in place, is read down its columns, at n = 1024 a row a page apart,
  // which no prefetcher follows); from 3 rows on, tiles are faster (docs/gemm.md). C's kFewCols
  // columns of a row stay in L1, and each element sums its terms in k's order, as a tile does.
  static constexpr index_t kFewRows = METAGRAD_GEMM_FEW_ROWS, kFewCols = METAGRAD_GEMM_FEW_BYTES / sizeof(T);
  static void few_rows(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, T* c, index_t ldc) {
    constexpr index_t U = 4;
    auto block = [&](index_t j0, index_t j1) {
      for (index_t i = 0; i < m; ++i) std::fill(c + i * ldc + j0, c + i * ldc + j1, T(0));
      for (index_t p = 0; p < k; p += U) {
        const T* bp = b + p * brs;
        for (index_t i = 0; i < m; ++i) {
          T* ci = c + i * ldc;
          const T* ai = a + i * ars + p * acs;
          index_t j = j0;
          if (p + U <= k) {
            const V a0 = simd<T>::broadcast(ai), a1 = simd<T>::broadcast(ai + acs),
                    a2 = simd<T>::broadcast(ai + 2 * acs), a3 = simd<T>::broadcast(ai + 3 * acs);
            for (; j + W <= j1; j += W) {
              V s = simd<T>::load(ci + j);
              s = fma(a0, simd<T>::load(bp + j), s);
              s = fma(a1, simd<T>::load(bp + brs + j), s);
              s = fma(a2, simd<T>::load(bp + 2 * brs + j), s);
              s = fma(a3, simd<T>::load(bp + 3 * brs + j), s);
              simd<T>::store(ci + j, s);
            }
          }
          for (; j < j1; ++j)  // the columns past the last vector, or the last k % U terms
            for (index_t q = 0; q < U && p + q < k; ++q) ci[j] += ai[q * acs] * bp[q * brs + j];
        }
      }
    };
    auto range = [&](index_t j0, index_t j1) {
      for (index_t j = j0; j < j1; j += kFewCols) block(j, std::min(j1, j + kFewCols));
    };
    if (m * n * k < kParallelMacs) return range(0, n);
    parallel_for(n, W, W, range);  // parts of whole vectors
  }

  // The kc x nc step's B: packed strips, or (direct) B's own rows, row p at b + p * stride, then
  // (ahead) from memory: see tile. Packed strips past half the L2 (`next`): each strip's first tile
  // asks the L2 (not the L1: there the strips evicted A's rows) for the next strip, which the
  // hardware prefetchers had left in the L3 (docs/gemm.md, "A packed panel past half the L2").
  struct Panel {
    const T* b;
    bool direct;
    index_t stride, nc;
    bool ahead = false, next = false;
  };

  // Rows [r0, r1) x columns [c0, c1) of the kc x nc step: A blocks of MC rows packed into ap
  // (strips of MR rows, column p then p+1), each times the B strips of the columns. Read in place,
  // the last strip is packed when it ends inside a vector (its loads would pass B's end).
  //
  // A is read in place, its strips unpacked, when its rows are contiguous: the tile's MR row streams
  // prefetch as well as a packed strip, and packing cost a third of a 64 x 64 product.
  // Rows a multiple of 4 KiB apart would put a tile's MR row streams in one L1 set: the block's rows
  // are copied then, whole, to rows a cache line more than kc apart (cheaper than a transposing pack),
  // unless every part reads all of A (`whole_a`, the column split), which would copy it once a part:
  // there it is read in place (docs/gemm.md, "A read in place").
  static void rows(index_t r0, index_t r1, index_t c0, index_t c1, index_t kc, index_t MC, const T* a,
                   index_t ars, index_t acs, const Panel& B, T* ap, T* edge, T* c, index_t ldc, bool acc,
                   bool whole_a) {
    const bool arows = acs == 1,
               alias = plan::mg_gemm_copy_a(ars, acs, whole_a, static_cast<index_t>(sizeof(T)));
    const index_t lda = alias ? padded_row(kc) : ars;
    for (index_t ic = r0; ic < r1; ic += MC) {
      const index_t mc = std::min(MC, r1 - ic);
      const T* ablock = a + ic * ars;
      if (alias) {
        for (index_t r = 0; r < mc; ++r)
          std::memcpy(ap + r * lda, ablock + r * ars, static_cast<std::size_t>(kc) * sizeof(T));
        ablock = ap;
      } else if (!arows) {
        pack<MR>(ap, kc, mc, ablock, acs, ars);
      }
      for (index_t jr = c0; jr < c1; jr += NR) {
        const T* bj = B.b + jr * kc;
        index_t bs = NR;
        if (B.direct && jr + NR <= B.nc)
          bj = B.b + jr, bs = B.stride;
        else if (B.direct)
          pack<NR>(edge, kc, B.nc - jr, B.b + jr, B.stride, 1), bj = edge;
        const index_t cols = std::min<index_t>(NR, c1 - jr);
        T* cj = c + ic * ldc + jr;
        if (arows) {
          in_place(kc, ablock, lda, mc, bj, bs, cj, ldc, cols, acc,
                   B.ahead && jr + 2 * NR <= B.nc ? B.b + jr + NR
                   : B.next && jr + NR < c1       ? B.b + (jr + NR) * kc
                                                  : nullptr,
                   B.next);
          continue;
        }
        for (index_t ir = 0; ir < mc; ir += MR)
          tile(kc, ap + ir * kc, bj, bs, cj + ir * ldc, ldc, std::min<index_t>(MR, mc - ir), cols, acc);
      }
    }
  }

  // `rows` rows of A read in place (row r at a + r * lda) times one B strip: tiles of MR rows, the
  // last MR and the rest split as kSplit says, so that no load passes A's last row and no short strip
  // is packed (a conv's 16 output channels: 8 + 8, or 6 + 6 + 4). The first tile asks for the next
  // strip `ahead` (a whole strip of B's own rows, or null; `packed`: of packed B, into the L2, where
  // the first tile has all MR rows).
  static void in_place(index_t kc, const T* a, index_t lda, index_t rows, const T* b, index_t bs, T* c,
                       index_t ldc, index_t cols, bool acc, const T* ahead = nullptr, bool packed = false) {
    auto run = [&]<int R>(index_t times) {
      for (; times > 0; --times, rows -= R, a += R * lda, c += R * ldc)
        if (ahead && !packed)
          tile<R, NV, true, 1>(kc, a, b, bs, c, ldc, R, cols, acc, lda, std::exchange(ahead, nullptr));
        else if (ahead && R == MR && cols == NR)
          tile<MR, NV, true, 2>(kc, a, b, bs, c, ldc, R, cols, acc, lda, std::exchange(ahead, nullptr));
        else if (cols > W)
          tile<R, NV, true>(kc, a, b, bs, c, ldc, R, cols, acc, lda);
        else
          tile<R, 1, true>(kc, a, b, bs, c, ldc, R, cols, acc, lda);
    };
    run.template operator()<MR>(rows >= MR ? rows / MR - 1 : 0);
    const auto& n = kSplit[static_cast<std::size_t>(rows)];
    [&]<std::size_t... S>(std::index_sequence<S...>) { (run.template operator()<kSizes[S]>(n[S]), ...); }
    (std::make_index_sequence<kSizes.size()>{});
  }
  // The tile sizes, and for the last 0 .. 2 MR - 1 rows how many of each: the cheapest sum of cycles
  // per k, max(rows, 4) a tile (under 4 rows, too few accumulators hide the FMA latency), plus one a
  // tile for its entry and stores. With MR = 14, 8 rows are one tile rather than 4 + 4, 13 are 7 + 4
  // + 2; with MR = 6, 5 rows are one. The last MR rows join the rest: with MR = 6, 8 rows are 4 + 4
  // rather than 6 + 2 (docs/gemm.md, "The kernel").
  static constexpr std::array<int, 6> kSizes = {MR, MR > 8 ? 8 : 5, (MR + 1) / 2 > 4 ? (MR + 1) / 2 : 3, 4, 2,
                                                1};
  static constexpr auto kSplit = [] {
    std::array<std::array<index_t, kSizes.size()>, 2 * MR> n{};
    std::array<int, 2 * MR> cost{};
    for (int r = 1; r < 2 * MR; ++r) {
      cost[static_cast<std::size_t>(r)] = 1 << 20;
      for (std::size_t s = 0; s < kSizes.size(); ++s)
        if (int rows = kSizes[s]; rows <= r) {
          int c = cost[static_cast<std::size_t>(r - rows)] + std::max(rows, 4) + 1;
          if (c < cost[static_cast<std::size_t>(r)]) {
            cost[static_cast<std::size_t>(r)] = c;
            n[static_cast<std::size_t>(r)] = n[static_cast<std::size_t>(r - rows)];
            ++n[static_cast<std::size_t>(r)][s];
          }
        }
    }
    return n;
  }();
  static_assert(
      [] {
        for (std::size_t r = 0; r < kSplit.size(); ++r) {
          index_t sum = 0;
          for (std::size_t s = 0; s < kSizes.size(); ++s) sum += kSplit[r][s] * kSizes[s];
          if (sum != static_cast<index_t>(r)) return false;
        }
        return true;
      }(),
      "Gemm::kSplit: every split covers its rows");

  // A row copied for the tile: kc rounded up to a cache line, plus one line when that is a multiple
  // of 4 KiB (the MR rows then fall in different L1 sets).
  static constexpr index_t padded_row(index_t kc) {
    return plan::mg_gemm_padded_row(kc, static_cast<index_t>(sizeof(T)));
  }

  // dst[strip][p][w] = src[p * step + (strip * Width + w) * across], zero past `count`. Strips whose
  // Width elements are contiguous are copied row by row, all of them a row: each source row is read
  // whole and in order, rather than one line from each of kc rows a strip apart (at a power-of-two
  // row stride those share one L1 set) or a few lines of each (B rows a page apart from memory,
  // where prefetchers stop at each page; docs/gemm.md, "The kernel"). Otherwise each of a strip's
  // columns is read along p, in the source's own order.
  template <int Width>
  static void pack(T* dst, index_t kc, index_t count, const T* src, index_t step, index_t across) {
    if (across == 1) {
      const index_t whole = count / Width;
      for (index_t p = 0; p < kc; ++p)
        for (index_t s = 0; s < whole; ++s)
#pragma GCC unroll 4
          for (int w = 0; w < Width; ++w) dst[s * Width * kc + p * Width + w] = src[p * step + s * Width + w];
      dst += whole * Width * kc, src += whole * Width, count -= whole * Width;
    }
    for (index_t s = 0; s < count; s += Width, dst += Width * kc) {
      index_t w_end = std::min<index_t>(Width, count - s);
      const T* from = src + s * across;
      if (across == 1) {  // the partial last strip of contiguous rows (n = 25): still row by row
        // Whole vectors a row, the lanes past w_end zeroed by a select (a row's zeros as a loop
        // became a `rep stos` a row, which dominated a 10-column product). A vector may read past
        // w_end into the next row, never past the strip's last element: the last rows go by scalars.
        const index_t end = (kc - 1) * step + w_end;
        index_t p = 0;
        if constexpr (Width % W == 0) {
          V iota;
          for (int l = 0; l < W; ++l) iota[l] = static_cast<T>(l);
          for (; p < kc && p * step + Width <= end; ++p)
#pragma GCC unroll 4
            for (int v = 0; v < Width / W; ++v) {
              const V x = simd<T>::load(from + p * step + v * W);
              simd<T>::store(dst + p * Width + v * W,
                             iota < simd<T>::splat(static_cast<T>(w_end - v * W)) ? x : V{});
            }
        }
        for (; p < kc; ++p)
          for (index_t w = 0; w < Width; ++w) dst[p * Width + w] = w < w_end ? from[p * step + w] : T(0);
        continue;
      }
#if defined(__AVX512F__)
      // A transpose of 4-byte elements: one gather per column p (lanes w_end.. read row 0 again and
      // are zeroed by the store's mask), so every row streams in order and the strip stays in L1.
      if constexpr (sizeof(T) == 4 && Width <= 16)
        if (across * Width < (index_t{1} << 31) && step == 1) {
          alignas(64) std::int32_t off[16] = {};
          for (index_t w = 0; w < w_end; ++w) off[w] = static_cast<std::int32_t>(w * across);
          const __m512i idx = _mm512_load_si512(off);
          const __mmask16 live = static_cast<__mmask16>((1u << w_end) - 1), all = (1u << Width) - 1;
          for (index_t p = 0; p < kc; ++p) {
            __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, from + p, 4);
            _mm512_mask_storeu_ps(dst + p * Width, all, v);
          }
          continue;
        }
#endif
      // A transpose (row-major A, a transposed B): each source row is read whole and in order, which
      // the hardware prefetcher follows (blocks of 16 along p, row by row, stalled on misses); the
      // strip written (kc x Width) stays in L1.
      for (index_t w = 0; w < w_end; ++w) {
        const T* row = from + w * across;
        for (index_t p = 0; p < kc; ++p) dst[p * Width + w] = row[p * step];
      }
      if (w_end < Width)
        for (index_t p = 0; p < kc; ++p)
          for (index_t w = w_end; w < Width; ++w) dst[p * Width + w] = T(0);
    }
  }
};

#ifdef METAGRAD_GEMM_FORWARD
// The library's baseline copy (runtime/gemm/sgemm_generic.cpp), which units built without ISA flags
// call, hands each product to the widest copy the CPU runs (runtime/gemm/forward.cpp): a plain
// Release build of a static unit gets AVX2 or AVX-512 products without -march. False: run here.
template <class T>
bool run_on_widest_isa(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk);
#endif

template <class T>
void Gemm<T>::run(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                  index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk) {
#ifdef METAGRAD_GEMM_FORWARD
  if (run_on_widest_isa(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, bk)) return;
#endif
  run_here(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, bk);
}

template <class T>
void Gemm<T>::run_here(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (index_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  if (acs == 1 && brs == 1 && k >= kDotDepth * std::max(m, n) && k >= 4 * W)
    return dots(m, n, k, a, ars, b, bcs, c, ldc);
  if (m <= kFewRows && bcs == 1) return few_rows(m, n, k, a, ars, acs, b, brs, c, ldc);
  const index_t KC = bk.kc, MC = std::max<index_t>(bk.mc / MR, 1) * MR,
                NC = std::max<index_t>(bk.nc / NR, 1) * NR;
  constexpr index_t S = sizeof(T);
  const CacheSizes& caches = host_caches();
  // k in equal steps of at most KC (docs/gemm.md, "Blocking from the machine it runs on")
  const index_t steps = plan::mg_gemm_steps(k, KC, NR, S, caches.l1), ks = (k + steps - 1) / steps;
  const index_t ncmax = std::min(n, NC), rstrips = (m + MR - 1) / MR, cstrips = (ncmax + NR - 1) / NR;
  // B read in place (docs/gemm.md, "B read in place"): small products (64 x 64, a conv's per-image
  // product) pay no packing.
  const bool direct = plan::mg_gemm_direct(m, n, k, brs, bcs, steps, MC, MR, S, caches.l2);
  // B's rows all equally off a cache line: the first columns, up to a line, a product of their own
  // (docs/gemm.md, "Off a cache line"; at k = 64 two products would cost a quarter of 64 x 64, and
  // the L1 holds the strips anyway).
  if (const index_t lead =
          plan::mg_gemm_lead(direct, static_cast<index_t>(reinterpret_cast<std::uintptr_t>(b) % 64) / S, n,
                             brs, ks, S, caches.l1)) {
    run(m, lead, k, a, ars, acs, b, brs, bcs, c, ldc, bk);
    return run(m, n - lead, k, a, ars, acs, b + lead, brs, bcs, c + lead, ldc, bk);
  }
  // A B read in place from memory (CacheSizes::from_memory) asks for each next strip (see tile); on
  // a B in the L2 or L3 the requests cost more than they gain, so not there (docs/gemm.md, "From
  // memory").
  const bool ahead = plan::mg_gemm_ahead(direct, k, n, S, caches.from_memory());
  Arena::Scope scope;
  T* bp = Arena::local().alloc<T>(ks * (cstrips * NR));
  const int parts = m * n * k >= kParallelMacs ? parts_for(rstrips * cstrips, 1) : 1;
  // The parts split C's row strips or its column strips. By rows, no A block is packed twice, but
  // the B panel, packed by all, is read by all, partly from other cores' caches. By columns, each
  // part packs and reads only its own B strips, with no wait for another's packing, but reads all
  // of A (in place where its rows are contiguous). So the columns where there are too few row
  // strips (a 16-row product at AVX-512's MR 14: 14 rows and 2), or where A's rows are contiguous
  // (read in place, even 4 KiB apart: see rows()) and at most 3/4 as many as the step has columns;
  // square products keep the rows (docs/gemm.md, "Threads").
  const bool by_rows = plan::mg_gemm_by_rows(parts, m, ncmax, rstrips, cstrips, acs);
  const index_t apack = std::min(MC, rstrips * MR) * padded_row(ks),
                ablock = apack + (direct ? ks * NR : 0);  // (+ B's edge strip)
  T* ap = Arena::local().alloc<T>(parts * ablock);
  for (index_t jc = 0; jc < n; jc += NC) {
    const index_t nc = std::min(NC, n - jc), bstrips = (nc + NR - 1) / NR;
    for (index_t pc = 0; pc < k; pc += ks) {
      const index_t kc = std::min(ks, k - pc);
      const T* bsrc = b + pc * brs + jc * bcs;
      const T* asrc = a + pc * acs;
      const Panel panel{direct ? bsrc : bp, direct, brs, nc, ahead, !direct && kc * nc * S > caches.l2 / 2};
      // Part p of np's B strips, packed (strips of NR columns, row p then p+1) unless read in
      // place; returns their columns [c0, c1).
      auto b_part = [&](int p, int np) {
        const index_t s0 = bstrips * p / np, c0 = s0 * NR, c1 = std::min(nc, bstrips * (p + 1) / np * NR);
        if (!direct && c0 < c1) pack<NR>(bp + s0 * NR * kc, kc, c1 - c0, bsrc + c0 * bcs, brs, bcs);
        return std::pair{c0, c1};
      };
      auto a_part = [&](int p) { return ap + p * ablock; };
      if (by_rows) {  // (one part included)
        if (!direct) parallel_parts(parts, [&](int p, int np) { b_part(p, np); });
        parallel_parts(parts, [&](int p, int np) {
          const index_t r0 = rstrips * p / np * MR, r1 = std::min(m, rstrips * (p + 1) / np * MR);
          if (r0 < r1)
            rows(r0, r1, 0, nc, kc, MC, asrc, ars, acs, panel, a_part(p), a_part(p) + apack, c + jc, ldc,
                 pc > 0, false);
        });
      } else {
        parallel_parts(parts, [&](int p, int np) {
          const auto [c0, c1] = b_part(p, np);
          if (c0 < c1)
            rows(0, m, c0, c1, kc, MC, asrc, ars, acs, panel, a_part(p), a_part(p) + apack, c + jc, ldc,
                 pc > 0, parts > 1);
        });
      }
    }
  }
}

// A unit linked against the runtime library (METAGRAD_PREBUILT, which the metagrad target
// exports) calls the library's copy for its ISA (runtime/gemm/sgemm_isa.inc) rather than compiling
// its own: the kernel is the largest part of a static unit's code generation (0.7 s of g++'s 3.3 s
// for the MLP step at -O2). Only where the unit's flags are those the library's copy was built with
// (CMakeLists.txt); run is defined outside the class so that it is not inline, which would let the
// compiler instantiate it anyway.
#if defined(METAGRAD_PREBUILT) && (defined(__AVX512F__) ? defined(__AVX512VL__) && defined(__AVX512DQ__) && \
                                                              defined(__AVX512BW__) && defined(__FMA__)     \
                                   : defined(__AVX__) ? defined(__AVX2__) && defined(__FMA__)               \
                                                      : true)
#define METAGRAD_FIXED_GEMM_PREBUILT 1
extern template struct Gemm<float>;
extern template struct Gemm<double>;
#endif

}  // namespace METAGRAD_CPU_ISA
}  // namespace detail
}  // namespace metagrad::cpu
