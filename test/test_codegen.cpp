// The kernel optimiser's paths on every compiled device against the CPU reference: matmul register
// tiles (8x32, 4x16, 4x8, none) with and without the reduce blocked through the output, column sums
// read in row blocks, masks (padding) and views inside them; common subexpressions emitted once;
// the inline, vectorizable exp2 against the C library's; and kernels that compute one expression
// agreeing to the bit (the max backward that failed when CLANG vectorized with contraction on).
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "kernel_sources.hpp"
#include "metagrad/codegen/kernel.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::kernel_sources;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

std::vector<std::string> compiled_devices() {
  std::vector<std::string> out;
  for (const char* d : {"CLANG", "LLVM", "OPENCL"}) try {
      Device::get(d);
      out.push_back(d);
    } catch (const std::exception& e) { std::printf("test_codegen: %s skipped: %s\n", d, e.what()); }
  return out;
}

Tensor rnd(const Dims& shape, std::uint64_t seed, DType dt = dtypes::float32) {
  return Tensor(random_values(prod(shape), seed), shape, {.device = "CPU"}).cast(dt);
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on CPU inputs and on their copies on `dev` agree; tolerances grow with the reduce length k.
void agree(const std::string& dev, const std::string& what, const Fn& f, const std::vector<Tensor>& in,
           double k = 1) {
  INFO(dev << ": " << what);
  std::vector<Tensor> on;
  for (const Tensor& t : in) on.push_back(t.to(dev));
  Tensor want = f(in), got = f(on);
  REQUIRE(got.device() == dev);
  REQUIRE(got.shape() == want.shape());
  double tol = (want.dtype() == dtypes::float64 ? 1e-13 : 2e-6) * k;
  require_close(got.to_vector<double>(), want.to_vector<double>(), tol, tol, dev + " " + what);
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

Tensor mm(const std::vector<Tensor>& x) { return x[0].matmul(x[1]); }

}  // namespace

TEST_CASE("codegen: matmuls of every tile and block shape agree with CPU", "[codegen]") {
  struct Case {
    i64 m, k, n;
    const char* why;
  };
  const Case cases[] = {{16, 256, 64, "8x32 tile, reduce in 2 blocks"},
                        {8, 384, 32, "8x32 tile filling the rows, 3 blocks"},
                        {12, 256, 48, "4x16 tile, blocked"},
                        {4, 128, 8, "4x8 tile, too short to block"},
                        {8, 8, 8, "8x8 (the tile drops the rows axis)"},
                        {13, 300, 33, "no tile divides: plain loops"},
                        {24, 512, 96, "8x32 tile, 4 blocks, 3 column tiles"}};
  std::uint64_t seed = 1;
  for (const std::string& dev : compiled_devices()) {
    for (const Case& c : cases) {
      agree(dev, c.why, mm, {rnd({c.m, c.k}, seed), rnd({c.k, c.n}, seed + 1)}, static_cast<double>(c.k));
      seed += 2;
    }
    // Masks and views inside blocked loops: a zero-padded reduce axis, a transposed and a flipped
    // operand, a batch, a float64 matmul (the partial sums round-trip through its output), and
    // elementwise work after the reduce (not blocked: the output holds the result, not the sum).
    agree(
        dev, "padded k",
        [](auto& x) {
          return x[0].pad({{0, 0}, {3, 3}}).matmul(x[1]);
        },
        {rnd({16, 250}, 40), rnd({256, 64}, 41)}, 256);
    agree(
        dev, "padded rows and columns",
        [](auto& x) {
          return x[0].pad({{1, 0}, {0, 0}}).matmul(x[1].pad({{0, 0}, {0, 2}}));
        },
        {rnd({15, 256}, 42), rnd({256, 30}, 43)}, 256);
    agree(
        dev, "transposed and flipped",
        [](auto& x) {
          return x[0].permute({1, 0}).matmul(x[1].flip(0));
        },
        {rnd({256, 16}, 44), rnd({256, 32}, 45)}, 256);
    agree(dev, "batched", mm, {rnd({3, 8, 256}, 46), rnd({3, 256, 32}, 47)}, 256);
    agree(dev, "float64", mm, {rnd({8, 256}, 48, dtypes::float64), rnd({256, 32}, 49, dtypes::float64)}, 256);
    agree(
        dev, "relu after", [](auto& x) { return x[0].matmul(x[1]).relu() * 2; },
        {rnd({16, 256}, 50), rnd({256, 64}, 51)}, 256);
  }
}

TEST_CASE("codegen: column sums in row blocks agree with CPU", "[codegen]") {
  std::uint64_t seed = 60;
  for (const std::string& dev : compiled_devices()) {
    for (Dims s : {Dims{32, 256}, Dims{64, 4096}, Dims{24, 200}, Dims{20, 256}, Dims{8, 64}, Dims{48, 128}}) {
      Tensor a = rnd(s, seed++);
      std::string name = std::to_string(s[0]) + "x" + std::to_string(s[1]);
      agree(
          dev, "sum(0) of " + name, [](auto& x) { return x[0].sum(0); }, {a}, static_cast<double>(s[0]));
      agree(dev, "max(0) of " + name, [](auto& x) { return x[0].max(0); }, {a});
      agree(
          dev, "mean(0) of " + name, [](auto& x) { return x[0].mean(0); }, {a}, static_cast<double>(s[0]));
    }
    agree(
        dev, "padded column sum",
        [](auto& x) {
          return x[0].pad({{2, 6}, {0, 0}}, 1.5).sum(0);
        },
        {rnd({24, 256}, 70)}, 32);
    agree(
        dev, "sum(1) of a transposed matrix",
        [](auto& x) {
          return x[0].permute({1, 0}).sum(1);
        },
        {rnd({64, 256}, 71)}, 64);
    agree(
        dev, "keepdim column sum of a 3-d batch", [](auto& x) { return x[0].sum(1, true); },
        {rnd({2, 32, 128}, 72)}, 32);
  }
}

TEST_CASE("codegen: long reductions with few outputs agree with CPU (grouped on OPENCL)", "[codegen]") {
  std::uint64_t seed = 100;
  for (const std::string& dev : compiled_devices()) {
    Tensor a = rnd({8, 4096}, seed++), b = rnd({2, 3, 512}, seed++), c = rnd({64, 64}, seed++);
    agree(
        dev, "sum(1) 8x4096", [](auto& x) { return x[0].sum(1); }, {a}, 4096);
    agree(dev, "max(1) 8x4096", [](auto& x) { return x[0].max(1); }, {a});
    agree(
        dev, "mean(1) keepdim 8x4096", [](auto& x) { return x[0].mean(1, true); }, {a}, 4096);
    agree(
        dev, "sum(2) 2x3x512", [](auto& x) { return x[0].sum(2); }, {b}, 512);
    agree(
        dev, "sum() 64x64", [](auto& x) { return x[0].sum(); }, {c}, 4096);
    agree(
        dev, "softmax(1) 8x4096", [](auto& x) { return x[0].softmax(1); }, {a}, 10);
    agree(
        dev, "padded sum(1)",
        [](auto& x) {
          return x[0].pad({{0, 0}, {6, 0}}, 0.5).sum(1);
        },
        {rnd({8, 250}, seed++)}, 256);
  }
  for (const std::string& dev : compiled_devices()) {
    if (dev != "OPENCL") continue;
    Tensor a = rnd({8, 4096}, 110).to(dev);
    a.realize();
    std::vector<std::string> src = kernel_sources(a.sum(1));
    REQUIRE(src.size() == 1);
    INFO(src[0]);
    CHECK(count(src[0], "get_local_id(0)") == 1);
    CHECK(count(src[0], "barrier(CLK_LOCAL_MEM_FENCE)") == 2);
  }
}

TEST_CASE("codegen: blocked paths are the ones taken on the host devices", "[codegen]") {
  // On CLANG the first block reads no partial sum: the load of the output is masked by the block
  // index (`?data0[`); PoCL's OPENCL options turn blocking off. A float32 matmul on a host device
  // is no rendered kernel at all but the runtime GEMM (test_gemm); a float64 one is rendered.
  for (const std::string& dev : compiled_devices()) {
    if (dev != "CLANG" && dev != "OPENCL") continue;
    Tensor a = rnd({16, 256}, 80, dtypes::float64).to(dev), b = rnd({256, 64}, 81, dtypes::float64).to(dev),
           c = rnd({32, 256}, 82).to(dev);
    a.realize(), b.realize(), c.realize();
    for (const Tensor& t : {a.matmul(b), c.sum(0)}) {
      std::vector<std::string> src = kernel_sources(t);
      REQUIRE(src.size() == 1);
      INFO(src[0]);
      CHECK((count(src[0], "?data0[") == 0) == (dev == "OPENCL"));
    }
    Tensor a32 = rnd({16, 256}, 83).to(dev), b32 = rnd({256, 64}, 84).to(dev);
    a32.realize(), b32.realize();
    std::vector<std::string> src = kernel_sources(a32.matmul(b32));
    CHECK((src.back().rfind("// gemm_", 0) == 0) == (dev == "CLANG"));
  }
  CHECK(codegen::Opts::opencl().matmul_block == 0);
  CHECK(codegen::Opts::host().matmul_block > 0);
}

TEST_CASE("codegen: a sum along memory is vectorized along it, a square is no matmul tile", "[codegen]") {
  // LayerNorm's variance, sum((x - mean)^2) over rows, with x = a + a position table (so batch and
  // time stay two axes): a multiply-accumulate, but no outer product, so partial sums run along
  // the row, not a matmul register tile over outputs: one loop whose additions may be reassociated
  // (the loop vectorizer's lanes, on LLVM and CLANG alike); column sums and matmul tiles keep their
  // order.
  for (const std::string& dev : compiled_devices()) {
    if (dev == "OPENCL") continue;
    Tensor a = rnd({8, 16, 256}, 90).to(dev), pos = rnd({16, 256}, 91).to(dev);
    a.realize(), pos.realize();
    Tensor x = a + pos, m = x.mean(-1, true).realize();
    Tensor var = ((x - m) * (x - m)).sum(-1);
    agree(
        dev, "variance",
        [](const std::vector<Tensor>& v) {
          Tensor x = v[0] + v[1], m = x.mean(-1, true);
          return ((x - m) * (x - m)).sum(-1);
        },
        {a.to("CPU"), pos.to("CPU")}, 256);
    std::vector<std::string> src = kernel_sources(var);
    REQUIRE(src.size() == 1);
    INFO(src[0]);
    // (CLANG: gcc's loop vectorizer, allowed to reassociate this sum alone by OpenMP's simd reduction)
    const std::string mark = dev == "LLVM" ? "fadd reassoc" : "#pragma omp simd reduction(+:";
    CHECK(src[0].find("r_8_16_256(") != std::string::npos);  // no upcast: the compiler's lanes
    CHECK(src[0].find(mark) != std::string::npos);
    Tensor c = rnd({64, 256}, 92).to(dev), d64 = rnd({16, 32}, 93, dtypes::float64).to(dev);
    c.realize(), d64.realize();
    for (const Tensor& t : {c.sum(0), d64.matmul(d64.permute({1, 0}))}) {
      std::vector<std::string> s = kernel_sources(t);
      REQUIRE(s.size() == 1);
      CHECK(s[0].find(dev == "LLVM" ? "reassoc" : "omp simd") == std::string::npos);
    }
  }
}

TEST_CASE("codegen: common subexpressions are emitted once", "[codegen]") {
  // a / (a + b), a = exp(-max(-x, 0)), b = exp(-max(x, 0)): two exps, not three.
  auto two_exps = [](const Tensor& x) {
    Tensor a = (-(-x).maximum(0)).exp(), b = (-x.maximum(0)).exp();
    return a / (a + b);
  };
  for (const std::string& dev : compiled_devices()) {
    if (dev != "CLANG" && dev != "OPENCL") continue;
    Tensor x = rnd({1000}, 90).to(dev);
    x.realize();
    std::vector<std::string> src = kernel_sources(two_exps(x));
    REQUIRE(src.size() == 1);
    std::string body = src[0].substr(src[0].find("void E_"));
    INFO(body);
    CHECK(count(body, dev == "CLANG" ? "mg_exp2f(" : "exp2(") == 2);
    // sigmoid() is the one-exp formula 1 / (1 + exp(-x)), as fast as spelling it out.
    src = kernel_sources(x.sigmoid());
    REQUIRE(src.size() == 1);
    body = src[0].substr(src[0].find("void E_"));
    INFO(body);
    CHECK(count(body, dev == "CLANG" ? "mg_exp2f(" : "exp2(") == 1);
    // (x*y + x*y) * (x*y): one multiply of x by y
    Tensor y = rnd({1000}, 91).to(dev);
    y.realize();
    src = kernel_sources((x * y + x * y) * (x * y));
    REQUIRE(src.size() == 1);
    body = src[0].substr(src[0].find('{', src[0].find("void E_")));  // after the pointer arguments
    INFO(body);
    CHECK(count(body, "*") == 2);  // x*y, then (s+s)*(x*y)
  }
  for (const std::string& dev : compiled_devices())
    agree(
        dev, "shared subtrees",
        [&](auto& x) {
          return (x[0] * x[1] + x[0] * x[1]) * (x[0] * x[1]) + two_exps(x[0]) + x[1].sigmoid();
        },
        {rnd({333}, 92), rnd({333}, 93)}, 10);
}

TEST_CASE("codegen: sigmoid and tanh are finite, with finite gradients, at every input", "[codegen]") {
  // sigmoid's one exp overflows to inf for x < -88 (float): its value is then 1 / inf = 0, and its
  // gradient s (1 - s) comes from the output, never from inf / inf.
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {-inf, -1e4, -1000, -104, -88.7, -87,  -30, -17,  -1,  -1e-3, 0,
                           1e-3, 1,    17,    30,   87,    88.7, 104, 1000, 1e4, inf};
  for (double x : random_values(200, 96, -120, 120)) v.push_back(x);
  auto sig = [](double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); };
  std::vector<std::string> devs = compiled_devices();
  devs.push_back("CPU");
  for (const std::string& dev : devs) {
    for (DType dt : {dtypes::float32, dtypes::float64}) {
      INFO(dev << " " << dt.name);
      Tensor x = Tensor(v, {static_cast<i64>(v.size())}, {.device = dev}).cast(dt).detach();
      x.requires_grad_();
      Tensor s = x.sigmoid(), t = x.tanh();
      (s + t).sum().backward();
      std::vector<double> sv = s.to_vector<double>(), tv = t.to_vector<double>(),
                          g = x.grad->to_vector<double>();
      // The exponent's rounding makes the error relative to |x|; below the smallest normal number
      // exp(-x) has overflowed and sigmoid is 0.
      bool f32 = dt == dtypes::float32;
      double eps = f32 ? 1e-6 : 1e-14, tiny = f32 ? 0x1p-126 : 0x1p-1022;
      for (std::size_t i = 0; i < v.size(); ++i) {
        double want_s = sig(v[i]), want_t = std::tanh(v[i]);
        double want_g = want_s * (1 - want_s) + (1 - want_t * want_t);
        INFO("x = " << v[i] << ": sigmoid " << sv[i] << ", tanh " << tv[i] << ", gradient " << g[i]);
        REQUIRE(std::isfinite(g[i]));
        CHECK(std::abs(sv[i] - want_s) <= eps * (1 + std::min(std::abs(v[i]), 1e4)) * want_s + tiny);
        CHECK(std::abs(tv[i] - want_t) <= 2 * eps);
        CHECK(std::abs(g[i] - want_g) <= 4 * eps);
      }
    }
  }
}

