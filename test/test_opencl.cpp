// The OPENCL device against the CPU interpreter: every dtype through every op the renderer emits,
// casts, reductions over each axis, non-contiguous and negative-index views, NaN and inf, sizes
// large enough to upcast, an MLP's gradients; plus the runtime itself: buffer round trips, raw
// programs, launch-size checks, the build-error path and the disk cache. Without an OpenCL device
// every case WARNs its reason and passes (Catch 2.13 has no SKIP).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "child_process.hpp"
#include "gradcheck.hpp"
#include "metagrad/backends/ops_opencl.hpp"

#include "reference.hpp"

using namespace metagrad;
using namespace metagrad::test;  // reference.hpp: Host, at, gather, for_each_index, kInf, kNaN
using Catch::Matchers::Contains;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

// The device, or nullptr after a WARN saying why it is not there.
OpenCLBackend* opencl() {
  try {
    auto* cl = dynamic_cast<OpenCLBackend*>(&Device::get("OPENCL"));
    if (!cl) WARN("SKIPPED: Device::get(\"OPENCL\") is not an OpenCLBackend");
    return cl;
  } catch (const std::exception& e) {
    WARN("SKIPPED: no OPENCL device: " << e.what());
    return nullptr;
  }
}

// Values that fit `d` (wide ranges and edge values for integers, fractions for floats).
std::vector<double> sample(DType d, i64 n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); };
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (d == dtypes::bool_)
      v[i] = static_cast<double>(g() % 2);
    else if (d == dtypes::int8)
      v[i] = std::floor(uni(-128, 128));
    else if (d == dtypes::uint8)
      v[i] = std::floor(uni(0, 256));
    else if (d == dtypes::int32)
      v[i] = std::floor(uni(-1000, 1000));
    else if (d == dtypes::int64)
      v[i] = std::floor(uni(-1e6, 1e6));
    else
      v[i] = uni(-3, 3);
  }
  if (d == dtypes::int32 && n >= 4) v[0] = -2147483648.0, v[1] = 2147483647.0, v[2] = -1, v[3] = 0;
  if (d == dtypes::int64 && n >= 4) v[0] = -1099511627776.0, v[1] = 1099511627776.0, v[2] = -1, v[3] = 0;
  if (dtypes::is_float(d) && n >= 3) v[0] = 0, v[1] = -0.0, v[2] = 1;
  return v;
}

Tensor on_cpu(const std::vector<double>& v, const Dims& shape, DType d) {
  return Tensor(v, shape, {.device = "CPU", .dtype = d}).realize();
}

// Agreement with the interpreter: exact for integers and bool; float16 and bfloat16 differ where the
// device's libm does (a last place of theirs); float32 kernels use the device's libm.
struct Tol {
  double atol, rtol;
};
Tol tol_for(DType d) {
  if (d == dtypes::float16) return {1e-2, 1e-2};
  if (d == dtypes::bfloat16) return {1.6e-2, 3.2e-2};  // 8 bits: a last-place difference is 2^-8
  if (d == dtypes::float32) return {1e-5, 1e-5};
  if (d == dtypes::float64) return {1e-12, 1e-12};
  return {0, 0};
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs f on CPU inputs and on the same inputs moved to OPENCL; the results must agree.
void agree(const Fn& f, const std::vector<Tensor>& cpu, const std::string& what,
           std::optional<Tol> tol = {}) {
  INFO(what);
  std::vector<Tensor> cl;
  for (const Tensor& t : cpu) cl.push_back(t.to("OPENCL"));
  Tensor want = f(cpu), got = f(cl);
  REQUIRE(got.device() == "OPENCL");
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  Tol t = tol.value_or(tol_for(want.dtype()));
  require_close(got.to_vector<double>(), want.to_vector<double>(), t.atol, t.rtol, what);
}

Tensor lb(const LazyBufferPtr& p) { return Tensor(p); }

// Sources of the kernels `f` runs (GlobalCounters::cache captures them).
std::vector<std::string> kernels_of(const std::function<void()>& f) {
  GlobalCounters::cache = std::vector<CacheEntry>{};
  f();
  std::vector<std::string> out;
  for (const auto& e : *GlobalCounters::cache) out.push_back(e.prg.prg);
  GlobalCounters::cache.reset();
  return out;
}

const char* kAdd =
    R"(__kernel void add(__global float* out, __global const float* a, __global const float* b) {
  int i = get_global_id(0);
  out[i] = a[i] + b[i];
})";

}  // namespace

