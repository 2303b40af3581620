// AOT GEMM replay: runs bench_gemm's AOT products (bench/gemm_shapes.hpp, one function each) from two
// generated libraries, say one built before a change to the C GEMM (runtime/aot/aot_gemm.cpp,
// detail/metagrad/detail/cpu/gemm_plan.h) and one after, on the same random operands at 1 and 2
// threads, and says whether every output is bitwise the same. tools/aot_gemm_replay.sh builds both
// libraries from their generated C (build/bench/gemm_aot.aot/gemm_aot.c) and runs this.
//   aot_gemm_replay before.so after.so   (exit status 1 where any output differs)
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../bench/gemm_shapes.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s before.so after.so\n", argv[0]);
    return 2;
  }
  void* lib[2] = {dlopen(argv[1], RTLD_NOW | RTLD_LOCAL), dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)};
  for (int l = 0; l < 2; ++l)
    if (!lib[l]) {
      std::fprintf(stderr, "%s\n", dlerror());
      return 2;
    }
  using Fn = void (*)(const float*, const float*, float*);
  using Threads = void (*)(int);
  int differ = 0, i = 0;
  std::mt19937 rng(36);
  std::normal_distribution<float> d;
  for (const auto& s : metagrad::bench::kGemmShapes) {
    const std::string name = "gemm_" + std::to_string(i++);
    std::vector<float> a(static_cast<std::size_t>(s.batch * s.m * s.k)), b(static_cast<std::size_t>(s.batch * s.k * s.n));
    for (float& x : a) x = d(rng);
    for (float& x : b) x = d(rng);
    for (int threads : {1, 2}) {
      std::vector<float> c[2];
      for (int l = 0; l < 2; ++l) {
        reinterpret_cast<Threads>(dlsym(lib[l], "gemm_aot_set_threads"))(threads);
        c[l].assign(static_cast<std::size_t>(s.batch * s.m * s.n), -1.f);
        reinterpret_cast<Fn>(dlsym(lib[l], name.c_str()))(a.data(), b.data(), c[l].data());
      }
      const bool same = std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(float)) == 0;
      differ += !same;
      std::printf("%-12s %d thread%s: %s\n", s.key, threads, threads > 1 ? "s" : " ",
                  same ? "bitwise the same" : "DIFFERENT");
    }
  }
  std::printf("%s\n", differ ? "outputs differ" : "every output bitwise the same");
  return differ ? 1 : 0;
}
