/* The GEMM's plan, written once: the register tile's size, the cache blocking, how k is stepped,
   when B is read in place, when its first columns go apart, when threads split C's rows rather
   than its columns. C that also compiles as C++: the C++ kernel (cpu/gemm.hpp) calls these
   functions, and an AOT library's C GEMM (runtime/aot/aot_gemm.cpp) carries this text verbatim (CMake
   reads it into the library at build time), so a rule changed here changes both. The measurements
   behind each rule are in docs/gemm.md. Sizes in bytes, counts in elements of `s` bytes each. */
#ifndef METAGRAD_CPU_GEMM_PLAN_H
#define METAGRAD_CPU_GEMM_PLAN_H

#include <stdint.h>

/* The vector registers of the compiling ISA, in bytes. */
#if defined(__AVX512F__)
#define METAGRAD_GEMM_VECTOR_BYTES 64
#elif defined(__AVX__)
#define METAGRAD_GEMM_VECTOR_BYTES 32
#else
#define METAGRAD_GEMM_VECTOR_BYTES 16
#endif
/* Register tile rows: MR x 2 accumulators in 28 of AVX-512's 32 registers, 12 of AVX's 16. */
#define METAGRAD_GEMM_MR(vb) ((vb) == 64 ? 14 : 6)
/* Vectors of B a tile row (NR = METAGRAD_GEMM_NV * lanes). */
#define METAGRAD_GEMM_NV 2
/* Under AVX2, KC stops at 512 (a KC x NR strip of B, 32 KiB, in L1); AVX-512 keeps 1024. */
#define METAGRAD_GEMM_MAX_KC(vb) ((vb) == 32 ? 512 : 1024)
/* One or two rows of A times a B with contiguous rows: sums of B's rows (few_rows), in runs of a
   4 KiB of C's row; from 3 rows on, tiles are faster. */
#define METAGRAD_GEMM_FEW_ROWS 2
#define METAGRAD_GEMM_FEW_BYTES 4096

/* The split over threads, by the threads' cost: the C++ pool's threads persist, and a product of
   METAGRAD_GEMM_POOL_MACS multiply-adds or more is split over them (parallel.hpp's kParallelMacs,
   every op's threshold); an AOT library's team sleeps on a condition variable between uses (and
   once started a thread for each call, 30 us a start and join on Zen 3), so a part there is at least
   METAGRAD_GEMM_CALL_THREAD_MACS (at 2^20 a part, 127 x 127 at 2 threads ran at half its speed on one). */
#define METAGRAD_GEMM_POOL_MACS ((int64_t)1 << 20)
#define METAGRAD_GEMM_CALL_THREAD_MACS ((int64_t)1 << 22)

/* Cache blocking from the host's caches, as macros: constant expressions in C too, where an AOT
   library sizes its packing buffers with them. K0 is the L2's size in KiB, 128 .. 1024: a K0 x NR
   strip of packed B, reused by every A strip of a block, streams from the L2, and a long K0 halves
   the passes over C, which decide large products; KC is K0 up to the ISA's METAGRAD_GEMM_MAX_KC. An
   MC x K0 block of packed A takes half the L2 up to 512 KiB, or a quarter of one of 512 KiB or less
   (so MC keeps the rows of K0 where KC is shorter). A KC x NC panel of B takes an eighth of the L3,
   which every core (and, in a VM, other guests) shares; NC stays at most 1024 columns. */
#define METAGRAD_GEMM_MIN(x, y) ((x) < (y) ? (x) : (y))
#define METAGRAD_GEMM_CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))
#define METAGRAD_GEMM_FIT(bytes, unit, step, lo, hi) \
  METAGRAD_GEMM_CLAMP((bytes) / (unit) / (step) * (step), lo, hi)
