#pragma once
// Threads for inline evaluation: one process-wide pool of persistent workers (the pool and how the
// kernels split their work: detail/metagrad/detail/fixed/parallel.hpp), used by both paths.
// Size: env THREADS (as the dynamic path) else every core; fixed::set_threads(n) changes it.
#include "metagrad/detail/fixed/parallel.hpp"

namespace metagrad::fixed {

// The number of threads inline evaluation uses (the caller included).
inline int threads() { return detail::Pool::get().size(); }
// Sets it (clamped to 1..64); not while another thread is evaluating.
inline void set_threads(int n) { detail::Pool::get().resize(n); }

}  // namespace metagrad::fixed
