// The LLVM device against the CPU reference: elementwise chains, every dtype and cast, reductions
// over each axis, non-contiguous inputs (permuted, flipped, padded, strided, flip + pad's negative
// index math), NaN and inf, sizes that upcast, a matmul-shaped reduce, backward through an MLP;
// the renderer's and the JIT's errors; cold and warm (disk cache) compile times.
#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "gradcheck.hpp"
#include "metagrad/backends/ops_clang.hpp"
#include "metagrad/backends/ops_llvm.hpp"
#include "metagrad/codegen/linearizer.hpp"
#include "metagrad/device/threadpool.hpp"

#include "reference.hpp"

using namespace metagrad;
using namespace metagrad::test;  // reference.hpp: Host, at, gather, for_each_index, kInf, kNaN
using Catch::Matchers::Contains;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

bool have_llvm() {
  static const bool ok = [] {
    try {
      Device::get("LLVM");
      return true;
    } catch (const std::exception& e) {
      std::printf("test_llvm: skipped: %s\n", e.what());
      return false;
    }
  }();
  return ok;
}

// The plugin's entry points (renderer, runtime, compile counter), or null without the device.
const LLVMApi* llvm_api() {
  static const LLVMApi* api = []() -> const LLVMApi* {
    if (!have_llvm()) return nullptr;
    Dl_info self{};  // the plugin sits beside libmetagrad, which Device::get("LLVM") loaded it from
    if (!::dladdr(reinterpret_cast<void*>(&Device::canonicalize), &self) || !self.dli_fname) return nullptr;
    std::string dir = self.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    void* lib = ::dlopen((dir + "libmetagrad_llvm.so").c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    auto get = lib ? reinterpret_cast<const LLVMApi* (*)()>(::dlsym(lib, "metagrad_llvm_api")) : nullptr;
    if (!get) std::printf("test_llvm: the LLVM plugin's metagrad_llvm_api is not found: %s\n", ::dlerror());
    return get ? get() : nullptr;
  }();
  return api;
}
int llvm_compiles() { return llvm_api() ? llvm_api()->compiles->load() : 0; }

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Absolute and relative tolerance for results of dtype d: float kernels compute in the dtype
// (float16 and bfloat16 in float) where the CPU device computes in double and rounds after every op.
std::pair<double, double> tolerance(DType d) {
  if (d == dtypes::float16) return {2e-3, 4e-3};
  if (d == dtypes::bfloat16) return {1.6e-2, 3.2e-2};  // 8 bits: a last-place difference is 2^-8
  if (d == dtypes::float32) return {1e-5, 1e-5};
  if (d == dtypes::float64) return {1e-12, 1e-12};
  return {0, 0};
}

// f on CPU inputs and on their copies on LLVM must agree in shape, dtype and values.
void check(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs, double scale = 1) {
  INFO(what);
  std::vector<Tensor> on;
  for (const Tensor& t : inputs) on.push_back(t.to("LLVM"));
  Tensor want = f(inputs), got = f(on);
  REQUIRE(got.device() == "LLVM");
  REQUIRE(want.device() == "CPU");
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  auto [atol, rtol] = tolerance(want.dtype());
  require_close(got.to_vector<double>(), want.to_vector<double>(), atol * scale, rtol * scale, what);
}

Tensor host_tensor(const std::vector<double>& v, const Dims& shape, DType dt = dtypes::float32) {
  return Tensor(v, shape, {.device = "CPU"}).cast(dt);
}
Tensor rnd(const Dims& shape, std::uint64_t seed, DType dt = dtypes::float32, double lo = -2, double hi = 2) {
  return host_tensor(random_values(prod(shape), seed, lo, hi), shape, dt);
}
// Integers in [lo, hi] (as doubles), for integer and bool dtypes and exact float checks.
Tensor rnd_int(const Dims& shape, std::uint64_t seed, DType dt, double lo, double hi) {
  std::vector<double> v = random_values(prod(shape), seed, lo, hi + 1);
  for (double& x : v) x = std::floor(x);
  return host_tensor(v, shape, dt);
}
Tensor binary(BinaryOps op, const Tensor& a, const Tensor& b) {
  return Tensor(a.lazydata->e(op, b.lazydata));
}

}  // namespace

