// The AOT library's GEMM as C text: detail/metagrad/detail/cpu/gemm_plan.h (the rules: the tile's
// size, the blocking, k's steps, B in place, the split over threads) and gemm_kernel.h (the tiles,
// the packing and the loops around them), the C++ kernel's own text, pasted after a prelude that
// names the vector type for them, then this file's driver: threads only where the caller asks for
// them (NAME_set_threads), each running a part of C as a product of its own, with its own packing
// buffers.
#include "aot_gemm.hpp"

#include <algorithm>

#include "metagrad/shape/view.hpp"  // metagrad::detail::cat

namespace metagrad::aot {

namespace {

constexpr const char* kPrelude = R"(
#include <pthread.h>
#include <stdlib.h>
#if defined(__SSE__)
#include <immintrin.h>
#endif
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
#define P_STEPS(k) mg_gemm_steps(k, P_KC, P_NR, 4, P_L1)
typedef float P_v __attribute__((vector_size(P_VB)));
#define P_ASIZE (P_UP(P_MIN(P_MC, P_MMAX), P_MR) * (P_UP(P_MIN(P_KC, P_KMAX), 16) + 16))
#define P_BSIZE (P_UP(P_MIN(P_NC, P_NMAX), P_NR) * P_MIN(P_KC, P_KMAX))
static float P_apack[P_ASIZE] __attribute__((aligned(64)));
static float P_bpack[P_BSIZE] __attribute__((aligned(64)));
static int64_t P_split[30][6]; /* mg_gemm_split's table, filled on the first product */
static int P_split_ready;

/* The kernel's vectors (gemm_kernel.h), as GNU C: FMAs are the compiler's contractions of a * b + c. */
static inline P_v P_load(const float* p) {
  P_v v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
static inline void P_store(float* p, P_v v) { __builtin_memcpy(p, &v, sizeof v); }
static inline P_v P_broadcast(const float* p) { /* a loop of lanes made a mess of the tiles at -O3 */
#if defined(__AVX512F__)
  return (P_v)_mm512_set1_ps(*p);
#elif defined(__AVX__)
  return (P_v)_mm256_broadcast_ss(p);
#elif defined(__SSE__)
  return (P_v)_mm_set1_ps(*p);
#else
  P_v v;
  int l;
  for (l = 0; l < P_W; ++l) v[l] = *p;
  return v;
#endif
}
#define MG_T float
#define MG_V P_v
#define MG_W P_W
#define MG_MR P_MR
#define MG_NV METAGRAD_GEMM_NV
#define MG_NR P_NR
#define MG_LOAD(p) P_load(p)
#define MG_STORE(p, v) P_store(p, v)
#define MG_BROADCAST(p) P_broadcast(p)
#define MG_SPLAT(x) ((P_v){0} + (x))
#define MG_FMA(a, b, c) ((a) * (b) + (c))
#define MG_KEEP(mask, v) ((P_v)((mask) & (__typeof__(mask))(v)))
/* nothing: at -O2 the C++ kernel's register pin made gcc spill the accumulators of AVX-512's 14-row
   tile in place (no loads are folded into the FMAs without it) */
#define MG_PIN(b0, b1) (void)0
#define MG_SPLIT P_split
/* C has no templates: a tile of R rows (one of the plan's six sizes) runs through a function for its
   kind (vectors, A in place, prefetch), out of line as the C++ kernel's template instances are
   (inlined into the loops around them, the tiles' k loops spilled registers to the stack). */
#define P_TILE_ARGS                                                                                   \
  int64_t kc, const float *a, const float *b, int64_t bs, float *c, int64_t ldc, int64_t rows, int64_t cols, \
      int acc, int64_t lda, const float *ahead
#define P_TILE_NAME(Nv, InPlaceA, Ahead) P_tile_##Nv##_##InPlaceA##_##Ahead
#define P_TILE_KIND(Nv, InPlaceA, Ahead) P_TILE_NAME(Nv, InPlaceA, Ahead)
#define MG_TILE(R, Nv, InPlaceA, Ahead, ...) P_TILE_KIND(Nv, InPlaceA, Ahead)(R, __VA_ARGS__)
#define P_TILE_KINDS(X) X(METAGRAD_GEMM_NV, 1, 1) X(METAGRAD_GEMM_NV, 1, 2) X(METAGRAD_GEMM_NV, 1, 0) \
  X(1, 1, 0) X(METAGRAD_GEMM_NV, 0, 0) X(1, 0, 0)
#define P_TILE_DECLARE(Nv, InPlaceA, Ahead) static void P_TILE_KIND(Nv, InPlaceA, Ahead)(int R, P_TILE_ARGS);
P_TILE_KINDS(P_TILE_DECLARE)
)";

constexpr const char* kSource = R"(
#define P_TILE_CASE(s, Nv, InPlaceA, Ahead)                                                            \
  case METAGRAD_GEMM_TILE_ROWS(P_MR, s):                                                                \
    mg_gemm_tile_body(kc, a, b, bs, c, ldc, rows, cols, acc, lda, ahead, METAGRAD_GEMM_TILE_ROWS(P_MR, s), \
                      Nv, InPlaceA, Ahead);                                                              \
    break;
#define P_TILE_DEFINE(Nv, InPlaceA, Ahead)                                                     \
  static __attribute__((noinline)) void P_TILE_KIND(Nv, InPlaceA, Ahead)(int R, P_TILE_ARGS) { \
    switch (R) {                                                                               \
      P_TILE_CASE(0, Nv, InPlaceA, Ahead)                                                      \
      P_TILE_CASE(1, Nv, InPlaceA, Ahead)                                                      \
      P_TILE_CASE(2, Nv, InPlaceA, Ahead)                                                      \
      P_TILE_CASE(3, Nv, InPlaceA, Ahead)                                                      \
      P_TILE_CASE(4, Nv, InPlaceA, Ahead)                                                      \
      P_TILE_CASE(5, Nv, InPlaceA, Ahead)                                                      \
    }                                                                                          \
  }
P_TILE_KINDS(P_TILE_DEFINE)

/* One thread's product: C's m x n (+)= A B through the packing buffers ap and bp (P_ASIZE and P_BSIZE
   floats). `whole_a`: every thread reads all of A (the column split), so none copies it. `direct`:
   B is read in place (`ahead`: from memory; its last strip packed into bp); see P_sgemm. */
typedef struct {
  int64_t m, n, k, ars, acs, brs, bcs, ldc;
  const float *a, *b;
  float *c, *ap, *bp;
  int whole_a, direct, ahead;
} P_part;
static void P_block(const P_part* t) {
  const int64_t m = t->m, n = t->n, k = t->k, ars = t->ars, acs = t->acs, brs = t->brs, bcs = t->bcs,
                ldc = t->ldc;
  const float* b = t->b;
  int64_t jc, pc;
  /* k in equal steps (P_STEPS); where B's rows in place are all equally off a cache line, the
     columns up to the first line are a product of their own (mg_gemm_lead). */
  const int64_t steps = P_STEPS(k), ks = (k + steps - 1) / steps;
  const int direct = t->direct;
  const int64_t lead = mg_gemm_lead(direct, (int64_t)((uintptr_t)b % 64) / 4, n, brs, ks, 4, P_L1);
  if (lead) {
    P_part head = *t, rest = *t;
    head.n = lead, rest.n = n - lead, rest.b = b + lead, rest.c = t->c + lead;
    P_block(&head);
    P_block(&rest);
    return;
  }
  for (jc = 0; jc < n; jc += P_NC)
    for (pc = 0; pc < k; pc += ks) {
      const int64_t nc = P_MIN(P_NC, n - jc), kc = P_MIN(ks, k - pc);
      const float* bsrc = b + pc * brs + jc * bcs;
      /* no request for the next packed strip (the C++ kernel's `next`): it cost this C 5% at 512 */
      const mg_gemm_panel panel = {direct ? bsrc : t->bp, direct, brs, nc, t->ahead, 0};
      if (!direct) mg_gemm_pack_body(t->bp, kc, nc, bsrc, brs, bcs, P_NR);
      mg_gemm_rows(0, m, 0, nc, kc, P_MC, t->a + pc * acs, ars, acs, &panel, t->ap, t->bp, t->c + jc, ldc,
                   pc > 0, t->whole_a);
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
  if (!P_split_ready) mg_gemm_split(P_split, P_MR), P_split_ready = 1;
  if (m <= METAGRAD_GEMM_FEW_ROWS && bcs == 1) {
    mg_gemm_few_range(m, 0, n, k, a, ars, acs, b, brs, c, ldc, 0);
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

// detail/metagrad/detail/cpu/gemm_plan.h's and gemm_kernel.h's texts (CMakeLists.txt reads them at
// build time; generated files: build/generated/)
constexpr const char* kPlan =
#include "gemm_plan_text.inc"
    ;
constexpr const char* kKernel =
#include "gemm_kernel_text.inc"
    ;

std::string gemm_c_source(const std::string& prefix, GemmExtent max, const cpu::CacheSizes& caches) {
  auto prefixed = [&](std::string s) {
    replace_all(s, "P_", prefix + "_");
    return s;
  };
  // The plan and the kernel untouched by the prefix: their names are static or macros, the same in
  // every library.
  return detail::cat(
      "/* ", prefix, "_sgemm: the matrix product of contractions, metagrad's blocked GEMM in C */\n", kPlan,
      prefixed(detail::cat("#define P_L1 ", std::to_string(caches.l1), "L\n#define P_L2 ",
                           std::to_string(caches.l2), "L\n#define P_L3 ", std::to_string(caches.l3),
                           "L\n#define P_MMAX ", std::to_string(std::max<std::int64_t>(max.m, 1)),
                           "L\n#define P_NMAX ", std::to_string(std::max<std::int64_t>(max.n, 1)),
                           "L\n#define P_KMAX ", std::to_string(std::max<std::int64_t>(max.k, 1)), "L",
                           kPrelude)),
      kKernel, prefixed(kSource));
}

}  // namespace metagrad::aot
