// metagrad::onnx (its own program, metagrad_onnx_tests): models built here as ModelProtos test the API
// and the error paths; the ONNX project's backend tests (Debian's libonnx-testdata) are run by
// [.onnx_backend] cases, one per set, each failing below the pass rate that ctest gives it.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <unistd.h>
#include <catch2/catch.hpp>

#include "device_scope.hpp"
#include "metagrad/metagrad.hpp"
#include "metagrad/onnx.hpp"
#include "onnx_builder.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using metagrad::test::attr_f;
using metagrad::test::attr_i;
using metagrad::test::attr_s;
using metagrad::test::attr_strings;
using metagrad::test::Builder;
using metagrad::test::i64;
namespace mo = metagrad::onnx;

namespace {

Tensor f32(const std::vector<double>& v, const Dims& shape) {
  return Tensor(v, shape, {.dtype = dtypes::float32});
}

std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const mo::Error& e) { return e.what(); }
  return "(no error)";
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("metagrad_onnx_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST_CASE("onnx: a model built in code reports its inputs and runs on the default device", "[onnx]") {
  Builder b;
  b.input("x", {std::string("batch"), 3}).input("y", {1, 3}).output("z");
  b.node("Add", {"x", "y"}, {"s"}, "add");
  b.node("Relu", {"s"}, {"z"}, "relu");
  mo::Model m = b.parse();
  REQUIRE(m.input_names() == std::vector<std::string>{"x", "y"});
  REQUIRE(m.output_names() == std::vector<std::string>{"z"});
  REQUIRE(std::get<std::string>(m.input_shapes()[0][0]) == "batch");
  REQUIRE(std::get<i64>(m.input_shapes()[0][1]) == 3);
  REQUIRE(m.input_dtypes()[1] == dtypes::float32);
  REQUIRE(m.opset() == 17);
  for (i64 batch : {1, 4}) {  // the symbolic dimension takes each call's size
    auto xv = test::random_floats(static_cast<std::size_t>(batch * 3), 1), yv = test::random_floats(3, 2);
    auto out = m({f32(xv, {batch, 3}), f32(yv, {1, 3})});
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].device() == Device::DEFAULT);
    REQUIRE(out[0].shape() == Dims{batch, 3});
    auto z = out[0].to_vector<float>();
    for (std::size_t k = 0; k < z.size(); ++k)
      REQUIRE(z[k] == std::max(0.0f, static_cast<float>(xv[k] + yv[k % 3])));
  }
}

TEST_CASE("onnx: unsupported operators and attribute values fail at load, naming the node", "[onnx]") {
  {
    Builder b;
    b.input("x", {2}).output("y");
    b.node("Relu", {"x"}, {"r"}, "first");
    b.node("FancyOp", {"r"}, {"y"}, "second");
    REQUIRE_THAT(message([&] { b.parse(); }),
                 Contains("built.onnx: node 1 'second' (FancyOp): the operator FancyOp is not supported"));
  }
  {
    Builder b;
    b.input("x", {1, 1, 2, 2}).input("s", {4}).output("y");
    attr_s(b.node("Resize", {"x", "", "s"}, {"y"}, "up"), "mode", "bogus");
    REQUIRE_THAT(message([&] { b.parse(); }),
                 Contains("node 0 'up' (Resize): mode 'bogus' is not supported"));
  }
  {
    Builder b;
    b.input("x", {2, 2}).output("y");
    attr_f(b.node("Softmax", {"x"}, {"y"}, "sm"), "axis", 1.0f);  // an INT attribute given as FLOAT
    REQUIRE_THAT(message([&] { b.parse(); }),
                 Contains("node 0 'sm' (Softmax): attribute 'axis' must be INT, it is FLOAT"));
  }
  {
    Builder b;
    b.input("x", {2}).output("y");
    b.node("Relu", {"nowhere"}, {"y"}, "r");
    REQUIRE_THAT(message([&] { b.parse(); }), Contains("its input 'nowhere' is computed by no earlier node"));
  }
  {
    Builder b;
    b.input("x", {2}).output("y");
    b.node("Relu", {"x"}, {"y"})->set_domain("com.microsoft");
    REQUIRE_THAT(message([&] { b.parse(); }),
                 Contains("the operator domain 'com.microsoft' is not supported"));
  }
}

TEST_CASE("onnx: window attributes and inputs that contradict each other are errors naming the node",
          "[onnx]") {
  auto ints = [](::onnx::NodeProto* n, const std::string& name, const std::vector<i64>& v) {
    auto* a = n->add_attribute();
    a->set_name(name), a->set_type(::onnx::AttributeProto::INTS);
    for (i64 x : v) a->add_ints(x);
  };
  {  // Indices with explicit asymmetric pads: at load
    Builder b;
    b.input("x", {1, 1, 4, 4}).output("y").output("i", ::onnx::TensorProto::INT64);
    auto* n = b.node("MaxPool", {"x"}, {"y", "i"}, "pool");
    ints(n, "kernel_shape", {2, 2}), ints(n, "pads", {0, 0, 1, 1});
    REQUIRE_THAT(
        message([&] { b.parse(); }),
        Contains("node 0 'pool' (MaxPool): the Indices output with asymmetric pads is not supported"));
  }
  {  // the same pads without Indices load and run
    Builder b;
    b.input("x", {1, 1, 4, 4}).output("y");
    auto* n = b.node("MaxPool", {"x"}, {"y"}, "pool");
    ints(n, "kernel_shape", {2, 2}), ints(n, "pads", {0, 0, 1, 1});
    REQUIRE(b.parse()({Tensor::ones({1, 1, 4, 4})})[0].shape() == Dims{1, 1, 4, 4});
  }
  {  // strides of the wrong length, a zero stride, negative pads: at load
    for (auto [attr, v, why] : {std::tuple<const char*, std::vector<i64>, const char*>{
                                    "strides", {1, 1, 1}, "strides has 3 entries for 2"},
                                {"strides", {1, 0}, "strides holds 0 (each must be >= 1)"},
                                {"pads", {0, -1, 0, 0}, "pads holds -1 (each must be >= 0)"}}) {
      Builder b;
      b.input("x", {1, 1, 4, 4}).output("y");
      b.init_f32("w", {1, 1, 2, 2}, {1, 1, 1, 1});
      auto* n = b.node("Conv", {"x", "w"}, {"y"}, "conv");
      ints(n, "kernel_shape", {2, 2}), ints(n, attr, v);
      REQUIRE_THAT(message([&] { b.parse(); }), Contains("node 0 'conv' (Conv): ") && Contains(why));
    }
  }
  {  // an input of rank 2 (its shape undeclared): at the call, naming the node and the shape
    Builder b;
    b.input("x", {std::string("a"), std::string("b")}).output("y");
    b.init_f32("w", {1, 1, 2, 2}, {1, 1, 1, 1});
    b.node("Conv", {"x", "w"}, {"y"}, "conv");
    REQUIRE_THAT(message([&] {
                   b.parse()({Tensor::ones({4, 4})});
                 }),
                 Contains("node 0 'conv' (Conv): the input (4, 4) must be (N, C, spatial...)"));
  }
}

