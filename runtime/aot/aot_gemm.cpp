// The AOT library's GEMM as C text: detail/metagrad/detail/cpu/gemm_plan.h (the rules: the tile's
// size, the blocking, k's steps, B in place, the split over threads), gemm_kernel.h (the tiles, the
// packing and the loops around them) and gemm_driver.h (the blocked product, its parts over
// threads), the C++ kernel's own text, around this folder's aot_gemm_prelude.h (the vector type and
// the seam for them) and aot_gemm_sgemm.c (its parts over the library's threads: aot_threads.c,
// started only where the caller asks for them, NAME_set_threads). All six are real files, compiled as
// C by test/aot (aot_gemm_c_*).
#include "aot_gemm.hpp"

#include <algorithm>

#include "metagrad/shape/view.hpp"  // metagrad::detail::cat

namespace metagrad::aot {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

// The texts of detail/metagrad/detail/cpu/gemm_{plan,kernel,driver}.h and of this folder's
// aot_gemm_prelude.h and aot_gemm_sgemm.c (CMakeLists.txt reads them at build time; generated
// files: build/generated/)
constexpr const char* kPlan =
#include "gemm_plan_text.inc"
    ;
constexpr const char* kPrelude =
#include "gemm_prelude_text.inc"
    ;
constexpr const char* kKernel =
#include "gemm_kernel_text.inc"
    ;
constexpr const char* kDriver =
#include "gemm_driver_text.inc"
    ;
constexpr const char* kSgemm =
#include "gemm_sgemm_text.inc"
    ;
constexpr const char* kThreads =
#include "gemm_threads_text.inc"
    ;

std::string threads_c_source(const std::string& prefix) {
  std::string s = kThreads;
  replace_all(s, "P_", prefix + "_");
  return s;
}

std::string gemm_c_source(const std::string& prefix, GemmExtent max, const cpu::CacheSizes& caches) {
  auto prefixed = [&](std::string s) {
    replace_all(s, "P_", prefix + "_");
    return s;
  };
  // The plan, the kernel and the driver untouched by the prefix: their names are static or macros,
  // the same in every library.
  return detail::cat(
      "/* ", prefix, "_sgemm: the matrix product of contractions, metagrad's blocked GEMM in C */\n", kPlan,
      prefixed(detail::cat("#define P_L1 ", std::to_string(caches.l1), "L\n#define P_L2 ",
                           std::to_string(caches.l2), "L\n#define P_L3 ", std::to_string(caches.l3),
                           "L\n#define P_MMAX ", std::to_string(std::max<std::int64_t>(max.m, 1)),
                           "L\n#define P_NMAX ", std::to_string(std::max<std::int64_t>(max.n, 1)),
                           "L\n#define P_KMAX ", std::to_string(std::max<std::int64_t>(max.k, 1)), "L\n",
                           kPrelude)),
      kKernel, kDriver, prefixed(kSgemm));
}

}  // namespace metagrad::aot
