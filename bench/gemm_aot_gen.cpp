// Generator of bench_gemm's AOT library (metagrad_add_aot_library): one C function per product of
// gemm_shapes.hpp, gemm_<i>(a, b, c) for shape i, each a matmul captured on CLANG and emitted as C
// with the library's C GEMM (runtime/aot/aot_gemm.cpp).
#include <metagrad/aot.hpp>
#include <string>

#include "gemm_shapes.hpp"

int main(int argc, char** argv) {
  using metagrad::Tensor;
  metagrad::aot::Generator g("gemm");
  int i = 0;
  for (const auto& s : metagrad::bench::kGemmShapes) {
    metagrad::Dims da{s.m, s.k}, db{s.k, s.n};
    if (s.batch > 1) da.insert(0, s.batch), db.insert(0, s.batch);
    Tensor a = Tensor::empty(da), b = Tensor::empty(db);
    g.function("gemm_" + std::to_string(i++), {{"a", a}, {"b", b}}, {{"c", a.matmul(b)}});
  }
  return g.main(argc, argv);
}