TEST_CASE("OPENCL: the device is found and reports itself", "[opencl]") {
  OpenCLBackend* cl = opencl();
  if (!cl) return;
  INFO(cl->device_name());
  CHECK(!cl->device_name().empty());
  auto avail = Device::available();
  CHECK(std::find(avail.begin(), avail.end(), "OPENCL") != avail.end());
  CHECK(&Device::get("opencl") == cl);  // names are case-insensitive
}

TEST_CASE("OPENCL: buffers round-trip every dtype", "[opencl]") {
  OpenCLBackend* cl = opencl();
  if (!cl) return;
  for (DType d : dtypes::all) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1} << 20}) {
      INFO(d.name << " x " << n);
      auto buf = cl->alloc(n, d);
      const RawBuffer& raw = *buf;  // by name: the test links where the device is not built
      REQUIRE(std::string(typeid(raw).name()).find("RawOpenCLBuffer") != std::string::npos);
      REQUIRE(buf->size == n);
      REQUIRE(buf->nbytes() == n * static_cast<std::size_t>(d.itemsize));
      std::vector<unsigned char> in(buf->nbytes()), out(buf->nbytes(), 0xAB);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 131 + 7);
      if (d == dtypes::bool_)
        for (auto& b : in) b &= 1;
      buf->copyin(in.data());
      buf->copyout(out.data());
      REQUIRE(in == out);
    }
  }
  auto f = cl->alloc(3, dtypes::float32);
  std::vector<float> v{1.5f, -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  f->copyin(v.data());
  auto back = f->toCPU<float>();
  CHECK(back[0] == 1.5f);
  CHECK(back[1] == -kInf);
  CHECK(std::isnan(back[2]));
  CHECK_THROWS_WITH(f->toCPU<double>(), Contains("holds float32"));
}

TEST_CASE("OPENCL: a hand-written program runs with global and local sizes", "[opencl]") {
  OpenCLBackend* cl = opencl();
  if (!cl) return;
  auto prg = cl->compile("add", kAdd);
  const std::size_t n = 96;
  auto out = cl->alloc(n, dtypes::float32), a = cl->alloc(n, dtypes::float32),
       b = cl->alloc(n, dtypes::float32);
  std::vector<float> ha(n), hb(n);
  for (std::size_t i = 0; i < n; ++i) ha[i] = static_cast<float>(i), hb[i] = 0.5f * static_cast<float>(i);
  a->copyin(ha.data());
  b->copyin(hb.data());
  for (std::vector<i64> local : {std::vector<i64>{}, std::vector<i64>{32}, std::vector<i64>{1}}) {
    std::vector<float> zero(n, 0);
    out->copyin(zero.data());
    (*prg)({static_cast<i64>(n)}, local, {out.get(), a.get(), b.get()});
    auto r = out->toCPU<float>();
    for (std::size_t i = 0; i < n; ++i) REQUIRE(r[i] == 1.5f * static_cast<float>(i));
  }
  // Kernels have no bounds checks, so a local size that does not tile the range is refused.
  CHECK_THROWS_WITH((*prg)({static_cast<i64>(n)}, {7}, {out.get(), a.get(), b.get()}),
                    Contains("does not divide"));
  // Only device buffers can be arguments.
  RawMallocBuffer host(n, dtypes::float32);
  CHECK_THROWS_WITH((*prg)({static_cast<i64>(n)}, {}, {&host, a.get(), b.get()}),
                    Contains("not a RawOpenCLBuffer"));
  // An empty range launches nothing.
  CHECK_NOTHROW((*prg)({0}, {}, {out.get(), a.get(), b.get()}));
}

