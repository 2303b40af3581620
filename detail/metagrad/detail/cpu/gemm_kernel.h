/* The GEMM's loops and tiles, written once: the register tile, the packing, the rows of a block and
   the one- or two-row products, functions named mg_gemm_*. C that also compiles as C++ (GNU vector
   extensions): the C++ kernel includes it inside struct Gemm<T> (cpu/gemm.hpp), once per element
   type and ISA, and an AOT library's C GEMM carries this text verbatim after gemm_plan.h's
   (runtime/aot/aot_gemm.cpp; CMake reads both at build time), so a change to the kernel is made here
   for both. The blocked driver around it is gemm_driver.h, also shared; threads and buffers are
   each side's own.

   No include guard: the includer defines the element type MG_T, its vector MG_V of MG_W lanes, the
   tile's MG_MR rows of MG_NV vectors (MG_NR elements), the vector operations MG_LOAD(p),
   MG_STORE(p, v), MG_BROADCAST(p), MG_SPLAT(x), MG_FMA(a, b, c) and MG_KEEP(mask, v) (v's lanes
   where mask is set, else 0: C has no vector ?:), MG_PIN(b0, b1) (keeps B's vectors in registers,
   or nothing), MG_SPLIT (mg_gemm_split's table for MG_MR) and
   MG_TILE(R, NV, INPLACE, AHEAD, args...), a call of mg_gemm_tile_body for that shape (C++: a
   template instance, out of line). C has no templates: functions take the tile's shape as
   arguments and are inlined where it is a constant, so each call runs the loops of one shape. */
#define MG_GEMM_INLINE static inline __attribute__((always_inline))
#define MG_GEMM_MIN(x, y) ((x) < (y) ? (x) : (y))

/* One Rows x Nv*W tile of C (+)= packed A strip (kc x MR) times a B strip (kc x NR, row p at
   b + p * bs: packed, bs = NR, or B's own rows); rows x cols of it are stored. InPlaceA: A's own
   rows instead of a packed strip, row r at a + r * lda, contiguous along k. Ahead: each k step asks
   for that row of the next strip (`ahead`, its start). 1, into the L1: B is read in place from
   memory, its rows down a strip a page or more apart, which no hardware prefetcher follows (without
   it every line of B was a miss to memory). 2, into the L2: B's packed panel outgrows the L2, and
   each strip's first tile waited on the L3 (see mg_gemm_rows).
   The accumulators are named scalars s<row>_<vector>, one line per row below, those past Rows
   dropped as dead code: every compiler keeps them in registers (clang left an array indexed by the
   row in memory, a third of the speed), and they leave by value only (were their address taken,
   g++ may keep them in memory through the k loop: it did for AVX2, half speed). */
#define MG_GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14)
#define MG_GEMM_ZERO(r) MG_V s##r##_0 = zero, s##r##_1 = zero;
/* In place, up to 6 rows (AVX2's tile) are read at a + r * lda, `a` stepping along k, so that g++
   keeps each r * lda in a register. More rows are read at a5[r / 5] + (r % 5) * lda + k: three
   bases, each row an index register times 1 or a scale of 4 bytes, as fourteen row pointers do not
   fit x86's 16 registers (docs/gemm.md, "Measured choices in the code"). */
#define MG_GEMM_FMA(r)                                                          \
  if (r < Rows) {                                                               \
    const MG_V av = MG_BROADCAST(!InPlaceA   ? a + r                            \
                                 : Rows <= 6 ? a + r * lda                      \
                                             : a5[r / 5] + kk + (r % 5) * lda); \
    s##r##_0 = MG_FMA(av, b0, s##r##_0);                                        \
    if (Nv == 2) s##r##_1 = MG_FMA(av, b1, s##r##_1);                           \
  }
/* One k step. Ahead: the lines holding the next strip's last element and those before it. B's two
   vectors are two scalars, not an array: an array's vectors went to the stack on every k. */
