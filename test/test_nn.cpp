// nn: the StateDict protocol and load_state_dict, safetensors files (every dtype, the bytes of a
// tiny file, each corrupt-file error), the optimizers' updates against their formulas written out
// here in double, and each layer's forward against a reference loop, its init and its gradients.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "gradcheck.hpp"
#include "metagrad/nn.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::random_tensor;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
Tensor f64(const std::vector<double>& v, const Dims& shape) { return Tensor(v, shape); }
Tensor f32(const std::vector<double>& v, const Dims& shape) {
  return Tensor(v, shape, {.dtype = dtypes::float32});
}

// A file in the temp directory, removed when the test ends.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              ("metagrad_test_nn_" + std::to_string(::getpid()) + "_" + name))
                 .string()) {}
  ~TempFile() { std::filesystem::remove(path); }
  void write(const std::string& bytes) const { std::ofstream(path, std::ios::binary) << bytes; }
  std::string read() const {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
};

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
// A safetensors file from its JSON header and data section, as another writer would produce it.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}
template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A composite model written the way a user would.
struct Block {
  nn::Linear a{2, 3};
  std::optional<nn::Linear> b;
  nn::StateDict state_dict() const { return nn::state_dict({{"a", a}, {"b", b}}); }
};
struct Net {
  std::vector<Block> blocks{Block{}, Block{nn::Linear{2, 3}, nn::Linear{3, 1}}};
  Tensor scale = Tensor::ones({1});
  nn::StateDict state_dict() const { return nn::state_dict({{"blocks", blocks}, {"scale", scale}}); }
};

}  // namespace

// ---------------------------------------------------------------- state dicts

TEST_CASE("state dict: nested names, order and aliasing", "[nn]") {
  Net net;
  nn::StateDict sd = nn::get_state_dict(net);
  std::vector<std::string> want{"blocks.0.a.weight",
                                "blocks.0.a.bias",
                                "blocks.1.a.weight",
                                "blocks.1.a.bias",
                                "blocks.1.b.weight",
                                "blocks.1.b.bias",
                                "scale"};
  REQUIRE(sd.keys() == want);
  REQUIRE(sd.at("blocks.1.b.weight").shape() == Dims{1, 3});
  REQUIRE(nn::get_state_dict(net, "net").keys()[0] == "net.blocks.0.a.weight");
  REQUIRE(nn::get_state_dict(Tensor::ones({2}), "w").keys() == std::vector<std::string>{"w"});
  REQUIRE(nn::get_state_dict(std::optional<Tensor>{}).empty());

  // Entries are the model's tensors, not copies.
  Tensor s = sd.at("scale");
  s.assign(Tensor({5.f}));
  REQUIRE(net.scale.item<float>() == 5.f);
  std::vector<Tensor> params = nn::get_parameters(net);
  REQUIRE(params.size() == 7);
  params[0].assign(Tensor::zeros({3, 2}));
  REQUIRE(vals(net.blocks[0].a.weight) == std::vector<double>(6, 0.0));

  REQUIRE_THROWS_WITH(sd.at("nope"), Contains("no key 'nope'"));
  nn::StateDict dup{{"x", Tensor::ones({1})}};
  REQUIRE_THROWS_WITH(dup.add("x", Tensor::ones({1})), Contains("'x' is there twice"));
  Tensor w = Tensor::ones({1});
  REQUIRE_THROWS_WITH(nn::state_dict({{"w", w}, {"w", w}}), Contains("'w' is there twice"));
}

TEST_CASE("load_state_dict: values, strictness and errors naming the key", "[nn]") {
  Net net, other;
  nn::StateDict src = nn::get_state_dict(other);
  nn::load_state_dict(net, src);
  for (const auto& [k, t] : nn::get_state_dict(net)) REQUIRE(vals(t) == vals(src.at(k)));
  // The loaded tensors are independent of later changes to the source's handles.
  Tensor(src.at("scale")).assign(Tensor({3.f}));
  REQUIRE(net.scale.item<float>() == 1.f);

  Net fresh;
  std::vector<double> before = vals(fresh.blocks[0].a.weight);
  nn::StateDict bad_shape = nn::get_state_dict(other);
  nn::StateDict wrong;
  for (const auto& [k, t] : bad_shape) wrong.add(k, k == "blocks.1.b.bias" ? Tensor::zeros({2}) : t);
  REQUIRE_THROWS_WITH(nn::load_state_dict(fresh, wrong), Contains("'blocks.1.b.bias'") &&
                                                             Contains("(1,) float32 in the model") &&
                                                             Contains("(2,) float32 in the state dict"));
  REQUIRE(vals(fresh.blocks[0].a.weight) == before);  // nothing was assigned

  nn::StateDict wrong_dtype;
  for (const auto& [k, t] : src)
    wrong_dtype.add(k, k == "scale" ? Tensor::ones({1}, {.dtype = dtypes::float64}) : t);
  REQUIRE_THROWS_WITH(nn::load_state_dict(fresh, wrong_dtype),
                      Contains("'scale'") && Contains("float32") && Contains("float64"));

  nn::StateDict missing, extra = nn::get_state_dict(other);
  for (const auto& [k, t] : src)
    if (k != "scale") missing.add(k, t);
  extra.add("blocks.2.a.weight", Tensor::ones({3, 2}));
  REQUIRE_THROWS_WITH(nn::load_state_dict(fresh, missing), Contains("has no 'scale'"));
  REQUIRE_THROWS_WITH(nn::load_state_dict(fresh, extra), Contains("model has no 'blocks.2.a.weight'"));
  REQUIRE(vals(fresh.blocks[0].a.weight) == before);
  nn::load_state_dict(fresh, missing, false);  // not strict: skips both
  nn::load_state_dict(fresh, extra, false);
  REQUIRE(vals(fresh.blocks[0].a.weight) == vals(src.at("blocks.0.a.weight")));
}

// ---------------------------------------------------------------- safetensors

