// The AOT library's GEMM as C text: cpu/gemm.hpp's design (B packed in KC x NR strips or read in
// place, A read in place or packed in MR-row strips, an MR x NR register tile of two vectors per row)
// in GNU C vector extensions, the tile's accumulators spelled out so that every C compiler keeps them
// in registers. Its rules (the tile's size, the blocking, k's steps, B in place, the split over
// threads) are the C++ kernel's own text, detail/metagrad/detail/cpu/gemm_plan.h, pasted first.
// Threads only where the caller asks for them (NAME_set_threads): each runs a part of C as a product
// of its own, with its own packing buffers.
#include "aot_gemm.hpp"

#include <algorithm>

#include "metagrad/shape/view.hpp"  // metagrad::detail::cat

namespace metagrad::aot {

namespace {

// P_tile<mr>: an mr x P_NR tile from a packed A strip (row r at a[r], the strip's row stride P_MR);
// P_itile<mr>: from A's own rows (row r at a + r * lda, contiguous along k), addressed from a base
// every five rows (fourteen row pointers would not fit x86's registers; for six, compilers keep each
// r * lda in a register, as cpu/gemm.hpp's tile spells it); P_atile<mr>: as P_itile, B in place
// from memory, asking each k step for the lines of the next strip's row (`ahead`, as cpu/gemm.hpp's
// tile). C's tile is asked for before the k loop, which hides its misses; accumulate, then store
// whole or through a temporary at an edge.
enum class Tile { packed, in_place, ahead };
std::string tile_fn(int mr, Tile kind) {
  const bool in_place = kind != Tile::packed, ahead = kind == Tile::ahead;
  auto n = [](int i) { return std::to_string(i); };
  std::string decl = "  P_v", k = "", full = "", part = "", bases = "", pre = "";
  for (int r = 0; r < mr; r += 5)
    bases += detail::cat("  const float* a", n(r), " = a + ", n(r), " * lda;\n");
  for (int r = 0; r < mr; ++r) {
    std::string ar = in_place ? detail::cat("a", n(r / 5 * 5), "[", n(r % 5), " * lda + p]")
                              : detail::cat("a[", n(r), "]");
    decl += detail::cat(r ? ", " : " ", "c", n(r), "_0 = {0}, c", n(r), "_1 = {0}");
    pre += detail::cat("  __builtin_prefetch(c + ", n(r), " * ldc, 1), __builtin_prefetch(c + ", n(r),
                       " * ldc + P_NR - 1, 1);\n");
    k += detail::cat("    c", n(r), "_0 += ", ar, " * b0;\n    c", n(r), "_1 += ", ar, " * b1;\n");
    for (int v = 0; v < 2; ++v) {
      full +=
          detail::cat("    P_put(c + ", n(r), " * ldc + ", n(v), " * P_W, c", n(r), "_", n(v), ", acc);\n");
      part += detail::cat("  P_put(t[", n(r), "] + ", n(v), " * P_W, c", n(r), "_", n(v), ", 0);\n");
    }
  }
  return detail::cat(
      "static void P_",
      ahead      ? "a"
      : in_place ? "i"
                 : "",
      "tile", n(mr),
      "(int64_t kc, const float* restrict a, int64_t lda, const float* restrict b, int64_t bs,\n"
      "                   float* restrict c, int64_t ldc, int64_t rows, int64_t cols, int acc",
      ahead ? ", const float* ahead" : "", ") {\n", decl, ";\n  float t[", n(mr), "][P_NR];\n",
      in_place ? bases : "  (void)lda;\n", pre,
      mr >= 12 ? "#pragma GCC unroll 4\n"
               : "#if P_VB < 64\n#pragma GCC unroll 4\n#endif\n",  // as cpu/gemm.hpp's tile
      "  for (int64_t p = 0; p < kc; ++p, ", in_place ? "" : "a += P_MR, ", "b += bs) {\n",
      ahead
          ? "    for (int l = 0; l < (P_NR + 15) / 16; ++l) __builtin_prefetch(ahead + P_NR - 1 - 16 * l);\n"
            "    ahead += bs;\n"
          : "",
      "    P_v b0 = P_load(b), b1 = P_load(b + P_W);\n", k, "  }\n", "  if (rows == ", n(mr),
      " && cols == P_NR) {\n", full, "    return;\n  }\n", part,
      "  for (int64_t r = 0; r < rows; ++r)\n    for (int64_t j = 0; j < cols; ++j)\n",
      "      c[r * ldc + j] = acc ? c[r * ldc + j] + t[r][j] : t[r][j];\n}\n");
}

constexpr const char* kSource = R"(
#include <pthread.h>
#include <stdlib.h>
/* The vector width, the register tile, the cache blocking and k's steps: the plan above, for
   floats, from this machine's caches (P_L1 .. P_L3). */
#define P_VB METAGRAD_GEMM_VECTOR_BYTES
#define P_MR METAGRAD_GEMM_MR(P_VB)
#define P_W (P_VB / 4)
#define P_NR (METAGRAD_GEMM_NV * P_W)
#define P_MIN(x, y) ((x) < (y) ? (x) : (y))
#define P_CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))
#define P_UP(x, q) (((x) + (q) - 1) / (q) * (q))
#define P_KC METAGRAD_GEMM_KC(P_L2, P_VB)
#define P_MC METAGRAD_GEMM_MC(P_L2, 4, P_MR)
#define P_NC METAGRAD_GEMM_NC(P_L3, P_KC, 4, P_NR)
#define P_FAR METAGRAD_GEMM_FROM_MEMORY(P_L3)
#define P_FEWCOLS (METAGRAD_GEMM_FEW_BYTES / 4)
#define P_STEPS(k) mg_gemm_steps(k, P_KC, P_NR, 4, P_L1)
typedef float P_v __attribute__((vector_size(P_VB)));
#define P_ASIZE (P_UP(P_MIN(P_MC, P_MMAX), P_MR) * (P_UP(P_MIN(P_KC, P_KMAX), 16) + 16))
#define P_BSIZE (P_UP(P_MIN(P_NC, P_NMAX), P_NR) * P_MIN(P_KC, P_KMAX))
static float P_apack[P_ASIZE] __attribute__((aligned(64)));
static float P_bpack[P_BSIZE] __attribute__((aligned(64)));

static inline P_v P_load(const float* p) {
  P_v v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
static inline P_v P_splat(float x) {
  P_v v = {0};
  int l;
  for (l = 0; l < P_W; ++l) v[l] = x;
  return v;
}
static inline void P_put(float* p, P_v v, int acc) {
  if (acc) v += P_load(p);
  __builtin_memcpy(p, &v, sizeof v);
}

/* C's rows x cols corner of an R x P_NR tile (+)= R rows of A (a packed strip, or in place: P_itile)
   times a B strip whose row p is at b + p * bs (packed: bs = P_NR; or B's own rows). */
#if P_MR == 14
P_TILE14
P_TILE8
#else
P_TILE6
#endif
P_TILE4
P_TILE2
P_TILE1
/* `rows` rows of A (packed strips, lda 0, or rows in place) times one B strip: tiles of P_MR rows,
   then the rest as tiles of 8 (AVX-512), 4, 2 and 1 rows rather than one padded tile (a 6-row product
   does not pay for 14, and no load in place passes A's last row). With A in place, the first tile
   asks for the next strip `ahead` (or null). */
#define P_CALL(R)                                                                                \
  if (lda && ahead)                                                                              \
    P_atile##R(kc, a + r * lda, lda, b, bs, c + r * ldc, ldc, R, cols, acc, ahead), ahead = 0;   \
  else if (lda)                                                                                  \
    P_itile##R(kc, a + r * lda, lda, b, bs, c + r * ldc, ldc, R, cols, acc);                     \
  else                                                                                           \
    P_tile##R(kc, a + (r / P_MR) * P_MR * kc + r % P_MR, 0, b, bs, c + r * ldc, ldc, R, cols, acc)
static void P_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t bs, float* c,
                   int64_t ldc, int64_t rows, int64_t cols, int acc, const float* ahead) {
  int64_t r = 0;
  for (; r + P_MR <= rows; r += P_MR)
#if P_MR == 14
    P_CALL(14);
  for (; r + 8 <= rows; r += 8) P_CALL(8);
#else
    P_CALL(6);
#endif
  for (; r + 4 <= rows; r += 4) P_CALL(4);
  for (; r + 2 <= rows; r += 2) P_CALL(2);
  for (; r < rows; r += 1) P_CALL(1);
}

/* Strips of `width` along `count`: d[strip][p][w] = s[p * along + (strip * width + w) * across],
   zero past count. Whole strips of contiguous rows are copied row by row, all of them a row: each
   source row is read whole and in order, not one line (or a few) from each of kc rows a strip apart
   (at a power-of-two row stride those share one L1 set; from memory, prefetchers stop at each page).
   Otherwise in the source's order. Inlined, so that each caller's width is a constant and the row
   copies are vector moves. */
static inline __attribute__((always_inline)) void P_pack(float* d, int64_t kc, int64_t count, int64_t width,
                                                         const float* s, int64_t along, int64_t across) {
  int64_t i = 0, x, p, g;
  if (across == 1) {
    const int64_t strips = count / width;
    for (p = 0; p < kc; ++p)
      for (g = 0; g < strips; ++g)
        __builtin_memcpy(d + g * width * kc + p * width, s + p * along + g * width, sizeof(float) * width);
    i = strips * width, d += strips * width * kc, s += strips * width;
  }
  for (; i < count; i += width, d += width * kc, s += width * across) {
    int64_t w = P_MIN(width, count - i);
    if (across == 1 || along != 1)
      for (p = 0; p < kc; ++p)
        for (x = 0; x < width; ++x) d[p * width + x] = x < w ? s[p * along + x * across] : 0.f;
    else
      for (x = 0; x < width; ++x)
        for (p = 0; p < kc; ++p) d[p * width + x] = x < w ? s[p + x * across] : 0.f;
  }
}

/* One thread's product: C's m x n (+)= A B through the packing buffers ap and bp (P_ASIZE and P_BSIZE
   floats). `whole_a`: every thread reads all of A (the column split), so none copies it. `direct`:
   B is read in place (`ahead`: from memory); see P_sgemm. */
typedef struct {
  int64_t m, n, k, ars, acs, brs, bcs, ldc;
  const float *a, *b;
  float *c, *ap, *bp;
  int whole_a, direct, ahead;
} P_part;
static void P_block(const P_part* t) {
  const int64_t m = t->m, n = t->n, k = t->k, ars = t->ars, acs = t->acs, brs = t->brs, bcs = t->bcs,
                ldc = t->ldc;
  const float *a = t->a, *b = t->b;
  float *c = t->c, *apack = t->ap, *bpack = t->bp;
  int64_t jc, pc, ic, jr;
  /* k in equal steps (P_STEPS). B in place: its last strip is packed where it ends inside a
     vector, and where its rows are all equally off a cache line, the columns up to the first line
     are a product of their own (mg_gemm_lead). A read in place where its rows are contiguous; a
     multiple of 4 KiB apart (its MR row streams would share one L1 set), a block's rows are copied
     first to rows a cache line more than kc apart (mg_gemm_padded_row). */
  const int64_t steps = P_STEPS(k), ks = (k + steps - 1) / steps;
  const int direct = t->direct, alias = mg_gemm_copy_a(ars, acs, t->whole_a, 4);
  const int64_t lead = mg_gemm_lead(direct, (int64_t)((uintptr_t)b % 64) / 4, n, brs, ks, 4, P_L1);
  if (lead) {
    P_part head = *t, rest = *t;
    head.n = lead, rest.n = n - lead, rest.b = b + lead, rest.c = c + lead;
    P_block(&head);
    P_block(&rest);
    return;
  }
  for (jc = 0; jc < n; jc += P_NC)
    for (pc = 0; pc < k; pc += ks) {
      int64_t nc = P_MIN(P_NC, n - jc), kc = P_MIN(ks, k - pc), whole = direct ? nc / P_NR * P_NR : 0;
      const float* bsrc = b + pc * brs + jc * bcs;
      P_pack(bpack + whole * kc, kc, nc - whole, P_NR, bsrc + whole * bcs, brs, bcs);
      for (ic = 0; ic < m; ic += P_MC) {
        int64_t mc = P_MIN(P_MC, m - ic);
        const float* ablock = a + ic * ars + pc * acs;
        int64_t lda = acs == 1 ? ars : 0, r;
        if (alias) {
          lda = mg_gemm_padded_row(kc, 4);
          for (r = 0; r < mc; ++r) __builtin_memcpy(apack + r * lda, ablock + r * ars, sizeof(float) * kc);
          ablock = apack;
        } else if (!lda) {
          P_pack(apack, kc, mc, P_MR, ablock, acs, ars), ablock = apack;
        }
        for (jr = 0; jr < nc; jr += P_NR)
          P_rows(kc, ablock, lda, jr < whole ? bsrc + jr : bpack + jr * kc, jr < whole ? brs : P_NR,
                 c + ic * ldc + jc + jr, ldc, mc, P_MIN(P_NR, nc - jr), pc > 0,
                 t->ahead && jr + P_NR < whole ? bsrc + jr + P_NR : 0);
      }
    }
}
/* One or two rows of A (batch 1) times a B whose rows are contiguous, as metagrad's C++ kernel does
   it: C's rows are sums of B's rows, four at a time, B read once along its rows in runs of P_FEWCOLS
   columns, not down its columns in strips (at n = 1024 a row a page apart, which no prefetcher
   follows). On the caller's thread: it is bound by reading B. */
static void P_few(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
                  int64_t brs, float* c, int64_t ldc) {
  int64_t j0, j1, i, p, j, q;
  for (j0 = 0; j0 < n; j0 += P_FEWCOLS) {
    j1 = P_MIN(n, j0 + P_FEWCOLS);
    for (i = 0; i < m; ++i)
      for (j = j0; j < j1; ++j) c[i * ldc + j] = 0.f;
    for (p = 0; p < k; p += 4)
      for (i = 0; i < m; ++i) {
        const float *ai = a + i * ars + p * acs, *bp = b + p * brs;
        float* ci = c + i * ldc;
        j = j0;
        if (p + 4 <= k) {
          const P_v a0 = P_splat(ai[0]), a1 = P_splat(ai[acs]), a2 = P_splat(ai[2 * acs]),
                    a3 = P_splat(ai[3 * acs]);
          for (; j + P_W <= j1; j += P_W) {
            P_v s = P_load(ci + j) + a0 * P_load(bp + j);
            s += a1 * P_load(bp + brs + j);
            s += a2 * P_load(bp + 2 * brs + j);
            P_put(ci + j, s + a3 * P_load(bp + 3 * brs + j), 0);
          }
        }
        for (; j < j1; ++j) /* the columns past the last vector, or the last k % 4 terms */
          for (q = 0; q < 4 && p + q < k; ++q) ci[j] += ai[q * acs] * bp[q * brs + j];
      }
  }
}
static void* P_run(void* t) {
  P_block((const P_part*)t);
  return 0;
}

/* Threads, split as metagrad's C++ kernel splits them: C's row strips, or its column strips where A's
   rows are contiguous and fewer than 3/4 of the columns of a panel (each part then packs only its own
   columns of B and reads A in place), or where there are too few row strips. Part 0 runs on the
   caller; each other part on a thread started for the call (with buffers allocated on first use and
   kept), and only for 2^22 multiply-adds a part: a thread's start and join cost 30 us on Zen 3, and
   at 2^20 a part (the C++ pool's threshold, whose threads persist) 127 x 127 at 2 threads ran at
   half its speed on one. Each element is the same sum whatever the split. */
#define P_TMAX 64
static int P_threads = 1;
static char* P_traw[P_TMAX];
/* the buffers go with the library (dlclose), not only with the process */
__attribute__((destructor)) static void P_free_buffers(void) {
  int p;
  for (p = 0; p < P_TMAX; ++p) free(P_traw[p]), P_traw[p] = 0;
}
static void P_use_threads(int threads) { P_threads = threads < 1 ? 1 : threads > P_TMAX ? P_TMAX : threads; }

static void P_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs,
                    const float* b, int64_t brs, int64_t bcs, float* c, int64_t ldc) {
  const int64_t rstrips = (m + P_MR - 1) / P_MR, cstrips = (P_MIN(n, P_NC) + P_NR - 1) / P_NR,
                nstrips = (n + P_NR - 1) / P_NR;
  int64_t parts = P_MIN(P_threads, m * n * k >> 22), p, i, j;
  const int by_rows = mg_gemm_by_rows(parts, m, P_MIN(n, P_NC), rstrips, cstrips, acs);
  /* B read in place (mg_gemm_direct); from memory (more than P_FAR bytes), each tile asks for the
     next strip ahead. */
  const int direct = mg_gemm_direct(m, n, k, brs, bcs, P_STEPS(k), P_MC, P_MR, 4, P_L2);
  P_part part[P_TMAX];
  pthread_t thread[P_TMAX];
  int started[P_TMAX];
  if (k == 0)
    for (i = 0; i < m; ++i)
      for (j = 0; j < n; ++j) c[i * ldc + j] = 0.f;
  if (m == 0 || n == 0 || k == 0) return;
  if (m <= METAGRAD_GEMM_FEW_ROWS && bcs == 1) {
    P_few(m, n, k, a, ars, acs, b, brs, c, ldc);
    return;
  }
  parts = P_CLAMP(parts, 1, by_rows ? rstrips : nstrips);
  for (p = 1; p < parts; ++p) /* each helper's buffers, kept for later calls; fewer parts without */
    if (!P_traw[p] && !(P_traw[p] = (char*)malloc((P_ASIZE + P_BSIZE) * 4 + 64))) break;
  parts = p;
  for (p = 0; p < parts; ++p) {
    P_part* t = &part[p];
    float* buf = p ? (float*)(P_traw[p] + 64 - (uintptr_t)P_traw[p] % 64) : 0;
    t->k = k, t->ars = ars, t->acs = acs, t->brs = brs, t->bcs = bcs, t->ldc = ldc;
    t->whole_a = !by_rows && parts > 1; /* one part copies A's aliased rows, as the C++ kernel's does */
    t->direct = direct, t->ahead = mg_gemm_ahead(direct, k, n, 4, P_FAR);
    t->ap = p ? buf : P_apack, t->bp = p ? buf + P_ASIZE : P_bpack;
    if (by_rows) {
      i = rstrips * p / parts * P_MR, j = P_MIN(m, rstrips * (p + 1) / parts * P_MR);
      t->m = j - i, t->n = n, t->a = a + i * ars, t->b = b, t->c = c + i * ldc;
    } else {
      i = nstrips * p / parts * P_NR, j = P_MIN(n, nstrips * (p + 1) / parts * P_NR);
      t->m = m, t->n = j - i, t->a = a, t->b = b + i * bcs, t->c = c + i;
    }
  }
  for (p = 1; p < parts; ++p) started[p] = pthread_create(&thread[p], 0, P_run, &part[p]) == 0;
  P_block(&part[0]);
  for (p = 1; p < parts; ++p)
    if (started[p])
      pthread_join(thread[p], 0);
    else
      P_block(&part[p]);  /* no thread: the caller runs it */
}
)";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

