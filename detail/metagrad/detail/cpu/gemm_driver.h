/* The GEMM's blocked driver, written once: the plan of a blocked product (k's steps, B in place or
   packed, its first columns apart, the parts and their split of C by row strips or column strips)
   and its loops (each KC step's B packed by the parts, then their rows of C times it). C that also
   compiles as C++: the C++ kernel includes it inside struct Gemm<T> after gemm_kernel.h
   (cpu/gemm.hpp), and an AOT library's C GEMM carries this text after gemm_kernel.h's
   (runtime/aot/aot_gemm.cpp; CMake reads it at build time), so the driver changes once for both.

   No include guard. Beside gemm_kernel.h's names, the includer defines the seam for its threads:
   MG_PARTS(macs, strips), the parts a product of `macs` multiply-adds over `strips` tiles of C is
   cut into (1: not split; the threshold is the seam's, by its threads' cost: gemm_plan.h's
   METAGRAD_GEMM_POOL_MACS for the C++ pool, METAGRAD_GEMM_CALL_THREAD_MACS for an AOT library's
   team), and MG_RUN_PARTS(parts, fn, ctx), which calls fn(ctx, p, parts) once for each p in
   [0, parts) on its threads and returns when all have returned; MG_PARTS_ONCE, 1 where the parts
   meet once a product rather than twice a KC step (an AOT library's team, for which each meeting
   costs a wake-up through a condition variable; on a machine with more threads than cores, a
   scheduling slice). MG_PACK_B(dst, kc, count,
   src, step, across), B's packing into strips of NR, may be defined (the C++ kernel's out-of-line copy). */
#ifndef MG_PACK_B
#define MG_PACK_B(dst, kc, count, src, step, across) \
  mg_gemm_pack_body(dst, kc, count, src, step, across, MG_NR)
#endif

/* B read through a gather rather than strides (a conv's windows: im2col in the packing):
   pack(ctx, dst, p0, kc, j0, count, width) writes rows [p0, p0 + kc) x columns [j0, j0 + count) of
   B as mg_gemm_pack_body does, in strips of `width` columns, zeros past count; called by several
   threads at once, each with its own columns. */
typedef struct {
  void (*pack)(const void* ctx, MG_T* dst, int64_t p0, int64_t kc, int64_t j0, int64_t count, int64_t width);
  const void* ctx;
} mg_gemm_gather;

/* A blocked product's plan (mg_gemm_plan_blocked). The includer gives it bsize elements for B's
   packed panel and parts x ablock for the parts' A blocks, B's edge strip and (MG_PARTS_ONCE) each
   part's own B panel at `own` in its block, or, where lead is not 0, runs the first `lead` columns
   and the rest as products of their own. */
typedef struct {
  int64_t ks, MC, NC, parts, apack, ablock, bsize, own, lead, l2;
  int direct, ahead, by_rows, next;
} mg_gemm_blocked;

/* C (m x n) = A B (A's columns acs apart) by blocks of KC x NC (B's panel, multiples of MR and NR), MC rows
   of A, on a host of l1 and l2 bytes of cache, operands past `far` bytes read from memory; `gather`: B packed
   by a gather (never read in place); `next`: packed strips past half the L2 ask for the next one. */