TEST_CASE("LLVM: elementwise chains fuse and match CPU", "[llvm]") {
  if (!have_llvm()) return;
  Tensor a = rnd({33, 65}, 1), b = rnd({33, 65}, 2), c = rnd({33, 65}, 3),
         p = rnd({33, 65}, 4, dtypes::float32, 0.1, 3);
  check("(a*b+c).relu()", [](auto& x) { return (x[0] * x[1] + x[2]).relu(); }, {a, b, c});
  {
    Tensor x = a.to("LLVM"), y = b.to("LLVM"), z = c.to("LLVM");
    x.realize(), y.realize(), z.realize();
    i64 before = GlobalCounters::kernel_count;
    GlobalCounters::cache.emplace();
    (x * y + z).relu().realize();
    std::vector<CacheEntry> ran = std::move(*GlobalCounters::cache);
    GlobalCounters::cache.reset();
    CHECK(GlobalCounters::kernel_count - before == 1);  // one fused kernel
    REQUIRE(ran.size() == 1);                           // whose source is its LLVM IR
    CHECK_THAT(ran[0].prg.prg, Contains("define void @" + ran[0].prg.name + "(ptr noalias"));
  }
  check("exp log sqrt", [](auto& x) { return x[0].exp() + x[1].log() * x[1].sqrt(); }, {a, p});
  check(
      "sin cos tan", [](auto& x) { return x[0].sin() * x[0].cos() + x[0].tan() * 0.01; }, {a}, 10);
  check(
      "sigmoid tanh gelu", [](auto& x) { return x[0].sigmoid() + x[0].tanh() + x[0].gelu(); }, {a}, 10);
  check(
      "pow div", [](auto& x) { return x[0].pow(x[1]) / (x[2] + 5); }, {p, a, c}, 10);
  check("max min where",
        [](auto& x) { return x[0].maximum(x[1]).minimum(x[2]) + x[0].lt(x[1]).where(x[2], x[1] * 1.5); },
        {a, b, c});
  check("abs sign neg reciprocal",
        [](auto& x) { return x[0].abs() * x[0].sign() - x[1].neg() + x[1].reciprocal(); }, {a, p});
  check("comparisons", [](auto& x) { return x[0].eq(x[1]) + x[0].ge(x[1]) * 2 + x[0].ne(x[0]) * 4; },
        {rnd_int({7, 9}, 5, dtypes::float32, -2, 2), rnd_int({7, 9}, 6, dtypes::float32, -2, 2)});
  check("broadcast", [](auto& x) { return x[0] * x[1] + x[2]; },
        {rnd({8, 1, 5}, 7), rnd({1, 6, 5}, 8), rnd({5}, 9)});
  check("scalar", [](auto& x) { return x[0] * 3.25 + 1.5; }, {rnd({1}, 10)});
}

TEST_CASE("LLVM: every dtype", "[llvm]") {
  if (!have_llvm()) return;
  for (DType dt : dtypes::all) {
    bool fl = dtypes::is_float(dt), u = dtypes::is_unsigned(dt) || dt == dtypes::bool_;
    double lo = dt == dtypes::bool_ ? 0 : u ? 0 : -100, hi = dt == dtypes::bool_ ? 1 : 100;
    Tensor a = fl ? rnd({5, 37}, 11, dt, -4, 4) : rnd_int({5, 37}, 11, dt, lo, hi);
    Tensor b = fl ? rnd({5, 37}, 12, dt, -4, 4) : rnd_int({5, 37}, 12, dt, lo, hi);
    std::string n = dt.name;
    auto bin = [](BinaryOps op) { return [op](auto& x) { return binary(op, x[0], x[1]); }; };
    check(n + " add", bin(BinaryOps::ADD), {a, b});
    check(n + " sub", bin(BinaryOps::SUB), {a, b});
    check(n + " mul", bin(BinaryOps::MUL), {a, b});
    check(n + " div", bin(BinaryOps::DIV), {a, b}, 10);  // integers: truncating, x/0 is 0
    check(n + " max", bin(BinaryOps::MAX), {a, b});
    check(n + " cmpeq", bin(BinaryOps::CMPEQ), {a, a.maximum(b)});
    check(n + " cast to float32", [](auto& x) { return x[0].cast(dtypes::float32) * 2; }, {a});
    check(
        n + " sum", [](auto& x) { return x[0].sum(1); }, {a}, 40);
    check(n + " max reduce", [](auto& x) { return x[0].max(0); }, {a});
    if (!fl) {
      Tensor e = rnd_int({5, 37}, 13, dt, 0, dt == dtypes::bool_ ? 1 : 5);
      check(n + " pow", bin(BinaryOps::POW), {a, e});
    } else {
      check(
          n + " exp2 log2 sin", [](auto& x) { return x[0].exp2() + x[0].abs().log2() + x[0].sin(); }, {a},
          10);
    }
  }
  // Wrapping arithmetic and the edges of integer division.
  Tensor big = host_tensor({2147483647, -2147483648.0, 7, -7, -2147483648.0, 5}, {6}, dtypes::int32);
  Tensor d = host_tensor({1, -1, 0, 2, -1, -3}, {6}, dtypes::int32);
  check("int32 wrap", [](auto& x) { return binary(BinaryOps::ADD, x[0], x[0]); }, {big});
  check("int32 div edges", [](auto& x) { return binary(BinaryOps::DIV, x[0], x[1]); }, {big, d});
  check("int32 negative pow", [](auto& x) { return binary(BinaryOps::POW, x[0], x[1]); },
        {host_tensor({1, -1, -1, 2, 0, 3}, {6}, dtypes::int32),
         host_tensor({-3, -3, -2, -1, 0, 3}, {6}, dtypes::int32)});
  check("int8 wrap", [](auto& x) { return binary(BinaryOps::MUL, x[0], x[0]); },
        {host_tensor({100, -128, 127, 16}, {4}, dtypes::int8)});
  check("uint8 div", [](auto& x) { return binary(BinaryOps::DIV, x[0], x[1]); },
        {host_tensor({255, 200, 7, 0}, {4}, dtypes::uint8), host_tensor({2, 0, 255, 3}, {4}, dtypes::uint8)});
  check("bool arithmetic",
        [](auto& x) { return binary(BinaryOps::ADD, x[0], x[1]) + binary(BinaryOps::SUB, x[0], x[1]); },
        {host_tensor({0, 0, 1, 1}, {4}, dtypes::bool_), host_tensor({0, 1, 0, 1}, {4}, dtypes::bool_)});
  check("int32 max of negatives", [](auto& x) { return x[0].max(); },
        {host_tensor({-5, -3, -9}, {3}, dtypes::int32)});
}

