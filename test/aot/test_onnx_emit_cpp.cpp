// metagrad-onnx --emit=cpp (tools/metagrad_onnx.cpp): models built in code (test/onnx_builder.hpp) and
// one of the ONNX backend tests are written as static-path headers, compiled by the system C++ compiler
// against the repository's headers alone (no metagrad library, no protobuf), run, and compared with
// onnx::parse of the same model on CPU; the second run of a forward must not allocate; operators the
// static path cannot express are errors naming the node.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "onnx_builder.hpp"

namespace fs = std::filesystem;
using metagrad::test::attr_f;
using metagrad::test::attr_i;
using metagrad::test::Builder;
using metagrad::test::i64;

namespace {

// What a command printed (stdout and stderr) and its exit status.
struct Ran {
  int status;
  std::string out;
};
Ran shell(const std::string& cmd) {
  Ran r{-1, ""};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name)
      : path(fs::temp_directory_path() / ("metagrad_emit_cpp_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
};

Ran emit(const fs::path& model, const fs::path& header, const std::string& more = "") {
  return shell(std::string(METAGRAD_ONNX_TOOL) + " --emit=cpp '" + model.string() + "' -o '" +
               header.string() + "' " + more);
}

// A program around the header: loads the parameters, reads Input0 from a file, runs forward twice
// (counting the allocations of the second run) and writes Output0.
const char* const kDriver = R"(#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>
#include MODEL_HEADER
static long allocations = 0;
void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {  // the arena's and big tensors' storage
  ++allocations;
  if (void* p = std::aligned_alloc(std::size_t(a), (n + std::size_t(a) - 1) / std::size_t(a) * std::size_t(a))) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
int main(int, char** argv) {
  using namespace MODEL_NS;
  auto p = std::make_unique<Params>();
  load(*p, argv[1]);
  auto s = std::make_unique<Stages>();
  auto x = std::make_unique<Input0>();
  auto y = std::make_unique<Output0>();
  std::ifstream(argv[2], std::ios::binary).read(reinterpret_cast<char*>(x->data()), sizeof(float) * Input0::size);
  forward(*p, *s, *x, *y);
  long before = allocations;
  forward(*p, *s, *x, *y);
  std::printf("allocations in a run: %ld\n", allocations - before);
  std::ofstream(argv[3], std::ios::binary).write(reinterpret_cast<const char*>(y->data()), sizeof(float) * Output0::size);
}
)";

// Emits `model`, compiles it with the driver, runs it on x and returns its output.
std::vector<float> run_emitted(const Dir& d, const fs::path& model, const std::string& ns,
                               const std::vector<float>& x, const std::string& more = "") {
  fs::path header = d.path / (ns + ".hpp");
  Ran e = emit(model, header, "-n " + ns + " " + more);
  INFO(e.out);
  REQUIRE(e.status == 0);
  REQUIRE(fs::exists(d.path / (ns + ".safetensors")));
  std::ofstream(d.path / "driver.cpp") << kDriver;
  std::string cc = std::string(METAGRAD_CXX) +
                   " -std=c++20 -O1 -DNDEBUG -Wall -Wextra -Werror -Wno-mismatched-new-delete -I'" +
                   METAGRAD_INCLUDE + "' -I'" + METAGRAD_DETAIL + "' -I'" + METAGRAD_BOOST +
                   "' -DMODEL_HEADER='\"" + header.string() + "\"' -DMODEL_NS=" + ns + " '" +
                   (d.path / "driver.cpp").string() + "' -o '" + (d.path / ns).string() + "' -pthread";
  Ran c = shell(cc);
  INFO(cc << "\n" << c.out.substr(0, 4000));
  REQUIRE(c.status == 0);
  std::ofstream(d.path / "x.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  Ran r = shell("'" + (d.path / ns).string() + "' '" + (d.path / (ns + ".safetensors")).string() + "' '" +
                (d.path / "x.bin").string() + "' '" + (d.path / "y.bin").string() + "'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("allocations in a run: 0\n") != std::string::npos);
  std::ifstream in(d.path / "y.bin", std::ios::binary);
  std::vector<float> y;
  for (float v; in.read(reinterpret_cast<char*>(&v), sizeof v);) y.push_back(v);
  return y;
}

std::vector<float> randn(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
std::vector<double> randd(std::size_t n, std::uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// The imported model's output on CPU, the reference.
std::vector<float> reference(const metagrad::onnx::Model& m, const std::vector<float>& x,
                             const metagrad::Dims& shape) {
  return m({metagrad::Tensor(x, shape)})[0].to_vector<float>();
}

void compare(const std::vector<float>& got, const std::vector<float>& want, double tol = 1e-4) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / (1 + std::abs(double(want[i]))));
  INFO("largest relative error " << worst);
  CHECK(worst < tol);
}

void save(const Builder& b, const fs::path& p) { std::ofstream(p, std::ios::binary) << b.bytes(); }

}  // namespace

TEST_CASE("emit cpp: an MLP (MatMul, Add, Relu, Gemm with transB and alpha, Softmax)", "[onnx_emit_cpp]") {
  Dir d("mlp");
  Builder b;
  b.input("x", {"batch", 6}).output("probs");
  b.init_f32("w1", {6, 8}, randd(48, 1)).init_f32("b1", {8}, randd(8, 2));
  b.init_f32("w2", {3, 8}, randd(24, 3)).init_f32("b2", {3}, randd(3, 4));
  b.node("MatMul", {"x", "w1"}, {"h"});
  b.node("Add", {"h", "b1"}, {"hb"});
  b.node("Relu", {"hb"}, {"r"});
  auto* g = b.node("Gemm", {"r", "w2", "b2"}, {"logits"});
  attr_i(g, "transB", 1);
  attr_f(g, "alpha", 0.5f);
  attr_f(g, "beta", 2.0f);
  attr_i(b.node("Softmax", {"logits"}, {"probs"}), "axis", -1);
  save(b, d.path / "mlp.onnx");
  SECTION("a symbolic batch needs its size") {
    Ran e = emit(d.path / "mlp.onnx", d.path / "mlp.hpp");
    CHECK(e.status != 0);
    CHECK(e.out.find("input 'x': dimension 0 is not fixed; give every size with --input x=AxBx...") !=
          std::string::npos);
  }
  SECTION("emitted, compiled and run as the imported model") {
    auto x = randn(4 * 6, 5);
    compare(run_emitted(d, d.path / "mlp.onnx", "mlp", x, "--input x=4x6"), reference(b.parse(), x, {4, 6}));
    // the header's loader on a missing and on a truncated weights file
    std::string prog = "'" + (d.path / "mlp").string() + "' ",
                rest = " '" + (d.path / "x.bin").string() + "' /dev/null";
    CHECK(shell(prog + "'" + (d.path / "none.safetensors").string() + "'" + rest)
              .out.find("load: cannot read") != std::string::npos);
    fs::copy_file(d.path / "mlp.safetensors", d.path / "short.safetensors");
    fs::resize_file(d.path / "short.safetensors", fs::file_size(d.path / "mlp.safetensors") - 8);
    CHECK(shell(prog + "'" + (d.path / "short.safetensors").string() + "'" + rest)
              .out.find("the file is short") != std::string::npos);
  }
}

TEST_CASE("emit cpp: a CNN (conv, batch norm, depthwise and grouped conv, clip, pools, gemm)",
          "[onnx_emit_cpp]") {
  Dir d("cnn");
  Builder b(13);
  b.input("image", {2, 3, 9, 9}).output("out");
  auto bn = [&](const std::string& x, const std::string& y, i64 c, std::uint32_t seed) {
    b.init_f32(y + "_g", {c}, randd(c, seed, 0.5, 1.5)).init_f32(y + "_b", {c}, randd(c, seed + 1));
    b.init_f32(y + "_m", {c}, randd(c, seed + 2)).init_f32(y + "_v", {c}, randd(c, seed + 3, 0.5, 2));
    attr_f(b.node("BatchNormalization", {x, y + "_g", y + "_b", y + "_m", y + "_v"}, {y}), "epsilon", 1e-3f);
  };
  auto ints = [](::onnx::NodeProto* n, const std::string& name, std::vector<i64> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (i64 x : v) a->add_ints(x);
  };
  // conv 3 -> 4, 3x3, pads 1, then a batch norm (folded into it) and a ReLU
  b.init_f32("w1", {4, 3, 3, 3}, randd(108, 10)).init_f32("c1", {4}, randd(4, 11));
  ints(b.node("Conv", {"image", "w1", "c1"}, {"y1"}, "conv1"), "pads", {1, 1, 1, 1});
  bn("y1", "n1", 4, 20);
  b.node("Relu", {"n1"}, {"r1"});
  // depthwise 3x3, stride 2, asymmetric pads, no bias, a batch norm, Clip(0, 6)
  b.init_f32("wd", {4, 1, 3, 3}, randd(36, 12));
  auto* dw = b.node("Conv", {"r1", "wd"}, {"y2"}, "depthwise");
  attr_i(dw, "group", 4);
  ints(dw, "strides", {2, 2});
  ints(dw, "pads", {1, 0, 1, 1});
  bn("y2", "n2", 4, 30);
  b.init_f32("lo", {}, {0.0}).init_f32("hi", {}, {6.0});
  b.node("Clip", {"n2", "lo", "hi"}, {"r2"});
  // a grouped 1x1 conv (2 groups), a residual Add, a max pool with padding over values of both signs
  b.init_f32("wg", {4, 2, 1, 1}, randd(8, 13)).init_f32("cg", {4}, randd(4, 14));
  attr_i(b.node("Conv", {"r2", "wg", "cg"}, {"y3"}, "grouped"), "group", 2);
  b.node("Add", {"r2", "y3"}, {"sum"});
  auto* mp = b.node("MaxPool", {"sum"}, {"p"});
  ints(mp, "kernel_shape", {3, 3});
  ints(mp, "strides", {2, 2});
  ints(mp, "pads", {1, 1, 1, 1});
  b.node("GlobalAveragePool", {"p"}, {"gap"});
  attr_i(b.node("Flatten", {"gap"}, {"flat"}), "axis", 1);
  b.init_f32("wf", {5, 4}, randd(20, 15)).init_f32("cf", {5}, randd(5, 16));
  attr_i(b.node("Gemm", {"flat", "wf", "cf"}, {"out"}), "transB", 1);
  save(b, d.path / "cnn.onnx");
  auto x = randn(2 * 3 * 9 * 9, 6);
  compare(run_emitted(d, d.path / "cnn.onnx", "cnn", x), reference(b.parse(), x, {2, 3, 9, 9}));
}

TEST_CASE("emit cpp: movement and elementwise ops (Transpose, Pad, Slice, Split, Concat, Sum, PRelu, ...)",
          "[onnx_emit_cpp]") {
  Dir d("ops");
  Builder b(13);
  b.input("x", {2, 3, 4}).output("y");
  b.init_i64("perm_pads", {0, 0, 1, 0, 1, 2}).init_f32("pv", {}, {-0.5});
  auto* t = b.node("Transpose", {"x"}, {"xt"});  // (2, 4, 3)
  auto* pa = t->add_attribute();
  pa->set_name("perm");
  pa->set_type(::onnx::AttributeProto::INTS);
  for (i64 v : {0, 2, 1}) pa->add_ints(v);
  b.node("Pad", {"xt", "perm_pads", "pv"}, {"xp"});  // (2, 5, 6), -0.5 around
  b.init_i64("st", {1, -5}).init_i64("en", {5, 100}).init_i64("ax", {1, 2});
  b.node("Slice", {"xp", "st", "en", "ax"}, {"xs"});  // (2, 4, 5)
  b.init_i64("parts", {2, 3});
  attr_i(b.node("Split", {"xs", "parts"}, {"a", "c"}), "axis", 2);  // (2, 4, 2) and (2, 4, 3)
  b.init_f32("slope", {4, 1}, randd(4, 7));
  b.node("PRelu", {"c", "slope"}, {"cp"});
  b.node("Selu", {"a"}, {"as"});
  attr_i(b.node("Concat", {"as", "cp", "a"}, {"cat"}), "axis", -1);  // (2, 4, 7)
  b.init_f32("bias", {7}, randd(7, 8));
  b.node("Sum", {"cat", "bias", "cat"}, {"sum"});
  auto* r = b.node("ReduceMean", {"sum"}, {"m"});  // (2, 1, 7)
  auto* ra = r->add_attribute();
  ra->set_name("axes");
  ra->set_type(::onnx::AttributeProto::INTS);
  ra->add_ints(1);
  attr_i(b.node("LogSoftmax", {"m"}, {"y"}), "axis", -1);
  save(b, d.path / "ops.onnx");
  auto x = randn(2 * 3 * 4, 9);
  compare(run_emitted(d, d.path / "ops.onnx", "ops", x), reference(b.parse(), x, {2, 3, 4}));
}

TEST_CASE("emit cpp: a backend test model (pytorch-operator conv) matches its expected output",
          "[onnx_emit_cpp]") {
  const fs::path dir = "/usr/share/libonnx-testdata/data/pytorch-operator/test_operator_conv";
  if (!fs::exists(dir / "model.onnx")) {
    WARN("skipped: no ONNX backend test data");
    return;
  }
  Dir d("backend");
  metagrad::Tensor in = metagrad::onnx::read_tensor((dir / "test_data_set_0/input_0.pb").string()).to("CPU");
  metagrad::Tensor want =
      metagrad::onnx::read_tensor((dir / "test_data_set_0/output_0.pb").string()).to("CPU");
  compare(run_emitted(d, dir / "model.onnx", "conv", in.to_vector<float>()), want.to_vector<float>());
}

TEST_CASE("emit cpp: what the static path cannot express is an error naming the node", "[onnx_emit_cpp]") {
  Dir d("errors");
  SECTION("an operator") {
    Builder b;
    b.input("x", {2, 3}).output("y");
    b.node("Relu", {"x"}, {"r"});
    b.node("NonZero", {"r"}, {"y"}, "where_nonzero");
    save(b, d.path / "m.onnx");
    Ran e = emit(d.path / "m.onnx", d.path / "m.hpp");
    CHECK(e.status == 1);
    CHECK(
        e.out.find("node 1 'where_nonzero' (NonZero): the static path (metagrad-onnx --emit=cpp) has no such "
                   "operator") != std::string::npos);
  }
  SECTION("an attribute") {
    Builder b;
    b.input("x", {1, 2, 8, 8}).output("y");
    b.init_f32("w", {2, 2, 3, 3}, randd(36, 1));
    auto* c = b.node("Conv", {"x", "w"}, {"y"}, "dilated");
    auto* a = c->add_attribute();
    a->set_name("dilations");
    a->set_type(::onnx::AttributeProto::INTS);
    a->add_ints(2);
    a->add_ints(2);
    save(b, d.path / "m.onnx");
    Ran e = emit(d.path / "m.onnx", d.path / "m.hpp");
    CHECK(e.status == 1);
    CHECK(e.out.find("node 0 'dilated' (Conv): dilations (2, 2)") != std::string::npos);
  }
  SECTION("a file that is not a model, and bad flags") {
    std::ofstream(d.path / "bad.onnx") << "not a protobuf at all";
    CHECK(emit(d.path / "bad.onnx", d.path / "m.hpp").out.find("bad.onnx: not an ONNX model") !=
          std::string::npos);
    CHECK(shell(std::string(METAGRAD_ONNX_TOOL) + " x.onnx -o m.hpp").out.find("--emit=cpp") !=
          std::string::npos);
  }
}
