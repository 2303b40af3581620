#pragma once
// The runtime's CPU kernels share the shared CPU layer's thread pool (cpu/parallel.hpp): one set of
// workers for both paths, sized by THREADS (default: every core; THREADS=1 runs everything on the
// calling thread), so a step that mixes rendered kernels and GEMMs keeps one set of threads hot.
#include <algorithm>
#include <cstdint>

#include "metagrad/cpu/parallel.hpp"

namespace metagrad {

inline int thread_count() { return cpu::threads(); }

// Calls f(begin, end) on contiguous chunks covering [0, n), one chunk per thread, each run by
// whichever thread claims it (the caller among them); returns when all are done. A call made
// while another thread's job runs, or from inside a chunk, runs its chunks on the calling thread.
template <class F>
void parallel_for(std::int64_t n, F&& f) {
  if (n <= 0) return;
  const int chunks = static_cast<int>(std::min<std::int64_t>(n, thread_count()));
  if (chunks == 1) return f(std::int64_t{0}, n);
  cpu::parallel_parts(chunks, [&](int c, int nc) { f(n * c / nc, n * (c + 1) / nc); });
}

}  // namespace metagrad