TEST_CASE("codegen: the inline exp2 matches the C library's to a few ulp", "[codegen]") {
  constexpr double inf = std::numeric_limits<double>::infinity(),
                   nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {0,     -0.0,   1,    -1,   0.5,    -0.5,  127.9,      128,  129,
                           1000,  -125.5, -126, -130, -140.3, -149,  -149.5,     -150, -151,
                           -1000, inf,    -inf, nan,  1e-8,   -1e-8, 0.49999997, 3.25};
  for (double x : random_values(4000, 95, -160, 130)) v.push_back(x);
  for (const std::string& dev : compiled_devices()) {
    Tensor t = Tensor(v, {static_cast<i64>(v.size())}, {.device = dev}).cast(dtypes::float32);
    std::vector<float> got = Tensor(t.lazydata->e(UnaryOps::EXP2)).to_vector<float>();
    REQUIRE(got.size() == v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      float x = static_cast<float>(v[i]), want = std::exp2(x);
      INFO(dev << ": exp2(" << x << ") = " << got[i] << ", want " << want);
      if (std::isnan(want)) {
        CHECK(std::isnan(got[i]));
      } else if (std::isinf(want) || want == 0) {
        CHECK(got[i] == want);
      } else {
        // 4 ulp of a normal result; subnormal results hold fewer bits, so 1 unit of the smallest.
        double tol = std::max(4.0 * std::numeric_limits<float>::epsilon() * want, 0x1p-149);
        CHECK(std::abs(static_cast<double>(got[i]) - want) <= tol);
      }
    }
  }
}