#define MG_GEMM_STEP(k)                                                                         \
  do {                                                                                          \
    const int64_t kk = (k);                                                                     \
    if (Ahead) {                                                                                \
      const int line = 64 / (int)sizeof(MG_T), lines = Nv * MG_W > line ? Nv * MG_W / line : 1; \
      _Pragma("GCC unroll 4") for (int l = 0; l < lines; ++l) {                                 \
        if (Ahead == 1)                                                                         \
          __builtin_prefetch(ahead + Nv * MG_W - 1 - l * line);                                 \
        else                                                                                    \
          __builtin_prefetch(ahead + Nv * MG_W - 1 - l * line, 0, 2);                           \
      }                                                                                         \
      ahead += bs;                                                                              \
    }                                                                                           \
    MG_V b0 = MG_LOAD(b), b1 = Nv == 2 ? MG_LOAD(b + MG_W) : b0;                                \
    MG_PIN(b0, b1);                                                                             \
    MG_GEMM_ROWS(MG_GEMM_FMA)                                                                   \
    a += InPlaceA ? 1 : MG_MR, b += bs;                                                         \
  } while (0)
#define MG_GEMM_STORE(r)                                                            \
  if (r < Rows) {                                                                   \
    MG_T* p = c + r * ldc;                                                          \
    MG_STORE(p, acc ? s##r##_0 + MG_LOAD(p) : s##r##_0);                            \
    if (Nv == 2) MG_STORE(p + MG_W, acc ? s##r##_1 + MG_LOAD(p + MG_W) : s##r##_1); \
  }
#define MG_GEMM_PART(r)                              \
  if (r < Rows) {                                    \
    MG_STORE(part[r], s##r##_0);                     \
    if (Nv == 2) MG_STORE(part[r] + MG_W, s##r##_1); \
  }
MG_GEMM_INLINE void mg_gemm_tile_body(int64_t kc, const MG_T* a, const MG_T* b, int64_t bs, MG_T* c,
                                      int64_t ldc, int64_t rows, int64_t cols, int acc, int64_t lda,
                                      const MG_T* ahead, const int Rows, const int Nv, const int InPlaceA,
                                      const int Ahead) {
  const MG_V zero = {0};
  MG_GEMM_ROWS(MG_GEMM_ZERO)
  /* C's tile is read (or written) only after the k loop: ask for its lines now (GotoBLAS's trick) */
#pragma GCC unroll 32
  for (int r = 0; r < Rows; ++r)
    __builtin_prefetch(c + r * ldc, 1), __builtin_prefetch(c + r * ldc + Nv * MG_W - 1, 1);
  const MG_T* a5[3] = {a, a + 5 * lda, a + 10 * lda};
  /* Four k steps a trip: a step's own instructions (a pointer and five row indices to advance, a
     compare) were a fifth of AVX2's 6-row step. Fewer rows keep one step a trip under AVX-512:
     unrolled, g++ rotated their accumulators through extra moves (docs/gemm.md, "The kernel"). */
#if !defined(__AVX512F__)
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) MG_GEMM_STEP(k);
#else
  const int U = Rows >= 12 ? 4 : 1;
  int64_t k = 0;
  for (; k + U <= kc; k += U)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) MG_GEMM_STEP(k + u);
  for (; k < kc; ++k) MG_GEMM_STEP(k);
#endif
  if (rows == Rows && cols == Nv * MG_W) {
    MG_GEMM_ROWS(MG_GEMM_STORE)
    return;
  }
  MG_T part[15][2 * MG_W] __attribute__((aligned(64)));
  MG_GEMM_ROWS(MG_GEMM_PART)
  for (int64_t r = 0; r < rows; ++r) { /* each row's columns contiguous: the copy vectorises */
    MG_T* __restrict out = c + r * ldc;
    const MG_T* in = part[r];
    if (acc)
      for (int64_t j = 0; j < cols; ++j) out[j] += in[j];
    else
      __builtin_memcpy(out, in, (size_t)cols * sizeof(MG_T));
  }
}
#undef MG_GEMM_ROWS
#undef MG_GEMM_ZERO
#undef MG_GEMM_FMA
#undef MG_GEMM_STEP
#undef MG_GEMM_STORE
#undef MG_GEMM_PART

/* The smallest tile covering rows x cols of a packed A strip: edge strips (m or n not a multiple
   of the tile, as 128 rows and 10 columns) do not pay for a whole one. Each element's sum is the
   same. */
#define MG_GEMM_PACKED_TILE(NV)                                                      \
  if (rows > (MG_MR + 1) / 2)                                                        \
    MG_TILE(MG_MR, NV, 0, 0, kc, a, b, bs, c, ldc, rows, cols, acc, 0, 0);           \
  else if (rows > (MG_MR + 3) / 4)                                                   \
    MG_TILE((MG_MR + 1) / 2, NV, 0, 0, kc, a, b, bs, c, ldc, rows, cols, acc, 0, 0); \
  else                                                                               \
    MG_TILE((MG_MR + 3) / 4, NV, 0, 0, kc, a, b, bs, c, ldc, rows, cols, acc, 0, 0)
static void mg_gemm_packed_tile(int64_t kc, const MG_T* a, const MG_T* b, int64_t bs, MG_T* c, int64_t ldc,
                                int64_t rows, int64_t cols, int acc) {
  if (cols > MG_W) {
    MG_GEMM_PACKED_TILE(MG_NV);
  } else {
    MG_GEMM_PACKED_TILE(1);
  }
}
#undef MG_GEMM_PACKED_TILE

/* `rows` rows of A read in place (row r at a + r * lda) times one B strip: tiles of MR rows, the
   last MR and the rest split as mg_gemm_split says (gemm_plan.h), so that no load passes A's last
   row and no short strip is packed (a conv's 16 output channels: 8 + 8, or 6 + 6 + 4). The first
   tile asks for the next strip `ahead` (a whole strip of B's own rows, or null; `packed`: of packed
   B, into the L2, where the first tile has all MR rows). */
#define MG_GEMM_RUN(R, count)                                                                 \
  for (times = (count); times > 0; --times, rows -= (R), a += (R)*lda, c += (R)*ldc)          \
    if (ahead && !packed)                                                                     \
      MG_TILE(R, MG_NV, 1, 1, kc, a, b, bs, c, ldc, R, cols, acc, lda, ahead), ahead = 0;     \
    else if (ahead && (R) == MG_MR && cols == MG_NR)                                          \
      MG_TILE(MG_MR, MG_NV, 1, 2, kc, a, b, bs, c, ldc, R, cols, acc, lda, ahead), ahead = 0; \
    else if (cols > MG_W)                                                                     \
      MG_TILE(R, MG_NV, 1, 0, kc, a, b, bs, c, ldc, R, cols, acc, lda, 0);                    \
    else                                                                                      \
      MG_TILE(R, 1, 1, 0, kc, a, b, bs, c, ldc, R, cols, acc, lda, 0)
static void mg_gemm_in_place(int64_t kc, const MG_T* a, int64_t lda, int64_t rows, const MG_T* b, int64_t bs,
                             MG_T* c, int64_t ldc, int64_t cols, int acc, const MG_T* ahead, int packed) {
  int64_t times;
  MG_GEMM_RUN(MG_MR, rows >= MG_MR ? rows / MG_MR - 1 : 0);
  const int64_t* n = MG_SPLIT[rows];
  MG_GEMM_RUN(METAGRAD_GEMM_TILE_ROWS(MG_MR, 0), n[0]);
  MG_GEMM_RUN(METAGRAD_GEMM_TILE_ROWS(MG_MR, 1), n[1]);
  MG_GEMM_RUN(METAGRAD_GEMM_TILE_ROWS(MG_MR, 2), n[2]);
  MG_GEMM_RUN(METAGRAD_GEMM_TILE_ROWS(MG_MR, 3), n[3]);
  MG_GEMM_RUN(METAGRAD_GEMM_TILE_ROWS(MG_MR, 4), n[4]);
  MG_GEMM_RUN(METAGRAD_GEMM_TILE_ROWS(MG_MR, 5), n[5]);
}
#undef MG_GEMM_RUN
/* The in-place runs' function: this one, unless the includer names another (its arguments). */
#ifndef MG_IN_PLACE
#define MG_IN_PLACE mg_gemm_in_place
#endif
/* MG_A_ROWS: the includer's constant, true where A's rows are always contiguous (acs 1), which leaves
   the packed strips of A out (else 0). */
#ifndef MG_A_ROWS
#define MG_A_ROWS 0
#endif

/* dst[strip][p][w] = src[p * step + (strip * Width + w) * across], zero past `count`. Strips whose
   Width elements are contiguous are copied row by row, all of them a row: each source row is read
   whole and in order, rather than one line from each of kc rows a strip apart (at a power-of-two
   row stride those share one L1 set) or a few lines of each (B rows a page apart from memory,
   where prefetchers stop at each page; docs/gemm.md, "The kernel"). Otherwise each of a strip's
   columns is read along p, in the source's own order. */
MG_GEMM_INLINE void mg_gemm_pack_body(MG_T* dst, int64_t kc, int64_t count, const MG_T* src, int64_t step,
                                      int64_t across, const int Width) {
  if (across == 1) {
    const int64_t whole = count / Width;
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t s = 0; s < whole; ++s)
        /* a copy of constant size: vector moves at -O2 too, where a loop stayed scalar (13% of 128 x
           784 x 512 in C) */
        __builtin_memcpy(dst + s * Width * kc + p * Width, src + p * step + s * Width, Width * sizeof(MG_T));
    dst += whole * Width * kc, src += whole * Width, count -= whole * Width;
  }
  for (int64_t s = 0; s < count; s += Width, dst += Width * kc) {
    const int64_t w_end = MG_GEMM_MIN((int64_t)Width, count - s);
    const MG_T* from = src + s * across;
    if (across == 1) { /* the partial last strip of contiguous rows (n = 25): still row by row */
      /* Whole vectors a row, the lanes past w_end zeroed by a select (a row's zeros as a loop
         became a `rep stos` a row, which dominated a 10-column product). A vector may read past
         w_end into the next row, never past the strip's last element: the last rows go by scalars. */
      const int64_t end = (kc - 1) * step + w_end;
      int64_t p = 0;
      if (Width % MG_W == 0) {
        MG_V iota;
        for (int l = 0; l < MG_W; ++l) iota[l] = (MG_T)l;
        for (; p < kc && p * step + Width <= end; ++p)
#pragma GCC unroll 4
          for (int v = 0; v < Width / MG_W; ++v) {
            const MG_V x = MG_LOAD(from + p * step + v * MG_W);
            MG_STORE(dst + p * Width + v * MG_W, MG_KEEP(iota < MG_SPLAT((MG_T)(w_end - v * MG_W)), x));
          }
      }
      for (; p < kc; ++p)
        for (int64_t w = 0; w < Width; ++w) dst[p * Width + w] = w < w_end ? from[p * step + w] : (MG_T)0;
      continue;
    }
#if defined(__AVX512F__)
    /* A transpose of 4-byte elements: one gather per column p (lanes w_end.. read row 0 again and
       are zeroed by the store's mask), so every row streams in order and the strip stays in L1. */
    if (sizeof(MG_T) == 4 && Width <= 16 && across * Width < ((int64_t)1 << 31) && step == 1) {
      int32_t off[16] __attribute__((aligned(64))) = {0};
      for (int64_t w = 0; w < w_end; ++w) off[w] = (int32_t)(w * across);
      const __m512i idx = _mm512_load_si512(off);
      const __mmask16 live = (__mmask16)((1u << w_end) - 1), all = (__mmask16)((1u << Width) - 1);
      for (int64_t p = 0; p < kc; ++p) {
        __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, (const float*)from + p, 4);
        _mm512_mask_storeu_ps((float*)dst + p * Width, all, v);
      }
      continue;
    }
#endif
    /* A transpose (row-major A, a transposed B): each source row is read whole and in order, which
       the hardware prefetcher follows (blocks of 16 along p, row by row, stalled on misses); the
       strip written (kc x Width) stays in L1. */
    for (int64_t w = 0; w < w_end; ++w) {
      const MG_T* row = from + w * across;
      for (int64_t p = 0; p < kc; ++p) dst[p * Width + w] = row[p * step];
    }
    if (w_end < Width)
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t w = w_end; w < Width; ++w) dst[p * Width + w] = (MG_T)0;
  }
}

