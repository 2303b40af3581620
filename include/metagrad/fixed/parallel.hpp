#pragma once
// Threads for inline evaluation: the shared CPU layer's pool (cpu/parallel.hpp), which both paths use.
// Size: env THREADS (as the dynamic path) else every core; fixed::set_threads(n) changes it.
#include "metagrad/cpu/parallel.hpp"

namespace metagrad::fixed {

using cpu::set_threads;
using cpu::threads;

}  // namespace metagrad::fixed
