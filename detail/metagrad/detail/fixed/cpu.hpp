#pragma once
// The shared CPU layer (include/metagrad/cpu/) under the names the static path's kernels use: the
// arena, the vector registers, the thread pool and the GEMM are metagrad::cpu's, which the runtime
// and AOT libraries use too.
#include "metagrad/cpu/caches.hpp"
#include "metagrad/cpu/gemm.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/detail/cpu/arena.hpp"
#include "metagrad/detail/cpu/simd.hpp"

namespace metagrad::fixed::detail {

using cpu::CacheSizes;
using cpu::host_caches;
using cpu::detail::Arena;
using cpu::detail::Gemm;
using cpu::detail::kMaxThreads;
using cpu::detail::kParallelElements;
using cpu::detail::kParallelMacs;
using cpu::detail::kPartsPerThread;
using cpu::detail::kVectorBytes;
using cpu::detail::kVectorMath;
using cpu::detail::parallel_for;
using cpu::detail::parallel_parts;
using cpu::detail::parallel_products;
using cpu::detail::parts_for;
using cpu::detail::simd;
using cpu::detail::stream;
using cpu::detail::stream_fence;
#if defined(METAGRAD_CPU_VECTOR_MATH)
using cpu::detail::FV;
using cpu::detail::vexp;
using cpu::detail::vexp2;
using cpu::detail::vsigmoid;
#endif

}  // namespace metagrad::fixed::detail
