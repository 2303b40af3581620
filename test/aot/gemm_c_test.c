/* The AOT library's C GEMM compiled as C, as runtime/aot/aot_gemm.cpp assembles it (aot_threads.c, gemm_plan.h,
   aot_gemm_prelude.h, gemm_kernel.h, gemm_driver.h, aot_gemm_sgemm.c; the P prefix kept), under -Wall
   -Werror, and its products checked against a double reference: random shapes and strides (A or B transposed,
   B's rows a multiple of 16 apart and off a cache line), caches small enough that every loop of the driver
   runs more than once (k's steps, blocks of A's rows, panels of B's columns), one to three threads, each
   thread count giving the same bits. Exits non-zero on the first wrong product. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#define P_L1 32768L
#define P_L2 262144L  /* KC 256 */
#define P_L3 1048576L /* NC 128 */
#define P_MMAX 320L
#define P_NMAX 320L
#define P_KMAX 640L
/* in the library's order (clang-format off: not sorted) */
/* clang-format off */
#include "aot_threads.c"
#include "metagrad/detail/cpu/gemm_plan.h"
#include "aot_gemm_prelude.h"
#include "metagrad/detail/cpu/gemm_kernel.h"
#include "metagrad/detail/cpu/gemm_driver.h"
#include "aot_gemm_sgemm.c"
/* clang-format on */

static unsigned long long state = 42;
static int64_t below(int64_t n) { /* 0 .. n - 1 */
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (int64_t)((state >> 33) % (unsigned long long)n);
}

enum { kMax = 640 * 640 + 64 };
static float a[kMax] __attribute__((aligned(64))), b[kMax] __attribute__((aligned(64))), c[kMax], c1[kMax];

/* One product at each thread count: 0 when right. */
static int check(int64_t m, int64_t n, int64_t k, int ta, int tb, int64_t off) {
  const int64_t ars = ta ? 1 : k, acs = ta ? m : 1, brs = tb ? 1 : (n + off + 15) / 16 * 16, bcs = tb ? k : 1;
  const float* bo = b + off;
  int64_t i, j, p, threads;
  for (i = 0; i < m * k; ++i) a[i] = (float)(below(2001) - 1000) / 1000.f;
  for (i = 0; i < k * (brs > n ? brs : n) + off; ++i) b[i] = (float)(below(2001) - 1000) / 1000.f;
  for (threads = 1; threads <= 3; ++threads) {
    P_use_threads((int)threads);
    for (i = 0; i < m * n; ++i) c[i] = NAN; /* every element written, none read */
    P_sgemm(m, n, k, a, ars, acs, bo, brs, bcs, c, n);
    for (i = 0; i < m && threads == 1; ++i) /* (others: the same bits, below) */
      for (j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (p = 0; p < k; ++p) {
          const double t = (double)a[i * ars + p * acs] * bo[p * brs + j * bcs];
          ref += t, mag += fabs(t);
        }
        if (!(fabs(c[i * n + j] - ref) <= 1e-5 * mag + 1e-6)) {
          printf("%ld x %ld x %ld (A%s, B%s, B %ld off a line), %ld threads: C[%ld][%ld] = %g, not %g\n",
                 (long)m, (long)n, (long)k, ta ? " transposed" : "", tb ? " transposed" : "", (long)off,
                 (long)threads, (long)i, (long)j, c[i * n + j], ref);
          return 1;
        }
      }
    if (threads == 1)
      memcpy(c1, c, sizeof(float) * (size_t)(m * n));
    else if (memcmp(c1, c, sizeof(float) * (size_t)(m * n)) != 0) {
      printf("%ld x %ld x %ld: %ld threads' bits differ from one thread's\n", (long)m, (long)n, (long)k,
             (long)threads);
      return 1;
    }
  }
  return 0;
}

int main(void) {
  /* the paths by shape: one or two rows, B in place (small), B packed, k in several steps, wide
     panels, threads (from 2^22 multiply-adds a part; 60 x 320: the column split), k = 0 */
  static const int64_t fixed[][3] = {{1, 300, 200},   {2, 33, 640},    {7, 9, 5},       {64, 64, 64},
                                     {127, 127, 127}, {300, 320, 600}, {320, 300, 100}, {60, 320, 640},
                                     {5, 0, 3},       {4, 6, 0}};
  int t, failed = 0;
  for (t = 0; t < (int)(sizeof fixed / sizeof fixed[0]); ++t)
    failed |= check(fixed[t][0], fixed[t][1], fixed[t][2], 0, 0, 0);
  for (t = 0; t < 24 && !failed; ++t) {
    const int64_t m = 1 + below(320), n = 1 + below(320), k = 1 + below(640);
    failed |= check(m, n, k, (int)below(2), (int)below(2), below(4) ? 0 : 16 * below(4) + below(16));
  }
  printf("%s\n", failed ? "FAILED" : "the AOT C GEMM: every product right");
  return failed;
}