TEST_CASE("OPENCL: a kernel that fails to build throws its build log and source", "[opencl]") {
  OpenCLBackend* cl = opencl();
  if (!cl) return;
  const std::string bad = "__kernel void broken(__global float* out) { out[0] = not_declared_anywhere; }";
  try {
    cl->compile("broken", bad);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Contains("CL_BUILD_PROGRAM_FAILURE"));
    CHECK_THAT(msg, Contains("--- build log ---"));
    CHECK_THAT(msg, Contains("--- source ---"));
    CHECK_THAT(msg, Contains(bad));
    // The compiler's own message (every OpenCL C compiler names the identifier).
    auto log =
        msg.substr(msg.find("--- build log ---"), msg.find("--- source ---") - msg.find("--- build log ---"));
    CHECK_THAT(log, Contains("not_declared_anywhere"));
  }
  CHECK_THROWS_WITH(cl->compile("missing", kAdd), Contains("no kernel missing") && Contains(kAdd));
  // The device still works afterwards.
  agree([](const std::vector<Tensor>& x) { return x[0] + 1; }, {on_cpu({1, 2, 3}, {3}, dtypes::float32)},
        "after");
}

TEST_CASE("OPENCL: float64 needs cl_khr_fp64", "[opencl]") {
  OpenCLBackend* cl = opencl();
  if (!cl) return;
  const std::string src = "__kernel void dbl(__global double* out) { out[0] = 0.5; }";
  if (!cl->has_fp64()) {
    CHECK_THROWS_WITH(cl->compile("dbl", src), Contains("cl_khr_fp64") && Contains(src));
    CHECK_THROWS_WITH(Tensor({1.f}, {.device = "OPENCL", .dtype = dtypes::float64}).exp().realize(),
                      Contains("cl_khr_fp64"));
    return;
  }
  auto prg = cl->compile("dbl", src);
  auto out = cl->alloc(1, dtypes::float64);
  (*prg)({1}, {}, {out.get()});
  CHECK(out->toCPU<double>()[0] == 0.5);
}

TEST_CASE("OPENCL: built programs are cached on disk and reused by source", "[opencl]") {
  OpenCLBackend* cl = opencl();
  if (!cl) return;
  namespace fs = std::filesystem;
  std::string old = metagrad::getenv("METAGRAD_CACHE");
  fs::path dir = fs::temp_directory_path() / ("metagrad-opencl-test-" + std::to_string(::getpid()));
  ::setenv("METAGRAD_CACHE", dir.c_str(), 1);
  // A fresh source (a unique comment) so no cache, ours or the driver's, has seen it.
  std::string src =
      "// " + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n" + kAdd;
  int before = cl->compiles();
  auto p1 = cl->compile("add", src);
  CHECK(cl->compiles() == before + 1);
  auto p2 = cl->compile("add", src);  // from the binary on disk
  CHECK(cl->compiles() == before + 1);
  // One binary and its sidecar (size and hash, checked before a load).
  CHECK(std::distance(fs::directory_iterator(dir / "opencl"), fs::directory_iterator{}) == 2);
  for (const auto& e : fs::directory_iterator(dir / "opencl")) {
    std::string n = e.path().filename().string();
    CHECK((n.ends_with(".bin") || n.ends_with(".bin.sum")));
  }
  auto out = cl->alloc(4, dtypes::float32), a = cl->alloc(4, dtypes::float32);
  std::vector<float> h{1, 2, 3, 4};
  a->copyin(h.data());
  (*p2)({4}, {}, {out.get(), a.get(), a.get()});
  CHECK(out->toCPU<float>() == std::vector<float>{2, 4, 6, 8});
  // A corrupt cached binary is rebuilt from source, not an error.
  for (const auto& e : fs::directory_iterator(dir / "opencl")) std::ofstream(e.path()) << "garbage";
  CHECK_NOTHROW(cl->compile("add", src));
  CHECK(cl->compiles() == before + 2);
  // A binary with a byte flipped, or one whose sidecar is gone, is rebuilt, never given the driver.
  auto damage = [&](bool flip) {
    for (const auto& e : fs::directory_iterator(dir / "opencl"))
      if (e.path().extension() == ".bin" && flip) {
        std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
        auto at = static_cast<std::streamoff>(fs::file_size(e.path()) / 2);
        f.seekg(at);
        char c = static_cast<char>(f.get() ^ 0x5a);
        f.seekp(at);
        f.put(c);
      } else if (e.path().extension() == ".sum" && !flip) {
        fs::remove(e.path());
      }
  };
  damage(true);
  CHECK_NOTHROW(cl->compile("add", src));
  CHECK(cl->compiles() == before + 3);
  damage(false);
  auto p3 = cl->compile("add", src);
  CHECK(cl->compiles() == before + 4);
  (*p3)({4}, {}, {out.get(), a.get(), a.get()});
  CHECK(out->toCPU<float>() == std::vector<float>{2, 4, 6, 8});
  if (old.empty())
    ::unsetenv("METAGRAD_CACHE");
  else
    ::setenv("METAGRAD_CACHE", old.c_str(), 1);
  fs::remove_all(dir);
}

