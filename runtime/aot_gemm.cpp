// The AOT library's GEMM as C text: fixed/gemm.hpp's structure (packed B in KC x NR strips, packed A
// in MR-row strips, an MR x NR register tile of two vectors per row) in GNU C vector extensions, the
// tile's accumulators spelled out so that every C compiler keeps them in registers. One thread: a
// library's functions already share static scratch memory.
#include "aot_gemm.hpp"

#include <algorithm>

#include "metagrad/shape/view.hpp"  // metagrad::detail::cat

namespace metagrad::aot {

namespace {

// P_tile<mr>: an mr x P_NR tile from rows of a packed A strip (row r at a[r], the strip's row stride
// P_MR); accumulate, then store whole or through a temporary at an edge.
std::string tile_fn(int mr) {
  auto n = [](int i) { return std::to_string(i); };
  std::string decl = "  P_v", k = "", full = "", part = "";
  for (int r = 0; r < mr; ++r) {
    decl += detail::cat(r ? ", " : " ", "c", n(r), "_0 = {0}, c", n(r), "_1 = {0}");
    k += detail::cat("    c", n(r), "_0 += a[", n(r), "] * b0;\n    c", n(r), "_1 += a[", n(r), "] * b1;\n");
    for (int v = 0; v < 2; ++v) {
      full +=
          detail::cat("    P_put(c + ", n(r), " * ldc + ", n(v), " * P_W, c", n(r), "_", n(v), ", acc);\n");
      part += detail::cat("  P_put(t[", n(r), "] + ", n(v), " * P_W, c", n(r), "_", n(v), ", 0);\n");
    }
  }
  return detail::cat(
      "static void P_tile", n(mr),
      "(int64_t kc, const float* restrict a, const float* restrict b, int64_t bs,\n"
      "                   float* restrict c, int64_t ldc, int64_t rows, int64_t cols, int acc) {\n",
      decl, ";\n  float t[", n(mr), "][P_NR];\n",
      "#if P_VB < 64\n#pragma GCC unroll 4\n#endif\n",  // as fixed/gemm.hpp's tile
      "  for (int64_t p = 0; p < kc; ++p, a += P_MR, b += bs) {\n",
      "    P_v b0 = P_load(b), b1 = P_load(b + P_W);\n", k, "  }\n", "  if (rows == ", n(mr),
      " && cols == P_NR) {\n", full, "    return;\n  }\n", part,
      "  for (int64_t r = 0; r < rows; ++r)\n    for (int64_t j = 0; j < cols; ++j)\n",
      "      c[r * ldc + j] = acc ? c[r * ldc + j] + t[r][j] : t[r][j];\n}\n");
}

constexpr const char* kSource = R"(
#if defined(__AVX512F__)
#define P_VB 64
#define P_MR 14
#elif defined(__AVX__)
#define P_VB 32
#define P_MR 6
#else
#define P_VB 16
#define P_MR 6
#endif
#define P_W (P_VB / 4)
#define P_NR (2 * P_W)
#define P_MIN(x, y) ((x) < (y) ? (x) : (y))
#define P_CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))
#define P_UP(x, q) (((x) + (q) - 1) / (q) * (q))
/* Cache blocking as metagrad's: P_K0 the L2's size in KiB (up to 1024), an MC x P_K0 block of A
   in half of the L2 up to 512 KiB (a quarter of one of 512 KiB or less), KC P_K0 but at most 512
   under AVX2, a KC x NC panel of B in an eighth of L3, NC at most 1024. */
#define P_K0 P_CLAMP(P_L2 / 1024 / 16 * 16, 128, 1024)
#define P_KC P_MIN(P_K0, P_VB == 32 ? 512 : 1024)
#define P_MC P_CLAMP((P_L2 <= 524288L ? P_L2 / 4 : P_MIN(P_L2 / 2, 524288L)) / (P_K0 * 4) / P_MR * P_MR, P_MR, 4096 / P_MR * P_MR)
#define P_NC P_CLAMP(P_L3 / 8 / (P_KC * 4) / P_NR * P_NR, P_NR, 1024 / P_NR * P_NR)
typedef float P_v __attribute__((vector_size(P_VB)));
static float P_apack[P_UP(P_MIN(P_MC, P_MMAX), P_MR) * P_MIN(P_KC, P_KMAX)] __attribute__((aligned(64)));
static float P_bpack[P_UP(P_MIN(P_NC, P_NMAX), P_NR) * P_MIN(P_KC, P_KMAX)] __attribute__((aligned(64)));

static inline P_v P_load(const float* p) {
  P_v v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
static inline void P_put(float* p, P_v v, int acc) {
  if (acc) v += P_load(p);
  __builtin_memcpy(p, &v, sizeof v);
}

/* C's rows x cols corner of an R x P_NR tile (+)= R rows of a packed A strip times a B strip whose row p
   is at b + p * bs (packed: bs = P_NR; or B's own rows). */
#if P_MR == 14
P_TILE14
P_TILE8
#else
P_TILE6
#endif
P_TILE4
P_TILE2
P_TILE1
/* A strip of rows < P_MR runs as tiles of 8 (AVX-512), 4, 2 and 1 rows rather than one padded tile:
   a 6-row product does not pay for 14. */
static void P_strip(int64_t kc, const float* a, const float* b, int64_t bs, float* c, int64_t ldc,
                    int64_t rows, int64_t cols, int acc) {
  if (rows == P_MR) {
#if P_MR == 14
    P_tile14(kc, a, b, bs, c, ldc, rows, cols, acc);
#else
    P_tile6(kc, a, b, bs, c, ldc, rows, cols, acc);
#endif
    return;
  }
  for (int64_t r = 0; r < rows;) {
    int64_t left = rows - r;
#if P_MR == 14
    if (left >= 8) {
      P_tile8(kc, a + r, b, bs, c + r * ldc, ldc, 8, cols, acc), r += 8;
      continue;
    }
#endif
    if (left >= 4)
      P_tile4(kc, a + r, b, bs, c + r * ldc, ldc, 4, cols, acc), r += 4;
    else if (left >= 2)
      P_tile2(kc, a + r, b, bs, c + r * ldc, ldc, 2, cols, acc), r += 2;
    else
      P_tile1(kc, a + r, b, bs, c + r * ldc, ldc, 1, cols, acc), r += 1;
  }
}

/* Strips of `width` along `count`: d[strip][p][w] = s[p * along + (strip * width + w) * across],
   zero past count; read in the source's own order. */
static void P_pack(float* d, int64_t kc, int64_t count, int64_t width, const float* s, int64_t along,
                   int64_t across) {
  for (int64_t i = 0; i < count; i += width, d += width * kc, s += width * across) {
    int64_t w = P_MIN(width, count - i), x, p;
    if (across == 1 && w == width) /* a whole strip of contiguous rows: row by row, as copies */
      for (p = 0; p < kc; ++p) __builtin_memcpy(d + p * width, s + p * along, sizeof(float) * width);
    else if (across == 1 || along != 1)
      for (p = 0; p < kc; ++p)
        for (x = 0; x < width; ++x) d[p * width + x] = x < w ? s[p * along + x * across] : 0.f;
    else
      for (x = 0; x < width; ++x)
        for (p = 0; p < kc; ++p) d[p * width + x] = x < w ? s[p + x * across] : 0.f;
  }
}

static void P_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t ars, int64_t acs,
                    const float* b, int64_t brs, int64_t bcs, float* c, int64_t ldc) {
  int64_t jc, pc, ic, jr, ir;
  if (k == 0)
    for (ir = 0; ir < m; ++ir)
      for (jr = 0; jr < n; ++jr) c[ir * ldc + jr] = 0.f;
  /* B read in place where its rows are contiguous, one step covers k and all of it sits in half the
     L2 (small products pay no packing); its last strip is packed where it ends inside a vector. */
  int direct = bcs == 1 && k <= P_KC && k * n * 4 <= P_L2 / 2;
  for (jc = 0; jc < n; jc += P_NC)
    for (pc = 0; pc < k; pc += P_KC) {
      int64_t nc = P_MIN(P_NC, n - jc), kc = P_MIN(P_KC, k - pc), whole = direct ? nc / P_NR * P_NR : 0;
      const float* bsrc = b + pc * brs + jc * bcs;
      P_pack(P_bpack + whole * kc, kc, nc - whole, P_NR, bsrc + whole * bcs, brs, bcs);
      for (ic = 0; ic < m; ic += P_MC) {
        int64_t mc = P_MIN(P_MC, m - ic);
        P_pack(P_apack, kc, mc, P_MR, a + ic * ars + pc * acs, acs, ars);
        for (jr = 0; jr < nc; jr += P_NR) {
          const float* bj = jr < whole ? bsrc + jr : P_bpack + jr * kc;
          int64_t bs = jr < whole ? brs : P_NR;
          for (ir = 0; ir < mc; ir += P_MR)
            P_strip(kc, P_apack + ir * kc, bj, bs, c + (ic + ir) * ldc + jc + jr, ldc, P_MIN(P_MR, mc - ir),
                    P_MIN(P_NR, nc - jr), pc > 0);
        }
      }
    }
}
)";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

std::string gemm_c_source(const std::string& prefix, GemmExtent max, std::int64_t l2, std::int64_t l3) {
  std::string s = detail::cat(
      "/* ", prefix, "_sgemm: the matrix product of contractions, metagrad's blocked GEMM in C */\n",
      "#define P_L2 ", std::to_string(l2), "L\n#define P_L3 ", std::to_string(l3), "L\n#define P_MMAX ",
      std::to_string(std::max<std::int64_t>(max.m, 1)), "L\n#define P_NMAX ",
      std::to_string(std::max<std::int64_t>(max.n, 1)), "L\n#define P_KMAX ",
      std::to_string(std::max<std::int64_t>(max.k, 1)), "L", kSource);
  for (int r : {14, 8, 6, 4, 2, 1}) replace_all(s, "P_TILE" + std::to_string(r) + "\n", tile_fn(r));
  replace_all(s, "P_", prefix + "_");
  return s;
}

}  // namespace metagrad::aot
