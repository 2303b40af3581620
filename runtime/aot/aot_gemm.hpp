#pragma once
// The matrix product an AOT library carries (runtime/aot/aot_gemm.cpp): cpu/gemm.hpp's plan, loops and
// driver (their C text) with its own threads in C, since the library links only libc and libm.
#include <cstdint>
#include <string>

#include "metagrad/cpu/caches.hpp"

namespace metagrad::aot {

// The largest product a library runs: its packing buffers are sized for it, not for a whole cache.
struct GemmExtent {
  std::int64_t m = 0, n = 0, k = 0;
};

// C source defining `static void PREFIX_sgemm(m, n, k, a, ars, acs, b, brs, bcs, c, ldc)`, after
// threads_c_source's text (the threads it splits a product over):
// C (m x n, row stride ldc) = A B with A[i][p] = a[i * ars + p * acs], B[p][j] = b[p * brs + j * bcs].
// Its register tile is picked by the C compiler's target (AVX-512, AVX, else SSE vectors); its cache
// blocking is derived from `caches` (the generating machine's).
std::string gemm_c_source(const std::string& prefix, GemmExtent max, const cpu::CacheSizes& caches);

// C source defining the library's threads (runtime/aot/aot_threads.c): `static void
// PREFIX_use_threads(int)` (1 until called), PREFIX_run_parts (the GEMM's seam) and
// `PREFIX_run_range(fn, args, n)`, a kernel's range [0, n) in slices over them.
std::string threads_c_source(const std::string& prefix);

}  // namespace metagrad::aot
