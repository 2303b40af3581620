// Runs vector_math.cpp's checks where this CPU has the ISA that unit was compiled for (the library's
// gemm::best_isa, the same CPUID test that picks its GEMM copy), else says it skipped. Built for the
// baseline ISA, so that nothing wider runs before the check.
#include <cstdio>

#include "metagrad/device/gemm.hpp"

extern const char* const kVectorMathIsa;
int vector_math_check();

int main() {
  namespace gemm = metagrad::gemm;
  bool has = false;
  for (gemm::Isa i : {gemm::Isa::avx2, gemm::Isa::avx512})
    if (gemm::to_string(i) == kVectorMathIsa) has = i <= gemm::best_isa();
  if (!has) {
    std::printf("skipped: this CPU lacks %s\n", kVectorMathIsa);
    return 0;
  }
  const int rc = vector_math_check();
  std::printf("%s: vector math %s\n", kVectorMathIsa, rc ? "FAILED" : "passed");
  return rc;
}