/* The packing of an edge strip of B read in place (its columns past count zeroed): this
   function, unless the includer names another (its arguments). */
#ifndef MG_PACK_EDGE
#define MG_PACK_EDGE(dst, kc, count, src, step) mg_gemm_pack_body(dst, kc, count, src, step, 1, MG_NR)
#endif

/* The kc x nc step's B: packed strips, or (direct) B's own rows, row p at b + p * stride, then
   (ahead) from memory: see mg_gemm_tile_body. Packed strips past half the L2 (`next`): each strip's first
   tile asks the L2 (not the L1: there the strips evicted A's rows) for the next strip, which the
   hardware prefetchers had left in the L3 (docs/gemm.md, "A packed panel past half the L2"). */
typedef struct {
  const MG_T* b;
  int direct;
  int64_t stride, nc;
  int ahead, next;
} mg_gemm_panel;

/* A GEMM's epilogue inside its blocks: fn(ctx, row + i0, row + i1) once rows [i0, i1) of C, all its
   columns, are final, while they are still in cache (the bias, activation or residual after a
   product); called by several threads at once, each with its own rows. */
typedef struct {
  void (*fn)(const void* ctx, int64_t i0, int64_t i1);
  const void* ctx;
  int64_t row; /* C's first row in the caller's numbering */
} mg_gemm_done;

