// The product of few rows (gemv.hpp): each element of C a dot product of a row of A with a row of the
// weight, so the product runs at the memory's read bandwidth.
#include "gemv.hpp"

#include <algorithm>
#include <bit>
#include <vector>

#include "metagrad/cpu/parallel.hpp"

namespace metagrad::gemm {

namespace {
inline float widen(float v) { return v; }
inline float widen(std::uint16_t bf16) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16);
}

// Columns [j0, j1) of C (m x n, row stride ldc) = A (m x k, contiguous) W^T, W's rows ldw apart: 16
// independent sums a dot product vectorises without reassociation.
template <class W>
[[gnu::always_inline]] inline void columns_body(std::int64_t m, std::int64_t k, const float* a, const W* w,
                                                std::int64_t ldw, float* c, std::int64_t ldc, std::int64_t j0,
                                                std::int64_t j1) {
  for (std::int64_t j = j0; j < j1; ++j) {
    const W* b = w + j * ldw;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* x = a + i * k;
      float acc[16] = {};
      std::int64_t q = 0;
      for (; q + 16 <= k; q += 16)
        for (int l = 0; l < 16; ++l) acc[l] += x[q + l] * widen(b[q + l]);
      float s = 0;
      for (; q < k; ++q) s += x[q] * widen(b[q]);
      for (float v : acc) s += v;
      c[i * ldc + j] = s;
    }
  }
}
// One copy per ISA, chosen by isa() as the GEMM's are (not target_clones: its IFUNC resolvers run
// while the library is relocated, before a sanitizer's runtime has started, and crash under TSan),
// in the ISA namespaces test/isa_isolation.cmake looks for.
namespace avx512 {
template <class W>
[[gnu::target("avx512f")]] void columns(std::int64_t m, std::int64_t k, const float* a, const W* w,
                                        std::int64_t ldw, float* c, std::int64_t ldc, std::int64_t j0,
                                        std::int64_t j1) {
  columns_body(m, k, a, w, ldw, c, ldc, j0, j1);
}
}  // namespace avx512
namespace avx {
template <class W>
[[gnu::target("avx2")]] void columns(std::int64_t m, std::int64_t k, const float* a, const W* w,
                                     std::int64_t ldw, float* c, std::int64_t ldc, std::int64_t j0,
                                     std::int64_t j1) {
  columns_body(m, k, a, w, ldw, c, ldc, j0, j1);
}
}  // namespace avx

template <class W>
void product(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const W* w, std::int64_t ldw,
             float* c, std::int64_t ldc, Isa isa) {
  auto columns = isa == Isa::avx512 ? &avx512::columns<W>
                 : isa == Isa::avx2 ? &avx::columns<W>
                                    : &columns_body<W>;
  cpu::parallel_for(n, 16, std::max<std::int64_t>(16, (std::int64_t{1} << 16) / k),
                    [&](std::int64_t j0, std::int64_t j1) { columns(m, k, a, w, ldw, c, ldc, j0, j1); });
}
}  // namespace

bool gemv_fits(const Problem& p) {
  return p.m <= 4 && p.brs == 1 && !p.gather_b && p.n * p.k >= (std::int64_t{1} << 16);
}

void gemv(const Problem& p, Isa isa) {
  std::vector<float> a(static_cast<std::size_t>(p.m * p.k));  // A's rows, contiguous
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t q = 0; q < p.k; ++q)
      a[static_cast<std::size_t>(i * p.k + q)] = p.a[i * p.ars + q * p.acs];
  product(p.m, p.n, p.k, a.data(), p.b, p.bcs, p.c, p.ldc, isa);
}

void gemv_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const std::uint16_t* w,
               float* y, Isa isa) {
  product(m, n, k, x, w, k, y, n, isa);
}

}  // namespace metagrad::gemm