TEST_CASE("onnx: a truncated or missing file is an error naming the file", "[onnx]") {
  Builder b;
  b.input("x", {2}).output("y");
  b.node("Relu", {"x"}, {"y"});
  b.init_i64("unused", std::vector<i64>(64, 7));
  fs::path dir = temp_dir("truncated");
  std::string bytes = b.bytes();
  std::string path = (dir / "cut.onnx").string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  REQUIRE_THAT(message([&] { mo::load(path); }), Contains(path + ": not a valid ONNX model"));
  REQUIRE_THAT(message([&] { mo::load((dir / "absent.onnx").string()); }),
               Contains("absent.onnx: cannot open"));
  REQUIRE_THAT(message([&] { mo::read_tensor((dir / "absent.pb").string()); }),
               Contains("absent.pb: cannot open"));
  fs::remove_all(dir);
}

TEST_CASE("onnx: corrupted model bytes load and run or fail with onnx::Error, never otherwise", "[onnx]") {
  Builder b(13);
  b.input("x", {2, 3}).output("y");
  b.init_f32("w", {3, 2}, test::random_floats(6, 3)).init_i64("shape", {6});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Reshape", {"m", "shape"}, {"r"});
  attr_i(b.node("Softmax", {"r"}, {"y"}), "axis", 0);
  std::string good = b.bytes();
  std::mt19937 gen(11);
  int loaded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    for (int k = 0; k < 1 + trial % 3; ++k) bad[gen() % bad.size()] = static_cast<char>(gen() % 256);
    try {
      mo::Model m = mo::parse(bad, "bad.onnx");
      ++loaded;
      if (m.input_names().size() == 1 && m.input_dtypes()[0] == dtypes::float32) m({Tensor::ones({2, 3})});
    } catch (const mo::Error& e) { REQUIRE_THAT(e.what(), Contains("bad.onnx")); }
  }
  REQUIRE(loaded > 0);  // some mutations leave a valid model (a weight's value, a name)
}

TEST_CASE("onnx: inputs of the wrong count, dtype or shape are errors naming the input", "[onnx]") {
  Builder b;
  b.input("x", {std::string("n"), 3}).output("y");
  b.node("Relu", {"x"}, {"y"});
  mo::Model m = b.parse();
  REQUIRE_THAT(message([&] { m({}); }), Contains("built.onnx: the model takes 1 inputs, 0 were given"));
  REQUIRE_THAT(message([&] {
                 m({Tensor::ones({2, 3}, {.dtype = dtypes::int32})});
               }),
               Contains("input 'x' must be float32, it is int32"));
  REQUIRE_THAT(message([&] {
                 m({Tensor::ones({2, 4})});
               }),
               Contains("input 'x' must have shape (n, 3), it has (2, 4)"));
  REQUIRE_THAT(message([&] { m({Tensor::ones({3})}); }),
               Contains("input 'x' must have shape (n, 3), it has (3,)"));
  // A node that fails while running names itself.
  Builder r;
  r.input("x", {4}).input("s", {2}, ::onnx::TensorProto::INT64).output("y");
  r.node("Reshape", {"x", "s"}, {"y"}, "rs");
  REQUIRE_THAT(message([&] {
                 r.parse()({Tensor::ones({4}), Tensor(std::vector<i64>{3, 3}, {2})});
               }),
               Contains("node 0 'rs' (Reshape): Reshape: cannot reshape (4,) to (3, 3)"));
}

TEST_CASE("onnx: shape arithmetic folds on the host, so a dynamic reshape runs under TinyJit", "[onnx]") {
  // y = reshape(x, concat(shape(x)[0], [-1])): the flatten an exporter writes.
  Builder b(13);
  b.input("x", {std::string("batch"), 2, 3}).output("y");
  b.init_i64("zero", {0}).init_i64("minus1", {-1});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"n"});
  attr_i(b.node("Concat", {"n", "minus1"}, {"target"}), "axis", 0);
  b.node("Reshape", {"x", "target"}, {"r"});
  b.node("Relu", {"r"}, {"y"});
  mo::Model m = b.parse();
  for (i64 batch : {2, 5}) {
    auto v = test::random_floats(static_cast<std::size_t>(batch * 6), 3);
    auto y = m({f32(v, {batch, 2, 3})});
    REQUIRE(y[0].shape() == Dims{batch, 6});
    auto got = y[0].to_vector<float>();
    for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == std::max(0.0f, static_cast<float>(v[k])));
  }
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  TinyJit jit([&](const Tensor& x) { return m({x}); });
  for (unsigned call = 0; call < 4; ++call) {
    auto v = test::random_floats(12, 10 + call);
    Tensor x = f32(v, {2, 2, 3}).realize();
    auto got = jit(x)[0].to_vector<float>();
    for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == std::max(0.0f, static_cast<float>(v[k])));
  }
  REQUIRE(jit.captured() != nullptr);
}