/* Rows [r0, r1) x columns [c0, c1) of the kc x nc step: A blocks of MC rows packed into ap
   (strips of MR rows, column p then p+1), each times the B strips of the columns. Read in place,
   the last strip is packed (into `edge`) when it ends inside a vector (its loads would pass B's
   end).

   A is read in place, its strips unpacked, when its rows are contiguous: the tile's MR row streams
   prefetch as well as a packed strip, and packing cost a third of a 64 x 64 product.
   Rows a multiple of 4 KiB apart would put a tile's MR row streams in one L1 set: the block's rows
   are copied then, whole, to rows a cache line more than kc apart (cheaper than a transposing pack),
   unless every part reads all of A (`whole_a`, the column split), which would copy it once a part:
   there it is read in place (docs/gemm.md, "A read in place"). `done`, where not null: this is C's
   last step and [c0, c1) all its columns, each block's rows handed to it once final. */
static void mg_gemm_rows(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t kc, int64_t MC,
                         const MG_T* a, int64_t ars, int64_t acs, const mg_gemm_panel* B, MG_T* ap,
                         MG_T* edge, MG_T* c, int64_t ldc, int acc, int whole_a, const mg_gemm_done* done) {
  const int arows = MG_A_ROWS || acs == 1, alias = mg_gemm_copy_a(ars, acs, whole_a, (int64_t)sizeof(MG_T));
  const int64_t lda = alias ? mg_gemm_padded_row(kc, (int64_t)sizeof(MG_T)) : ars;
  for (int64_t ic = r0; ic < r1; ic += MC) {
    const int64_t mc = MG_GEMM_MIN(MC, r1 - ic);
    const MG_T* ablock = a + ic * ars;
    if (alias) {
      for (int64_t r = 0; r < mc; ++r)
        __builtin_memcpy(ap + r * lda, ablock + r * ars, (size_t)kc * sizeof(MG_T));
      ablock = ap;
    } else if (!arows) {
      mg_gemm_pack_body(ap, kc, mc, ablock, acs, ars, MG_MR);
    }
    for (int64_t jr = c0; jr < c1; jr += MG_NR) {
      const MG_T* bj = B->b + jr * kc;
      int64_t bs = MG_NR;
      if (B->direct && jr + MG_NR <= B->nc)
        bj = B->b + jr, bs = B->stride;
      else if (B->direct)
        MG_PACK_EDGE(edge, kc, B->nc - jr, B->b + jr, B->stride), bj = edge;
      const int64_t cols = MG_GEMM_MIN((int64_t)MG_NR, c1 - jr);
      MG_T* cj = c + ic * ldc + jr;
      if (arows) {
        MG_IN_PLACE(kc, ablock, lda, mc, bj, bs, cj, ldc, cols, acc,
                    B->ahead && jr + 2 * MG_NR <= B->nc ? B->b + jr + MG_NR
                    : B->next && jr + MG_NR < c1        ? B->b + (jr + MG_NR) * kc
                                                        : 0,
                    B->next);
        continue;
      }
      for (int64_t ir = 0; ir < mc; ir += MG_MR)
        mg_gemm_packed_tile(kc, ap + ir * kc, bj, bs, cj + ir * ldc, ldc,
                            MG_GEMM_MIN((int64_t)MG_MR, mc - ir), cols, acc);
    }
    if (done) done->fn(done->ctx, done->row + ic, done->row + ic + mc); /* (the block's rows, all final) */
  }
}

