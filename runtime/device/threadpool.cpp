// The one compiled copy of the static path's thread pool (cpu/parallel.hpp) for units built with
// METAGRAD_PREBUILT, which declare it extern: the runtime's kernels and every such unit share it.
#include "metagrad/device/threadpool.hpp"

template class metagrad::cpu::detail::BasicPool<void>;