TEST_CASE("onnx: a convolutional model's TinyJit replays agree with plain calls on CPU", "[onnx]") {
  // Conv (padded) -> Relu -> GlobalAveragePool -> Flatten -> Gemm, weights as initializers.
  Builder b(13);
  b.input("x", {std::string("batch"), 1, 6, 6}).output("y");
  b.init_f32("w", {2, 1, 3, 3}, test::random_floats(18, 1)).init_f32("bias", {2}, {0.5, -0.25});
  b.init_f32("w2", {2, 3}, test::random_floats(6, 2)).init_f32("b2", {3}, {0.1, 0.2, 0.3});
  auto* conv = b.node("Conv", {"x", "w", "bias"}, {"c"}, "conv");
  auto* pads = conv->add_attribute();
  pads->set_name("pads"), pads->set_type(::onnx::AttributeProto::INTS);
  for (int k = 0; k < 4; ++k) pads->add_ints(1);
  b.node("Relu", {"c"}, {"r"});
  b.node("GlobalAveragePool", {"r"}, {"p"});
  b.node("Flatten", {"p"}, {"f"});
  b.node("Gemm", {"f", "w2", "b2"}, {"y"});
  mo::Model m = b.parse();
  std::vector<std::vector<double>> inputs;
  std::vector<std::vector<float>> want;
  {
    test::DeviceScope cpu("CPU");
    for (unsigned call = 0; call < 4; ++call) {
      inputs.push_back(test::random_floats(72, 20 + call));
      want.push_back(m({f32(inputs.back(), {2, 1, 6, 6})})[0].to_vector<float>());
    }
  }
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  TinyJit jit([&](const Tensor& x) { return m({x}); });
  for (unsigned call = 0; call < 4; ++call) {
    Tensor x = f32(inputs[call], {2, 1, 6, 6}).realize();
    auto got = jit(x)[0].to_vector<float>();
    REQUIRE(got.size() == 6);
    for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == Approx(want[call][k]).margin(1e-5));
  }
  REQUIRE(jit.captured() != nullptr);
  REQUIRE(!jit.captured()->kernels.empty());
}