/* One or two rows of A (batch 1: a vector times a matrix) times a B whose rows are contiguous, C's
   columns [j0, j1) (acc: added to them): C's rows are sums of B's rows, four at a time, B read once
   along its rows in runs of METAGRAD_GEMM_FEW_BYTES (no packing; a B strip, packed or in place, is read down
   its columns, at n = 1024 a row a page apart, which no prefetcher follows); from 3 rows on, tiles are faster
   (docs/gemm.md). C's run of a row stays in L1, and each element sums its terms in k's order, as a tile does.
 */
MG_GEMM_INLINE void mg_gemm_few_block(int64_t m, int64_t j0, int64_t j1, int64_t k, const MG_T* a,
                                      int64_t ars, int64_t acs, const MG_T* b, int64_t brs, MG_T* c,
                                      int64_t ldc, int acc) {
  for (int64_t i = 0; i < m && !acc; ++i)
    for (int64_t j = j0; j < j1; ++j) c[i * ldc + j] = (MG_T)0;
  for (int64_t p = 0; p < k; p += 4) {
    const MG_T* bp = b + p * brs;
    for (int64_t i = 0; i < m; ++i) {
      MG_T* ci = c + i * ldc;
      const MG_T* ai = a + i * ars + p * acs;
      int64_t j = j0;
      if (p + 4 <= k) {
        const MG_V a0 = MG_BROADCAST(ai), a1 = MG_BROADCAST(ai + acs), a2 = MG_BROADCAST(ai + 2 * acs),
                   a3 = MG_BROADCAST(ai + 3 * acs);
        for (; j + MG_W <= j1; j += MG_W) {
          MG_V s = MG_LOAD(ci + j);
          s = MG_FMA(a0, MG_LOAD(bp + j), s);
          s = MG_FMA(a1, MG_LOAD(bp + brs + j), s);
          s = MG_FMA(a2, MG_LOAD(bp + 2 * brs + j), s);
          s = MG_FMA(a3, MG_LOAD(bp + 3 * brs + j), s);
          MG_STORE(ci + j, s);
        }
      }
      for (; j < j1; ++j) /* the columns past the last vector, or the last k % 4 terms */
        for (int64_t q = 0; q < 4 && p + q < k; ++q) ci[j] += ai[q * acs] * bp[q * brs + j];
    }
  }
}
static void mg_gemm_few_range(int64_t m, int64_t j0, int64_t j1, int64_t k, const MG_T* a, int64_t ars,
                              int64_t acs, const MG_T* b, int64_t brs, MG_T* c, int64_t ldc, int acc) {
  const int64_t run = METAGRAD_GEMM_FEW_BYTES / (int64_t)sizeof(MG_T);
  for (int64_t j = j0; j < j1; j += run)
    mg_gemm_few_block(m, j, MG_GEMM_MIN(j1, j + run), k, a, ars, acs, b, brs, c, ldc, acc);
}

#undef MG_GEMM_INLINE
#undef MG_GEMM_MIN
#undef MG_IN_PLACE
#undef MG_A_ROWS
#undef MG_PACK_EDGE
