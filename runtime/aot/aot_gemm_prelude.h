/* The prelude of an AOT library's C GEMM (runtime/aot/aot_gemm.cpp pastes this text after
   gemm_plan.h and before gemm_kernel.h and gemm_driver.h; CMake reads it at build time): the names
   those ask their includer for (MG_T, MG_V, MG_LOAD and the rest, as GNU C vectors; the driver's
   seam for threads, MG_PARTS and MG_RUN_PARTS, defined in aot_gemm_sgemm.c and aot_threads.c), the cache blocking for
   floats from the generating machine's caches, and the packing buffers. The includer defines P_L1,
   P_L2, P_L3 (cache bytes) and P_MMAX, P_NMAX, P_KMAX (the largest product); names beginning with
   the P prefix take the library's. Compiled as C by test/aot (aot_gemm_c_*). */
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
#define P_UP(x, q) (((x) + (q)-1) / (q) * (q))
#define P_KC METAGRAD_GEMM_KC(P_L2, P_VB)
#define P_MC METAGRAD_GEMM_MC(P_L2, 4, P_MR)
#define P_NC METAGRAD_GEMM_NC(P_L3, P_KC, 4, P_NR)
#define P_FAR METAGRAD_GEMM_FROM_MEMORY(P_L3)
typedef float P_v __attribute__((vector_size(P_VB)));
#define P_ASIZE (P_UP(P_MIN(P_MC, P_MMAX), P_MR) * (P_UP(P_MIN(P_KC, P_KMAX), 16) + 16))
#define P_BSIZE (P_UP(P_MIN(P_NC, P_NMAX), P_NR) * P_MIN(P_KC, P_KMAX))
/* a part's A blocks, B's edge strip and its B panel (gemm_driver.h's ablock, the parts meeting once
   a product): part 0's here, the others' on the heap (aot_gemm_sgemm.c) */
#define P_ABLOCK (P_ASIZE + P_MIN(P_KC, P_KMAX) * P_NR + P_BSIZE)
static float P_apack[P_ABLOCK] __attribute__((aligned(64)));
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
#define P_TILE_ARGS                                                                                          \
  int64_t kc, const float *a, const float *b, int64_t bs, float *c, int64_t ldc, int64_t rows, int64_t cols, \
      int acc, int64_t lda, const float *ahead
#define P_TILE_NAME(Nv, InPlaceA, Ahead) P_tile_##Nv##_##InPlaceA##_##Ahead
#define P_TILE_KIND(Nv, InPlaceA, Ahead) P_TILE_NAME(Nv, InPlaceA, Ahead)
#define MG_TILE(R, Nv, InPlaceA, Ahead, ...) P_TILE_KIND(Nv, InPlaceA, Ahead)(R, __VA_ARGS__)
#define P_TILE_KINDS(X)     \
  X(METAGRAD_GEMM_NV, 1, 1) \
  X(METAGRAD_GEMM_NV, 1, 2) X(METAGRAD_GEMM_NV, 1, 0) X(1, 1, 0) X(METAGRAD_GEMM_NV, 0, 0) X(1, 0, 0)
#define P_TILE_DECLARE(Nv, InPlaceA, Ahead) static void P_TILE_KIND(Nv, InPlaceA, Ahead)(int R, P_TILE_ARGS);
P_TILE_KINDS(P_TILE_DECLARE)
/* gemm_driver.h's seam: the library's team (aot_threads.c; the parts in aot_gemm_sgemm.c), meeting once a product */
static int64_t P_parts(int64_t macs, int64_t strips);
static void P_run_parts(int parts, void (*fn)(void*, int, int), void* ctx);
#define MG_PARTS(macs, strips) P_parts(macs, strips)
#define MG_RUN_PARTS(parts, fn, ctx) P_run_parts(parts, fn, ctx)
#define MG_PARTS_ONCE 1
