#pragma once
// The internals of cpu/gemm.hpp, in an ISA-named namespace (simd.hpp): the driver (the paths chosen
// by shape, the blocking, the dot-product path) around the blocked driver of gemm_driver.h (the split
// over threads, behind a seam: here the pool) and the loops and tiles of gemm_kernel.h, by the rules
// of gemm_plan.h: C that AOT libraries carry too.
#include <algorithm>
#include <cstdint>
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

// B read through a gather rather than strides (a conv's windows: im2col in the packing, nothing
// materialised): pack(ctx, dst, p0, kc, j0, count, width) writes rows [p0, p0 + kc) x columns
// [j0, j0 + count) of B as pack<NR> does, in strips of `width` columns (row p, then p + 1), zeros
// past count. Called by several threads at once, each with its own columns.
template <class T>
struct GemmGatherB {
  void (*pack)(const void* ctx, T* dst, std::int64_t p0, std::int64_t kc, std::int64_t j0, std::int64_t count,
               std::int64_t width);
  const void* ctx;
};

// A product's epilogue inside its blocks (gemm_driver.h's mg_gemm_done): fn(ctx, i0, i1) once rows
// [i0, i1) of C, all its columns, are final, while they are still in cache; called by several
// threads at once, each with its own rows, and once for every row.
struct GemmRowsDone {
  void (*fn)(const void* ctx, std::int64_t i0, std::int64_t i1);
  const void* ctx;
};

