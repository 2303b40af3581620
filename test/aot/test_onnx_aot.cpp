// metagrad-aot: ONNX models compiled to C by the command, built by the system C compiler into a shared
// object, run on the backend tests' inputs and on random ones, and compared with the expected outputs
// and with the imported model on the CPU device. The C run allocates nothing (malloc is counted here).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "metagrad/onnx.hpp"
#include "onnx_builder.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
namespace mo = metagrad::onnx;
using test::attr_i;
using test::Builder;

#include "count_mallocs.hpp"  // malloc counted while `counting` (COUNTS_MALLOC where it is)

namespace {

const fs::path kData = "/usr/share/libonnx-testdata/data";

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("metagrad_onnx_aot_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Runs a command; its status, and what it printed in `out`.
int run(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string tool(const fs::path& model, const fs::path& dir, const std::string& name, const std::string& more,
                 int& status) {
  std::string out;
  status = run(std::string(METAGRAD_AOT_TOOL) + " '" + model.string() + "' -o '" + dir.string() + "' -n " +
                   name + " " + more,
               out);
  return out;
}

// The compiled model: NAME_run from DIR/libNAME.so, built from DIR/NAME.c as CMake builds it (-O3,
// for this machine).
struct CLibrary {
  void* so = nullptr;
  void* fn = nullptr;
  CLibrary(const fs::path& dir, const std::string& name) {
    fs::path lib = dir / ("lib" + name + ".so");
    std::string out, cc = std::string(METAGRAD_AOT_CC) +
                          " -O3 -march=native -fno-math-errno -fopenmp-simd -shared -fPIC -o '" +
                          lib.string() + "' '" + (dir / (name + ".c")).string() + "' -lm -pthread";
    INFO(cc << "\n" << out);
    REQUIRE(run(cc, out) == 0);
    so = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(so != nullptr);
    fn = ::dlsym(so, (name + "_run").c_str());
    REQUIRE(fn != nullptr);
  }
  ~CLibrary() {
    if (so) ::dlclose(so);
  }
  // One call on these arrays (inputs, then outputs): every parameter is a pointer. Its status.
  int operator()(const std::vector<void*>& a) const {
    using P = void*;
    switch (a.size()) {
      case 2:
        return reinterpret_cast<int (*)(P, P)>(fn)(a[0], a[1]);
      case 3:
        return reinterpret_cast<int (*)(P, P, P)>(fn)(a[0], a[1], a[2]);
      case 4:
        return reinterpret_cast<int (*)(P, P, P, P)>(fn)(a[0], a[1], a[2], a[3]);
      default:
        FAIL("a test model with " << a.size() << " arrays");
    }
    return -1;
  }
};

// Runs the compiled model on `in` (float32 or int64; counting its allocations) and returns its float
// outputs, shaped as `like`; `status` is what it returned, expected 0 unless given.
std::vector<Tensor> call(const CLibrary& c, const std::vector<Tensor>& in, const std::vector<Tensor>& like,
                         int status = 0) {
  std::vector<std::vector<float>> host;
  std::vector<std::vector<std::int64_t>> ints;
  std::vector<void*> args;
  for (const auto& t : in)
    if (t.dtype() == dtypes::int64) {
      args.push_back(ints.emplace_back(t.to_vector<std::int64_t>()).data());
    } else {
      args.push_back(host.emplace_back(t.to_vector<float>()).data());
    }
  std::size_t outs = host.size();
  for (const auto& t : like) host.emplace_back(static_cast<std::size_t>(t.numel()), -7.f);
  for (std::size_t k = 0; k < like.size(); ++k) args.push_back(host[outs + k].data());
#ifdef COUNTS_MALLOC
  mallocs = 0, counting = true;  // first, that the count sees a malloc
  void* volatile probe = std::malloc(8);
  counting = false;
  std::free(probe);
  REQUIRE(mallocs == 1);
  mallocs = 0, counting = true;
#endif
  CHECK(c(args) == status);
#ifdef COUNTS_MALLOC
  counting = false;
  CHECK(mallocs == 0);
#endif
  std::vector<Tensor> out;
  for (std::size_t k = 0; k < like.size(); ++k)
    out.emplace_back(host[outs + k], like[k].shape(), TensorOptions{.device = "CPU"});
  return out;
}

void check_close(const Tensor& got, const Tensor& want, double atol, double rtol) {
  REQUIRE(got.shape() == want.shape());
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << " of " << to_string(want.shape()));
    REQUIRE(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]));
  }
}

std::vector<Tensor> read_set(const fs::path& dir, const std::string& prefix) {
  std::vector<Tensor> out;
  for (int k = 0; fs::exists(dir / (prefix + "_" + std::to_string(k) + ".pb")); ++k)
    out.push_back(mo::read_tensor((dir / (prefix + "_" + std::to_string(k) + ".pb")).string()).to("CPU"));
  return out;
}

