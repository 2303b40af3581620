// The generic kernel (flags set in CMakeLists.txt). It is also the copy that units built without
// ISA flags call (cpu/gemm.hpp): it hands their products to the widest copy the CPU runs.
#define METAGRAD_GEMM_FORWARD 1
#include "sgemm_isa.inc"

#include <atomic>

namespace metagrad {

namespace gemm {
namespace {
std::atomic<std::int64_t> widened{0};
}
std::int64_t widened_products() { return widened.load(std::memory_order_relaxed); }
}  // namespace gemm

#if defined(__x86_64__)
namespace gemm {
// The wider copies' entry points (sgemm_isa.inc), compiled with their ISA's flags.
#define METAGRAD_GEMM_DECLARE(ns)                                                                           \
  namespace ns {                                                                                            \
  template <class T>                                                                                        \
  void run_static(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t ars,             \
                  std::int64_t acs, const T* b, std::int64_t brs, std::int64_t bcs, T* c, std::int64_t ldc, \
                  const GemmBlocking* bk, bool acc);                                                        \
  }
METAGRAD_GEMM_DECLARE(avx)
METAGRAD_GEMM_DECLARE(avx512)
#undef METAGRAD_GEMM_DECLARE
}  // namespace gemm
#endif

namespace cpu::detail::METAGRAD_CPU_ISA {  // (the header's declaration: base)

template <class T>
bool run_on_widest_isa(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
                       index_t brs, index_t bcs, T* c, index_t ldc, const GemmBlocking& bk, bool acc) {
#if defined(__x86_64__)
  // The caller's blocking, unless it is this copy's default: then the wider copy's own.
  const GemmBlocking* own = bk == Gemm<T>::host_blocking() ? nullptr : &bk;
  gemm::Isa isa = gemm::isa();  // (METAGRAD_ISA=generic keeps every product here)
  if (isa == gemm::Isa::generic) return false;
  gemm::widened.fetch_add(1, std::memory_order_relaxed);
  if (isa == gemm::Isa::avx512)
    gemm::avx512::run_static<T>(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, own, acc);
  else
    gemm::avx::run_static<T>(m, n, k, a, ars, acs, b, brs, bcs, c, ldc, own, acc);
  return true;
#else
  (void)m, (void)n, (void)k, (void)a, (void)ars, (void)acs, (void)b, (void)brs, (void)bcs, (void)c, (void)ldc,
      (void)bk, (void)acc;
#endif
  return false;
}
template bool run_on_widest_isa<float>(index_t, index_t, index_t, const float*, index_t, index_t,
                                       const float*, index_t, index_t, float*, index_t, const GemmBlocking&,
                                       bool);
template bool run_on_widest_isa<double>(index_t, index_t, index_t, const double*, index_t, index_t,
                                        const double*, index_t, index_t, double*, index_t,
                                        const GemmBlocking&, bool);

}  // namespace cpu::detail::METAGRAD_CPU_ISA
}  // namespace metagrad