#define METAGRAD_GEMM_K0(l2) METAGRAD_GEMM_FIT(l2, 1024, 16, 128, 1024)
#define METAGRAD_GEMM_KC(l2, vb) METAGRAD_GEMM_MIN(METAGRAD_GEMM_K0(l2), METAGRAD_GEMM_MAX_KC(vb))
#define METAGRAD_GEMM_MC(l2, s, mr)                                                          \
  METAGRAD_GEMM_FIT((l2) <= (512 << 10) ? (l2) / 4 : METAGRAD_GEMM_MIN((l2) / 2, 512 << 10), \
                    METAGRAD_GEMM_K0(l2) * (s), mr, mr, 4096 / (mr) * (mr))
#define METAGRAD_GEMM_NC(l3, kc, s, nr) METAGRAD_GEMM_FIT((l3) / 8, (kc) * (s), nr, nr, 1024)
/* Above this many bytes, an operand read once comes from memory: an eighth of the L3, counting at
   most 64 MiB of it (a VM shares its host's L3 with other guests). */
#define METAGRAD_GEMM_FROM_MEMORY(l3) (METAGRAD_GEMM_MIN(l3, (int64_t)64 << 20) / 8)

#ifdef __cplusplus
#define METAGRAD_GEMM_FN constexpr inline
namespace metagrad::cpu::detail::plan {
#else
#define METAGRAD_GEMM_FN static inline
#endif

/* k's steps: of at most kc, and where k < kc but a k x nr strip of B would overflow the L1, as many
   as keep a strip there (extra passes over C are cheap at such k, B strips from the L2 are not). */
METAGRAD_GEMM_FN int64_t mg_gemm_steps(int64_t k, int64_t kc, int64_t nr, int64_t s, int64_t l1) {
  return k < kc && k * nr * s > l1 ? (k * nr * s + l1 - 1) / l1 : (k + kc - 1) / kc;
}
/* B read in place, unpacked, where its rows are contiguous and either one step covers k and all of
   it sits in half the L2 (small products pay no packing), or A's rows are one block of mc (each
   packed strip would be read once, by that block's tiles in turn), unless B's rows are a multiple
   of 4 KiB apart and the block more than two tiles (a strip in place shares one L1 set). */
METAGRAD_GEMM_FN int mg_gemm_direct(int64_t m, int64_t n, int64_t k, int64_t brs, int64_t bcs, int64_t steps,
                                    int64_t mc, int64_t mr, int64_t s, int64_t l2) {
  return bcs == 1 &&
         ((steps == 1 && n * k * s <= l2 / 2) || (m <= mc && (brs * s % 4096 != 0 || m <= 2 * mr)));
}
/* B in place whose rows are all `off` elements past a cache line: each row of a strip spans two
   lines, the second also the next strip's, and once a strip's 2 ks lines pass half the L1 it is
   gone when that strip reads it. Then the first columns, up to a line, are a product of their own
   (the count returned; 0: no split), and the rest's strips start on lines. */
METAGRAD_GEMM_FN int64_t mg_gemm_lead(int direct, int64_t off, int64_t n, int64_t brs, int64_t ks, int64_t s,
                                      int64_t l1) {
  const int64_t line = 64 / s, lead = line - off;
  return direct && off && brs % line == 0 && ks * 2 * 64 > l1 / 2 && n > lead ? lead : 0;
}
/* B in place from memory (more than `far` bytes: METAGRAD_GEMM_FROM_MEMORY) asks, each k step, for the
   lines of the next strip; on a B in the L2 or L3 the requests cost more than they gain. */
METAGRAD_GEMM_FN int mg_gemm_ahead(int direct, int64_t k, int64_t n, int64_t s, int64_t far) {
  return direct && k * n * s > far;
}
/* A is read in place where its rows are contiguous; rows a multiple of 4 KiB apart would put a
   tile's MR row streams in one L1 set, so a block's rows are copied first to padded rows
   (mg_gemm_padded_row), unless every part reads all of A (`whole_a`, the column split), which would
   copy it once a part. */
METAGRAD_GEMM_FN int mg_gemm_copy_a(int64_t ars, int64_t acs, int whole_a, int64_t s) {
  return acs == 1 && !whole_a && ars * s % 4096 == 0;
}
/* Parts split C's row strips, or its column strips where there are too few row strips, or where
   A's rows are contiguous (read in place) and at most 3/4 as many as a panel has columns. */
METAGRAD_GEMM_FN int mg_gemm_by_rows(int64_t parts, int64_t m, int64_t ncmax, int64_t rstrips,
                                     int64_t cstrips, int64_t acs) {
  return rstrips >= parts && (acs != 1 || cstrips < parts || 4 * m > 3 * ncmax);
}
/* The split's cut, the same on both sides (C's row strips or its column strips): part p of np
   starts at this row or column, its strips of `width` counted out evenly, up to `limit`; it ends
   where part p + 1 starts. */
METAGRAD_GEMM_FN int64_t mg_gemm_part_start(int64_t strips, int64_t p, int64_t np, int64_t width,
                                            int64_t limit) {
  return strips * p / np * width < limit ? strips * p / np * width : limit;
}
/* Packed strips past half the L2: each strip's first tile asks the L2 for the next strip. */
METAGRAD_GEMM_FN int mg_gemm_next(int direct, int64_t kc, int64_t nc, int64_t s, int64_t l2) {
  return !direct && kc * nc * s > l2 / 2;
}
/* Rows read in place run as tiles of MR rows; the last MR rows and the rest (0 .. 2 MR - 1) as the
   cheapest mix of these sizes (METAGRAD_GEMM_TILE_ROWS(mr, 0 .. 5)), counting max(rows, 4) cycles a
   k step a tile (under 4 rows, too few accumulators hide the FMA latency) plus one for its entry
   and stores. With MR = 14, 8 rows are one tile rather than 4 + 4, 13 are 7 + 4 + 2; with MR = 6,
   5 rows are one, and 8 are 4 + 4 rather than 6 + 2 (docs/gemm.md, "The kernel"). n[r][s]: how
   many tiles of size s for r rows, r < 2 mr <= 30. */
#define METAGRAD_GEMM_TILE_ROWS(mr, s)                    \
  ((s) == 0   ? (mr)                                      \
   : (s) == 1 ? ((mr) > 8 ? 8 : 5)                        \
   : (s) == 2 ? (((mr) + 1) / 2 > 4 ? ((mr) + 1) / 2 : 3) \
   : (s) == 3 ? 4                                         \
   : (s) == 4 ? 2                                         \
              : 1)
METAGRAD_GEMM_FN void mg_gemm_split(int64_t n[30][6], int mr) {
  int cost[30];
  int r, s, t;
  for (r = 0; r < 2 * mr; ++r)
    for (s = 0; s < 6; ++s) n[r][s] = 0;
  cost[0] = 0;
  for (r = 1; r < 2 * mr; ++r) {
    cost[r] = 1 << 20;
    for (s = 0; s < 6; ++s) {
      const int rows = METAGRAD_GEMM_TILE_ROWS(mr, s);
      if (rows <= r && cost[r - rows] + (rows > 4 ? rows : 4) + 1 < cost[r]) {
        cost[r] = cost[r - rows] + (rows > 4 ? rows : 4) + 1;
        for (t = 0; t < 6; ++t) n[r][t] = n[r - rows][t];
        ++n[r][s];
      }
    }
  }
}
/* A row of A copied for the tile: kc rounded up to a cache line, plus one line when that is a
   multiple of 4 KiB (the MR rows then fall in different L1 sets). */
METAGRAD_GEMM_FN int64_t mg_gemm_padded_row(int64_t kc, int64_t s) {
  const int64_t line = 64 / s, r = (kc + line - 1) / line * line;
  return r * s % 4096 == 0 ? r + line : r;
}

#ifdef __cplusplus
}  // namespace metagrad::cpu::detail::plan
#endif
#undef METAGRAD_GEMM_FN
#endif