namespace detail {
using index_t = std::int64_t;
using namespace plan;  // gemm_kernel.h calls the plan's functions as C does, unqualified

inline namespace METAGRAD_CPU_ISA {

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
#endif

// A unit that compiles its own kernel (header-only, or under flags no library copy has) trades the
// speed of edge tiles and of a few shapes for compile time (kAllTiles false): the kernel's 25 tile
// shapes, its dot-product and one- or two-row paths were the bulk of such a unit's code generation
// (1.5 s of the MLP step's 6.7 with g++ -O2, which put it above Eigen's). Its copy has one tile,
// MR rows by NR columns, A read in place (a transposed A is first copied to contiguous rows): a B
// strip is always NR columns wide (zeros past n), and the last rows (fewer than MR) are copied,
// a chunk of k at a time, into a tile's worth of rows (see in_place). No prefetching variants; deep
// products go the blocked way, one or two rows on one thread. Full tiles run at full speed. The
// library's copies (runtime/gemm), and so the units that call them, keep every shape and path.
#ifdef METAGRAD_FIXED_GEMM_PREBUILT
inline constexpr bool kAllTiles = true;
#else
inline constexpr bool kAllTiles = false;
#endif

inline constexpr int kTileRows = METAGRAD_GEMM_MR(kVectorBytes);  // (gemm_plan.h)
static_assert(METAGRAD_GEMM_POOL_MACS == kParallelMacs, "gemm_plan.h: the pool's threshold is every op's");

template <class T, bool AllTiles = kAllTiles>
struct Gemm {
  using V = typename simd<T>::V;
  static constexpr int W = simd<T>::W;
  static constexpr int MR = kTileRows, NV = METAGRAD_GEMM_NV, NR = NV * W;
  static V fma(V a, V b, V c) { return simd<T>::fma(a, b, c); }

  // The loops and tiles, shared with AOT libraries' C GEMM (gemm_kernel.h): its mg_gemm_* functions
  // and the mg_gemm_panel of a step's B, as members of this class.
  struct Split {  // mg_gemm_split's table (gemm_plan.h)
    index_t n[30][6];
  };
  static constexpr Split kSplit = [] {
    Split s{};
    plan::mg_gemm_split(s.n, MR);
    return s;
  }();
  static_assert(
      [] {
        for (int r = 0; r < 2 * MR; ++r) {
          index_t sum = 0;
          for (int s = 0; s < 6; ++s) sum += kSplit.n[r][s] * METAGRAD_GEMM_TILE_ROWS(MR, s);
          if (sum != r) return false;
        }
        return true;
      }(),
      "Gemm::kSplit: every split covers its rows");
#define MG_T T
#define MG_V V
#define MG_W W
#define MG_MR MR
#define MG_NV NV
#define MG_NR NR
#define MG_LOAD(p) simd<T>::load(p)
#define MG_STORE(p, v) simd<T>::store(p, v)
#define MG_BROADCAST(p) simd<T>::broadcast(p)
#define MG_SPLAT(x) simd<T>::splat(x)
#define MG_FMA(a, b, c) fma(a, b, c)
#define MG_KEEP(mask, v) ((mask) ? (v) : V{})
// B's vectors stay in registers (else, for 4 rows or fewer, g++ folds the load into every FMA: twice
// the loads, 2.4 ns a k step at 4 rows, 1.9 at 8)
#if defined(__x86_64__)
#define MG_PIN(b0, b1) __asm__("" : "+v"(b0), "+v"(b1))
#else
#define MG_PIN(b0, b1) (void)0
#endif
#define MG_SPLIT kSplit.n
// (few tiles: A's rows are always read in place, MG_A_ROWS, so the packed tile is never reached; a B
// strip, packed or in place, is always NR columns wide)
#define MG_TILE(R, Nv, InPlaceA, Ahead, ...)                                                             \
  tile<AllTiles ? (R) : MR, AllTiles ? (Nv) : NV, !AllTiles || (InPlaceA) != 0, AllTiles ? (Ahead) : 0>( \
      __VA_ARGS__)
#define MG_IN_PLACE in_place
#define MG_PACK_EDGE(dst, kc, count, src, step) pack_edge(dst, kc, count, src, step)
#define MG_A_ROWS (!AllTiles)
#include "metagrad/detail/cpu/gemm_kernel.h"
// The blocked driver, shared with AOT libraries' C GEMM too (gemm_driver.h): its seam is the pool
#define MG_PARTS(macs, strips) ((macs) >= METAGRAD_GEMM_POOL_MACS ? parts_for(strips, 1) : 1)
#define MG_RUN_PARTS(parts, fn, ctx) Pool::get().run(parts, fn, ctx)
#define MG_PARTS_ONCE 0  // (the pool's threads persist: they meet at each step)
#define MG_PACK_B(dst, kc, count, src, step, across) pack<NR>(dst, kc, count, src, step, across)
#include "metagrad/detail/cpu/gemm_driver.h"
#undef MG_PARTS
#undef MG_RUN_PARTS
#undef MG_PARTS_ONCE
#undef MG_T
#undef MG_V
#undef MG_W
#undef MG_MR
#undef MG_NV
#undef MG_NR
#undef MG_LOAD
#undef MG_STORE
#undef MG_BROADCAST
#undef MG_SPLAT
#undef MG_FMA
#undef MG_KEEP
#undef MG_PIN
#undef MG_SPLIT
#undef MG_TILE
  // Rows of A read in place times one B strip (mg_gemm_rows): the kernel's runs of tile sizes, or with
  // few tiles, tiles of MR rows and the last rows (fewer) copied, a chunk of k at a time, into the
  // first rows of a buffer of MR (the rest zero), so that no load passes A's last row.
  static void in_place(index_t kc, const T* a, index_t lda, index_t rows, const T* b, index_t bs, T* c,
                       index_t ldc, index_t cols, int acc, const T* ahead, int packed) {
    if constexpr (AllTiles) {
      mg_gemm_in_place(kc, a, lda, rows, b, bs, c, ldc, cols, acc, ahead, packed);
    } else {
      for (; rows >= MR; rows -= MR, a += MR * lda, c += MR * ldc)
        tile<MR, NV, true>(kc, a, b, bs, c, ldc, MR, cols, acc, lda);
      if (rows == 0) return;
      constexpr index_t KB = std::max<index_t>(16, 16384 / (MR * sizeof(T)) / 16 * 16);  // (16 KiB)
      alignas(64) T rest[MR * KB];
      for (index_t k0 = 0; k0 < kc; k0 += KB) {
        const index_t kb = std::min(KB, kc - k0);
        for (index_t r = 0; r < MR; ++r)
          if (r < rows)
            std::copy(a + r * lda + k0, a + r * lda + k0 + kb, rest + r * KB);
          else
            std::fill(rest + r * KB, rest + r * KB + kb, T(0));
        tile<MR, NV, true>(kb, rest, b + k0 * bs, bs, c, ldc, rows, cols, acc || k0 > 0, KB);
      }
    }
  }
  // mg_gemm_tile_body for one shape, out of line (a tile is called once a strip, its k loop inside).
  template <int Rows, int Nv, bool InPlaceA = false, int Ahead = 0>
  static void tile(index_t kc, const T* a, const T* b, index_t bs, T* c, index_t ldc, index_t rows,
                   index_t cols, bool acc, index_t lda = 0, const T* ahead = nullptr) {
    static_assert(Rows <= 15, "Gemm::tile: three row bases of five rows each");
    static_assert(Nv == 1 || Nv == 2, "Gemm::tile: one or two vectors of B");
    mg_gemm_tile_body(kc, a, b, bs, c, ldc, rows, cols, acc, lda, ahead, Rows, Nv, InPlaceA, Ahead);
  }
  template <int Width>
  static void pack(T* dst, index_t kc, index_t count, const T* src, index_t step, index_t across) {
    mg_gemm_pack_body(dst, kc, count, src, step, across, Width);
  }
  // mg_gemm_rows' edge strip of B: inline, or (few tiles) the B panel's pack<NR>, out of line, rather
  // than a second copy of the packing loops.
  __attribute__((always_inline)) static void pack_edge(T* dst, index_t kc, index_t count, const T* src,
                                                       index_t step) {
    if constexpr (AllTiles)
      mg_gemm_pack_body(dst, kc, count, src, step, 1, NR);
    else
      pack<NR>(dst, kc, count, src, step, 1);
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

  // C (m x n, row stride ldc) = A B, or (acc) C += A B; A[i][p] = a[i * ars + p * acs],
  // B[p][j] = b[p * brs + j * bcs].
  // Above METAGRAD_GEMM_POOL_MACS (gemm_plan.h) the work of each KC step is cut into parts (kPartsPerThread a
  // pool thread) over C's row strips or its column strips (gemm_driver.h); each part packs its A blocks into
  // its own buffer (from the caller's arena, so no worker allocates). Every element is the same sum whatever
  // the split.
  static void run(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                  index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk = host_blocking(),
                  bool acc = false);
  // run on this copy whatever the CPU (run itself may hand the product to a wider copy: below).
  // `gather`: B packed by it (b, brs and bcs unused), never read in place. `done`: C's epilogue,
  // called on each block of rows once final (in the blocked path's last step; after the product in
  // the others).
  static void run_here(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk, bool acc = false,
                       const GemmGatherB<T>* gather = nullptr, const GemmRowsDone* done = nullptr);

  // A product whose k dwarfs m and n (a conv's weight gradient: 6 x 25 outputs over 36864 terms)
  // with both operands contiguous along k is mn dot products: each DI x DJ block of C sums vectors
  // of A's rows times vectors of B's columns, nothing packed (packing would write B's k x NR panel,
  // read once), then one horizontal sum per element.
  static constexpr index_t kDotDepth = 16;
  // 6 x 4 accumulators of AVX-512's 32 registers; 4 x 3 of AVX2's 16 (with 3 of B, 1 of A)
  static constexpr int DI = kVectorBytes == 64 ? 6 : 4, DJ = kVectorBytes == 64 ? 4 : 3;
  static void dots(index_t m, index_t n, index_t k, const T* a, index_t ars, const T* b, index_t bcs, T* c,
                   index_t ldc, bool acc) {
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
          T& out = c[(i0 + i) * ldc + j0 + j];
          out = acc ? out + t : t;
        }
    };
    const int parts = m * n * k >= METAGRAD_GEMM_POOL_MACS ? parts_for(bi * bj, 1) : 1;
    if (parts <= 1) {
      for (index_t blk = 0; blk < bi * bj; ++blk) block(blk);
      return;
    }
    parallel_parts(parts, [&](int q, int np) {
      for (index_t blk = bi * bj * q / np; blk < bi * bj * (q + 1) / np; ++blk) block(blk);
    });
  }

  // One or two rows of A (batch 1) times a B whose rows are contiguous: mg_gemm_few_range,
  // split over threads in parts of whole vectors.
  static constexpr index_t kFewRows = METAGRAD_GEMM_FEW_ROWS;
  static void few_rows(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, T* c, index_t ldc, bool acc) {
    auto range = [&](index_t j0, index_t j1) {
      mg_gemm_few_range(m, j0, j1, k, a, ars, acs, b, brs, c, ldc, acc);
    };
    if (m * n * k < METAGRAD_GEMM_POOL_MACS) return range(0, n);
    parallel_for(n, W, W, range);
  }
};

#ifdef METAGRAD_GEMM_FORWARD
// The library's baseline copy (runtime/gemm/sgemm_generic.cpp), which units built without ISA flags
// call, hands each product to the widest copy the CPU runs (runtime/gemm/dispatch.cpp): a plain
// Release build of a static unit gets AVX2 or AVX-512 products without -march. False: run here.
template <class T>
bool run_on_widest_isa(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk, bool acc);
#endif

template <class T, bool AllTiles>
void Gemm<T, AllTiles>::run(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                            index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk, bool acc) {
#ifdef METAGRAD_GEMM_FORWARD
  if (run_on_widest_isa(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, bk, acc)) return;
#endif
  run_here(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, bk, acc);
}

template <class T, bool AllTiles>
void Gemm<T, AllTiles>::run_here(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs,
                                 const T* b, index_t brs, index_t bcs, T* c, index_t ldc,
                                 const GemmBlocking& bk, bool acc, const GemmGatherB<T>* gather,
                                 const GemmRowsDone* done) {
  if (m == 0 || n == 0) return;
  auto finish = [&] {  // (the paths without blocks: C's epilogue after the product)
    if (done) done->fn(done->ctx, 0, m);
  };
  if (k == 0) {
    if (!acc)
      for (index_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return finish();
  }
  if constexpr (!AllTiles) {
    if (acs != 1) {  // (few tiles: A read in place only) A's rows made contiguous, once
      Arena::Scope scope;
      T* at = Arena::local().alloc<T>(m * k);
      for (index_t i = 0; i < m; ++i)
        for (index_t p = 0; p < k; ++p) at[i * k + p] = a[i * ars + p * acs];
      return run_here(m, n, k, at, k, 1, b, brs, bcs, c, ldc, bk, acc, gather, done);
    }
    // (one thread: a tile of MR rows for one was 4x slower at 1 x 512 x 512)
    if (m <= kFewRows && bcs == 1 && !gather)
      return mg_gemm_few_range(m, 0, n, k, a, ars, acs, b, brs, c, ldc, acc), finish();
  } else if (!gather) {  // (with few tiles, the blocked path: see kAllTiles)
    if (acs == 1 && brs == 1 && k >= kDotDepth * std::max(m, n) && k >= 4 * W)
      return dots(m, n, k, a, ars, b, bcs, c, ldc, acc), finish();
    if (m <= kFewRows && bcs == 1) return few_rows(m, n, k, a, ars, acs, b, brs, c, ldc, acc), finish();
  }
  // The blocked path (gemm_driver.h): by gemm_plan.h's rules, from the host's caches
  const CacheSizes& caches = host_caches();
  const mg_gemm_blocked pl = mg_gemm_plan_blocked(
      m, n, k, acs, b, brs, bcs, gather != nullptr, bk.kc, std::max<index_t>(bk.mc / MR, 1) * MR,
      std::max<index_t>(bk.nc / NR, 1) * NR, caches.l1, caches.l2, caches.from_memory(), 1);
  if (pl.lead) {
    run(m, pl.lead, k, a, ars, acs, b, brs, bcs, c, ldc, bk, acc);
    run(m, n - pl.lead, k, a, ars, acs, b + pl.lead, brs, bcs, c + pl.lead, ldc, bk, acc);
    return finish();
  }
  Arena::Scope scope;  // (so no worker allocates)
  T* bp = Arena::local().alloc<T>(pl.bsize);
  T* ap = Arena::local().alloc<T>(pl.parts * pl.ablock);
  const mg_gemm_gather g{gather ? gather->pack : nullptr, gather ? gather->ctx : nullptr};
  const mg_gemm_done d{done ? done->fn : nullptr, done ? done->ctx : nullptr, 0};
  mg_gemm_run_blocked_done(&pl, m, n, k, a, ars, acs, b, brs, bcs, c, ldc, acc, gather ? &g : nullptr, bp, ap,
                           done ? &d : nullptr);
}

#ifdef METAGRAD_FIXED_GEMM_PREBUILT
extern template struct Gemm<float>;
extern template struct Gemm<double>;
#endif

}  // namespace METAGRAD_CPU_ISA
}  // namespace detail
}  // namespace metagrad::cpu