TEST_CASE("safetensors: every dtype round trips, in order, with metadata", "[nn]") {
  TempFile file("roundtrip.safetensors");
  std::vector<std::int64_t> big{(i64{1} << 60) + 1, -(i64{1} << 62) - 3, 0, 7};
  nn::StateDict sd{
      {"f32", Tensor({1.5f, -2.25f, 3e30f, 0.f, -0.f, 1e-40f}).reshape({2, 3})},
      {"f64", Tensor(std::vector<double>{0.1, -1e300, 5e-324}, {3})},
      {"f16", Tensor({1.f, -0.5f, 65504.f, 6e-8f}, {.dtype = dtypes::float16})},
      {"i8", Tensor(std::vector<std::int8_t>{-128, 127, 0, -1}, {2, 2})},
      {"u8", Tensor(std::vector<std::uint8_t>{0, 255, 128}, {3})},
      {"i32", Tensor(std::vector<std::int32_t>{-2147483647 - 1, 2147483647}, {1, 2})},
      {"i64", Tensor(big, {4})},
      {"bool", Tensor({1.f, 0.f, 1.f}, {.dtype = dtypes::bool_})},
      {"scalar", Tensor(std::vector<float>{42.f}, Dims{})},
      {"empty", Tensor::zeros({0, 3})},
      {"permuted", Tensor({{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}}).permute({1, 0})},  // saved row-major as seen
      {"name with \"quotes\" and \\ é", Tensor({9.f})},
  };
  nn::safe_save(sd, file.path, {{"format", "pt"}, {"note", "line\nbreak"}});
  nn::StateDict back = nn::safe_load(file.path);
  REQUIRE(back.keys() == sd.keys());
  for (const auto& [k, t] : sd) {
    INFO(k);
    const Tensor& b = back.at(k);
    REQUIRE(b.dtype() == t.dtype());
    REQUIRE(b.shape() == t.shape());
    REQUIRE(b.device() == Device::DEFAULT);
    if (t.dtype() == dtypes::int64)
      REQUIRE(b.to_vector<std::int64_t>() == big);  // all 64 bits, not through double
    else
      REQUIRE(vals(b) == vals(t));
  }
  REQUIRE(vals(back.at("permuted")) == std::vector<double>{1, 4, 2, 5, 3, 6});
  REQUIRE(std::signbit(vals(back.at("f32"))[4]));
  std::map<std::string, std::string> meta = nn::safe_load_metadata(file.path);
  REQUIRE(meta == std::map<std::string, std::string>{{"format", "pt"}, {"note", "line\nbreak"}});

  // The loaded tensors train like any other.
  Tensor w = back.at("f32");
  w.requires_grad_();
  (w * w).sum().backward();
  REQUIRE(static_cast<bool>(w.grad));
}

TEST_CASE("safetensors: the bytes of a tiny file", "[nn]") {
  TempFile file("tiny.safetensors");
  nn::safe_save({{"a", Tensor({1.f, 2.f})}, {"b", Tensor(std::vector<std::int8_t>{-1}, {1, 1})}}, file.path);
  std::string bytes = file.read();
  std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"I8","shape":[1,1],"data_offsets":[8,9]}})";
  std::string header = json + std::string((8 - json.size() % 8) % 8, ' ');  // padded to 8 bytes
  REQUIRE(header.size() % 8 == 0);
  std::string data = bytes_of(std::vector<float>{1.f, 2.f}) + std::string(1, '\xff');
  REQUIRE(bytes.size() == 8 + header.size() + 9);
  REQUIRE(bytes.substr(0, 8) == le64(header.size()));
  REQUIRE(static_cast<unsigned char>(bytes[0]) == header.size());  // little-endian: low byte first
  REQUIRE(bytes.substr(8, header.size()) == header);
  REQUIRE(bytes.substr(8 + header.size()) == data);
  // IEEE 754 single 1.0 is 00 00 80 3f in little-endian order.
  REQUIRE(bytes.substr(8 + header.size(), 4) == std::string("\x00\x00\x80\x3f", 4));
}

TEST_CASE("safetensors: a file written by another tool", "[nn]") {
  TempFile file("foreign.safetensors");
  // Keys out of offset order, whitespace, escapes, metadata first, and no padding.
  std::string header = R"({ "__metadata__" : {"framework": "torch"},
    "z\u00e9\n" : { "shape" : [ 2 ], "data_offsets" : [ 8, 16 ], "dtype" : "I32" } ,
    "b" : {"dtype":"F64","shape":[1],"data_offsets":[0,8]}, "e": {"dtype":"BOOL","shape":[0],"data_offsets":[16,16]} } )";
  file.write(safetensors_bytes(
      header, bytes_of(std::vector<double>{-0.75}) + bytes_of(std::vector<std::int32_t>{7, -9})));
  nn::StateDict sd = nn::safe_load(file.path);
  REQUIRE(sd.keys() == std::vector<std::string>{"z\xc3\xa9\n", "b", "e"});
  REQUIRE(sd.at("z\xc3\xa9\n").dtype() == dtypes::int32);
  REQUIRE(vals(sd.at("z\xc3\xa9\n")) == std::vector<double>{7, -9});
  REQUIRE(vals(sd.at("b")) == std::vector<double>{-0.75});
  REQUIRE(sd.at("e").shape() == Dims{0});
  REQUIRE(nn::safe_load_metadata(file.path).at("framework") == "torch");
}