TEST_CASE("LLVM: casts between every pair of dtypes", "[llvm]") {
  if (!have_llvm()) return;
  // Whole numbers in range of every dtype (fractions to bool differ: see the report) and fractions.
  std::vector<double> whole = {0, 1, -1, 2, 100, -100, 127, -128, 3, 0};
  std::vector<double> frac = {0.25, -0.75, 2.5, -2.5, 1e3, -1e3, 65504, 1e-5, 3.99, -3.99};
  for (DType from : dtypes::all)
    for (DType to : dtypes::all) {
      std::string n = detail::cat(from.name, " -> ", to.name);
      check(n, [to](auto& x) { return x[0].cast(to); }, {host_tensor(whole, {10}, from)});
      if (dtypes::is_float(from) && to != dtypes::bool_ && (to != dtypes::int8 && to != dtypes::uint8))
        check(n + " (fractions)", [to](auto& x) { return x[0].cast(to); }, {host_tensor(frac, {10}, from)});
    }
  check("float -> int saturates, NaN is 0", [](auto& x) { return x[0].cast(dtypes::int64); },
        {host_tensor({kNaN, kInf, -kInf, 1e30, -1e30, 3.7}, {6}, dtypes::float32)});
  // Inside a kernel float16 computes in float: the product is not rounded to half before the cast.
  check(
      "float16 rounding", [](auto& x) { return (x[0].cast(dtypes::float16) * 3).cast(dtypes::float32); },
      {host_tensor({0.1, 1.0 / 3, 1000.7, 70000, 1e-6, -2.2}, {6})}, 200);
  check("float16 in and out", [](auto& x) { return x[0].cast(dtypes::float16) * 3; },
        {host_tensor({0.1, 1.0 / 3, 1000.7, 70000, 1e-6, -2.2}, {6})});
}

TEST_CASE("LLVM: reductions over each axis and in full", "[llvm]") {
  if (!have_llvm()) return;
  for (DType dt : {dtypes::float32, dtypes::float64, dtypes::float16, dtypes::int32, dtypes::int64}) {
    Tensor a = dtypes::is_float(dt) ? rnd({6, 7, 9}, 21, dt) : rnd_int({6, 7, 9}, 21, dt, -50, 50);
    for (i64 axis : {0, 1, 2}) {
      std::string n = detail::cat(dt.name, " axis ", std::to_string(axis));
      check(
          n + " sum", [axis](auto& x) { return x[0].sum(axis); }, {a}, 20);
      check(n + " max", [axis](auto& x) { return x[0].max(axis, true); }, {a});
    }
    check(
        std::string(dt.name) + " full sum", [](auto& x) { return x[0].sum(); }, {a}, 50);
    check(std::string(dt.name) + " full max", [](auto& x) { return x[0].max(); }, {a});
    check(
        std::string(dt.name) + " sum of two axes",
        [](auto& x) {
          return x[0].sum({0, 2});
        },
        {a}, 20);
  }
  Tensor x = rnd({16, 33}, 22), y = rnd({16, 33}, 23);
  check("reduce then elementwise (softmax)", [](auto& t) { return t[0].softmax(1); }, {x});
  check(
      "mulacc (x*y).sum(1)", [](auto& t) { return (t[0] * t[1]).sum(1); }, {x, y}, 10);
  check(
      "mean and std", [](auto& t) { return t[0].mean(0) + t[0].std(0); }, {x}, 10);
  check("argmax", [](auto& t) { return t[0].argmax(1); }, {x});
}

