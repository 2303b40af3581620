/* The entry of an AOT library's C GEMM, after gemm_kernel.h and gemm_driver.h (runtime/aot/aot_gemm.cpp
   pastes this text last; CMake reads it at build time): the tiles' out-of-line functions, the
   driver's seam for threads (the team of aot_threads.c) and P_sgemm. Names
   beginning with the P prefix take the library's. Compiled as C by test/aot (aot_gemm_c_*). */
#define P_TILE_CASE(s, Nv, InPlaceA, Ahead)                                                                \
  case METAGRAD_GEMM_TILE_ROWS(P_MR, s):                                                                   \
    mg_gemm_tile_body(kc, a, b, bs, c, ldc, rows, cols, acc, lda, ahead, METAGRAD_GEMM_TILE_ROWS(P_MR, s), \
                      Nv, InPlaceA, Ahead);                                                                \
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

/* gemm_driver.h's seam: the library's team (aot_threads.c, pasted before this text), the caller one of
   them, each running a part of C as a product of its own (MG_PARTS_ONCE: the parts meet once a
   product); a part is at least METAGRAD_GEMM_CALL_THREAD_MACS multiply-adds (gemm_plan.h: a wake-up
   through a condition variable costs more than the C++ pool's). */
static int64_t P_parts(int64_t macs, int64_t strips) {
  const int64_t parts = P_MIN(P_threads, macs / METAGRAD_GEMM_CALL_THREAD_MACS);
  return P_CLAMP(parts, 1, strips);
}

/* the other parts' buffers (P_ABLOCK floats each), allocated on first use and kept; they go with
   the library (dlclose), not only with the process */
static char* P_more;
static int64_t P_more_parts;
__attribute__((destructor)) static void P_free_buffers(void) { free(P_more), P_more = 0, P_more_parts = 0; }

static void P_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
                    int64_t brs, int64_t bcs, float* c, int64_t ldc) {
  int64_t i, j;
  mg_gemm_blocked pl;
  float* ap = P_apack;
  if (k == 0)
    for (i = 0; i < m; ++i)
      for (j = 0; j < n; ++j) c[i * ldc + j] = 0.f;
  if (m == 0 || n == 0 || k == 0) return;
  if (!P_split_ready) mg_gemm_split(P_split, P_MR), P_split_ready = 1;
  if (m <= METAGRAD_GEMM_FEW_ROWS && bcs == 1) {
    mg_gemm_few_range(m, 0, n, k, a, ars, acs, b, brs, c, ldc, 0);
    return;
  }
  /* no request for the next packed strip (the C++ kernel's `next`): it cost this C 5% at 512 */
  pl = mg_gemm_plan_blocked(m, n, k, acs, b, brs, bcs, 0, P_KC, P_MC, P_NC, P_L1, P_L2, P_FAR, 0);
  if (pl.lead) {
    P_sgemm(m, pl.lead, k, a, ars, acs, b, brs, bcs, c, ldc);
    P_sgemm(m, n - pl.lead, k, a, ars, acs, b + pl.lead, brs, bcs, c + pl.lead, ldc);
    return;
  }
  if (pl.parts > 1) { /* the parts' buffers in one block (without: one part) */
    if (P_more_parts < pl.parts) {
      free(P_more);
      P_more = (char*)malloc((size_t)(pl.parts * P_ABLOCK * 4 + 64));
      P_more_parts = P_more ? pl.parts : 0;
    }
    if (P_more)
      ap = (float*)(P_more + 64 - (uintptr_t)P_more % 64);
    else
      pl.parts = 1;
  }
  mg_gemm_run_blocked(&pl, m, n, k, a, ars, acs, b, brs, bcs, c, ldc, 0, 0, 0, ap);
}