TEST_CASE("OPENCL: every op the renderer emits, on every dtype", "[opencl]") {
  if (!opencl()) return;
  const Dims shape{6, 5};
  for (DType d : dtypes::all) {
    INFO("dtype " << d.name);
    Tensor a = on_cpu(sample(d, 30, 1), shape, d), b = on_cpu(sample(d, 30, 2), shape, d);
    std::vector<BinaryOps> binary{BinaryOps::ADD, BinaryOps::MUL, BinaryOps::CMPEQ, BinaryOps::MAX};
    if (d != dtypes::bool_) {
      binary.push_back(BinaryOps::SUB);
      binary.push_back(BinaryOps::DIV);
    }
    if (dtypes::is_float(d)) binary.push_back(BinaryOps::POW);
    for (BinaryOps op : binary)
      agree([op](const std::vector<Tensor>& x) { return lb(x[0].lazydata->e(op, x[1].lazydata)); }, {a, b},
            to_string(op));
    agree([](const std::vector<Tensor>& x) { return lb(x[0].lazydata->e(UnaryOps::NOOP)); }, {a}, "NOOP");
    if (dtypes::is_float(d))
      for (UnaryOps op : {UnaryOps::EXP2, UnaryOps::LOG2, UnaryOps::SIN})
        agree([op](const std::vector<Tensor>& x) { return lb(x[0].lazydata->e(op)); }, {a}, to_string(op));
    // A fused chain with a constant, a comparison and a select.
    agree([](const std::vector<Tensor>& x) { return (x[0] * x[1] + x[0]).eq(x[1]).where(x[0], x[1]); },
          {a, b}, "chain");
    for (ReduceOps op : {ReduceOps::SUM, ReduceOps::MAX})
      for (Dims to : {Dims{1, 5}, Dims{6, 1}, Dims{1, 1}}) {
        bool bad_init = d == dtypes::bool_ || d == dtypes::int8 || d == dtypes::int32;
        if (op == ReduceOps::MAX && bad_init) continue;  // a known bug elsewhere, see the end

        agree([op, to](const std::vector<Tensor>& x) { return lb(x[0].lazydata->r(op, to)); }, {a},
              to_string(op) + " to " + to_string(to));
      }
  }
}

TEST_CASE("OPENCL: integer division, powers and overflow keep the interpreter's semantics", "[opencl]") {
  if (!opencl()) return;
  for (DType d : {dtypes::int8, dtypes::uint8, dtypes::int32, dtypes::int64}) {
    INFO(d.name);
    bool sig = !dtypes::is_unsigned(d);
    double lo = d == dtypes::int8 ? -128 : d == dtypes::int32 ? -2147483648.0 : -9.0e18;
    std::vector<double> num{7, sig ? -7.0 : 250.0, 0, 5, 100, sig ? lo : 255, 3, 2, sig ? -3.0 : 9.0};
    std::vector<double> den{2, 2, 0, 0, sig ? -7.0 : 7.0, sig ? -1.0 : 1.0, sig ? -2.0 : 2.0, 31, 3};
    Tensor a = on_cpu(num, {9}, d), b = on_cpu(den, {9}, d);
    for (BinaryOps op : {BinaryOps::DIV, BinaryOps::POW, BinaryOps::MUL, BinaryOps::ADD})
      agree([op](const std::vector<Tensor>& x) { return lb(x[0].lazydata->e(op, x[1].lazydata)); }, {a, b},
            to_string(op));
  }
}