// n weights from N(0, sd), a seeded sequence.
struct Normal {
  std::mt19937 rng;
  std::normal_distribution<double> nd;
  Normal(unsigned seed, double sd) : rng(seed), nd(0, sd) {}
  std::vector<double> operator()(std::size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
  }
};

// Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax on a symbolic batch, random weights.
Builder conv_net() {
  Normal random(7, 0.3);
  Builder b;
  b.input("image", {"batch", 3, 8, 8});
  b.init_f32("w1", {8, 3, 3, 3}, random(8 * 27)).init_f32("b1", {8}, random(8));
  b.init_f32("w2", {10, 128}, random(1280)).init_f32("b2", {10}, random(10));  // 5 kB: into the .bin
  auto* conv = b.node("Conv", {"image", "w1", "b1"}, {"c"}, "conv");
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(::onnx::AttributeProto::INTS);
  for (int k = 0; k < 4; ++k) pads->add_ints(1);
  b.node("Relu", {"c"}, {"r"});
  auto* pool = b.node("MaxPool", {"r"}, {"p"}, "pool");
  auto* ks = pool->add_attribute();
  ks->set_name("kernel_shape");
  ks->set_type(::onnx::AttributeProto::INTS);
  ks->add_ints(2), ks->add_ints(2);
  auto* st = pool->add_attribute();
  st->set_name("strides");
  st->set_type(::onnx::AttributeProto::INTS);
  st->add_ints(2), st->add_ints(2);
  b.node("Flatten", {"p"}, {"f"});
  auto* gemm = b.node("Gemm", {"f", "w2", "b2"}, {"g"}, "fc");
  attr_i(gemm, "transB", 1);
  b.node("Softmax", {"g"}, {"probs.out"});
  b.output("probs.out");
  return b;
}

// An embedding and a head, a GPT's ends: Gather(wte, tokens) on axis 0 (rows of 8) and Gather(head,
// tokens) on axis 1 (single elements of its 8 rows), token ids from the input, a symbolic sequence.
Builder token_net() {
  Normal random(5, 1);
  Builder b;
  b.input("tokens", {1, "seq"}, ::onnx::TensorProto::INT64);
  b.init_f32("wte", {11, 8}, random(88)).init_f32("head", {8, 11}, random(88));
  b.node("Gather", {"wte", "tokens"}, {"x"}, "wte_gather");
  b.node("MatMul", {"x", "head"}, {"logits"});
  attr_i(b.node("Gather", {"head", "tokens"}, {"cols"}, "head_gather"), "axis", 1);
  b.output("logits").output("cols");
  return b;
}

}  // namespace

