// The C renderer's output as text: a kernel is the shared prelude followed by its function (what
// aot::Generator splits it into), and every kernel compiles cleanly with the system compiler's
// -Wall -Wextra -Werror: elementwise, reductions, matmul tiles, masks, comparisons, where and casts
// between every dtype.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernel_sources.hpp"
#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/metagrad.hpp"
#include "metagrad/backends/ops_clang.hpp"

using namespace metagrad;
namespace fs = std::filesystem;
using metagrad::test::kernel_sources;

namespace {

// Tensors whose kernels cover what the renderer emits.
std::vector<std::pair<std::string, Tensor>> representative() {
  auto r = [](const Dims& s) { return Tensor::randn(s, {.device = "CLANG"}).realize(); };
  Tensor a = r({17, 33}), c = r({17, 33}), b = r({33, 9}), m = r({64, 64}), n = r({64, 64}),
         big = r({512, 512});
  Tensor i64 = a.cast(dtypes::int64), ints = (a * 10).cast(dtypes::int32);
  std::vector<std::pair<std::string, Tensor>> out = {
      {"fused elementwise", a * c + 1},
      {"sum over an axis", a.sum(1)},
      {"max over an axis", a.max(0)},
      {"full sum", a.sum()},
      {"column sums", big.sum(0)},
      // (float64: a float32 contraction runs the runtime GEMM, with no kernel source)
      {"small matmul", a.cast(dtypes::float64).matmul(b.cast(dtypes::float64))},
      {"matmul register tile", m.cast(dtypes::float64).matmul(n.cast(dtypes::float64))},
      {"blocked matmul", big.cast(dtypes::float64).matmul(big.cast(dtypes::float64))},
      {"where and comparisons", (a < c).where(a, c) + a.eq(c).cast(dtypes::float32)},
      {"bool products and sums",
       ((a < c) * (c < a)).cast(dtypes::float32) + ((a < c) + (c > a)).cast(dtypes::float32)},
      {"padding masks", a.pad({{1, 2}, {3, 0}}).sum(0) + 1},
      {"integer division and power", ints / 3 + i64.cast(dtypes::int32).pow(2)},
      {"int64 power", i64.pow(Tensor::full({17, 33}, 3, {.device = "CLANG", .dtype = dtypes::int64}))},
      {"float16", (a.cast(dtypes::float16) * 2).cast(dtypes::float32)},
      {"float64", a.cast(dtypes::float64).exp().log().sin()},
      {"int8 and uint8",
       (a > 0).cast(dtypes::int8) * (c < 0).cast(dtypes::int8) + a.cast(dtypes::uint8).cast(dtypes::int8)},
      {"bool sum", (a > 0).sum()},
      {"sigmoid, sqrt, maximum", a.sigmoid() + c.abs().sqrt() + a.maximum(c)},
      {"softmax", a.softmax(1)},
  };
  return out;
}

}  // namespace

TEST_CASE("C output: a kernel is the shared prelude, then its function", "[codegen]") {
  const std::string& pre = codegen::c_prelude(ClangCodegen::lang);
  REQUIRE(pre.find("mg_exp2f") != std::string::npos);
  for (const auto& [what, t] : representative()) {
    INFO(what);
    for (const std::string& src : kernel_sources(t)) {
      REQUIRE(src.compare(0, pre.size(), pre) == 0);
      std::string fn = src.substr(pre.size());
      // The function's own text has no helper in it: nothing before it but gcc attributes.
      INFO(fn);
      CHECK(fn.find("static") == std::string::npos);
      CHECK(fn.find("#define") == std::string::npos);
      std::size_t v = fn.find("void ");
      REQUIRE(v != std::string::npos);
      CHECK((v == 0 || fn.compare(0, 14, "__attribute__(") == 0));
    }
  }
}

TEST_CASE("C output: every kernel compiles with -Wall -Wextra -Werror", "[codegen]") {
  fs::path dir = fs::temp_directory_path() / ("metagrad_c_output_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int n = 0;
  for (const auto& [what, t] : representative()) {
    for (const std::string& src : kernel_sources(t)) {
      fs::path c = dir / ("k" + std::to_string(n++) + ".c"), log = dir / "log.txt";
      std::ofstream(c) << src;
      std::string cmd =
          "cc -Wall -Wextra -Werror -fsyntax-only " + c.string() + " > " + log.string() + " 2>&1";
      int rc = std::system(cmd.c_str());
      std::stringstream msg;
      msg << std::ifstream(log).rdbuf();
      INFO(what << ":\n" << msg.str() << "\n--- source ---\n" << src);
      CHECK(rc == 0);
    }
  }
  CHECK(n >= 19);
  fs::remove_all(dir);
}