TEST_CASE("OPENCL: casts between every pair of dtypes", "[opencl]") {
  if (!opencl()) return;
  // In range for every target (float -> unsigned of a negative is undefined in C and OpenCL C).
  std::vector<double> v{0, 1, 2.5, 3.75, 100.25, 126.5, 0.5, 7, 64, 99.99};
  std::vector<double> neg{0, -1, -2.5, -3.75, -100.25, -127.5, -0.5, 7, -64, 99.99};
  for (DType from : dtypes::all) {
    for (DType to : dtypes::all) {
      for (const auto* src : {&v, &neg}) {
        if (src == &neg && (dtypes::is_unsigned(to) || from == dtypes::bool_)) continue;
        INFO(from.name << " -> " << to.name << (src == &neg ? " (negative)" : ""));
        agree([to](const std::vector<Tensor>& x) { return x[0].cast(to); }, {on_cpu(*src, {10}, from)},
              "cast");
      }
    }
  }
  // Float to bool is "!= 0": NaN and fractions are true, -0.0 false.
  for (DType from : {dtypes::float16, dtypes::float32, dtypes::float64})
    agree([](const std::vector<Tensor>& x) { return x[0].cast(dtypes::bool_); },
          {on_cpu({kNaN, -0.0, 0.0, 0.5, -0.25, 1e-30, kInf, -kInf}, {8}, from)},
          std::string("to bool from ") + from.name);
  // bool arithmetic stays bool: true + true is true (OpenCL C computes bools as `bool`, not uchar).
  Tensor t = on_cpu({1, 1, 0, 0}, {4}, dtypes::bool_), u = on_cpu({1, 0, 1, 0}, {4}, dtypes::bool_);
  agree([](const std::vector<Tensor>& x) { return x[0] + x[1]; }, {t, u}, "bool + bool");
  agree([](const std::vector<Tensor>& x) { return lb(x[0].lazydata->e(BinaryOps::SUB, x[1].lazydata)); },
        {t, u}, "bool - bool");
  agree(
      [](const std::vector<Tensor>& x) {
        return lb(x[0].reshape({1, 4}).expand({300, 4}).lazydata->r(ReduceOps::SUM, {1, 4}));
      },
      {t}, "bool sum of 300");
}

TEST_CASE("OPENCL: float16 and float64 math", "[opencl]") {
  if (!opencl()) return;
  for (DType d : {dtypes::float16, dtypes::float64}) {
    Tensor a = on_cpu(random_values(96, 3, 0.1, 3), {12, 8}, d), b = on_cpu(random_values(96, 4), {12, 8}, d);
    Tensor c = on_cpu(random_values(128, 5), {8, 16}, d);
    agree([](const std::vector<Tensor>& x) { return (x[0].log() * x[1]).exp().sum(1); }, {a, b},
          "log-mul-exp-sum");
    agree([](const std::vector<Tensor>& x) { return x[0].sqrt() / x[1] + x[0].sin(); }, {a, b},
          "sqrt-div-sin");
    agree([](const std::vector<Tensor>& x) { return x[0].matmul(x[1].transpose()); }, {a, b}, "matmul");
    agree([](const std::vector<Tensor>& x) { return x[0].matmul(x[1]); }, {a, c}, "tiled matmul");
  }
  // float16 rounding and range: overflow to inf, subnormals.
  agree([](const std::vector<Tensor>& x) { return x[0] * 2; },
        {on_cpu({40000, 65504, 1e-5, 6e-8, -3e-6, 0.1}, {6}, dtypes::float16)}, "half range", Tol{0, 0});
}

TEST_CASE("OPENCL: elementwise chains and activations (float32)", "[opencl]") {
  if (!opencl()) return;
  Tensor a = on_cpu(random_values(240, 5), {4, 6, 10}, dtypes::float32);
  Tensor b = on_cpu(random_values(240, 6, 0.5, 2), {4, 6, 10}, dtypes::float32);
  std::vector<std::pair<std::string, Fn>> fns = {
      {"a*b+a", [](auto& x) { return x[0] * x[1] + x[0]; }},
      {"relu", [](auto& x) { return x[0].relu(); }},
      {"sigmoid", [](auto& x) { return x[0].sigmoid(); }},
      {"tanh", [](auto& x) { return x[0].tanh(); }},
      {"gelu", [](auto& x) { return x[0].gelu(); }},
      {"exp/log", [](auto& x) { return x[0].exp() + x[1].log(); }},
      {"sqrt/rsqrt", [](auto& x) { return x[1].sqrt() * x[1].rsqrt(); }},
      {"pow", [](auto& x) { return x[1].pow(x[0]); }},
      {"div", [](auto& x) { return x[0] / x[1]; }},
      {"cos/tan", [](auto& x) { return x[0].cos() + x[0].tan(); }},
      {"compare/where", [](auto& x) { return (x[0] < x[1]).where(x[0], -x[1]); }},
      {"max/min", [](auto& x) { return x[0].maximum(x[1]) - x[0].minimum(0.5); }},
      {"abs/sign/clip", [](auto& x) { return x[0].abs() + x[0].sign() + x[0].clip(-0.5, 0.5); }},
      {"floor/ceil", [](auto& x) { return x[0].floor() * x[1].ceil(); }},
      {"softmax", [](auto& x) { return x[0].softmax(); }},
      {"log_softmax axis 1", [](auto& x) { return x[0].log_softmax(1); }},
      {"layernorm", [](auto& x) { return x[0].layernorm(); }},
  };
  for (const auto& [name, f] : fns) agree(f, {a, b}, name, Tol{1e-5, 1e-4});
}

