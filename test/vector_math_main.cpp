// Runs vector_math.cpp's checks where this CPU has the ISA that unit was compiled for, else says it
// skipped. Built for the baseline ISA, so that nothing wider runs before the check.
#include <cstdio>
#include <cstring>

extern const char* const kVectorMathIsa;
int vector_math_check();

int main() {
  const bool has = std::strcmp(kVectorMathIsa, "avx512") == 0
                       ? __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw")
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!has) {
    std::printf("skipped: this CPU lacks %s\n", kVectorMathIsa);
    return 0;
  }
  const int rc = vector_math_check();
  std::printf("%s: vector math %s\n", kVectorMathIsa, rc ? "FAILED" : "passed");
  return rc;
}