static mg_gemm_blocked mg_gemm_plan_blocked(int64_t m, int64_t n, int64_t k, int64_t acs, const MG_T* b,
                                            int64_t brs, int64_t bcs, int gather, int64_t KC, int64_t MC,
                                            int64_t NC, int64_t l1, int64_t l2, int64_t far, int next) {
  const int64_t S = (int64_t)sizeof(MG_T);
  mg_gemm_blocked pl;
  /* k in equal steps of at most KC (docs/gemm.md, "Blocking from the machine it runs on") */
  const int64_t steps = mg_gemm_steps(k, KC, MG_NR, S, l1);
  const int64_t ncmax = METAGRAD_GEMM_MIN(n, NC), cstrips = (ncmax + MG_NR - 1) / MG_NR,
                rstrips = (m + MG_MR - 1) / MG_MR;
  pl.ks = (k + steps - 1) / steps, pl.MC = MC, pl.NC = NC, pl.l2 = l2, pl.next = next;
  /* B read in place (docs/gemm.md, "B read in place"): small products (64 x 64, a conv's per-image
     product) pay no packing. */
  pl.direct = !gather && mg_gemm_direct(m, n, k, brs, bcs, steps, MC, MG_MR, S, l2);
  /* B's rows all equally off a cache line: the first columns, up to a line, a product of their own
     (docs/gemm.md, "Off a cache line"; at k = 64 two products would cost a quarter of 64 x 64, and
     the L1 holds the strips anyway). */
  pl.lead = mg_gemm_lead(pl.direct, (int64_t)((uintptr_t)b % 64) / S, n, brs, pl.ks, S, l1);
  /* B in place from memory asks for each next strip (see mg_gemm_tile_body); on a B in the L2 or L3
     the requests cost more than they gain, so not there (docs/gemm.md, "From memory"). */
  pl.ahead = mg_gemm_ahead(pl.direct, k, n, S, far);
  pl.parts = MG_PARTS(m * n * k, rstrips * cstrips);
  /* The parts split C's row strips or its column strips. By rows, no A block is packed twice, but
     the B panel, packed by all, is read by all, partly from other cores' caches. By columns, each
     part packs and reads only its own B strips, with no wait for another's packing, but reads all
     of A (in place where its rows are contiguous). So the columns where there are too few row
     strips (a 16-row product at AVX-512's MR 14: 14 rows and 2), or where A's rows are contiguous
     (read in place, even 4 KiB apart: see mg_gemm_rows) and at most 3/4 as many as the step has
     columns; square products keep the rows (docs/gemm.md, "Threads"). */
  pl.by_rows = mg_gemm_by_rows(pl.parts, m, ncmax, rstrips, cstrips, acs);
  pl.apack = METAGRAD_GEMM_MIN(MC, rstrips * MG_MR) * mg_gemm_padded_row(pl.ks, S);
  pl.own = pl.apack + (pl.direct ? pl.ks * MG_NR : 0); /* (+ B's edge strip) */
  pl.bsize = pl.ks * cstrips * MG_NR;
  pl.ablock = MG_PARTS_ONCE ? pl.own + pl.bsize : pl.own;
  if (MG_PARTS_ONCE) pl.bsize = 0;
  return pl;
}

/* One KC step (a part's share of it: mg_gemm_step_part). phase 0: part p packs its share of B's
   strips; 1: then C's row strips of part p times all of B; 2: part p's B strips, packed, then all of
   C's rows times them (the column split). */
typedef struct {
  const mg_gemm_panel* panel;
  const MG_T *asrc, *bsrc;
  MG_T *bp, *ap, *c;
  int64_t m, nc, kc, MC, ars, acs, brs, bcs, ldc, bstrips, rstrips, ablock, apack, pc, jc;
  int direct, acc, whole_a, phase;
  const mg_gemm_gather* gather; /* B's packing, or null: B's strides */
  const mg_gemm_done* done;     /* C's last step: its rows' epilogue, or null */
} mg_gemm_step;

/* The epilogue of C's rows [0, m) after the column split, whose parts' rows are final only when all
   have returned: part p's share of the rows (each still in some core's cache). */
typedef struct {
  const mg_gemm_done* done;
  int64_t m;
} mg_gemm_after;
static void mg_gemm_after_part(void* ctx, int p, int np) {
  const mg_gemm_after* a = (const mg_gemm_after*)ctx;
  const int64_t i0 = a->m * p / np, i1 = a->m * (p + 1) / np;
  if (i0 < i1) a->done->fn(a->done->ctx, a->done->row + i0, a->done->row + i1);
}
static void mg_gemm_after_parts(const mg_gemm_done* done, int64_t m, int parts) {
  mg_gemm_after a;
  a.done = done, a.m = m;
  if (parts <= 1)
    mg_gemm_after_part(&a, 0, 1);
  else
    MG_RUN_PARTS(parts, mg_gemm_after_part, &a);
}