TEST_CASE("onnx aot: a gather of an input's token ids is an indexed load that checks its indices",
          "[onnx_aot]") {
  fs::path dir = temp_dir("tokens");
  fs::path model = dir / "tokens.onnx";
  std::ofstream(model, std::ios::binary) << token_net().bytes();
  mo::Model m = mo::load(model.string());
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int64_t> tok(-11, 10);  // negative: counted from the end (ONNX)
  for (std::int64_t seq : {1, 64}) {
    INFO("sequence " << seq);
    fs::path out = dir / std::to_string(seq);
    int status = 0;
    std::string said = tool(model, out, "tokens", "--input tokens=1x" + std::to_string(seq), status);
    INFO(said);
    REQUIRE(status == 0);
    CLibrary c(out, "tokens");
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<std::int64_t> ids(static_cast<std::size_t>(seq));
      for (auto& t : ids) t = tok(rng);
      Tensor tokens(ids, {1, seq}, {.device = "CPU"});
      std::string was = Device::DEFAULT;
      Device::DEFAULT = "CPU";
      std::vector<Tensor> want = m({tokens});
      Device::DEFAULT = was;
      for (auto& w : want) w = w.to("CPU");
      auto got = call(c, {tokens}, want);
      for (std::size_t k = 0; k < got.size(); ++k) check_close(got[k], want[k], 1e-6, 1e-5);
    }
    // out of range either way: the call says so and reads nothing (ASan would see a wild read); the
    // import reads the indices when it runs, and throws then
    for (std::int64_t bad : {std::int64_t{11}, std::int64_t{-12}, std::int64_t{1} << 40}) {
      INFO("token " << bad);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(seq), 3);
      ids.back() = bad;
      std::string was = Device::DEFAULT;
      Device::DEFAULT = "CPU";
      std::vector<Tensor> lazy = m({Tensor(ids, {1, seq}, {.device = "CPU"})});
      CHECK_THROWS_WITH(lazy[0].realize(), Contains("out of range") && Contains("indexed_load"));
      Device::DEFAULT = was;
      call(c, {Tensor(ids, {1, seq}, {.device = "CPU"})},
           {Tensor::empty({1, seq, 11}, {.device = "CPU"}), Tensor::empty({8, 1, seq}, {.device = "CPU"})},
           1);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("onnx aot: backend test models compiled to C match their expected outputs", "[onnx_aot]") {
  for (const char* test : {"pytorch-converted/test_Conv2d_groups", "pytorch-converted/test_BatchNorm2d_eval",
                           "pytorch-operator/test_operator_addmm"}) {
    fs::path dir = kData / test;
    if (!fs::exists(dir / "model.onnx")) {
      WARN("skipped: no ONNX backend test data at " << dir);
      continue;
    }
    INFO(test);
    fs::path out = temp_dir("backend");
    int status = 0;
    std::string said = tool(dir / "model.onnx", out, "model", "", status);
    INFO(said);
    REQUIRE(status == 0);
    CLibrary c(out, "model");
    auto in = read_set(dir / "test_data_set_0", "input"), want = read_set(dir / "test_data_set_0", "output");
    auto got = call(c, in, want);
    REQUIRE(got.size() == want.size());
    mo::Model m = mo::load((dir / "model.onnx").string());
    std::vector<Tensor> on_cpu;
    {
      std::string was = Device::DEFAULT;
      Device::DEFAULT = "CPU";
      on_cpu = m(in);
      Device::DEFAULT = was;
    }
    for (std::size_t k = 0; k < got.size(); ++k) {
      check_close(got[k], want[k], 1e-5, 1e-3);  // ONNX's own tolerance
      check_close(got[k], on_cpu[k].to("CPU"), 1e-5, 1e-4);
    }
    fs::remove_all(out);
  }
}

TEST_CASE("onnx aot: a conv net built here, its weights in the .bin or in the C, matches the import",
          "[onnx_aot]") {
  fs::path dir = temp_dir("convnet");
  fs::path model = dir / "conv net.onnx";
  std::ofstream(model, std::ios::binary) << conv_net().bytes();
  mo::Model m = mo::load(model.string());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(2 * 3 * 8 * 8);
  for (auto& v : x) v = u(rng);
  Tensor image(x, {2, 3, 8, 8}, {.device = "CPU"});
  std::string was = Device::DEFAULT;
  Device::DEFAULT = "CPU";
  Tensor want = m({image})[0].to("CPU");
  Device::DEFAULT = was;
  for (const char* constants : {"bin", "c"}) {
    INFO("--constants=" << constants);
    fs::path out = dir / constants;
    int status = 0;
    std::string said =
        tool(model, out, "convnet", std::string("--input image=2x3x8x8 --constants=") + constants, status);
    INFO(said);
    REQUIRE(status == 0);
    std::ifstream h(out / "convnet.h");
    std::string header((std::istreambuf_iterator<char>(h)), {});
    CHECK_THAT(header, Contains("int convnet_run(const float* image, float* probs_out);"));
    CHECK_THAT(header, Contains("probs_out is 'probs.out'") && !Contains("image is"));
    CHECK_THAT(header, Contains("#define convnet_run_image_SHAPE {2, 3, 8, 8}"));
    CHECK_THAT(header, Contains("#define convnet_run_probs_out_SIZE 20"));
    bool bin = std::string(constants) == "bin";
    // the 1280 weights of the Gemm: 5120 bytes in the .bin, or their text in the C
    CHECK((bin ? fs::file_size(out / "convnet.bin") >= 5120 : !fs::exists(out / "convnet.bin")));
    CLibrary c(out, "convnet");
    check_close(call(c, {image}, {want})[0], want, 1e-6, 1e-4);
  }
  fs::remove_all(dir);
}

TEST_CASE("onnx aot: what cannot be compiled is an error naming the input or the node", "[onnx_aot]") {
  fs::path dir = temp_dir("errors");
  fs::path model = dir / "net.onnx";
  std::ofstream(model, std::ios::binary) << conv_net().bytes();
  int status = 0;
  std::string said = tool(model, dir / "out", "net", "", status);
  CHECK(status == 1);
  CHECK_THAT(said, Contains("input 'image'") && Contains("dimension 0") && Contains("--input image="));
  said = tool(model, dir / "out", "net", "--input images=2x3x8x8", status);
  CHECK(status == 1);
  CHECK_THAT(said, Contains("--input images") && Contains("no such input") && Contains("image"));
  said = tool(model, dir / "out", "net", "--input image=2x3x9x8", status);
  CHECK(status == 1);
  CHECK_THAT(said, Contains("--input image") && Contains("[batch, 3, 8, 8]"));
  said = tool(model, dir / "out", "net", "--input image=2x3x8x", status);
  CHECK(status == 1);
  CHECK_THAT(said, Contains("a size is missing"));

  // NonZero's output shape is the count of its input's nonzero elements: known only when it runs.
  Builder b;
  b.input("x", {4});
  b.node("NonZero", {"x"}, {"nz"}, "where_nonzero");
  b.output("nz", ::onnx::TensorProto::INT64);
  std::ofstream(dir / "nz.onnx", std::ios::binary) << b.bytes();
  said = tool(dir / "nz.onnx", dir / "out", "nz", "", status);
  CHECK(status == 1);
  CHECK_THAT(said, Contains("node 0 'where_nonzero' (NonZero)") && Contains("values of input 'x'"));
  fs::remove_all(dir);
}