TEST_CASE("LLVM: non-contiguous inputs and negative index math", "[llvm]") {
  if (!have_llvm()) return;
  Tensor a = rnd({6, 10}, 31), b = rnd({10, 6}, 32);
  check("permuted", [](auto& x) { return x[0].permute({1, 0}) + x[1]; }, {a, b});
  check("flipped", [](auto& x) { return x[0].flip(0) * x[0].flip({0, 1}); }, {a});
  check("padded", [](auto& x) { return x[0].pad({{1, 2}, {3, 0}}, 0) + 1; }, {a});
  check("padded with a value", [](auto& x) { return x[0].pad({{2, 2}, {1, 1}}, -7.5); }, {a});
  check("shrunk", [](auto& x) { return x[0].shrink({{1, 5}, {2, 9}}).exp(); }, {a});
  // Strides through the movement op itself (Tensor's stepped slices are tested elsewhere).
  auto stride = [](const Tensor& t, Dims s) {
    return Tensor(t.lazydata->movement_op(MovementOps::STRIDE, s));
  };
  check("strided", [&](auto& x) { return stride(x[0].shrink({{0, 6}, {1, 10}}), {2, 3}) * 2; }, {a});
  check("negative strides", [&](auto& x) { return stride(x[0], {-2, -1}) + 1; }, {a});
  check("flip + pad (negative numerators)",
        [](auto& x) {
          return x[0].flip(1).pad({{2, 1}, {4, 3}}).flip(0) + 2;
        },
        {a});
  check("pad then reduce", [](auto& x) { return x[0].pad({{3, 3}, {0, 5}}).sum(0); }, {a});
  check("flip, pad, shrink, reduce",
        [](auto& x) {
          return x[0].flip(0).pad({{2, 3}, {1, 1}}).shrink({{1, 9}, {0, 12}}).max(1);
        },
        {a});
  check("expanded", [](auto& x) { return x[0].reshape({6, 1, 10}).expand({6, 4, 10}) * 3; }, {a});
  check(
      "conv2d (strided windows)", [](auto& x) { return x[0].conv2d(x[1], {}, 1, {2}, {1}, {1}); },
      {rnd({1, 2, 9, 9}, 33), rnd({3, 2, 3, 3}, 34)}, 10);
  check("max_pool2d", [](auto& x) { return x[0].max_pool2d(); }, {rnd({2, 3, 8, 8}, 35)});
  check(
      "cumsum", [](auto& x) { return x[0].cumsum(1); }, {a}, 10);
}

TEST_CASE("LLVM: NaN and inf behave", "[llvm]") {
  if (!have_llvm()) return;
  Tensor a = host_tensor({kNaN, 1, -kInf, kInf, 0, -0.0, 3, kNaN}, {8});
  Tensor b = host_tensor({2, kNaN, 5, -kInf, 0, 1, kInf, kNaN}, {8});
  auto bin = [](BinaryOps op) { return [op](auto& x) { return binary(op, x[0], x[1]); }; };
  for (DType dt : {dtypes::float32, dtypes::float64, dtypes::float16}) {
    std::string n = dt.name;
    Tensor x = a.cast(dt), y = b.cast(dt);
    check(n + " max propagates NaN", bin(BinaryOps::MAX), {x, y});
    check(n + " add mul div", [](auto& t) { return (t[0] + t[1]) * t[0] / t[1]; }, {x, y});
    check(n + " eq", bin(BinaryOps::CMPEQ), {x, y});
    check(n + " log exp", [](auto& t) { return t[0].log() + t[1].exp(); }, {x, y});
    check(n + " max reduce with NaN", [](auto& t) { return t[0].reshape({2, 4}).max(1); }, {x});
    check(n + " sum with inf", [](auto& t) { return t[0].reshape({4, 2}).sum(1); }, {y});
  }
  check("1/0 and 0/0", [](auto& t) { return t[0] / t[1]; },
        {host_tensor({1, -1, 0}, {3}), host_tensor({0, 0, 0}, {3})});
  check("relu of NaN", [](auto& t) { return t[0].relu(); }, {a});
}

TEST_CASE("LLVM: large kernels that upcast", "[llvm]") {
  if (!have_llvm()) return;
  Tensor a = rnd({4096, 4096}, 41, dtypes::float32, 0, 1);
  check(
      "4096x4096 sum(0)", [](auto& x) { return x[0].sum(0); }, {a}, 200);
  check(
      "4096x4096 sum(1)", [](auto& x) { return x[0].sum(1); }, {a}, 200);
  check("4096x4096 max(1)", [](auto& x) { return x[0].max(1); }, {a});
  check(
      "matmul 128x512 @ 512x96", [](auto& x) { return x[0].matmul(x[1]); },
      {rnd({128, 512}, 42), rnd({512, 96}, 43)}, 100);
  check("1M elementwise", [](auto& x) { return (x[0] * x[0] + 1).sqrt(); }, {rnd({1 << 20}, 44)});
}