static void mg_gemm_step_part(void* ctx, int p, int np) {
  const mg_gemm_step* s = (const mg_gemm_step*)ctx;
  MG_T* ap = s->ap + p * s->ablock;
  int64_t c0, c1;
  if (s->phase == 1) { /* C's row strips [r0, r1), all columns */
    const int64_t r0 = mg_gemm_part_start(s->rstrips, p, np, MG_MR, s->m),
                  r1 = mg_gemm_part_start(s->rstrips, p + 1, np, MG_MR, s->m);
    if (r0 < r1)
      mg_gemm_rows(r0, r1, 0, s->nc, s->kc, s->MC, s->asrc, s->ars, s->acs, s->panel, ap, ap + s->apack, s->c,
                   s->ldc, s->acc, 0, s->done);
    return;
  }
  /* B's strips of columns [c0, c1), packed (strips of NR columns, row p then p+1) unless read in
     place */
  c0 = mg_gemm_part_start(s->bstrips, p, np, MG_NR, s->nc),
  c1 = mg_gemm_part_start(s->bstrips, p + 1, np, MG_NR, s->nc);
  if (c0 >= c1) return;
  if (s->gather)
    s->gather->pack(s->gather->ctx, s->bp + c0 * s->kc, s->pc, s->kc, s->jc + c0, c1 - c0, MG_NR);
  else if (!s->direct)
    MG_PACK_B(s->bp + c0 * s->kc, s->kc, c1 - c0, s->bsrc + c0 * s->bcs, s->brs, s->bcs);
  if (s->phase == 2) /* then all of C's rows times them (one part: all its columns, so its epilogue too) */
    mg_gemm_rows(0, s->m, c0, c1, s->kc, s->MC, s->asrc, s->ars, s->acs, s->panel, ap, ap + s->apack, s->c,
                 s->ldc, s->acc, s->whole_a, np == 1 ? s->done : 0);
}

/* The KC steps of C (m x n) = A B, cut into `parts` by rows or columns (by_rows: a part packs its
   share of B's panel, then after all have, C's row strips of its share times all of it; else each
   packs its share of the panel, then all of C's rows times it). `done`: C's rows' epilogue, block
   by block in the last step (by rows, or one part), else after it. */
static void mg_gemm_step_parts(const mg_gemm_blocked* pl, int parts, int by_rows, int whole_a, int64_t m,
                               int64_t n, int64_t k, const MG_T* a, int64_t ars, int64_t acs, const MG_T* b,
                               int64_t brs, int64_t bcs, MG_T* c, int64_t ldc, int acc,
                               const mg_gemm_gather* gather, MG_T* bp, MG_T* ap, const mg_gemm_done* done) {
  int64_t jc, pc;
  for (jc = 0; jc < n; jc += pl->NC) {
    const int64_t nc = METAGRAD_GEMM_MIN(pl->NC, n - jc);
    for (pc = 0; pc < k; pc += pl->ks) {
      const int64_t kc = METAGRAD_GEMM_MIN(pl->ks, k - pc);
      const MG_T* bsrc = gather ? b : b + pc * brs + jc * bcs;
      mg_gemm_panel panel;
      mg_gemm_step st;
      panel.b = pl->direct ? bsrc : bp, panel.direct = pl->direct, panel.stride = brs, panel.nc = nc;
      panel.ahead = pl->ahead;
      panel.next = pl->next && mg_gemm_next(pl->direct, kc, nc, (int64_t)sizeof(MG_T), pl->l2);
      st.panel = &panel, st.asrc = a + pc * acs, st.bsrc = bsrc, st.bp = bp, st.ap = ap, st.c = c + jc;
      st.m = m, st.nc = nc, st.kc = kc, st.MC = pl->MC, st.ars = ars, st.acs = acs, st.brs = brs;
      st.bcs = bcs, st.ldc = ldc, st.bstrips = (nc + MG_NR - 1) / MG_NR, st.rstrips = (m + MG_MR - 1) / MG_MR;
      st.ablock = pl->ablock, st.apack = pl->apack, st.pc = pc, st.jc = jc, st.direct = pl->direct;
      st.acc = acc || pc > 0, st.whole_a = whole_a, st.gather = gather;
      st.done = done && jc + nc >= n && pc + kc >= k && (by_rows || parts == 1) ? done : 0;
      st.phase = by_rows ? 0 : 2;
      if (by_rows && pl->direct) st.phase = 1; /* (nothing to pack) */
      for (;;) {
        if (parts == 1)
          mg_gemm_step_part(&st, 0, 1);
        else
          MG_RUN_PARTS(parts, mg_gemm_step_part, &st);
        if (st.phase != 0) break;
        st.phase = 1;
      }
    }
  }
  if (done && !by_rows && parts > 1) mg_gemm_after_parts(done, m, parts);
}

