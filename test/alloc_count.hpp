#pragma once
// Heap allocations made by the calling thread so far: test_alloc_count.cpp replaces the global
// operator new (every form) for the test binary and counts, as Eigen's nomalloc test does.
#include <cstdint>

namespace metagrad::test {
std::uint64_t allocations();
}  // namespace metagrad::test