TEST_CASE("safetensors: missing, truncated and corrupt files are clear errors", "[nn]") {
  TempFile file("corrupt.safetensors");
  const std::string& p = file.path;
  REQUIRE_THROWS_AS(nn::safe_load(p + ".missing"), std::runtime_error);
  REQUIRE_THROWS_WITH(nn::safe_load(p + ".missing"), Contains("cannot open") && Contains(".missing"));

  auto fails = [&](const std::string& bytes, const std::string& why) {
    file.write(bytes);
    INFO(why);
    REQUIRE_THROWS_AS(nn::safe_load(p), std::runtime_error);
    REQUIRE_THROWS_WITH(nn::safe_load(p), Contains(p) && Contains(why));
  };
  std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string ok_data = bytes_of(std::vector<float>{1, 2});
  fails("", "0 bytes, too short");
  fails(std::string("\x05\x00\x00", 3), "3 bytes, too short");
  fails(le64(1000) + "{}", "header length 1000 exceeds the 2 bytes");
  fails(le64(~std::uint64_t{0}) + "{}", "header length 18446744073709551615");
  fails(safetensors_bytes(ok_header, ok_data).substr(0, 40), "exceeds");  // truncated inside the header
  fails(safetensors_bytes(ok_header, ok_data.substr(0, 6)), "out of range: the data section has 6 bytes");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", ok_data),
        "expected '}'");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x)", ok_data),
        "unexpected text after");
  fails(safetensors_bytes(R"({"a":{"dtype":F32}})", ok_data), "unexpected character 'F'");
  fails(safetensors_bytes(R"({"a\q":{}})", ok_data), "bad escape");
  fails(safetensors_bytes(R"({"a":"unterminated)", ok_data), "unterminated string");
  fails(safetensors_bytes(std::string(100, '[') + std::string(100, ']'), ""), "nested too deeply");
  fails(safetensors_bytes("[1, 2]", ""), "not a JSON object");
  fails(safetensors_bytes(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", ok_data),
        "tensor 'a': unknown dtype \"F8\"");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", ok_data),
        "data_offsets [4, 12] out of range");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", ok_data),
        "out of range");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", ok_data),
        "hold 8 bytes but F32 (3,) needs 12");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", ok_data),
        "\"shape\" must hold non-negative integers");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", ok_data),
        "non-negative integers");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                          ok_data),
        "the shape is too large");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", ok_data), "needs \"dtype\", \"shape\"");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", ok_data),
        "must be [begin, end]");
  fails(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          ok_data),
        "'a' is there twice");
  fails(safetensors_bytes(R"({"a":[]})", ok_data), "its entry is not an object");

  REQUIRE_THROWS_WITH(nn::safe_save({{"x", Tensor({1.f})}}, "/nonexistent-dir/x.safetensors"),
                      Contains("cannot open '/nonexistent-dir/x.safetensors'"));
}

// ---------------------------------------------------------------- optimizers

namespace {

// f(w) = sum(0.5 * a * w^2 + c * w): the gradient is a * w + c.
const std::vector<double> kA{1.0, 3.0, 0.5, 2.0}, kC{-1.0, 0.5, 2.0, 0.0}, kW0{0.3, -1.2, 2.0, 0.7};
Tensor quadratic(const Tensor& w) {
  Tensor a = Tensor(kA, {4}).cast(w.dtype()), c = Tensor(kC, {4}).cast(w.dtype());
  return (a * w * w * 0.5 + c * w).sum();
}
std::vector<double> quadratic_grad(const std::vector<double>& w) {
  std::vector<double> g(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) g[i] = kA[i] * w[i] + kC[i];
  return g;
}

// Steps the optimizer on the quadratic and the reference update in double; compares every step.
template <class Opt, class Make, class Ref>
void compare_steps(DType dt, Make make, Ref ref, int steps = 5) {
  Tensor w = Tensor(kW0, {4}).cast(dt);
  w.requires_grad_();
  Opt opt = make({w});
  std::vector<double> want = kW0;
  double tol = dt == dtypes::float64 ? 1e-12 : 2e-6;
  for (int s = 1; s <= steps; ++s) {
    opt.zero_grad();
    REQUIRE(!static_cast<bool>(w.grad));
    quadratic(w).backward();
    opt.step();
    ref(want, quadratic_grad(want), s);
    INFO("step " << s);
    require_close(vals(w), want, tol, tol);
    REQUIRE(w.dtype() == dt);
    REQUIRE(w.lazydata->base()->realized != nullptr);  // step realizes
    REQUIRE(w._ctx.get() == nullptr);
  }
}

}  // namespace

TEST_CASE("SGD: plain, momentum, nesterov and weight decay follow PyTorch's update", "[nn]") {
  struct Case {
    double lr, momentum, wd;
    bool nesterov;
  };
  for (Case c : {Case{0.1, 0, 0, false}, Case{0.05, 0.9, 0, false}, Case{0.05, 0.9, 0, true},
                 Case{0.1, 0, 0.1, false}, Case{0.02, 0.8, 0.05, true}}) {
    for (DType dt : {dtypes::float64, dtypes::float32}) {
      INFO("lr " << c.lr << " momentum " << c.momentum << " wd " << c.wd << " nesterov " << c.nesterov << " "
                 << dt.name);
      std::vector<double> b(4, 0.0);
      compare_steps<nn::optim::SGD>(
          dt, [&](std::vector<Tensor> ps) { return nn::optim::SGD(ps, c.lr, c.momentum, c.wd, c.nesterov); },
          [&](std::vector<double>& w, std::vector<double> g, int step) {
            for (std::size_t i = 0; i < w.size(); ++i) {
              g[i] += c.wd * w[i];
              if (c.momentum != 0) {
                b[i] = step == 1 ? g[i] : c.momentum * b[i] + g[i];  // PyTorch: the first buffer is g
                g[i] = c.nesterov ? g[i] + c.momentum * b[i] : b[i];
              }
              w[i] -= c.lr * g[i];
            }
          });
    }
  }
}