TEST_CASE("OPENCL: reductions over each axis and all of them", "[opencl]") {
  if (!opencl()) return;
  Tensor a = on_cpu(random_values(3 * 4 * 5 * 6, 7), {3, 4, 5, 6}, dtypes::float32);
  for (std::vector<i64> axes : std::vector<std::vector<i64>>{{0}, {1}, {2}, {3}, {0, 2}, {1, 3}, {}}) {
    std::string name;
    for (i64 x : axes) name += std::to_string(x) + " ";
    agree([axes](auto& x) { return x[0].sum(axes); }, {a}, "sum " + name);
    agree([axes](auto& x) { return x[0].max(axes, true); }, {a}, "max " + name);
    agree([axes](auto& x) { return x[0].mean(axes); }, {a}, "mean " + name);
  }
  agree([](auto& x) { return x[0].argmax(2); }, {a}, "argmax");
  agree([](auto& x) { return x[0].cumsum(3); }, {a}, "cumsum");
  // Elementwise work before and after a reduce, fused with it.
  agree([](auto& x) { return (x[0].exp().sum(1) + 1).log(); }, {a}, "exp-sum-log");
}

TEST_CASE("OPENCL: non-contiguous inputs: padded, flipped, permuted, strided, expanded", "[opencl]") {
  if (!opencl()) return;
  Tensor a = on_cpu(random_values(5 * 6 * 7, 8), {5, 6, 7}, dtypes::float32);
  Tensor c = on_cpu(random_values(6 * 7, 9), {6, 7}, dtypes::float32);
  std::vector<std::pair<std::string, Fn>> fns = {
      {"permute",
       [](auto& x) {
         return x[0].permute({2, 0, 1}) * 2;
       }},
      {"flip",
       [](auto& x) {
         return x[0].flip({0, 2}) + 1;
       }},
      {"pad",
       [](auto& x) {
         return x[0].pad({{1, 2}, {0, 3}, {2, 0}}, -1.5) * 3;
       }},
      {"shrink",
       [](auto& x) {
         return x[0].shrink({{1, 4}, {2, 5}, {0, 7}}) - 1;
       }},
      {"stride",
       [](auto& x) {
         return x[0][{Slice{}, Slice{{}, {}, 2}, Slice{{}, {}, -3}}] * 2;
       }},
      {"expand", [](auto& x) { return x[0] + x[1]; }},
      {"transpose+sum", [](auto& x) { return x[0].transpose(0, 2).sum(1); }},
      {"flip+pad",
       [](auto& x) {
         return x[0].flip({1}).pad({{0, 0}, {3, 1}, {1, 1}}).sum(2);
       }},
      {"pad of flipped stride",
       [](auto& x) {
         return x[0][{Slice{{}, {}, -2}}].pad({{2, 2}, {0, 0}, {0, 0}});
       }},
      {"cat", [](auto& x) { return x[0].cat({x[0].flip({0})}, 1); }},
      {"pool",
       [](auto& x) {
         return x[0].reshape({1, 5, 6, 7}).max_pool2d({2, 2});
       }},
      {"conv",
       [](auto& x) {
         return x[0]
             .reshape({1, 5, 6, 7})
             .conv2d(x[0].shrink({{0, 2}, {0, 3}, {0, 3}}).reshape({2, 1, 3, 3}).expand({2, 5, 3, 3}), {}, 1,
                     {1}, {1}, {1});
       }},
  };
  for (const auto& [name, f] : fns) agree(f, {a, c}, name, Tol{1e-5, 1e-5});
}