TEST_CASE("onnx: a GPT-style embedding (Gather by tokens and by Range) replays under TinyJit", "[onnx]") {
  // y = relu((wte[tokens] + wpe[range(T-1, -1, -1)]) @ w1) @ w2: the GPT export's first nodes. Under TinyJit
  // the memory plan lends the positions' small index buffer a larger scratch buffer; the Gather reads only
  // its first T elements.
  const i64 vocab = 16, width = 8, t = 4;
  Builder b(14);
  b.input("tokens", {1, std::string("T")}, ::onnx::TensorProto::INT64).output("y");
  b.init_f32("wte", {vocab, width}, test::random_floats(vocab * width, 5));
  b.init_f32("wpe", {t, width}, test::random_floats(t * width, 6));
  b.init_f32("w1", {width, 4 * width}, test::random_floats(4 * width * width, 7));
  b.init_f32("w2", {4 * width, width}, test::random_floats(4 * width * width, 8));
  b.init_i64("one", {1}).init_i64("zero", {0}).init_i64("minus1", {-1});
  b.node("Shape", {"tokens"}, {"s"});
  b.node("Gather", {"s", "one"}, {"n1"});
  b.node("Sub", {"n1", "one"}, {"last1"});
  b.node("Squeeze", {"last1", "zero"}, {"start"});
  b.node("Squeeze", {"minus1", "zero"}, {"delta"});
  // Positions T-1 ... 0: not a consecutive run, so a gather (consecutive ones are a slice).
  b.node("Range", {"start", "delta", "delta"}, {"pos"});
  b.node("Gather", {"wte", "tokens"}, {"te"});
  b.node("Gather", {"wpe", "pos"}, {"pe"});
  b.node("Add", {"te", "pe"}, {"x"});
  b.node("MatMul", {"x", "w1"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("MatMul", {"r", "w2"}, {"y"});
  mo::Model m = b.parse();
  std::vector<std::vector<i64>> tokens;
  std::vector<std::vector<float>> want;
  std::mt19937 gen(3);
  {
    test::DeviceScope cpu("CPU");
    for (int call = 0; call < 4; ++call) {
      tokens.emplace_back();
      for (i64 k = 0; k < t; ++k) tokens.back().push_back(static_cast<i64>(gen() % vocab));
      want.push_back(m({Tensor(tokens.back(), {1, t})})[0].to_vector<float>());
    }
  }
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  TinyJit jit([&](const Tensor& x) { return m({x}); });
  for (std::size_t call = 0; call < 4; ++call) {
    auto got = jit(Tensor(tokens[call], {1, t}).realize())[0].to_vector<float>();
    REQUIRE(got.size() == static_cast<std::size_t>(t * width));
    for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == Approx(want[call][k]).margin(1e-4));
  }
  REQUIRE(jit.captured() != nullptr);
}

TEST_CASE("onnx: Gemm with transB agrees with a float64 reference, B constant or an input", "[onnx]") {
  // y = x @ W^T + b with W an initializer (transposed once and kept) and z = x @ V^T with V an input
  // (a new value each call: nothing may be kept), plain and under TinyJit.
  const i64 m = 3, k = 5, n = 4;
  auto w = test::random_floats(n * k, 31), bias = test::random_floats(n, 32);
  Builder b(13);
  b.input("x", {m, k}).input("v", {n, k}).output("y").output("z");
  b.init_f32("w", {n, k}, w).init_f32("b", {n}, bias);
  attr_i(b.node("Gemm", {"x", "w", "b"}, {"y"}), "transB", 1);
  attr_i(b.node("Gemm", {"x", "v"}, {"z"}), "transB", 1);
  mo::Model model = b.parse();
  auto reference = [&](const std::vector<double>& x, const std::vector<double>& bt,
                       const std::vector<double>* c) {
    std::vector<double> out(static_cast<std::size_t>(m * n));
    for (i64 i = 0; i < m; ++i)
      for (i64 j = 0; j < n; ++j) {
        double acc = c ? (*c)[static_cast<std::size_t>(j)] : 0.0;
        for (i64 q = 0; q < k; ++q)
          acc += static_cast<double>(static_cast<float>(x[static_cast<std::size_t>(i * k + q)])) *
                 static_cast<float>(bt[static_cast<std::size_t>(j * k + q)]);
        out[static_cast<std::size_t>(i * n + j)] = acc;
      }
    return out;
  };
  auto check = [&](const std::function<std::vector<Tensor>(const Tensor&, const Tensor&)>& f) {
    for (unsigned call = 0; call < 4; ++call) {
      auto x = test::random_floats(static_cast<std::size_t>(m * k), 40 + call);
      auto v = test::random_floats(static_cast<std::size_t>(n * k), 50 + call);
      auto outs = f(f32(x, {m, k}).realize(), f32(v, {n, k}).realize());
      auto y = outs[0].to_vector<float>(), z = outs[1].to_vector<float>();
      auto wy = reference(x, w, &bias), wz = reference(x, v, nullptr);
      for (std::size_t q = 0; q < y.size(); ++q) {
        REQUIRE(y[q] == Approx(wy[q]).margin(1e-5));
        REQUIRE(z[q] == Approx(wz[q]).margin(1e-5));
      }
    }
  };
  check([&](const Tensor& x, const Tensor& v) { return model({x, v}); });
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  TinyJit jit([&](const Tensor& x, const Tensor& v) { return model({x, v}); });
  check([&](const Tensor& x, const Tensor& v) { return jit(x, v); });
  REQUIRE(jit.captured() != nullptr);
}

TEST_CASE("onnx: If and Loop run subgraphs that read the outer scope", "[onnx]") {
  // r = relu(x); n = -r (r's last explicit reader); y = If(c, then: r + 1, else: n);
  // z = Loop(3 trips, carried acc = n: acc + r). The branches read r, which must stay alive.
  Builder b(13);
  b.input("x", {3}).input("c", {}, ::onnx::TensorProto::BOOL).output("y").output("z");
  b.init_i64("trips", {3});
  b.g->mutable_initializer(0)->clear_dims();  // a scalar trip count
  b.node("Relu", {"x"}, {"r"});
  b.node("Neg", {"r"}, {"n"});
  auto branch = [](const std::string& name, const std::string& op, const std::vector<std::string>& in) {
    ::onnx::AttributeProto a;
    a.set_name(name), a.set_type(::onnx::AttributeProto::GRAPH);
    auto* g = a.mutable_g();
    auto* node = g->add_node();
    node->set_op_type(op);
    for (const auto& i : in) node->add_input(i);
    node->add_output(name + "_out");
    g->add_output()->set_name(name + "_out");
    return a;
  };
  auto* one = b.g->add_initializer();
  one->set_name("one"), one->set_data_type(::onnx::TensorProto::FLOAT), one->add_float_data(1);
  auto* iff = b.node("If", {"c"}, {"y"}, "if");
  *iff->add_attribute() = branch("then_branch", "Add", {"r", "one"});
  *iff->add_attribute() = branch("else_branch", "Identity", {"n"});
  auto* loop = b.node("Loop", {"trips", "", "n"}, {"z"}, "loop");
  ::onnx::AttributeProto body;
  body.set_name("body"), body.set_type(::onnx::AttributeProto::GRAPH);
  auto* g = body.mutable_g();
  for (const char* in : {"i", "cond", "acc"}) g->add_input()->set_name(in);
  auto* add = g->add_node();
  add->set_op_type("Add"), add->add_input("acc"), add->add_input("r"), add->add_output("acc_next");
  auto* keep = g->add_node();
  keep->set_op_type("Identity"), keep->add_input("cond"), keep->add_output("cond_next");
  g->add_output()->set_name("cond_next"), g->add_output()->set_name("acc_next");
  *loop->add_attribute() = body;
  mo::Model m = b.parse();
  std::vector<double> xv{-1, 2, 3};
  for (bool c : {true, false}) {
    auto out = m({f32(xv, {3}), Tensor(std::vector<bool>{c}, Dims{})});
    auto y = out[0].to_vector<float>(), z = out[1].to_vector<float>();
    for (std::size_t k = 0; k < 3; ++k) {
      double r = std::max(0.0, xv[k]);
      REQUIRE(y[k] == static_cast<float>(c ? r + 1 : -r));
      REQUIRE(z[k] == static_cast<float>(-r + 3 * r));
    }
  }
  // A branch that reads a name no scope defines fails at load, naming the subgraph.
  *iff->mutable_attribute(0) = branch("then_branch", "Relu", {"nowhere"});
  REQUIRE_THAT(message([&] { b.parse(); }),
               Contains("node 2 'if' (If): subgraph 'then_branch': node 0 '' (Relu): its input 'nowhere'"));
}

TEST_CASE("onnx: initializers from raw_data and from an external data file", "[onnx]") {
  fs::path dir = temp_dir("external");
  std::vector<float> w{1.5f, -2, 3, 0.25f}, e{10, 20, 30, 40};
  {
    std::ofstream f(dir / "weights.bin", std::ios::binary);
    f.write("pad!", 4);  // the data starts at an offset
    f.write(reinterpret_cast<const char*>(e.data()), 16);
  }
  Builder b;
  b.input("x", {4}).output("y");
  auto* t = b.g->add_initializer();
  t->set_name("w"), t->set_data_type(::onnx::TensorProto::FLOAT), t->add_dims(4);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(w.data()), 16));
  auto* x = b.g->add_initializer();
  x->set_name("ext"), x->set_data_type(::onnx::TensorProto::FLOAT), x->add_dims(4);
  x->set_data_location(::onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair{"location", "weights.bin"}, {"offset", "4"}, {"length", "16"}}) {
    auto* kv = x->add_external_data();
    kv->set_key(k), kv->set_value(v);
  }
  b.node("Mul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "ext"}, {"y"});
  std::string path = (dir / "model.onnx").string();
  std::ofstream(path, std::ios::binary) << b.bytes();
  auto y = mo::load(path)({f32({1, 2, 3, 4}, {4})})[0].to_vector<float>();
  REQUIRE(y == std::vector<float>{11.5f, 16, 39, 41});
  x->mutable_external_data(1)->set_value("8");  // past the file's end
  std::ofstream(path, std::ios::binary) << b.bytes();
  REQUIRE_THAT(message([&] { mo::load(path); }),
               Contains("initializer: tensor 'ext': its external data file"));
  fs::remove_all(dir);
}