TEST_CASE("Adam, AdamW and LAMB follow their update formulas", "[nn]") {
  for (DType dt : {dtypes::float64, dtypes::float32}) {
    INFO(dt.name);
    for (double wd : {0.0, 0.1}) {
      INFO("AdamW wd " << wd);
      const double lr = 0.05, b1 = 0.8, b2 = 0.95, eps = 1e-6;
      std::vector<double> m(4, 0.0), v(4, 0.0);
      compare_steps<nn::optim::AdamW>(
          dt, [&](std::vector<Tensor> ps) { return nn::optim::AdamW(ps, lr, b1, b2, eps, wd); },
          [&](std::vector<double>& w, const std::vector<double>& g, int t) {
            for (std::size_t i = 0; i < w.size(); ++i) {  // PyTorch's AdamW: decay, then the Adam step
              w[i] *= 1 - lr * wd;
              m[i] = b1 * m[i] + (1 - b1) * g[i];
              v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
              double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
              w[i] -= lr * mh / (std::sqrt(vh) + eps);
            }
          },
          8);
    }
    {
      INFO("Adam defaults");
      std::vector<double> m(4, 0.0), v(4, 0.0);
      compare_steps<nn::optim::Adam>(
          dt, [&](std::vector<Tensor> ps) { return nn::optim::Adam(ps); },
          [&](std::vector<double>& w, const std::vector<double>& g, int t) {
            for (std::size_t i = 0; i < w.size(); ++i) {
              m[i] = 0.9 * m[i] + 0.1 * g[i];
              v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
              double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
              w[i] -= 0.001 * mh / (std::sqrt(vh) + 1e-8);
            }
          });
    }
    {
      INFO("LAMB");
      const double lr = 0.1, wd = 0.01;
      std::vector<double> m(4, 0.0), v(4, 0.0);
      compare_steps<nn::optim::LAMB>(
          dt, [&](std::vector<Tensor> ps) { return nn::optim::LAMB(ps, lr, 0.9, 0.999, 1e-6, wd); },
          [&](std::vector<double>& w, const std::vector<double>& g, int t) {
            std::vector<double> up(4);
            double r1 = 0, r2 = 0;
            for (std::size_t i = 0; i < w.size(); ++i) {
              m[i] = 0.9 * m[i] + 0.1 * g[i];
              v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
              double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
              up[i] = mh / (std::sqrt(vh) + 1e-6) + wd * w[i];
              r1 += w[i] * w[i], r2 += up[i] * up[i];
            }
            double r = std::sqrt(r1) / std::sqrt(r2);
            for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * r * up[i];
          });
    }
  }
  // LAMB's trust ratio is 1 where the parameter is zero (r1 / r2 must not leak a NaN).
  Tensor z = Tensor::zeros({3}, {.requires_grad = true});
  nn::optim::LAMB lamb({z}, 0.1);
  (z * Tensor({1.f, -2.f, 0.f})).sum().backward();
  lamb.step();
  require_close(vals(z), {-0.1, 0.1, 0.0}, 1e-5, 1e-5);
}

TEST_CASE("optimizers minimize a least-squares problem", "[nn]") {
  Tensor::manual_seed(7);
  Tensor X = f32(random_values(64 * 3, 11), {64, 3});
  Tensor Xw = X.matmul(f32({1, -2, 0.5}, {3, 1}));
  struct Run {
    const char* name;
    std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<Tensor>)> make;
    int steps;
    double target, lr_decay = 1;
    bool bias = true;  // LAMB's step is relative to |p|: a bias starting near 0 would crawl
  };
  using namespace nn::optim;
  std::vector<Run> runs{
      {"SGD", [](auto ps) { return std::make_unique<SGD>(ps, 0.1); }, 150, 1e-6},
      {"SGD momentum", [](auto ps) { return std::make_unique<SGD>(ps, 0.05, 0.9); }, 150, 1e-6},
      {"SGD nesterov", [](auto ps) { return std::make_unique<SGD>(ps, 0.05, 0.9, 0, true); }, 150, 1e-6},
      {"Adam", [](auto ps) { return std::make_unique<Adam>(ps, 0.05); }, 300, 1e-4},
      {"AdamW", [](auto ps) { return std::make_unique<AdamW>(ps, 0.05, 0.9, 0.999, 1e-8, 1e-3); }, 300, 1e-3},
      {"LAMB", [](auto ps) { return std::make_unique<LAMB>(ps, 0.1); }, 300, 1e-5, 0.98, false},
  };
  for (const Run& r : runs) {
    INFO(r.name);
    nn::Linear model(3, 1, r.bias);
    Tensor y = r.bias ? Xw + 0.3f : Xw;
    auto loss_of = [&] { return (model(X) - y).square().mean(); };
    auto opt = r.make(nn::get_parameters(model));
    double first = loss_of().item<double>(), last = first;
    for (int s = 0; s < r.steps; ++s) {
      opt->zero_grad();
      Tensor loss = loss_of();
      loss.backward();
      opt->set_lr(opt->get_lr() * (s ? r.lr_decay : 1));
      opt->step();
      last = loss.item<double>();
    }
    INFO("loss " << first << " -> " << last);
    REQUIRE(last < r.target);
    require_close(vals(model.weight), {1, -2, 0.5}, 0.03, 0);
  }
}