TEST_CASE("OPENCL: negative numerators in index math use floor division", "[opencl]") {
  if (!opencl()) return;
  Tensor a = on_cpu(random_values(4 * 6, 10), {4, 6}, dtypes::float32);
  // Padding in front of a flip, then a reshape that splits the padded axis: the index of the
  // original data is (5 - (j - 3)) before the split, negative in the padding.
  Fn f = [](auto& x) {
    return x[0]
        .flip({1})
        .pad({{0, 0}, {3, 3}})
        .reshape({4, 3, 4})
        .flip({2})
        .pad({{1, 0}, {0, 0}, {2, 1}})
        .sum(1);
  };
  agree(f, {a}, "flip/pad/reshape");
  Fn g = [](auto& x) {
    return x[0]
        .pad({{2, 2}, {5, 1}})
        .reshape({-1})
        .flip({0})
        .shrink({{3, 70}})
        .reshape({67, 1})
        .expand({67, 2});
  };
  agree(g, {a}, "flat pad-flip-shrink");
  // The generated sources really exercise mg_fdiv/mg_fmod (or the index math folded them away).
  Tensor b = a.to("OPENCL");
  auto srcs = kernels_of([&] { f({b}).realize(), g({b}).realize(); });
  std::string all;
  for (const auto& s : srcs) all += s;
  INFO(all);
  if (all.find("mg_fdiv(") == std::string::npos && all.find("mg_fmod(") == std::string::npos)
    WARN("no kernel here has a negative numerator after simplification: floor division untested");
}

TEST_CASE("OPENCL: NaN and inf", "[opencl]") {
  if (!opencl()) return;
  Tensor a = on_cpu({kNaN, kInf, -kInf, 0, -0.0, 1, -1, 2, kNaN, 3, -kInf, 5}, {3, 4}, dtypes::float32);
  Tensor b = on_cpu({1, kInf, kInf, 0, 1, kNaN, -kInf, 0, 2, kNaN, 1, -2}, {3, 4}, dtypes::float32);
  std::vector<std::pair<std::string, Fn>> fns = {
      {"relu", [](auto& x) { return x[0].relu(); }},
      {"maximum", [](auto& x) { return x[0].maximum(x[1]); }},
      {"max reduce 0", [](auto& x) { return x[0].max(0); }},
      {"max reduce 1", [](auto& x) { return x[0].max(1); }},
      {"max all", [](auto& x) { return x[0].max(); }},
      {"sum", [](auto& x) { return x[0].sum(1); }},
      {"div", [](auto& x) { return x[0] / x[1]; }},
      {"log", [](auto& x) { return x[0].log(); }},
      {"exp", [](auto& x) { return (x[0] * 100).exp(); }},
      {"sqrt", [](auto& x) { return x[0].sqrt(); }},
      {"eq", [](auto& x) { return x[0].eq(x[1]); }},
      {"lt", [](auto& x) { return x[0] < x[1]; }},
      {"sub", [](auto& x) { return x[0] - x[1]; }},
      {"mul", [](auto& x) { return x[0] * x[1]; }},
  };
  for (const auto& [name, f] : fns) agree(f, {a, b}, name);
  for (DType d : {dtypes::float16, dtypes::float64})
    agree([](auto& x) { return (x[0].maximum(x[1]) + x[0].sum(1, true)) / x[1]; },
          {a.cast(d).realize(), b.cast(d).realize()}, std::string("chain in ") + d.name);
}

TEST_CASE("OPENCL: large reductions that upcast", "[opencl]") {
  if (!opencl()) return;
  const i64 n = 4096;
  Tensor big = on_cpu(random_values(n * n, 11, -1, 1), {n, n}, dtypes::float32);
  // Float accumulation over 4096 terms of size ~1: the error grows like sqrt(n) ulps.
  agree([](auto& x) { return x[0].sum(0); }, {big}, "sum axis 0", Tol{1e-3, 1e-4});
  agree([](auto& x) { return x[0].sum(1); }, {big}, "sum axis 1", Tol{1e-3, 1e-4});
  agree([](auto& x) { return x[0].max(0) + x[0].max(1); }, {big}, "max axes", Tol{0, 0});
  agree([](auto& x) { return x[0].sum(); }, {big}, "sum all", Tol{1e-1, 1e-4});
  Tensor l = on_cpu(random_values(256 * 384, 12), {256, 384}, dtypes::float32);
  Tensor r = on_cpu(random_values(384 * 192, 13), {384, 192}, dtypes::float32);
  agree([](auto& x) { return x[0].matmul(x[1]); }, {l, r}, "matmul 256x384x192", Tol{1e-3, 1e-4});
  agree([](auto& x) { return x[0].matmul(x[1]).relu().sum(0); }, {l, r}, "matmul+relu+sum", Tol{1e-2, 1e-4});
}

