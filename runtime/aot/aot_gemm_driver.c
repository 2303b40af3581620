/* The driver of an AOT library's C GEMM, after gemm_kernel.h (runtime/aot/aot_gemm.cpp pastes this
   text last; CMake reads it at build time): the tiles' out-of-line functions, one thread's blocked
   product (P_block) and the split over threads started for each call (P_sgemm, P_use_threads).
   Names beginning with the P prefix take the library's. Compiled as C by test/aot (aot_gemm_c). */
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
   kept), and only for METAGRAD_GEMM_CALL_THREAD_MACS multiply-adds a part (gemm_plan.h). Each element is the same sum whatever the split. */
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
  int64_t parts = P_MIN(P_threads, m * n * k / METAGRAD_GEMM_CALL_THREAD_MACS), p, i, j;
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
      i = mg_gemm_part_start(rstrips, p, parts, P_MR, m), j = mg_gemm_part_start(rstrips, p + 1, parts, P_MR, m);
      t->m = j - i, t->n = n, t->a = a + i * ars, t->b = b, t->c = c + i * ldc;
    } else {
      i = mg_gemm_part_start(nstrips, p, parts, P_NR, n), j = mg_gemm_part_start(nstrips, p + 1, parts, P_NR, n);
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