// detail/metagrad/detail/cpu/gemm_plan.h's text (CMakeLists.txt reads it at build time)
constexpr const char* kPlan =
#include "gemm_plan_text.inc"  // (a generated file: build/generated/)
    ;

std::string gemm_c_source(const std::string& prefix, GemmExtent max, const cpu::CacheSizes& caches) {
  std::string s =
      detail::cat("#define P_L1 ", std::to_string(caches.l1), "L\n#define P_L2 ", std::to_string(caches.l2),
                  "L\n#define P_L3 ", std::to_string(caches.l3), "L\n#define P_MMAX ",
                  std::to_string(std::max<std::int64_t>(max.m, 1)), "L\n#define P_NMAX ",
                  std::to_string(std::max<std::int64_t>(max.n, 1)), "L\n#define P_KMAX ",
                  std::to_string(std::max<std::int64_t>(max.k, 1)), "L", kSource);
  for (int r : {14, 8, 6, 4, 2, 1})
    replace_all(s, "P_TILE" + std::to_string(r) + "\n",
                tile_fn(r, Tile::packed) + tile_fn(r, Tile::in_place) + tile_fn(r, Tile::ahead));
  replace_all(s, "P_", prefix + "_");
  // The plan first, untouched by the prefix: its names are static or macros, the same in every library.
  return detail::cat("/* ", prefix,
                     "_sgemm: the matrix product of contractions, metagrad's blocked GEMM in C */\n", kPlan,
                     s);
}

}  // namespace metagrad::aot
