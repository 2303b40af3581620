// The product of few rows (decoding: one token's activations times a weight): C (m x n) = A B with
// m <= 4 and B's columns contiguous (brs == 1, a weight W (n x k) used as W^T, as Linear's is). The
// blocked GEMM would pack B for m rows of work, reading and writing the whole weight per product;
// dot products read each weight once, so the product runs at the memory's read bandwidth.
#include <algorithm>
#include <vector>

#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"

namespace metagrad::gemm {

namespace {
// Columns [j0, j1) of C: 16 independent sums a dot product vectorise without reassociation.
[[gnu::always_inline]] inline void columns_body(const Problem& p, const float* a, std::int64_t j0,
                                                std::int64_t j1) {
  for (std::int64_t j = j0; j < j1; ++j) {
    const float* b = p.b + j * p.bcs;
    for (std::int64_t i = 0; i < p.m; ++i) {
      const float* x = a + i * p.k;
      float acc[16] = {};
      std::int64_t q = 0;
      for (; q + 16 <= p.k; q += 16)
        for (int l = 0; l < 16; ++l) acc[l] += x[q + l] * b[q + l];
      float s = 0;
      for (; q < p.k; ++q) s += x[q] * b[q];
      for (float v : acc) s += v;
      p.c[i * p.ldc + j] = s;
    }
  }
}
// One copy per ISA, chosen by isa() as the GEMM's are (not target_clones: its IFUNC resolvers run
// while the library is relocated, before a sanitizer's runtime has started, and crash under TSan).
// (in the ISA namespaces test/isa_isolation.cmake looks for)
namespace avx512 {
[[gnu::target("avx512f")]] void columns(const Problem& p, const float* a, std::int64_t j0, std::int64_t j1) {
  columns_body(p, a, j0, j1);
}
}  // namespace avx512
namespace avx {
[[gnu::target("avx2")]] void columns(const Problem& p, const float* a, std::int64_t j0, std::int64_t j1) {
  columns_body(p, a, j0, j1);
}
}  // namespace avx
}  // namespace

bool gemv_fits(const Problem& p) {
  return p.m <= 4 && p.brs == 1 && !p.gather_b && p.n * p.k >= (std::int64_t{1} << 16);
}

void gemv(const Problem& p) {
  std::vector<float> a(static_cast<std::size_t>(p.m * p.k));  // A's rows, contiguous
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t q = 0; q < p.k; ++q)
      a[static_cast<std::size_t>(i * p.k + q)] = p.a[i * p.ars + q * p.acs];
  auto columns = isa() == Isa::avx512 ? &avx512::columns : isa() == Isa::avx2 ? &avx::columns : &columns_body;
  cpu::parallel_for(p.n, 16, std::max<std::int64_t>(16, (std::int64_t{1} << 16) / p.k),
                    [&](std::int64_t j0, std::int64_t j1) { columns(p, a.data(), j0, j1); });
}

}  // namespace metagrad::gemm