TEST_CASE("onnx: Slice agrees on the host path and the Tensor path for random bounds", "[onnx]") {
  // The same node with its bounds as initializers and x a host constant, or x a graph input:
  // both must give numpy's slice.
  std::mt19937 gen(7);
  std::uniform_int_distribution<i64> pos(-8, 8), stepd(-3, 3);
  for (int trial = 0; trial < 40; ++trial) {
    i64 n = 6, s = pos(gen), e = pos(gen), st = stepd(gen);
    if (st == 0) st = 1;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (i64 k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = static_cast<double>(k * 10 + 1);
    // The reference: ONNX's clamping, then the walk.
    i64 a = s < 0 ? s + n : s, z = e < 0 ? e + n : e;
    std::vector<float> want;
    if (st > 0) {
      a = std::clamp<i64>(a, 0, n), z = std::clamp<i64>(z, 0, n);
      for (i64 k = a; k < z; k += st) want.push_back(static_cast<float>(v[static_cast<std::size_t>(k)]));
    } else {
      a = std::clamp<i64>(a, 0, n - 1), z = std::clamp<i64>(z, -1, n - 1);
      for (i64 k = a; k > z; k += st) want.push_back(static_cast<float>(v[static_cast<std::size_t>(k)]));
    }
    for (bool host : {true, false}) {
      Builder b(13);
      b.init_i64("s", {s}).init_i64("e", {e}).init_i64("ax", {0}).init_i64("st", {st});
      if (host) {
        auto* t = b.g->add_initializer();
        t->set_name("x"), t->set_data_type(::onnx::TensorProto::FLOAT), t->add_dims(n);
        for (double d : v) t->add_float_data(static_cast<float>(d));
        b.input("dummy", {1});
      } else {
        b.input("x", {n});
      }
      b.output("y");
      b.node("Slice", {"x", "s", "e", "ax", "st"}, {"y"});
      Tensor in = host ? Tensor::ones({1}) : f32(v, {n});
      auto got = b.parse()({in})[0].to_vector<float>();
      INFO("start " << s << " end " << e << " step " << st << (host ? " (host)" : " (tensor)"));
      REQUIRE(got == want);
    }
  }
}

// ---- tensors of strings ----
namespace {

constexpr int kString = ::onnx::TensorProto::STRING;

mo::StringTensor strings(std::vector<std::string> v, const Dims& shape) { return {shape, std::move(v)}; }

const mo::StringTensor& str_of(const mo::AnyTensor& v) {
  REQUIRE(std::holds_alternative<mo::StringTensor>(v));
  return std::get<mo::StringTensor>(v);
}

std::string ascii_case(std::string s, bool up) {
  for (auto& c : s)
    c = static_cast<char>(up ? std::toupper(static_cast<unsigned char>(c))
                             : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

TEST_CASE("onnx: StringNormalizer over random words agrees with a plain reference", "[onnx]") {
  std::mt19937 gen(61);
  const std::string letters = "aAbBcCdDeEzZ09 _-";
  auto word = [&] {
    std::string w;
    for (std::size_t n = gen() % 4; n-- > 0;) w += letters[gen() % letters.size()];
    return w;
  };
  for (int trial = 0; trial < 60; ++trial) {
    const std::string action =
        std::vector<std::string>{"NONE", "LOWER", "UPPER"}[static_cast<std::size_t>(trial % 3)];
    const bool sensitive = (trial / 3) % 2, two_d = (trial / 6) % 2;
    std::vector<std::string> stop;
    for (std::size_t n = gen() % 4; n-- > 0;) stop.push_back(word());
    std::vector<std::string> x;
    for (std::size_t n = 1 + gen() % 8; n-- > 0;)
      x.push_back(gen() % 3      ? word()
                  : stop.empty() ? word()
                                 : ascii_case(stop[gen() % stop.size()], gen() % 2));
    const auto c = static_cast<i64>(x.size());
    Builder b(10);
    b.input("x",
            two_d ? std::vector<std::variant<i64, std::string>>{1, c}
                  : std::vector<std::variant<i64, std::string>>{c},
            kString)
        .output("y", kString);
    auto* n = b.node("StringNormalizer", {"x"}, {"y"}, "norm");
    if (action != "NONE" || gen() % 2) attr_s(n, "case_change_action", action);
    attr_i(n, "is_case_sensitive", sensitive);
    if (!stop.empty()) attr_strings(n, "stopwords", stop);
    std::vector<std::string> want;
    for (const auto& w : x) {
      bool drop = false;
      for (const auto& s : stop)
        drop = drop || (sensitive ? w == s : ascii_case(w, false) == ascii_case(s, false));
      if (!drop) want.push_back(action == "NONE" ? w : ascii_case(w, action == "UPPER"));
    }
    if (want.empty()) want.emplace_back();
    const auto wc = static_cast<i64>(want.size());
    INFO("trial " << trial << ": " << action << (sensitive ? ", case-sensitive" : ""));
    mo::Model m = b.parse();
    REQUIRE(m.input_dtypes()[0] == mo::string_dtype);
    REQUIRE(m.output_dtypes()[0] == mo::string_dtype);
    auto out = m.run({strings(x, two_d ? Dims{1, c} : Dims{c})});
    REQUIRE(out.size() == 1);
    const auto& y = str_of(out[0]);
    REQUIRE(y.data == want);
    REQUIRE(y.shape == (two_d ? Dims{1, wc} : Dims{wc}));
  }
}

TEST_CASE("onnx: StringNormalizer maps UTF-8 case, rejects bad shapes and unknown locales", "[onnx]") {
  auto model = [](const std::string& action, const std::string& locale) {
    Builder b(10);
    b.input("x", {}, kString).output("y", kString);  // any shape: the operator checks it
    auto* n = b.node("StringNormalizer", {"x"}, {"y"}, "norm");
    attr_s(n, "case_change_action", action);
    if (!locale.empty()) attr_s(n, "locale", locale);
    attr_strings(n, "stopwords", {"ÉTÉ"});
    return b;
  };
  auto up = model("UPPER", "en_US").parse().run({strings({"façade", "été", "Ωmega"}, {3})});
  REQUIRE(str_of(up[0]).data ==
          std::vector<std::string>{"FAÇADE", "ΩMEGA"});  // "été" is a stopword in any case
  auto low = model("LOWER", "").parse().run({strings({"ÀB", "Σ"}, {2})});
  REQUIRE(str_of(low[0]).data == std::vector<std::string>{"àb", "σ"});
  REQUIRE_THAT(message([&] { model("UPPER", "xx_NOWHERE").parse(); }),
               Contains("node 0 'norm' (StringNormalizer): locale 'xx_NOWHERE' is not supported"));
  REQUIRE_THAT(message([&] { model("TITLE", "").parse(); }),
               Contains("case_change_action 'TITLE' is not supported"));
  REQUIRE_THAT(message([&] {
                 model("UPPER", "").parse().run({strings({"a", "b", "c", "d"}, {2, 2})});
               }),
               Contains("StringNormalizer takes a tensor of shape (C,) or (1, C), the input is (2, 2)"));
  REQUIRE_THAT(message([&] {
                 model("UPPER", "").parse().run({f32({1, 2}, {2})});
               }),
               Contains("input 'x' must be string, it is float32"));
}

TEST_CASE("onnx: Cast to STRING and back is exact; the text is ONNX's", "[onnx]") {
  auto cast = [](int from, int to) {
    Builder b(13);
    b.input("x", {std::string("n")}, from).output("y", to);
    attr_i(b.node("Cast", {"x"}, {"s"}, "to_text"), "to", kString);
    attr_i(b.node("Cast", {"s"}, {"y"}, "from_text"), "to", to);
    b.output("s", kString);
    return b.parse();
  };
  std::mt19937 gen(5);
  std::vector<double> xs = {1.0, -0.0, 1e-5, 0.039187793, 1e16, 123.5, 3e38, -2.5e-7};
  for (int k = 0; k < 200; ++k)
    xs.push_back(
        std::ldexp(std::uniform_real_distribution<double>(-1, 1)(gen), static_cast<int>(gen() % 120) - 60));
  const auto n = static_cast<i64>(xs.size());
  for (int to : {::onnx::TensorProto::FLOAT, ::onnx::TensorProto::DOUBLE}) {
    Tensor x = to == ::onnx::TensorProto::FLOAT ? f32(xs, {n}) : Tensor(xs, {n});
    auto out = cast(to, to).run({x});
    const auto& text = str_of(out[1]);
    REQUIRE(std::get<Tensor>(out[0]).to_vector<double>() == x.to_vector<double>());  // bit-exact both ways
    if (to == ::onnx::TensorProto::FLOAT)
      REQUIRE(std::vector<std::string>(text.data.begin(), text.data.begin() + 8) ==
              std::vector<std::string>{"1.0", "-0.0", "1e-05", "0.039187793", "1e+16", "123.5", "3e+38",
                                       "-2.5e-07"});
  }
  std::vector<i64> ints = {0, -1, 42, std::numeric_limits<i64>::max(), std::numeric_limits<i64>::min()};
  auto iout = cast(::onnx::TensorProto::INT64, ::onnx::TensorProto::INT64).run({Tensor(ints, {5})});
  REQUIRE(std::get<Tensor>(iout[0]).to_vector<i64>() == ints);
  REQUIRE(str_of(iout[1]).data[3] == "9223372036854775807");

  Builder b(13);
  b.input("x", {6}, kString).output("y");
  attr_i(b.node("Cast", {"x"}, {"y"}, "parse"), "to", ::onnx::TensorProto::FLOAT);
  auto y = std::get<Tensor>(b.parse().run({strings({"NaN", "INF", "+inf", "-INF", "1E8", "0.5"}, {6})})[0])
               .to_vector<float>();
  REQUIRE(std::isnan(y[0]));
  REQUIRE(y[1] == INFINITY);
  REQUIRE(y[2] == INFINITY);
  REQUIRE(y[3] == -INFINITY);
  REQUIRE(y[4] == 1e8f);
  REQUIRE(y[5] == 0.5f);
  REQUIRE_THAT(message([&] {
                 b.parse().run({strings({"1", "2", "Hello", "4", "5", "6"}, {6})});
               }),
               Contains("node 0 'parse' (Cast): Cast: the string 'Hello' is not a number"));
  Builder ib(13);
  ib.input("x", {3}, kString).output("y", ::onnx::TensorProto::INT64);
  attr_i(ib.node("Cast", {"x"}, {"y"}, "to_int"), "to", ::onnx::TensorProto::INT64);
  auto iy = ib.parse().run({strings({"-7", "100.5", "9007199254740993"}, {3})});
  REQUIRE(std::get<Tensor>(iy[0]).to_vector<i64>() == std::vector<i64>{-7, 100, 9007199254740993});
  REQUIRE_THAT(message([&] {
                 ib.parse().run({strings({"1", "1e30", "3"}, {3})});
               }),
               Contains("the string '1e30' is out of the range of int64"));
}

TEST_CASE("onnx: string initializers, Equal on strings, and a string output through the Tensor call",
          "[onnx]") {
  Builder b;
  b.input("x", {2, 2}, kString).output("eq", ::onnx::TensorProto::BOOL).output("same", kString);
  b.init_strings("words", {2}, {"cat", "dog"});
  b.node("Equal", {"x", "words"}, {"eq"}, "eq");
  b.init_i64("flat", {4}).init_i64("back", {2, 2});  // strings move through Reshape and Flatten
  b.node("Reshape", {"x", "flat"}, {"r"}, "r");
  b.node("Flatten", {"r"}, {"f"}, "f");
  b.node("Reshape", {"f", "back"}, {"b"}, "b");
  b.node("Identity", {"b"}, {"same"}, "id");
  mo::Model m = b.parse();
  auto x = strings({"cat", "cow", "dog", "dog"}, {2, 2});
  auto out = m.run({x});
  REQUIRE(std::get<Tensor>(out[0]).to_vector<bool>() == std::vector<bool>{true, false, false, true});
  REQUIRE(str_of(out[1]).data == x.data);
  REQUIRE(str_of(out[1]).shape == Dims{2, 2});
  REQUIRE_THAT(message([&] {
                 m.run({strings({"cat"}, {2, 2})});
               }),
               Contains("input 'x' has shape (2, 2) but 1 strings"));

  Builder c;
  c.input("x", {2}).output("y").output("text", kString);
  c.node("Relu", {"x"}, {"y"});
  attr_i(c.node("Cast", {"x"}, {"text"}, "fmt"), "to", kString);
  REQUIRE_THAT(
      message([&] {
        c.parse()({f32({1, 2}, {2})});
      }),
      Contains(
          "built.onnx: the output 'text' is a tensor of strings, which a Tensor cannot hold: call run()"));
  ::onnx::TensorProto words;  // a .pb of strings: read_any reads it, read_tensor says why it cannot
  words.set_data_type(kString);
  words.add_dims(2);
  words.add_string_data("a");
  words.add_string_data("");
  fs::path pb = temp_dir("strings") / "words.pb";
  std::ofstream(pb, std::ios::binary) << words.SerializeAsString();
  REQUIRE(str_of(mo::read_any(pb.string())).data == std::vector<std::string>{"a", ""});
  REQUIRE_THAT(message([&] { mo::read_tensor(pb.string()); }), Contains("holds strings"));
  fs::remove_all(pb.parent_path());
}

// ---- the backend tests ----
namespace {

#ifndef METAGRAD_ONNX_TESTDATA
#define METAGRAD_ONNX_TESTDATA "/usr/share/libonnx-testdata/data"
#endif

// Why a test's output differs, or "" when it matches (rtol 1e-3, atol 1e-5, as ONNX's runner); the
// largest absolute difference seen goes to max_err.
std::string compare(const mo::AnyTensor& got_any, const mo::AnyTensor& want_any, std::size_t k,
                    double& max_err) {
  std::string o = "output " + std::to_string(k) + ": ";
  if (got_any.index() != want_any.index())
    return o + (got_any.index() ? "strings" : "a Tensor") + ", expected " +
           (want_any.index() ? "strings" : "a Tensor");
  if (const auto* ws = std::get_if<mo::StringTensor>(&want_any)) {
    const auto& gs = std::get<mo::StringTensor>(got_any);
    if (gs.shape != ws->shape)
      return o + "shape " + to_string(gs.shape) + ", expected " + to_string(ws->shape);
    for (std::size_t i = 0; i < ws->data.size(); ++i)
      if (gs.data[i] != ws->data[i])
        return o + "element " + std::to_string(i) + " is '" + gs.data[i] + "', expected '" + ws->data[i] +
               "'";
    return "";
  }
  const Tensor &got = std::get<Tensor>(got_any), &want = std::get<Tensor>(want_any);
  if (got.dtype() != want.dtype()) return o + "dtype " + got.dtype().name + ", expected " + want.dtype().name;
  if (got.shape() != want.shape())
    return o + "shape " + to_string(got.shape()) + ", expected " + to_string(want.shape());
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    bool nan = std::isnan(g[i]) && std::isnan(w[i]);
    if (!nan && g[i] != w[i]) max_err = std::max(max_err, std::abs(g[i] - w[i]));
    bool ok = nan || g[i] == w[i] || std::abs(g[i] - w[i]) <= 1e-5 + 1e-3 * std::abs(w[i]);
    if (!ok)
      return o + "element " + std::to_string(i) + " is " + std::to_string(g[i]) + ", expected " +
             std::to_string(w[i]);
  }
  return "";
}

std::vector<mo::AnyTensor> read_all(const fs::path& dir, const std::string& prefix) {
  std::vector<mo::AnyTensor> out;
  for (std::size_t k = 0;; ++k) {
    fs::path p = dir / (prefix + "_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) return out;
    out.push_back(mo::read_any(p.string()));
  }
}

// Runs one test folder: "" when every data set matches, else the first line of the reason.
std::string run_backend_test(const fs::path& dir, double& max_err) {
  try {
    mo::Model m = mo::load((dir / "model.onnx").string());
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
        sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) return "no test_data_set_* folder";
    for (const auto& s : sets) {
      auto in = read_all(s, "input"), want = read_all(s, "output");
      auto got = m.run(in);
      if (got.size() != want.size())
        return std::to_string(got.size()) + " outputs, expected " + std::to_string(want.size());
      for (std::size_t k = 0; k < got.size(); ++k)
        if (auto why = compare(got[k], want[k], k, max_err); !why.empty())
          return s.filename().string() + ": " + why;
    }
    return "";
  } catch (const std::exception& e) {
    std::string w = e.what();
    return w.substr(0, w.find('\n'));
  }
}

void run_backend_set(const std::string& set) {
  const char* data = std::getenv("ONNX_TESTDATA");  // another root in the same layout
  fs::path root = fs::path(data ? data : METAGRAD_ONNX_TESTDATA) / set;
  if (!fs::exists(root)) {
    std::printf("skipped: no ONNX backend test data at %s (Debian: libonnx-testdata)\n", root.c_str());
    return;
  }
  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());
  const char* only = std::getenv("ONNX_TEST");  // a substring of the test names to run
  std::size_t pass = 0, total = 0;
  std::vector<std::pair<double, std::string>> slow;
  for (const auto& t : tests) {
    std::string name = t.filename().string();
    if (only && name.find(only) == std::string::npos) continue;
    ++total;
    auto start = std::chrono::steady_clock::now();
    double max_err = 0;
    std::string why = run_backend_test(t, max_err);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    slow.push_back({secs, name});
    if (why.empty())
      ++pass;
    else
      std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    if (std::getenv("ONNX_VERBOSE"))
      std::printf("%s %s: max |error| %.3g, %.2f s\n", why.empty() ? "pass" : "fail", name.c_str(), max_err,
                  secs);
  }
  std::sort(slow.rbegin(), slow.rend());
  for (std::size_t k = 0; k < std::min<std::size_t>(3, slow.size()); ++k)
    std::printf("slowest: %s %.2f s\n", slow[k].second.c_str(), slow[k].first);
  double rate = total ? static_cast<double>(pass) / static_cast<double>(total) : 1.0;
  std::printf("onnx backend %s on %s: %zu of %zu pass (%.1f%%)\n", set.c_str(), Device::DEFAULT.c_str(), pass,
              total, 100 * rate);
  const char* floor = std::getenv("ONNX_MIN_PASS");  // the ratchet, set by test/CMakeLists.txt
  if (floor) {
    INFO("pass rate " << rate << " is below the floor " << floor);
    REQUIRE(rate >= std::atof(floor));
  }
}

}  // namespace

TEST_CASE("onnx backend tests: node", "[.onnx_node]") { run_backend_set("node"); }
TEST_CASE("onnx backend tests: pytorch-converted", "[.onnx_pytorch_converted]") {
  run_backend_set("pytorch-converted");
}
TEST_CASE("onnx backend tests: pytorch-operator", "[.onnx_pytorch_operator]") {
  run_backend_set("pytorch-operator");
}
TEST_CASE("onnx backend tests: simple", "[.onnx_simple]") { run_backend_set("simple"); }

// Damaged copies of backend-test model files (truncated, bytes overwritten): each loads, and then runs on
// its test inputs, or fails with onnx::Error naming the file; any other exception, or a crash (the
// ASan copy of the library runs this too: test/CMakeLists.txt), fails. ONNX_FUZZ_TRIALS per file.
TEST_CASE("onnx: damaged backend-test models load or fail with onnx::Error", "[.onnx_fuzz]") {
  const char* data = std::getenv("ONNX_TESTDATA");
  fs::path root = data ? data : METAGRAD_ONNX_TESTDATA;
  if (!fs::exists(root / "node")) {
    std::printf("skipped: no ONNX backend test data at %s (Debian: libonnx-testdata)\n", root.c_str());
    return;
  }
  const char* models[] = {"node/test_conv_with_strides_padding",
                          "node/test_maxpool_with_argmax_2d_precomputed_pads",
                          "node/test_lstm_defaults",
                          "node/test_gemm_default_scalar_bias",
                          "node/test_resize_upsample_scales_linear",
                          "node/test_if",
                          "node/test_loop11",
                          "node/test_slice",
                          "node/test_reshape_extended_dims",
                          "node/test_layer_normalization_2d_axis0",
                          "node/test_einsum_batch_matmul",
                          "node/test_gather_0",
                          "node/test_scan9_sum",
                          "node/test_batchnorm_example",
                          "pytorch-converted/test_ConvTranspose2d"};
  const char* n = std::getenv("ONNX_FUZZ_TRIALS");
  const int trials = n ? std::atoi(n) : 200;
  std::mt19937 gen(7);
  int loaded = 0, ran = 0, rejected = 0;
  for (const char* name : models) {
    fs::path dir = root / name;
    std::ifstream f(dir / "model.onnx", std::ios::binary);
    const std::string good((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    REQUIRE(!good.empty());
    const auto inputs = read_all(dir / "test_data_set_0", "input");
    for (int trial = 0; trial < trials; ++trial) {
      std::string bad = good;
      if (trial % 3 == 0)
        bad.resize(gen() % bad.size());
      else
        for (int k = 0; k < 1 + trial % 8; ++k) bad[gen() % bad.size()] = static_cast<char>(gen() % 256);
      INFO(name << ", trial " << trial);
      if (std::getenv("ONNX_VERBOSE")) std::fprintf(stderr, "%s, trial %d\n", name, trial);  // before a crash
      try {
        mo::Model m = mo::parse(bad, "damaged.onnx", dir.string());
        ++loaded;
        m.run(inputs);
        ++ran;
      } catch (const mo::Error& e) {
        ++rejected;
        REQUIRE_THAT(e.what(), Contains("damaged.onnx"));
      }
    }
  }
  std::printf("onnx loader fuzz: %d damaged models, %d loaded, %d ran, %d rejected with onnx::Error\n",
              trials * static_cast<int>(std::size(models)), loaded, ran, rejected);
  REQUIRE(loaded > 0);
  REQUIRE(rejected > 0);
}

// Any folder of tests in the same layout (tools/export_onnx_models.py writes one): ONNX_TESTDATA/ONNX_SET.
TEST_CASE("onnx backend tests: a folder", "[.onnx_folder]") {
  const char* set = std::getenv("ONNX_SET");
  run_backend_set(set ? set : ".");
}