TEST_CASE("LLVM: backward through a small MLP", "[llvm]") {
  if (!have_llvm()) return;
  auto grads = [](const std::string& dev) {
    Tensor x = rnd({8, 12}, 51).to(dev), y = rnd({8, 4}, 52).to(dev);
    Tensor w1 = rnd({12, 16}, 53).to(dev).requires_grad_(), w2 = rnd({16, 4}, 54).to(dev).requires_grad_();
    Tensor loss = ((x.matmul(w1).relu().matmul(w2) - y).square()).mean();
    loss.backward();
    return std::vector<std::vector<double>>{loss.to_vector<double>(), w1.grad->to_vector<double>(),
                                            w2.grad->to_vector<double>()};
  };
  auto want = grads("CPU"), got = grads("LLVM");
  for (std::size_t i = 0; i < want.size(); ++i)
    require_close(got[i], want[i], 1e-4, 1e-4, "MLP gradient " + std::to_string(i));
}

TEST_CASE("LLVM: invalid kernels raise with the IR and the reason", "[llvm]") {
  const LLVMApi* api = llvm_api();
  if (!api) return;
  SECTION("IR that does not parse") {
    std::string src = "define void @k(ptr %a) {\n  store float 1.0, ptr %b\n  ret void\n}\n";
    try {
      api->runtime("k", src);
      FAIL("expected a compile error");
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Contains("compiling kernel k failed"));
      CHECK_THAT(e.what(), Contains("%b"));  // the parser's message
      CHECK_THAT(e.what(), Contains(src));   // the IR
    }
  }
  SECTION("a kernel without the named function") {
    CHECK_THROWS_WITH(api->runtime("missing", "define void @k() {\n  ret void\n}\n"),
                      Contains("no function @missing"));
  }
  SECTION("the verifier: a value used outside the loop that defines it") {
    using namespace codegen;
    LinearizedKernel k;
    k.name = "E_bad";
    k.buf_dtypes = {dtypes::float32, dtypes::float32};
    symbolic::Node i = symbolic::Variable("gidx0", 0, 3);
    k.uops.push_back(UOp{UOps::LOOP, dtypes::int32, {}, UnaryOps::NOOP, -1, 0, 1, 0, "gidx0", 4, true});
    k.uops.push_back(UOp{UOps::LOOP, dtypes::int32, {}, UnaryOps::NOOP, -1, 0, 1, 0, "ridx0", 4, false});
    k.uops.push_back(UOp{UOps::LOAD, dtypes::float32, {}, UnaryOps::NOOP, 1, i});
    k.uops.push_back(UOp{UOps::ENDLOOP});
    k.uops.push_back(UOp{UOps::STORE, dtypes::float32, {2}, UnaryOps::NOOP, 0, i});
    k.uops.push_back(UOp{UOps::ENDLOOP});
    try {
      api->render(k);
      FAIL("expected a verifier error");
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Contains("does not verify"));
      CHECK_THAT(e.what(), Contains("does not dominate"));  // the verifier's words
      CHECK_THAT(e.what(), Contains("define void @E_bad"));
    }
  }
  SECTION("a valid hand-made kernel renders and runs") {
    using namespace codegen;
    LinearizedKernel k;
    k.name = "E_ok";
    k.buf_dtypes = {dtypes::float32, dtypes::float32};
    symbolic::Node i = symbolic::Variable("gidx0", 0, 3);
    k.uops.push_back(UOp{UOps::LOOP, dtypes::int32, {}, UnaryOps::NOOP, -1, 0, 1, 0, "gidx0", 4, true});
    k.uops.push_back(UOp{UOps::LOAD, dtypes::float32, {}, UnaryOps::NOOP, 1, i});
    k.uops.push_back(UOp{UOps::CONST, dtypes::float32, {}, UnaryOps::NOOP, -1, 0, 1, 2.5});
    k.uops.push_back(UOp{UOps::ALU, dtypes::float32, {1, 2}, BinaryOps::MUL});
    k.uops.push_back(UOp{UOps::STORE, dtypes::float32, {3}, UnaryOps::NOOP, 0, i});
    k.uops.push_back(UOp{UOps::ENDLOOP});
    std::string ir = api->render(k);
    CHECK_THAT(ir, Contains("define void @E_ok(ptr noalias nocapture %data0, ptr noalias nocapture readonly "
                            "%data1, i64 %start, i64 %end)"));
    auto prg = api->runtime("E_ok", ir);
    auto in = RawMallocBuffer::fromCPU(std::vector<float>{1, 2, 3, 4});
    RawMallocBuffer out(4, dtypes::float32);
    (*prg)({4}, {}, {&out, &in});
    CHECK(out.toCPU<float>() == std::vector<float>{2.5f, 5, 7.5f, 10});
  }
}

