// Which ISA's kernel runs: CPUID's widest, or METAGRAD_ISA.
#include <stdexcept>

#include "gemv.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/helpers.hpp"

namespace metagrad::gemm {

// Each ISA's copy (sgemm_isa.inc), declared here in its namespace.
#define METAGRAD_GEMM_DECLARE(ns)                       \
  namespace ns {                                        \
  void sgemm(const Problem& p, const GemmBlocking& bk); \
  GemmBlocking default_blocking();                      \
  }
METAGRAD_GEMM_DECLARE(base)
#if defined(__x86_64__)
METAGRAD_GEMM_DECLARE(avx)
METAGRAD_GEMM_DECLARE(avx512)
#endif
#undef METAGRAD_GEMM_DECLARE

std::string to_string(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return "avx512";
    case Isa::avx2:
      return "avx2";
    default:
      return "generic";
  }
}

Isa best_isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
  return Isa::generic;
}

Isa isa() {
  static const Isa chosen = [] {
    std::string want = getenv("METAGRAD_ISA");
    Isa best = best_isa();
    if (want.empty()) return best;
    for (Isa i : {Isa::generic, Isa::avx2, Isa::avx512})
      if (to_string(i) == want) {
        if (i > best)
          throw std::runtime_error("METAGRAD_ISA=" + want + ": this CPU's widest is " + to_string(best));
        return i;
      }
    throw std::runtime_error("METAGRAD_ISA=" + want + ": expected generic, avx2 or avx512");
  }();
  return chosen;
}

bool enabled() {
  static const bool on = getenv("METAGRAD_GEMM") != "0";
  return on;
}

GemmBlocking default_blocking(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::avx512:
      return avx512::default_blocking();
    case Isa::avx2:
      return avx::default_blocking();
#endif
    default:
      return base::default_blocking();
  }
}

void sgemm(const Problem& p, const GemmBlocking& bk, Isa isa) {
  if (gemv_fits(p)) {  // few rows: dot products, not the blocked kernel (then C's epilogue)
    gemv(p, isa);
    if (p.done) p.done->fn(p.done->ctx, 0, p.m);
    return;
  }
  GemmBlocking b = bk.kc > 0 ? bk : choose_blocking(p.m, p.n, p.k, isa);
  switch (isa) {
#if defined(__x86_64__)
    case Isa::avx512:
      return avx512::sgemm(p, b);
    case Isa::avx2:
      return avx::sgemm(p, b);
#endif
    default:
      return base::sgemm(p, b);
  }
}

}  // namespace metagrad::gemm
