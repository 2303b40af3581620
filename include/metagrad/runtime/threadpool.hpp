#pragma once
// One process-wide pool of worker threads that CPU kernels share. THREADS= sets its size
// (default: every core); THREADS=1 runs everything on the calling thread.
#include <cstdint>
#include <functional>

namespace metagrad {

int thread_count();
// Calls f(begin, end) on contiguous chunks covering [0, n), one chunk per thread, the caller
// taking one itself; returns when all are done. Calls from several threads take turns.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f);

}  // namespace metagrad