TEST_CASE("codegen: kernels that compute one expression agree to the bit", "[codegen]") {
  // std's backward recomputes the variance in one kernel and compares it with the forward's
  // (max(var, -1)'s gradient): with FMA contraction decided per kernel (gcc's default, which
  // vectorizing changes) they differed by an ulp and the gradient was 0.
  for (const std::string& dev : compiled_devices()) {
    for (std::uint64_t seed : {534, 535, 536}) {
      std::vector<double> grads[2];
      for (int on = 0; on < 2; ++on) {
        Tensor x(random_values(12, seed), {2, 3, 2}, {.device = on ? dev : "CPU", .requires_grad = true});
        Tensor p(random_values(4, seed + 100, 0.5, 1.5), {2, 1, 2}, {.device = on ? dev : "CPU"});
        (x.std(1, true) * p).sum().backward();
        grads[on] = x.grad->to_vector<double>();
      }
      INFO(dev << " seed " << seed);
      require_close(grads[1], grads[0], 1e-12, 1e-10, dev + " std gradient");
    }
  }
}

TEST_CASE("codegen: reads through a reshape of a permuted view take its finer axes", "[codegen]") {
  // A head merge, (B, T, H*E) over (B, H, T, E) memory: its bias gradient sums over B and T, and
  // its copy walks it. Each kernel loops over (B, T, H, E), so no index divides or takes a
  // remainder (the merged axis's div/mod read one float a cache line).
  std::uint64_t seed = 400;
  for (const std::string& dev : compiled_devices()) {
    for (Dims s : {Dims{4, 3, 16, 8}, Dims{2, 4, 64, 32}, Dims{3, 5, 7, 9}, Dims{1, 2, 8, 16}}) {
      Tensor a = rnd(s, seed++);
      std::string name = to_string(s);
      auto merged = [s](const Tensor& x) {
        return x.permute({0, 2, 1, 3}).reshape({s[0], s[2], s[1] * s[3]});
      };
      agree(
          dev, "sum over B and T of the head merge of " + name,
          [&](auto& x) {
            return merged(x[0]).sum(std::vector<std::int64_t>{0, 1});
          },
          {a}, static_cast<double>(s[0] * s[2]));
      agree(dev, "max over T of the head merge of " + name, [&](auto& x) { return merged(x[0]).max(1); },
            {a});
      agree(dev, "copy of the head merge of " + name, [&](auto& x) { return merged(x[0]).contiguous(); },
            {a});
      agree(dev, "head merge plus a bias of " + name, [&](auto& x) { return merged(x[0]) + x[1]; },
            {a, rnd({s[1] * s[3]}, seed++)});
      if (dev != "CLANG") continue;
      Tensor on = a.to(dev).realize();
      for (const Tensor& t : {merged(on).sum(std::vector<std::int64_t>{0, 1}), merged(on).contiguous()}) {
        std::vector<std::string> src = kernel_sources(t);
        REQUIRE(src.size() == 1);
        std::string body = src[0].substr(src[0].rfind("void "));
        INFO(body);
        CHECK(count(body, "%") == 0);
        CHECK(count(body, "/") == 0);
      }
    }
  }
}