TEST_CASE("optimizers: parameters, buffers, lr, memory and bad input", "[nn]") {
  Tensor w = Tensor::ones({2}), fixed = Tensor::ones({2}, {.requires_grad = false}),
         counts = Tensor(std::vector<std::int64_t>{1, 2}, {2});
  nn::optim::SGD opt({w, fixed, w, counts}, 0.5);
  REQUIRE(opt.params.size() == 1);  // w once; fixed and the integer tensor are buffers
  REQUIRE(opt.buffers.size() == 2);
  REQUIRE(w.requires_grad.get() == true);
  REQUIRE_THROWS_WITH(opt.step(), Contains("SGD.step: parameter 0") && Contains("has no gradient"));

  (w * w).sum().backward();
  opt.step();  // w -= 0.5 * 2w
  REQUIRE(vals(w) == std::vector<double>{0, 0});
  REQUIRE(opt.get_lr() == 0.5);
  opt.set_lr(0.25);
  REQUIRE(opt.get_lr() == 0.25);
  opt.zero_grad();
  REQUIRE(!static_cast<bool>(w.grad));
  (w - 4).sum().backward();
  opt.step();
  REQUIRE(vals(w) == std::vector<double>{-0.25, -0.25});

  // float16 parameters keep their dtype.
  Tensor h = Tensor({1.f, 2.f}, {.dtype = dtypes::float16, .requires_grad = true});
  nn::optim::Adam adam({h}, 0.1);
  (h * h).sum().backward();
  adam.step();
  REQUIRE(h.dtype() == dtypes::float16);
  require_close(vals(h), {0.9, 1.9}, 2e-3, 0);

  using namespace nn::optim;
  REQUIRE_THROWS_WITH(SGD({w}, -1), Contains("Optimizer: lr must be in [0, inf), got -1"));
  REQUIRE_THROWS_WITH(SGD({w}, 0.1, -0.5), Contains("SGD: momentum"));
  REQUIRE_THROWS_WITH(SGD({w}, 0.1, 0, -1), Contains("SGD: weight_decay"));
  REQUIRE_THROWS_WITH(SGD({w}, 0.1, 0, 0, true), Contains("nesterov needs a momentum"));
  REQUIRE_THROWS_WITH(Adam({w}, 0.1, 1.0), Contains("Adam: b1 must be in [0, 1), got 1"));
  REQUIRE_THROWS_WITH(AdamW({w}, 0.1, 0.9, -0.1), Contains("AdamW: b2"));
  REQUIRE_THROWS_WITH(LAMB({w}, 0.1, 0.9, 0.999, -1), Contains("LAMB: eps"));
  REQUIRE_THROWS_WITH(opt.set_lr(std::nan("")), Contains("lr must be"));

  // Training steps neither grow graphs nor leak buffers.
  nn::Linear l(4, 2);
  nn::optim::Adam train(nn::get_parameters(l), 0.01);
  Tensor x = Tensor::rand({8, 4});
  auto step = [&] {
    train.zero_grad();
    l(x).square().mean().backward();
    train.step();
  };
  for (int i = 0; i < 3; ++i) step();
  std::int64_t raw = RawBuffer::live_count, lazy = LazyBuffer::live_count;
  for (int i = 0; i < 30; ++i) step();
  REQUIRE(RawBuffer::live_count == raw);
  REQUIRE(LazyBuffer::live_count == lazy);
}

// ---------------------------------------------------------------- layers

namespace {
double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : vals(t)) m = std::max(m, std::abs(x));
  return m;
}
}  // namespace

TEST_CASE("Linear: shapes, init, forward, gradients, errors", "[nn]") {
  Tensor::manual_seed(1);
  nn::Linear big(64, 32);
  REQUIRE(big.weight.shape() == Dims{32, 64});
  REQUIRE(big.bias->shape() == Dims{32});
  double bound = 1 / std::sqrt(64.0);  // kaiming_uniform(a = sqrt(5)) and PyTorch's bias bound
  REQUIRE(max_abs(big.weight) <= bound);
  REQUIRE(max_abs(big.weight) > 0.95 * bound);
  REQUIRE(max_abs(*big.bias) <= bound);
  REQUIRE(max_abs(*big.bias) > 0.8 * bound);
  REQUIRE(nn::get_state_dict(big).keys() == std::vector<std::string>{"weight", "bias"});
  nn::Linear nobias(3, 2, false);
  REQUIRE(!nobias.bias);
  REQUIRE(nn::get_state_dict(nobias).keys() == std::vector<std::string>{"weight"});

  nn::Linear l(3, 2);
  std::vector<double> W{1, -2, 0.5, 3, 0, -1}, b{0.25, -4}, X = random_values(2 * 4 * 3, 5);
  l.weight.assign(f32(W, {2, 3}));
  l.bias->assign(f32(b, {2}));
  Tensor x = f32(X, {2, 4, 3});
  std::vector<double> want;
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < 2; ++o) {
      double s = b[static_cast<std::size_t>(o)];
      for (int i = 0; i < 3; ++i)
        s += X[static_cast<std::size_t>(r * 3 + i)] * W[static_cast<std::size_t>(o * 3 + i)];
      want.push_back(s);
    }
  Tensor y = l(x);
  REQUIRE(y.shape() == Dims{2, 4, 2});
  require_close(vals(y), want, 1e-5, 1e-5);
  // Non-contiguous input: the same rows seen through a permute.
  Tensor xt = f32(X, {2, 4, 3}).permute({1, 0, 2});
  require_close(vals(l(xt).permute({1, 0, 2})), want, 1e-5, 1e-5);
  nobias.weight.assign(f32(W, {2, 3}));
  std::vector<double> want_nb = want;
  for (std::size_t i = 0; i < want_nb.size(); ++i) want_nb[i] -= b[i % 2];
  require_close(vals(nobias(x)), want_nb, 1e-5, 1e-5);

  check_gradients(
      [](const std::vector<Tensor>& in) {
        nn::Linear m(3, 2);
        m.weight = in[1], m.bias = in[2];
        return m(in[0]);
      },
      {random_tensor({4, 3}, 1), random_tensor({2, 3}, 2), random_tensor({2}, 3)});

  REQUIRE_THROWS_WITH(l(Tensor::ones({2, 4})), Contains("Linear(3, 2): input (2, 4) must end in 3 features"));
  REQUIRE_THROWS_WITH(nn::Linear(-1, 2), Contains("Linear: in_features must be at least 0, got -1"));
}