#if MG_PARTS_ONCE
/* MG_PARTS_ONCE: part p of a product cut once, C's row strips or its column strips of its own, a
   blocked product on one thread with its own buffers (B by strides: no gather, the C++ kernel's only) */
typedef struct {
  const mg_gemm_blocked* pl;
  int64_t m, n, k, ars, acs, brs, bcs, ldc;
  const MG_T *a, *b;
  MG_T *c, *ap;
  int acc;
  const mg_gemm_gather* gather;
  const mg_gemm_done* done;
} mg_gemm_whole;
static void mg_gemm_whole_part(void* ctx, int p, int np) {
  const mg_gemm_whole* w = (const mg_gemm_whole*)ctx;
  MG_T* ap = w->ap + p * w->pl->ablock;
  int64_t i0 = 0, i1 = w->m, j0 = 0, j1 = w->n;
  if (w->pl->by_rows)
    i0 = mg_gemm_part_start((w->m + MG_MR - 1) / MG_MR, p, np, MG_MR, w->m),
    i1 = mg_gemm_part_start((w->m + MG_MR - 1) / MG_MR, p + 1, np, MG_MR, w->m);
  else
    j0 = mg_gemm_part_start((w->n + MG_NR - 1) / MG_NR, p, np, MG_NR, w->n),
    j1 = mg_gemm_part_start((w->n + MG_NR - 1) / MG_NR, p + 1, np, MG_NR, w->n);
  mg_gemm_done rows; /* (by rows, or one part: its rows' epilogue in its last step) */
  const int own = w->done && (w->pl->by_rows || np == 1);
  if (own) rows = *w->done, rows.row += i0;
  if (i0 < i1 && j0 < j1) /* (the column split's parts read all of A: none copies it) */
    mg_gemm_step_parts(w->pl, 1, 0, !w->pl->by_rows && np > 1, i1 - i0, j1 - j0, w->k, w->a + i0 * w->ars,
                       w->ars, w->acs, w->gather ? w->b : w->b + j0 * w->bcs, w->brs, w->bcs,
                       w->c + i0 * w->ldc + j0, w->ldc, w->acc, w->gather, ap + w->pl->own, ap,
                       own ? &rows : 0);
}

#endif

/* The blocked product of plan `pl` (without a lead), B's panel in bp and the parts' blocks in ap;
   `acc`: C += A B. Every element is the same sum whatever the split. `done`, where not null: C's
   epilogue, run on each block of rows once final (mg_gemm_done). */
static void mg_gemm_run_blocked_done(const mg_gemm_blocked* pl, int64_t m, int64_t n, int64_t k,
                                     const MG_T* a, int64_t ars, int64_t acs, const MG_T* b, int64_t brs,
                                     int64_t bcs, MG_T* c, int64_t ldc, int acc, const mg_gemm_gather* gather,
                                     MG_T* bp, MG_T* ap, const mg_gemm_done* done) {
#if MG_PARTS_ONCE
  mg_gemm_whole w;
  w.pl = pl, w.m = m, w.n = n, w.k = k, w.ars = ars, w.acs = acs, w.brs = brs, w.bcs = bcs, w.ldc = ldc;
  w.a = a, w.b = b, w.c = c, w.ap = ap, w.acc = acc, w.gather = gather, w.done = done;
  (void)bp;
  if (pl->parts == 1)
    mg_gemm_whole_part(&w, 0, 1);
  else
    MG_RUN_PARTS((int)pl->parts, mg_gemm_whole_part, &w);
  if (done && !pl->by_rows && pl->parts > 1) mg_gemm_after_parts(done, m, (int)pl->parts);
#else
  mg_gemm_step_parts(pl, (int)pl->parts, pl->by_rows, pl->parts > 1, m, n, k, a, ars, acs, b, brs, bcs, c,
                     ldc, acc, gather, bp, ap, done);
#endif
}
static void mg_gemm_run_blocked(const mg_gemm_blocked* pl, int64_t m, int64_t n, int64_t k, const MG_T* a,
                                int64_t ars, int64_t acs, const MG_T* b, int64_t brs, int64_t bcs, MG_T* c,
                                int64_t ldc, int acc, const mg_gemm_gather* gather, MG_T* bp, MG_T* ap) {
  mg_gemm_run_blocked_done(pl, m, n, k, a, ars, acs, b, brs, bcs, c, ldc, acc, gather, bp, ap, 0);
}
#undef MG_PACK_B