TEST_CASE("OPENCL: backward through a small MLP matches CPU", "[opencl]") {
  if (!opencl()) return;
  auto make = [](const std::string& dev) {
    std::vector<Tensor> p;
    p.push_back(Tensor(random_values(16 * 32, 20, -0.5, 0.5), {16, 32},
                       {.device = dev, .dtype = dtypes::float32, .requires_grad = true}));
    p.push_back(Tensor(random_values(32, 21, -0.1, 0.1), {32},
                       {.device = dev, .dtype = dtypes::float32, .requires_grad = true}));
    p.push_back(Tensor(random_values(32 * 10, 22, -0.5, 0.5), {32, 10},
                       {.device = dev, .dtype = dtypes::float32, .requires_grad = true}));
    return p;
  };
  std::vector<double> labels{0, 3, 9, 1, 1, 4, 7, 2};
  std::vector<std::vector<double>> grads[2];
  double losses[2];
  const char* devs[] = {"CPU", "OPENCL"};
  for (int k = 0; k < 2; ++k) {
    auto p = make(devs[k]);
    Tensor x(random_values(8 * 16, 23), {8, 16}, {.device = devs[k], .dtype = dtypes::float32});
    Tensor y(labels, {8}, {.device = devs[k], .dtype = dtypes::int32});
    Tensor loss = x.linear(p[0], p[1]).relu().matmul(p[2]).log_softmax().sparse_categorical_crossentropy(y);
    loss.backward();
    losses[k] = loss.item<float>();
    for (auto& t : p) {
      REQUIRE(t.grad);
      REQUIRE(t.grad->device() == devs[k]);
      grads[k].push_back(t.grad->to_vector<double>());
    }
  }
  CHECK(std::abs(losses[0] - losses[1]) < 1e-5);
  for (std::size_t i = 0; i < grads[0].size(); ++i)
    require_close(grads[1][i], grads[0][i], 1e-5, 1e-4, "grad " + std::to_string(i));
}

TEST_CASE("OPENCL: an 8x8 matmul and max reductions of all-negative integers agree with CPU", "[opencl]") {
  if (!opencl()) return;
  // Regressions: the matmul tile once indexed a shrunken shape ("Kernel.upcast: axis of <garbage>"),
  // and a MAX accumulator once started at INT64_MIN whatever the dtype (1 for bool, 0 for int32).
  Tensor e = on_cpu(random_values(64, 30), {8, 8}, dtypes::float32);
  agree([](const std::vector<Tensor>& x) { return x[0].matmul(x[0]); }, {e}, "8x8 matmul");
  for (DType d : {dtypes::bool_, dtypes::int8, dtypes::int32, dtypes::int64}) {
    std::vector<double> v =
        d == dtypes::bool_ ? std::vector<double>{0, 0, 0} : std::vector<double>{-5, -3, -7};
    agree([](const std::vector<Tensor>& x) { return lb(x[0].lazydata->r(ReduceOps::MAX, {1})); },
          {on_cpu(v, {3}, d)}, std::string("max of all-negative ") + d.name);
  }
}

namespace {
bool icd_loader_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libOpenCL.so") != std::string::npos) return true;
  return false;
}
}  // namespace

// Run in a child process of its own (below): nothing else has touched OPENCL there.
TEST_CASE("OPENCL child: the ICD loader is mapped only once the device is used", "[.opencl_lazy]") {
  REQUIRE((Tensor::arange(8) * 2).sum().item<float>() == 56.f);  // on DEVICE=CLANG
  REQUIRE_FALSE(icd_loader_mapped());
  if (!opencl()) return;
  REQUIRE(icd_loader_mapped());
}

TEST_CASE("OPENCL: libmetagrad runs without the ICD loader until the device is asked for", "[opencl]") {
  pid_t pid = test::spawn_child("OPENCL child: the ICD loader is mapped only once the device is used",
                                {"DEVICE=CLANG", "THREADS=1"});
  REQUIRE(pid > 0);
  REQUIRE(test::wait_for(pid) == 0);
}