namespace {
// A kernel storing `value` to every element of a float buffer of n.
codegen::LinearizedKernel fill_kernel(const std::string& name, std::int64_t n, double value) {
  using namespace codegen;
  LinearizedKernel k;
  k.name = name;
  k.buf_dtypes = {dtypes::float32};
  k.uops.push_back(UOp{UOps::LOOP, dtypes::int32, {}, UnaryOps::NOOP, -1, 0, 1, 0, "gidx0", n, true});
  k.uops.push_back(UOp{UOps::CONST, dtypes::float32, {}, UnaryOps::NOOP, -1, 0, 1, value});
  k.uops.push_back(
      UOp{UOps::STORE, dtypes::float32, {1}, UnaryOps::NOOP, 0, symbolic::Variable("gidx0", 0, n - 1)});
  k.uops.push_back(UOp{UOps::ENDLOOP});
  return k;
}
}  // namespace

TEST_CASE("LLVM: kernels compile and run from several threads at once", "[llvm]") {
  const LLVMApi* api = llvm_api();
  if (!api) return;
  double salt = static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() % 1000003);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2; ++i) {
        double v = salt + t * 10 + i;
        auto prg = api->runtime("E_8", api->render(fill_kernel("E_8", 8, v)));  // same name, own dylib
        RawMallocBuffer out(8, dtypes::float32);
        (*prg)({8}, {}, {&out});
        ok[static_cast<std::size_t>(t)] += out.toCPU<float>() == std::vector<float>(8, static_cast<float>(v));
      }
    });
  for (auto& t : threads) t.join();
  CHECK(ok == std::vector<int>(4, 2));
}

TEST_CASE("LLVM: a cached object truncated, corrupted or without its sidecar is rebuilt", "[llvm]") {
  const LLVMApi* api = llvm_api();
  if (!api) return;
  namespace fs = std::filesystem;
  std::string old = metagrad::getenv("METAGRAD_CACHE");
  fs::path dir = fs::temp_directory_path() / ("metagrad-llvm-damage-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ::setenv("METAGRAD_CACHE", dir.c_str(), 1);
  std::string ir = api->render(fill_kernel("E_4", 4, 2.5));
  auto run = [&] {
    auto prg = api->runtime("E_4", ir);
    RawMallocBuffer out(4, dtypes::float32);
    (*prg)({4}, {}, {&out});
    return out.toCPU<float>() == std::vector<float>(4, 2.5f);
  };
  int c0 = llvm_compiles();
  CHECK(run());
  CHECK(run());
  CHECK(llvm_compiles() == c0 + 1);
  auto object = [&] {
    for (const auto& e : fs::directory_iterator(dir / "llvm"))
      if (e.path().extension() == ".o") return e.path();
    return fs::path();
  };
  REQUIRE(fs::exists(object().string() + ".sum"));
  std::vector<std::pair<const char*, std::function<void(const fs::path&)>>> damages = {
      {"truncated", [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); }},
      {"bytes flipped",
       [](const fs::path& p) {
         std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
         std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
         for (std::size_t i = b.size() / 2; i < b.size() / 2 + 16 && i < b.size(); ++i) b[i] ^= 0x5a;
         f.seekp(0);
         f.write(b.data(), static_cast<std::streamsize>(b.size()));
       }},
      {"sidecar deleted", [](const fs::path& p) { fs::remove(p.string() + ".sum"); }}};
  int expected = c0 + 1;
  for (const auto& [what, apply] : damages) {
    INFO(what);
    apply(object());
    CHECK(run());
    CHECK(llvm_compiles() == ++expected);  // rebuilt
    CHECK(run());
    CHECK(llvm_compiles() == expected);  // and the rebuilt one reused
  }
  if (old.empty())
    ::unsetenv("METAGRAD_CACHE");
  else
    ::setenv("METAGRAD_CACHE", old.c_str(), 1);
  fs::remove_all(dir);
}