namespace {
// The reference convolution: out[n][o][y][x] = bias[o] + sum over the group's channels and the
// kernel of in[n][c][y*sh - top + ky*dh][x*sw - left + kx*dw] * w[o][c][ky][kx], zero outside.
std::vector<double> conv_ref(const std::vector<double>& in, Dims is, const std::vector<double>& w, Dims ws,
                             const std::vector<double>& b, i64 groups, i64 sh, i64 sw, i64 top, i64 bottom,
                             i64 left, i64 right, i64 dh, i64 dw, Dims& os) {
  i64 N = is[0], C = is[1], H = is[2], W = is[3], O = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  i64 OH = (H + top + bottom - dh * (kh - 1) - 1) / sh + 1,
      OW = (W + left + right - dw * (kw - 1) - 1) / sw + 1;
  os = {N, O, OH, OW};
  std::vector<double> out;
  for (i64 n = 0; n < N; ++n)
    for (i64 o = 0; o < O; ++o)
      for (i64 y = 0; y < OH; ++y)
        for (i64 x = 0; x < OW; ++x) {
          double s = b.empty() ? 0 : b[static_cast<std::size_t>(o)];
          i64 g = o / (O / groups);
          for (i64 c = 0; c < cg; ++c)
            for (i64 ky = 0; ky < kh; ++ky)
              for (i64 kx = 0; kx < kw; ++kx) {
                i64 iy = y * sh - top + ky * dh, ix = x * sw - left + kx * dw;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                s += in[static_cast<std::size_t>(((n * C + g * cg + c) * H + iy) * W + ix)] *
                     w[static_cast<std::size_t>(((o * cg + c) * kh + ky) * kw + kx)];
              }
          out.push_back(s);
        }
  return out;
}
}  // namespace

TEST_CASE("Conv2d: shapes, init, forward with stride/padding/dilation/groups, gradients, errors", "[nn]") {
  Tensor::manual_seed(2);
  nn::Conv2d c(4, 6, {3, 2}, {2, 1}, 1, {1, 2}, 2);
  REQUIRE(c.weight.shape() == Dims{6, 2, 3, 2});
  REQUIRE(c.bias->shape() == Dims{6});
  nn::Conv2d wide(16, 32, 3);
  REQUIRE(wide.kernel_size == std::vector<i64>{3, 3});
  double bound = 1 / std::sqrt(16.0 * 9);
  REQUIRE(max_abs(wide.weight) <= bound);
  REQUIRE(max_abs(wide.weight) > 0.95 * bound);
  REQUIRE(max_abs(*wide.bias) <= bound);
  REQUIRE(nn::get_state_dict(nn::Conv2d(1, 1, 1, 1, 0, 1, 1, false)).keys() ==
          std::vector<std::string>{"weight"});

  Dims is{2, 4, 6, 7}, os;
  std::vector<double> X = random_values(prod(is), 3), W = random_values(6 * 2 * 3 * 2, 4),
                      B = random_values(6, 5);
  c.weight = f64(W, {6, 2, 3, 2});
  c.bias = f64(B, {6});
  std::vector<double> want = conv_ref(X, is, W, {6, 2, 3, 2}, B, 2, 2, 1, 1, 1, 1, 1, 1, 2, os);
  Tensor y = c(f64(X, is));
  REQUIRE(y.shape() == os);
  require_close(vals(y), want, 1e-9, 1e-9);

  // (left, right, top, bottom) padding, no bias, an input seen through a flip.
  nn::Conv2d d(4, 2, 2, 1, {0, 2, 1, 0}, 1, 1, false);
  std::vector<double> W2 = random_values(2 * 4 * 2 * 2, 6), Xf(X.size());
  d.weight = f64(W2, {2, 4, 2, 2});
  Tensor xf = f64(X, is).flip(3);
  for (i64 i = 0; i < prod(is); ++i)
    Xf[static_cast<std::size_t>(i)] = X[static_cast<std::size_t>(i - i % 7 + 6 - i % 7)];
  want = conv_ref(Xf, is, W2, {2, 4, 2, 2}, {}, 1, 1, 1, 1, 0, 0, 2, 1, 1, os);
  REQUIRE(d(xf).shape() == os);
  require_close(vals(d(xf)), want, 1e-9, 1e-9);

  check_gradients(
      [](const std::vector<Tensor>& in) {
        nn::Conv2d m(2, 2, 2, 1, 1, 1, 2);
        m.weight = in[1], m.bias = in[2];
        return m(in[0]);
      },
      {random_tensor({1, 2, 3, 3}, 7), random_tensor({2, 1, 2, 2}, 8), random_tensor({2}, 9)});

  REQUIRE_THROWS_WITH(
      nn::Conv2d(3, 4, 3, 1, 0, 1, 2),
      Contains("Conv2d(3, 4): in_channels and out_channels") && Contains("divisible by groups = 2"));
  REQUIRE_THROWS_WITH(nn::Conv2d(3, 4, 0), Contains("Conv2d(3, 4): kernel_size must be at least 1, got 0"));
  REQUIRE_THROWS_WITH(nn::Conv2d(3, 4, {1, 2, 3}), Contains("kernel_size (1, 2, 3) needs 1 or 2 values"));
  REQUIRE_THROWS_WITH(nn::Conv2d(3, 4, 3, 1, {1, 2, 3}),
                      Contains("padding (1, 2, 3) needs 1, 2 or 4 values"));
  REQUIRE_THROWS_WITH(nn::Conv2d(3, 4, 3, 1, -1), Contains("padding must be at least 0"));
  REQUIRE_THROWS_WITH(c(Tensor::ones({1, 3, 6, 7})), Contains("conv2d") && Contains("channels"));
}