TEST_CASE("codegen: pieces padded into one axis take the pieces' finer axes", "[codegen]") {
  // A chunk's gradient: three head merges, (B, T, H*E) over (B, H, T, E) memory each, padded into
  // (B, T, 3*H*E) and added. The kernel loops over (B, T, 3, H, E): each piece is read along E, not
  // through a div/mod of the merged axis (the GPT's was 10x slower).
  std::uint64_t seed = 450;
  for (const std::string& dev : compiled_devices()) {
    for (Dims s : {Dims{4, 3, 16, 8}, Dims{2, 4, 64, 32}, Dims{3, 5, 7, 9}}) {
      auto merged = [s](const Tensor& x) {
        return x.permute({0, 2, 1, 3}).reshape({s[0], s[2], s[1] * s[3]});
      };
      auto pieces = [&](auto& x) { return merged(x[0]).cat({merged(x[1]), merged(x[2])}, 2); };
      std::vector<Tensor> in{rnd(s, seed), rnd(s, seed + 1), rnd(s, seed + 2)};
      seed += 3;
      agree(dev, "three head merges side by side, " + to_string(s), pieces, in);
      if (dev != "CLANG") continue;
      std::vector<Tensor> on;
      for (const Tensor& t : in) on.push_back(t.to(dev).realize());
      std::vector<std::string> src = kernel_sources(pieces(on));
      REQUIRE(src.size() == 1);
      std::string name = "_3_" + std::to_string(s[1]) + "_" + std::to_string(s[3]) + "(";
      INFO(src[0]);
      CHECK(src[0].find(name) != std::string::npos);
    }
  }
}