TEST_CASE("LLVM: cold compile time per kernel; a warm run compiles nothing", "[llvm]") {
  if (!have_llvm()) return;
  // Constants fold into the source, so a run-unique constant makes kernels no cache has seen.
  double salt =
      1 + static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() % 1000003) * 1e-9;
  auto cpu_seconds = [] {  // this process and its finished children (the C compiler)
    rusage self{}, kids{};
    getrusage(RUSAGE_SELF, &self), getrusage(RUSAGE_CHILDREN, &kids);
    auto s = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
    };
    return s(self.ru_utime) + s(self.ru_stime) + s(kids.ru_utime) + s(kids.ru_stime);
  };
  for (std::string dev : {"LLVM", "CLANG"}) {
    Tensor a = rnd({64, 256}, 61).to(dev), b = rnd({64, 256}, 62).to(dev);
    a.realize(), b.realize();
    // One salt each: a sub-expression shared by two kernels would compile once.
    std::vector<std::function<Tensor()>> kernels = {
        [&] { return a * b * salt + 1; },
        [&] { return (a * (salt + 1e-3)).exp().sum(1); },
        [&] {
          return (a * (salt + 2e-3)).matmul(b.permute({1, 0}));
        },
        [&] {
          return (a * (salt + 3e-3)).flip(0).pad({{1, 1}, {2, 2}}).contiguous();
        },
        [&] { return ((a * (salt + 4e-3)).max(0) + b.sum(0)).sqrt(); },
    };
    auto compiles = [&] { return dev == "LLVM" ? llvm_compiles() : ClangProgram::compiles.load(); };
    int before = compiles();
    double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto& k : kernels) k().realize();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double cpu_s = cpu_seconds() - c0;
    int compiled = compiles() - before;
    CHECK(compiled >= static_cast<int>(kernels.size()));
    std::printf(
        "%-5s cold compile: %d kernels, per kernel %.1f ms wall, %.1f ms CPU (incl. the compiler process)\n",
        dev.c_str(), compiled, wall * 1e3 / compiled, cpu_s * 1e3 / compiled);
  }
  // The same IR again, as a second process would see it: the disk cache has its object.
  if (const LLVMApi* api = llvm_api()) {
    std::string ir = api->render(fill_kernel("E_4", 4, salt));
    int c0 = llvm_compiles();
    auto t1 = std::chrono::steady_clock::now();
    auto cold = api->runtime("E_4", ir);
    double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    CHECK(llvm_compiles() == c0 + 1);
    auto t2 = std::chrono::steady_clock::now();
    auto warm = api->runtime("E_4", ir);
    double second = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
    CHECK(llvm_compiles() == c0 + 1);
    RawMallocBuffer out(4, dtypes::float32);
    (*warm)({4}, {}, {&out});
    CHECK(out.toCPU<float>() == std::vector<float>(4, static_cast<float>(salt)));
    std::printf("LLVM  one small kernel: cold %.2f ms, warm (disk cache) %.2f ms\n", first * 1e3,
                second * 1e3);
  }
}

TEST_CASE("LLVM and CLANG: a cold realize builds its kernels together and they agree with CPU", "[llvm]") {
  // Kernels no cache has seen (run-unique constants), in one realize: Compiled::prebuild compiles
  // them on the cores before any runs (LLVM: a target machine per thread). Every one is built,
  // GlobalCounters::compile_time counts the wait (DEBUG=2's split), and the results are right.
  double salt =
      1 + static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() % 999983) * 1e-9;
  Tensor a = rnd({32, 128}, 71), b = rnd({32, 128}, 72);
  auto graph = [&](const Tensor& x, const Tensor& y) {
    Tensor out = Tensor::zeros({32}, {.device = x.device()});
    for (int i = 0; i < 8; ++i) out = out + (x * (salt + i * 1e-3) + y).exp().sum(1) * (i + 1);
    return out;
  };
  std::vector<double> want = graph(a, b).to_vector<double>();
  for (std::string dev : {"LLVM", "CLANG"}) {
    if (dev == "LLVM" && !have_llvm()) continue;
    Tensor x = a.to(dev), y = b.to(dev);
    x.realize(), y.realize();
    auto compiles = [&] { return dev == "LLVM" ? llvm_compiles() : ClangProgram::compiles.load(); };
    int before = compiles();
    double waited = GlobalCounters::compile_time;
    Tensor got = graph(x, y);
    got.realize();
    INFO(dev);
    CHECK(compiles() - before >= 8);
    CHECK(GlobalCounters::compile_time > waited);
    require_close(got.to_vector<double>(), want, 1e-4, 1e-4, dev + " cold realize");
  }
}

namespace {
// A cold step's kind of graph, in one realize: products whose epilogues are one source (a bias
// added alike), packs, elementwise and reduce kernels; `salt` keeps them out of every cache.
Tensor cold_step_graph(const Tensor& a, const Tensor& w, const Tensor& bias, double salt) {
  Tensor out = Tensor::zeros({48}, {.device = a.device()});
  for (int i = 0; i < 4; ++i)
    out = out + ((a * (salt + i * 1e-3)).matmul(w) + bias).relu().sum(1) + (a + salt * i).exp().max(1);
  return out;
}
}  // namespace