namespace {
// Per-channel mean and biased variance of (N, C, H, W) values.
void channel_stats(const std::vector<double>& x, Dims s, std::vector<double>& mean,
                   std::vector<double>& var) {
  i64 N = s[0], C = s[1], HW = s[2] * s[3];
  mean.assign(static_cast<std::size_t>(C), 0), var.assign(static_cast<std::size_t>(C), 0);
  for (i64 c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (i64 n = 0; n < N; ++n)
      for (i64 i = 0; i < HW; ++i) sum += x[static_cast<std::size_t>((n * C + c) * HW + i)];
    double m = sum / static_cast<double>(N * HW);
    for (i64 n = 0; n < N; ++n)
      for (i64 i = 0; i < HW; ++i) sq += std::pow(x[static_cast<std::size_t>((n * C + c) * HW + i)] - m, 2);
    mean[static_cast<std::size_t>(c)] = m,
    var[static_cast<std::size_t>(c)] = sq / static_cast<double>(N * HW);
  }
}
std::vector<double> normalize(const std::vector<double>& x, Dims s, const std::vector<double>& mean,
                              const std::vector<double>& var, const std::vector<double>& w,
                              const std::vector<double>& b, double eps) {
  i64 C = s[1], HW = s[2] * s[3];
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto c = static_cast<std::size_t>((static_cast<i64>(i) / HW) % C);
    out[i] = (x[i] - mean[c]) / std::sqrt(var[c] + eps) * w[c] + b[c];
  }
  return out;
}
}  // namespace

TEST_CASE("BatchNorm2d: batch statistics and running updates in training, running statistics in eval",
          "[nn]") {
  nn::BatchNorm2d bn(3, 1e-3, true, true, 0.2);
  REQUIRE(nn::get_state_dict(bn).keys() ==
          std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  REQUIRE(vals(*bn.weight) == std::vector<double>{1, 1, 1});
  REQUIRE(vals(*bn.running_var) == std::vector<double>{1, 1, 1});
  REQUIRE(bn.running_mean->requires_grad.get() == false);
  std::vector<double> w{0.5, 2, -1}, b{0.1, 0, -0.3};
  bn.weight->assign(f32(w, {3}));
  bn.bias->assign(f32(b, {3}));

  Dims s{2, 3, 2, 2};
  std::vector<double> X1 = random_values(prod(s), 21, -1, 3), X2 = random_values(prod(s), 22, 0, 1);
  std::vector<double> rm(3, 0.0), rv(3, 1.0), mean, var;
  const double n = 8;
  for (const auto* X : {&X1, &X2}) {
    Tensor::TrainingGuard training;
    Tensor y = bn(f32(*X, s));
    channel_stats(*X, s, mean, var);
    require_close(vals(y), normalize(*X, s, mean, var, w, b, 1e-3), 1e-5, 1e-5, "training output");
    for (std::size_t c = 0; c < 3; ++c)
      rm[c] = 0.8 * rm[c] + 0.2 * mean[c], rv[c] = 0.8 * rv[c] + 0.2 * var[c] * n / (n - 1);
    require_close(vals(*bn.running_mean), rm, 1e-6, 1e-5, "running_mean");
    require_close(vals(*bn.running_var), rv, 1e-6, 1e-5, "running_var (unbiased)");
  }
  REQUIRE(vals(*bn.num_batches_tracked) == std::vector<double>{2});

  // Eval: the running statistics, left as they are.
  Tensor y = bn(f32(X1, s));
  require_close(vals(y), normalize(X1, s, rm, rv, w, b, 1e-3), 1e-5, 1e-5, "eval output");
  require_close(vals(*bn.running_mean), rm, 1e-6, 1e-5);
  REQUIRE(vals(*bn.num_batches_tracked) == std::vector<double>{2});

  // Without running statistics: batch statistics always, nothing tracked; without affine: no weight.
  nn::BatchNorm2d plain(3, 1e-5, false, false);
  REQUIRE(nn::get_state_dict(plain).empty());
  channel_stats(X1, s, mean, var);
  require_close(vals(plain(f32(X1, s))), normalize(X1, s, mean, var, {1, 1, 1}, {0, 0, 0}, 1e-5), 1e-5, 1e-5,
                "untracked eval");

  // Gradients through the batch statistics (training) and the running ones (eval).
  for (bool train : {true, false}) {
    INFO("training " << train);
    Tensor::TrainingGuard mode(train);
    check_gradients(
        [](const std::vector<Tensor>& in) {
          nn::BatchNorm2d m(2);
          m.weight = in[1], m.bias = in[2];
          return m(in[0]);
        },
        {random_tensor({2, 2, 2, 3}, 31), random_tensor({2}, 32), random_tensor({2}, 33)}, 1e-6, 1e-4, 1e-4);
  }

  REQUIRE_THROWS_WITH(bn(Tensor::ones({2, 3, 4})),
                      Contains("BatchNorm2d(3): input (2, 3, 4) must be (N, 3, H, W)"));
  REQUIRE_THROWS_WITH(bn(Tensor::ones({2, 4, 1, 1})), Contains("(N, 3, H, W)"));
  Tensor::TrainingGuard training;
  REQUIRE_THROWS_WITH(bn(Tensor::ones({1, 3, 1, 1})), Contains("more than one value per channel"));
  REQUIRE_THROWS_WITH(nn::BatchNorm2d(0), Contains("BatchNorm2d: sz must be at least 1"));
  REQUIRE_THROWS_WITH(nn::BatchNorm2d(2, 1e-5, true, true, 1.5), Contains("momentum must be in [0, 1]"));
}

TEST_CASE("LayerNorm: over the trailing axes, affine, gradients, errors", "[nn]") {
  nn::LayerNorm ln({3, 4}, 1e-4);
  REQUIRE(ln.weight->shape() == Dims{3, 4});
  REQUIRE(vals(*ln.weight) == std::vector<double>(12, 1.0));
  REQUIRE(vals(*ln.bias) == std::vector<double>(12, 0.0));
  std::vector<double> X = random_values(2 * 12, 41), W = random_values(12, 42), B = random_values(12, 43);
  ln.weight->assign(f32(W, {3, 4}));
  ln.bias->assign(f32(B, {3, 4}));
  std::vector<double> want;
  for (int r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 12; ++i) m += X[static_cast<std::size_t>(r * 12 + i)] / 12;
    for (int i = 0; i < 12; ++i) v += std::pow(X[static_cast<std::size_t>(r * 12 + i)] - m, 2) / 12;
    for (int i = 0; i < 12; ++i)
      want.push_back((X[static_cast<std::size_t>(r * 12 + i)] - m) / std::sqrt(v + 1e-4) *
                         W[static_cast<std::size_t>(i)] +
                     B[static_cast<std::size_t>(i)]);
  }
  require_close(vals(ln(f32(X, {2, 3, 4}))), want, 1e-5, 1e-5);

  nn::LayerNorm plain(4, 1e-5, false);
  REQUIRE(nn::get_state_dict(plain).empty());
  Tensor y = plain(f32(X, {6, 4}));
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 4; ++i) m += vals(y)[static_cast<std::size_t>(r * 4 + i)] / 4;
    for (int i = 0; i < 4; ++i) v += std::pow(vals(y)[static_cast<std::size_t>(r * 4 + i)] - m, 2) / 4;
    REQUIRE(std::abs(m) < 1e-6);
    REQUIRE(std::abs(v - 1) < 1e-3);
  }

  check_gradients(
      [](const std::vector<Tensor>& in) {
        nn::LayerNorm m(3);
        m.weight = in[1], m.bias = in[2];
        return m(in[0]);
      },
      {random_tensor({2, 3}, 44), random_tensor({3}, 45), random_tensor({3}, 46)});

  REQUIRE_THROWS_WITH(ln(Tensor::ones({2, 4, 3})),
                      Contains("LayerNorm(3, 4): the last dimensions of input (2, 4, 3) must be (3, 4)"));
  REQUIRE_THROWS_WITH(ln(Tensor::ones({4})), Contains("must be (3, 4)"));
  REQUIRE_THROWS_WITH(nn::LayerNorm({3, 0}),
                      Contains("LayerNorm: a normalized size must be at least 1, got 0"));
}

