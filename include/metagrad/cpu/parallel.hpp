#pragma once
// The shared CPU layer's threads: one process-wide pool of persistent workers (the pool and how the
// kernels split their work: detail/metagrad/detail/cpu/parallel.hpp), which the static path, the
// runtime's host kernels and the GEMM all use.
// Size: env THREADS (as the dynamic path) else every core; cpu::set_threads(n) changes it.
#include "metagrad/detail/cpu/parallel.hpp"

namespace metagrad::cpu {

// The number of threads inline evaluation uses (the caller included).
inline int threads() { return detail::Pool::get().size(); }
// Sets it (clamped to 1..64); not while another thread is evaluating.
inline void set_threads(int n) { detail::Pool::get().resize(n); }

// f(part, parts) for each part of `parts`, on the pool's threads (the caller among them).
using detail::parallel_parts;
// f(begin, end) over [0, n) cut into ranges of at least `grain` units, each starting at a multiple
// of `align`.
using detail::parallel_for;
// Below this many multiply-adds a product runs on one thread.
using detail::kParallelMacs;
// f(begin, end) over a batch of `count` products of `macs` multiply-adds each, split by whole
// products where each is too small to split itself.
using detail::parallel_products;

}  // namespace metagrad::cpu
