// Loops over more than 2^31 iterations on the host: the C kernels count in 64 bits (an `int`
// counter wrapped and a CLANG reduction over more than INT_MAX elements never ended), and the range
// arguments the host launch passes are 64-bit too. Running such a kernel needs gigabytes and
// minutes, so the rendered source is checked instead, and a moderate kernel for its results.
#include <climits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "metagrad/codegen/pipeline.hpp"
#include "metagrad/metagrad.hpp"
#include "metagrad/backends/ops_clang.hpp"

using namespace metagrad;

TEST_CASE("codegen: C loop counters and ranges are 64-bit where a bound exceeds INT_MAX",
          "[codegen][CLANG]") {
  const std::int64_t n = 2147483659;  // a prime above INT_MAX: no upcast splits the loop
  MemBuffer in{1, dtypes::float32, ShapeTracker({n})};
  auto ast = std::make_shared<LazyOp>(ReduceOps::SUM, std::vector<LazySrc>{in}, OpArg{Dims{1}});
  ASTRunner r = codegen::run_pipeline(ast, dtypes::float32, [](const codegen::LinearizedKernel& k) {
    return codegen::render_cstyle(k, ClangCodegen::lang);
  });
  std::string body = r.prg.substr(r.prg.find("void "));
  INFO(body);
  CHECK(body.find("for (int ") == std::string::npos);
  CHECK(body.find("for (long long ") != std::string::npos);
  CHECK(body.find(std::to_string(n)) != std::string::npos);
}

TEST_CASE("codegen: the C range arguments are 64-bit", "[codegen][CLANG]") {
  MemBuffer in{1, dtypes::float32, ShapeTracker({1 << 20})};
  auto ast = std::make_shared<LazyOp>(UnaryOps::EXP2, std::vector<LazySrc>{in});
  ASTRunner r = codegen::run_pipeline(ast, dtypes::float32, [](const codegen::LinearizedKernel& k) {
    return codegen::render_cstyle(k, ClangCodegen::lang);
  });
  INFO(r.prg);
  CHECK(r.prg.find("long long start, long long end") != std::string::npos);
}

TEST_CASE("CLANG: a moderate reduction and elementwise kernel with 64-bit counters are correct", "[CLANG]") {
  const std::int64_t n = 3'000'003;
  std::vector<float> v(static_cast<std::size_t>(n));
  double want = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
    want += v[static_cast<std::size_t>(i)];
  }
  Tensor x(v, {n}, {.device = "CLANG"});
  CHECK(x.sum().item<float>() == Approx(want).margin(1));
  std::vector<float> y = (x * 2 + 1).to_vector<float>();
  REQUIRE(y.size() == v.size());
  bool ok = true;
  for (std::size_t i = 0; i < y.size(); ++i) ok = ok && y[i] == v[i] * 2 + 1;
  CHECK(ok);
}