TEST_CASE("Embedding: rows by index of any shape, init, gradients", "[nn]") {
  Tensor::manual_seed(3);
  nn::Embedding e(10, 4);
  REQUIRE(e.weight.shape() == Dims{10, 4});
  double bound = std::sqrt(6.0 / 14);  // glorot_uniform
  REQUIRE(max_abs(e.weight) <= bound);
  REQUIRE(max_abs(e.weight) > 0.8 * bound);
  std::vector<double> W = vals(e.weight);
  std::vector<std::int64_t> idx{3, 0, 9, 3, 7, 1};
  Tensor y = e(Tensor(idx, {2, 3}));
  REQUIRE(y.shape() == Dims{2, 3, 4});
  std::vector<double> want;
  for (std::int64_t i : idx)
    for (int j = 0; j < 4; ++j) want.push_back(W[static_cast<std::size_t>(i * 4 + j)]);
  require_close(vals(y), want, 0, 0);
  require_close(vals(e(Tensor({3.f, 0.f, 9.f}))), std::vector<double>(want.begin(), want.begin() + 12), 0, 0);
  REQUIRE(e(Tensor(std::vector<std::int64_t>{2}, Dims{})).shape() == Dims{4});

  check_gradients(
      [](const std::vector<Tensor>& in) {
        nn::Embedding m(5, 3);
        m.weight = in[0];
        return m(Tensor(std::vector<std::int64_t>{4, 1, 4, 0}, {2, 2}));
      },
      {random_tensor({5, 3}, 51)});
  REQUIRE_THROWS_WITH(e(Tensor({1.f}, {.dtype = dtypes::bool_})), Contains("must be integers, not bool"));
  REQUIRE_THROWS_WITH(nn::Embedding(0, 4), Contains("Embedding: vocab_size must be at least 1"));
}

TEST_CASE("a small CNN trains, saves and loads", "[nn]") {
  struct Cnn {
    nn::Conv2d conv{1, 4, 3, 1, 1};
    nn::BatchNorm2d bn{4};
    nn::LayerNorm ln{16};
    nn::Linear fc{16, 2};
    Tensor operator()(const Tensor& x) const {
      Tensor h = bn(conv(x)).relu().avg_pool2d({2, 2}).flatten(1);  // (N, 4 * 2 * 2)
      return fc(ln(h));
    }
    nn::StateDict state_dict() const {
      return nn::state_dict({{"conv", conv}, {"bn", bn}, {"ln", ln}, {"fc", fc}});
    }
  };
  Tensor::manual_seed(4);
  Cnn net;
  // Two classes: a bright top half or a bright bottom half.
  std::vector<float> xs;
  std::vector<std::int64_t> ys;
  std::vector<double> noise = random_values(16 * 16, 61, 0, 0.3);
  for (int i = 0; i < 16; ++i) {
    ys.push_back(i % 2);
    for (int p = 0; p < 16; ++p)
      xs.push_back(static_cast<float>(((p < 8) == (i % 2 == 0) ? 1.0 : 0.0) +
                                      noise[static_cast<std::size_t>(i * 16 + p)]));
  }
  Tensor X(xs, {16, 1, 4, 4}), Y(ys, {16});
  nn::optim::Adam opt(nn::get_parameters(net), 0.05);
  REQUIRE(opt.buffers.size() == 3);  // bn's running statistics
  double loss0 = 0, loss = 0;
  {
    Tensor::TrainingGuard training;
    for (int s = 0; s < 30; ++s) {
      opt.zero_grad();
      Tensor l = net(X).sparse_categorical_crossentropy(Y);
      l.backward();
      opt.step();
      (s == 0 ? loss0 : loss) = l.item<double>();
    }
  }
  INFO("loss " << loss0 << " -> " << loss);
  REQUIRE(loss < 0.5 * loss0);
  std::vector<double> out = vals(net(X));

  TempFile file("cnn.safetensors");
  nn::safe_save(nn::get_state_dict(net), file.path);
  Cnn fresh;
  nn::load_state_dict(fresh, nn::safe_load(file.path));
  REQUIRE(vals(fresh(X)) == out);
  REQUIRE(vals(*fresh.bn.num_batches_tracked) == std::vector<double>{30});
}
