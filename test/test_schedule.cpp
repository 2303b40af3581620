// The scheduler's fusion, counted: how many kernels typical graphs become on a compiled device
// (CLANG), each result checked against the same formula computed here in double; and GRAPH=1's
// DOT output of what was realized.
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "device_scope.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

// Kernels launched while realizing t (its inputs realized beforehand).
i64 kernels_for(Tensor t) {
  i64 before = GlobalCounters::kernel_count;
  t.realize();
  return GlobalCounters::kernel_count - before;
}

Tensor on_device(const std::vector<double>& v, const Dims& shape) {
  return Tensor(v, shape, {.dtype = dtypes::float32}).realize();
}

void require_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-4 * (1 + std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("(a*b+c).relu() is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (unsigned seed = 0; seed < 4; ++seed) {
    const i64 n = 7 + 61 * seed;
    auto va = test::random_floats(n, seed), vb = test::random_floats(n, seed + 10),
         vc = test::random_floats(n, seed + 20);
    Tensor a = on_device(va, {n}), b = on_device(vb, {n}), c = on_device(vc, {n});
    Tensor out = (a * b + c).relu();
    REQUIRE(kernels_for(out) == 1);
    std::vector<double> want(va.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0, va[i] * vb[i] + vc[i]);
    require_close(out.to_vector<float>(), want);
  }
}

TEST_CASE("(a*b).sum(1) is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (i64 rows : {1, 5, 33})
    for (i64 cols : {1, 16, 45}) {
      auto va = test::random_floats(rows * cols, 1), vb = test::random_floats(rows * cols, 2);
      Tensor out = (on_device(va, {rows, cols}) * on_device(vb, {rows, cols})).sum(1);
      REQUIRE(kernels_for(out) == 1);
      std::vector<double> want(static_cast<std::size_t>(rows), 0.0);
      for (i64 r = 0; r < rows; ++r)
        for (i64 k = 0; k < cols; ++k) want[r] += va[r * cols + k] * vb[r * cols + k];
      require_close(out.to_vector<float>(), want);
    }
}

TEST_CASE("softmax over the last axis is at most 3 kernels", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (i64 rows : {1, 4, 17})
    for (i64 cols : {2, 10, 100}) {
      auto v = test::random_floats(rows * cols, static_cast<unsigned>(rows * cols));
      Tensor out = on_device(v, {rows, cols}).softmax(-1);
      i64 k = kernels_for(out);
      INFO(rows << "x" << cols << ": " << k << " kernels");
      REQUIRE(k <= 3);
      std::vector<double> want(v.size());
      for (i64 r = 0; r < rows; ++r) {
        double m = -INFINITY, s = 0;
        for (i64 j = 0; j < cols; ++j) m = std::max(m, v[r * cols + j]);
        for (i64 j = 0; j < cols; ++j) s += std::exp(v[r * cols + j] - m);
        for (i64 j = 0; j < cols; ++j) want[r * cols + j] = std::exp(v[r * cols + j] - m) / s;
      }
      require_close(out.to_vector<float>(), want);
    }
}

TEST_CASE("matmul is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (auto [m, k, n] : std::vector<std::array<i64, 3>>{{1, 1, 1}, {16, 32, 8}, {9, 70, 13}}) {
    auto va = test::random_floats(m * k, 3), vb = test::random_floats(k * n, 4);
    Tensor out = on_device(va, {m, k}).matmul(on_device(vb, {k, n}));
    REQUIRE(kernels_for(out) == 1);
    std::vector<double> want(static_cast<std::size_t>(m * n), 0.0);
    for (i64 i = 0; i < m; ++i)
      for (i64 j = 0; j < n; ++j)
        for (i64 x = 0; x < k; ++x) want[i * n + j] += va[i * k + x] * vb[x * n + j];
    require_close(out.to_vector<float>(), want);
  }
}

// An MLP training step (784-128-10, batch 16: forward, sparse cross-entropy, backward, SGD with
// momentum) launched 33 kernels when this test was written (29 without momentum). Fusion work may
// lower this bound; nothing may raise it.
constexpr i64 kMlpStepKernels = 33;

TEST_CASE("an MLP training step launches at most the documented number of kernels", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  Tensor::manual_seed(3);
  nn::Linear l1(784, 128), l2(128, 10);
  nn::optim::SGD opt({l1.weight, *l1.bias, l2.weight, *l2.bias}, 0.01, 0.9);
  Tensor x = Tensor::randn({16, 784}).realize();
  Tensor y =
      Tensor(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16}).realize();
  Tensor::TrainingGuard training;
  auto step = [&] {
    Tensor loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.realize();
  };
  step();  // the first step differs (momentum buffers start at zero)
  i64 before = GlobalCounters::kernel_count;
  step();
  i64 k = GlobalCounters::kernel_count - before;
  INFO("MLP step: " << k << " kernels");
  REQUIRE(k <= kMlpStepKernels);
  REQUIRE(k >= 8);  // forward 2 matmuls, backward 3, 4 parameter updates: fewer means work went missing
}

TEST_CASE("GRAPH=1 writes each realized buffer as a node of a DOT graph", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  std::string path =
      (std::filesystem::temp_directory_path() / ("metagrad_graph_" + std::to_string(::getpid()) + ".dot"))
          .string();
  std::filesystem::remove(path);
  Tensor a = on_device(test::random_floats(12, 1), {3, 4}), b = on_device(test::random_floats(12, 2), {3, 4});
  Tensor x = on_device(test::random_floats(12, 3), {3, 4});
  i64 kernels = 0;
  {
    struct Env {
      Env(const std::string& p) { ::setenv("GRAPH", "1", 1), ::setenv("GRAPH_PATH", p.c_str(), 1); }
      ~Env() { ::unsetenv("GRAPH"), ::unsetenv("GRAPH_PATH"); }
    } env(path);
    kernels += kernels_for((a * b + 1).relu().sum(1));
    kernels += kernels_for(x.softmax(-1) + a);
  }
  std::ifstream f(path);
  REQUIRE(f.good());
  std::string first, line;
  std::getline(f, first);
  REQUIRE(first.rfind("digraph", 0) == 0);
  std::map<std::string, std::string> nodes;  // id -> attributes
  std::vector<std::pair<std::string, std::string>> edges;
  std::smatch m;
  while (std::getline(f, line)) {
    if (std::regex_search(line, m, std::regex(R"(^\s*(n\d+) \[label=(.*)\];$)"))) {
      REQUIRE(nodes.emplace(m[1], m[2]).second);  // one node per buffer
    } else if (std::regex_search(line, m, std::regex(R"(^\s*(n\d+) -> (n\d+);$)"))) {
      edges.emplace_back(m[1], m[2]);
    }
  }
  i64 kernel_nodes = 0, inputs = 0;
  for (const auto& [id, attrs] : nodes) {
    kernel_nodes += attrs.find("\"kernel ") == 0;
    inputs += attrs.find("dashed") != std::string::npos;
  }
  REQUIRE(kernel_nodes == kernels);  // every kernel launched is a node, and nothing else is a kernel
  REQUIRE(inputs == 3);              // a, b and x were realized before
  std::map<std::string, int> in_degree;
  for (const auto& [from, to] : edges) {
    REQUIRE(nodes.count(from));
    REQUIRE(nodes.count(to));
    REQUIRE(nodes[to].find("dashed") == std::string::npos);  // inputs are only read
    ++in_degree[to];
  }
  for (const auto& [id, attrs] : nodes)
    if (attrs.find("\"kernel ") == 0) REQUIRE(in_degree[id] >= 1);  // every kernel here reads a buffer
  std::filesystem::remove(path);
}