TEST_CASE("cold build child process", "[.][cold_build]") {
  const char* out = std::getenv("METAGRAD_TEST_CHILD_OUT");
  if (!out) return;  // only as a child of the test below
  std::string dev = metagrad::getenv("METAGRAD_TEST_COLD_DEVICE");
  double salt = std::stod(metagrad::getenv("METAGRAD_TEST_COLD_SALT"));
  Tensor a = rnd({48, 40}, 81, dtypes::float32, -1, 1), w = rnd({40, 24}, 82), bias = rnd({24}, 83);
  std::vector<double> want = cold_step_graph(a, w, bias, salt).to_vector<double>();
  auto compiles = [&] { return dev == "LLVM" ? llvm_compiles() : ClangProgram::compiles.load(); };
  int before = compiles();
  Tensor got = cold_step_graph(a.to(dev), w.to(dev), bias.to(dev), salt);
  require_close(got.to_vector<double>(), want, 1e-4, 1e-4, dev + " cold build");
  std::ofstream(out) << compiles() - before << "\n";
}

// A cold realize builds its programs together over the cores (here 2 threads), a GEMM's epilogues
// and packs with its kernels; a source made twice compiles once: every compile is a distinct object
// in the fresh cache. A second process computes the same from that cache, compiling nothing.
TEST_CASE("LLVM and CLANG: a cold realize compiles each source once and a second process none", "[llvm]") {
  namespace fs = std::filesystem;
  double salt =
      1 + static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() % 999979) * 1e-9;
  for (std::string dev : {"LLVM", "CLANG"}) {
    if (dev == "LLVM" && !have_llvm()) continue;
    INFO(dev);
    test::TempDir tmp("metagrad_cold_build");
    REQUIRE(!tmp.path.empty());
    auto child = [&](const char* out) {
      pid_t pid = test::spawn_child(
          "cold build child process",
          {"METAGRAD_CACHE=" + (tmp.path / "cache").string(),
           "METAGRAD_TEST_CHILD_OUT=" + (tmp.path / out).string(), "METAGRAD_TEST_COLD_DEVICE=" + dev,
           "METAGRAD_TEST_COLD_SALT=" + std::to_string(salt), "THREADS=2"});
      REQUIRE(pid > 0);
      REQUIRE(test::wait_for(pid) == 0);
      int n = -1;
      std::ifstream(tmp.path / out) >> n;
      return n;
    };
    int first = child("first");
    int objects = 0;
    for (const auto& e : fs::recursive_directory_iterator(tmp.path / "cache"))
      objects += e.path().extension() == ".sum";
    CHECK(first >= 8);  // (11 kernels in one realize; one's source repeats another's)
    CHECK(first == objects);
    CHECK(child("second") == 0);
  }
}

// Not part of the suite (hidden tag): LLVM's and CLANG's kernel speed on the same workloads. Each
// kernel is captured (GlobalCounters::cache) and replayed on the same buffers: a fresh 64 MiB
// output per run would mostly time the page faults of its first touch.
TEST_CASE("LLVM: kernel speed against CLANG", "[llvm][.perf]") {
  if (!have_llvm()) return;
  struct Work {
    std::string name;
    Dims a, b;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> f;
    double bytes, flops;
  };
  const double m = 1 << 24;
  std::vector<Work> works = {
      {"a*b+c 2^24",
       {1 << 24},
       {1 << 24},
       [](auto& a, auto& b, auto& c) { return a * b + c; },
       16 * m,
       2 * m},
      {"4096^2 sum(0)", {4096, 4096}, {1}, [](auto& a, auto&, auto&) { return a.sum(0); }, 4 * m, m},
      {"4096^2 sum(1)", {4096, 4096}, {1}, [](auto& a, auto&, auto&) { return a.sum(1); }, 4 * m, m},
      {"4096^2 sum()", {4096, 4096}, {1}, [](auto& a, auto&, auto&) { return a.sum(); }, 4 * m, m},
      {"matmul 1024",
       {1024, 1024},
       {1024, 1024},
       [](auto& a, auto& b, auto&) { return a.matmul(b); },
       12 * 1048576.0,
       2 * 1024.0 * 1048576},
  };
  for (const Work& w : works)
    for (std::string dev : {"LLVM", "CLANG"}) {
      Tensor a = Tensor::rand(w.a, {.device = dev}), b = Tensor::rand(w.b, {.device = dev}),
             c = Tensor::rand(w.a, {.device = dev});
      a.realize(), b.realize(), c.realize();
      GlobalCounters::cache.emplace();
      w.f(a, b, c).realize();
      std::vector<CacheEntry> captured = std::move(*GlobalCounters::cache);
      GlobalCounters::cache.reset();
      double best = 1e9;
      for (int i = 0; i < 10; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        for (const auto& [prg, owned] : captured) {
          std::vector<RawBuffer*> bufs;
          for (const auto& buf : owned) bufs.push_back(buf.get());
          prg.exec(bufs);
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%-14s %-5s %zu kernel(s), %d threads: %8.2f ms %7.1f GB/s %7.1f GFLOP/s\n", w.name.c_str(),
                  dev.c_str(), captured.size(), thread_count(), best * 1e3, w.bytes / best * 1e-9,
                  w.flops / best * 1e-9);
    }
}
