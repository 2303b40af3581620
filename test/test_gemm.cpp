// The runtime GEMM (device/gemm.hpp): every ISA's kernel this CPU runs against a double-precision
// reference over random shapes, strides, offsets and blockings (edges of every tile and block);
// thread splits bitwise equal to one thread; the host devices' contractions (matmul, transposed,
// batched, broadcast, matrix-vector) run it and agree with CPU; BEAM's choice gives the same
// results as the default blocking, and a second process reuses it without searching.
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "child_process.hpp"
#include "device_scope.hpp"
#include "gradcheck.hpp"
#include "kernel_sources.hpp"
#include "metagrad/cpu/caches.hpp"
#include "metagrad/cpu/gemm.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/fixed/parallel.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;
namespace fs = std::filesystem;
using i64 = std::int64_t;

namespace {

std::vector<gemm::Isa> isas() {
  std::vector<gemm::Isa> out;
  for (gemm::Isa i : {gemm::Isa::generic, gemm::Isa::avx2, gemm::Isa::avx512})
    if (i <= gemm::best_isa()) out.push_back(i);
  return out;
}

// A random product with random strides (row-major or transposed operands, padded rows) and offsets,
// checked against a double-precision sum.
struct Case {
  i64 m, n, k;
  bool ta, tb;
  i64 pad_a, pad_b, pad_c, off;
  std::vector<float> a, b;
  std::vector<float> c;
  bool flip_b = false;  // B's rows read last to first (a negative row stride, as flip(0) gives)
  gemm::Problem problem() {
    i64 lda = (ta ? m : k) + pad_a, ldb = (tb ? k : n) + pad_b;
    gemm::Problem p{m,
                    n,
                    k,
                    a.data() + off,
                    ta ? 1 : lda,
                    ta ? lda : 1,
                    b.data() + off,
                    tb ? 1 : ldb,
                    tb ? ldb : 1,
                    c.data() + off,
                    n + pad_c};
    if (flip_b) p.b += (k - 1) * p.brs, p.brs = -p.brs;
    return p;
  }
  // a and b sized for the shape, strides and offset, with random values; c all 7 (written over, or
  // padding kept)
  void allocate(std::mt19937& g) {
    std::uniform_real_distribution<float> u(-1, 1);
    i64 lda = (ta ? m : k) + pad_a, ldb = (tb ? k : n) + pad_b;
    a.resize(static_cast<std::size_t>(off + (ta ? k : m) * lda));
    b.resize(static_cast<std::size_t>(off + (tb ? n : k) * ldb));
    c.assign(static_cast<std::size_t>(off + m * (n + pad_c)), 7.f);
    for (auto& x : a) x = u(g);
    for (auto& x : b) x = u(g);
  }
};
Case random_case(std::mt19937& g, i64 max_dim) {
  std::uniform_int_distribution<i64> dim(1, max_dim), pad(0, 5);
  Case c{dim(g), dim(g), dim(g), g() % 2 == 0, g() % 2 == 0, pad(g), pad(g), pad(g), pad(g), {}, {}, {}};
  c.allocate(g);
  c.flip_b = g() % 4 == 0;
  return c;
}
// C's values before an accumulating product (acc): each is added to, so check adds them back.
void check(Case& c, const std::string& what, const std::vector<float>& before = {}) {
  gemm::Problem p = c.problem();
  for (i64 i = 0; i < c.m; ++i)
    for (i64 j = 0; j < c.n + c.pad_c; ++j) {
      float got = p.c[i * p.ldc + j];
      if (j >= c.n) {
        if (got != 7.f) FAIL(what << ": C padding written at (" << i << ", " << j << ")");
        continue;
      }
      double want = before.empty() ? 0 : before[static_cast<std::size_t>(p.c - c.c.data() + i * p.ldc + j)];
      for (i64 q = 0; q < c.k; ++q) want += double(p.a[i * p.ars + q * p.acs]) * p.b[q * p.brs + j * p.bcs];
      if (std::abs(got - want) > 1e-5 * static_cast<double>(c.k) + 1e-5)
        FAIL(what << ": C(" << i << ", " << j << ") = " << got << ", want " << want);
    }
}

}  // namespace

TEST_CASE("gemm: every ISA's kernel over random shapes, strides and blockings", "[gemm]") {
  std::mt19937 g(2026);
  for (gemm::Isa isa : isas()) {
    for (int t = 0; t < 60; ++t) {
      Case c = random_case(g, t < 50 ? 70 : 300);
      gemm::GemmBlocking bk = gemm::default_blocking(isa);
      if (t % 3 == 1)
        bk = {std::uniform_int_distribution<i64>(1, 50)(g), std::uniform_int_distribution<i64>(1, 40)(g),
              std::uniform_int_distribution<i64>(1, 80)(g)};
      std::string what = gemm::to_string(isa) + " case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " blocking " +
                         std::to_string(bk.mc) + "/" + std::to_string(bk.kc) + "/" + std::to_string(bk.nc);
      gemm::sgemm(c.problem(), bk, isa);
      check(c, what);
    }
  }
}

TEST_CASE("gemm: deep products (k >> m, n) as dot products, and B read in place", "[gemm]") {
  std::mt19937 g(99);
  std::uniform_int_distribution<i64> small(1, 12), deep(200, 3000);
  for (gemm::Isa isa : isas())
    for (int t = 0; t < 24; ++t) {
      // t even: A row-major and B transposed (both contiguous along k: the dot-product path);
      // t odd: B row-major with one strip of A's rows (B read in place, its last strip packed)
      Case c = random_case(g, 2);
      c.m = small(g), c.n = t % 2 ? small(g) * 5 : small(g), c.k = deep(g), c.ta = false, c.tb = t % 2 == 0;
      c.allocate(g);
      gemm::sgemm(c.problem(), gemm::default_blocking(isa), isa);
      check(c, gemm::to_string(isa) + " deep case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                   " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
    }
}

TEST_CASE("gemm: A rows a multiple of 4 KiB apart (copied to padded rows) over random shapes", "[gemm]") {
  std::mt19937 g(4096);
  std::uniform_int_distribution<i64> rows(1, 64), cols(1, 80);
  for (gemm::Isa isa : isas())
    for (int t = 0; t < 12; ++t) {
      Case c = random_case(g, 2);
      const i64 lda = t % 3 == 2 ? 2048 : 1024;  // 4 or 8 KiB
      c.m = rows(g), c.n = cols(g), c.k = std::uniform_int_distribution<i64>(1, lda)(g), c.ta = false;
      c.pad_a = lda - c.k;
      c.allocate(g);
      gemm::GemmBlocking bk = gemm::default_blocking(isa);
      if (t % 2) bk.kc = std::uniform_int_distribution<i64>(1, 300)(g), bk.mc = rows(g);
      gemm::sgemm(c.problem(), bk, isa);
      check(c, gemm::to_string(isa) + " aliased case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                   " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " lda=" + std::to_string(lda));
    }
}

TEST_CASE("gemm: B read in place by one block of A's rows: rows 4 KiB apart, off a line, from memory",
          "[gemm]") {
  std::mt19937 g(64);
  std::uniform_int_distribution<i64> rows(3, 40), two_tiles(3, 12), depth(140, 700), line(0, 15);
  // B's rows 4 KiB apart (in place up to two tiles of rows, 12 under AVX2, else packed whole rows at
  // a time) or 4000 bytes (in place); k past a strip whose two lines a row outgrow half the L1, with
  // B's rows off a cache line by every amount (the first columns a product of their own); and a B
  // larger than CacheSizes::from_memory(), read in place (each tile asking for the next strip)
  const i64 from_memory = cpu::host_caches().from_memory() / 4000 + 1;
  for (gemm::Isa isa : isas())
    for (int t = 0; t < 16; ++t) {
      Case c = random_case(g, 2);
      const i64 ldb = t % 4 == 3 ? 1000 : 1024;
      const bool memory = t >= 14;
      c.m = memory ? 6 : t % 2 ? rows(g) : two_tiles(g);
      c.k = memory ? from_memory : depth(g);
      c.n = t % 2 || memory ? ldb : std::uniform_int_distribution<i64>(1, ldb)(g);
      c.ta = false, c.tb = false, c.pad_b = ldb - c.n, c.off = 15;
      c.allocate(g);
      // B's first element `line(g)` floats past a 64-byte boundary (a, b and c share the offset)
      const auto at = reinterpret_cast<std::uintptr_t>(c.b.data()) / sizeof(float);
      c.off = static_cast<i64>((16 - at % 16 + static_cast<std::uintptr_t>(line(g))) % 16);
      gemm::sgemm(c.problem(), gemm::default_blocking(isa), isa);
      check(c, gemm::to_string(isa) + " in-place case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                   " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " ldb=" + std::to_string(ldb) +
                   " B off a line by " +
                   std::to_string(reinterpret_cast<std::uintptr_t>(c.problem().b) % 64) + " bytes");
    }
}

TEST_CASE("gemm: a packed panel of B past half the L2 (each strip's first tile asking for the next)",
          "[gemm]") {
  std::mt19937 g(2048);
  std::uniform_int_distribution<i64> extra(1, 40);
  const i64 l2 = cpu::host_caches().l2;
  for (gemm::Isa isa : isas())
    for (int t = 0; t < 3; ++t) {
      // more rows than a block of A (B packed, not read in place), k one step (or two), and n's
      // columns, full strips and a partial last one, past half the L2 at that step's depth
      const gemm::GemmBlocking bk = gemm::default_blocking(isa);
      Case c = random_case(g, 2);
      c.ta = false, c.tb = t == 2, c.flip_b = false;
      c.m = bk.mc + extra(g), c.k = t == 1 ? bk.kc + extra(g) : bk.kc;
      const i64 step = t == 1 ? (c.k + 1) / 2 : c.k;
      c.n = std::min<i64>(bk.nc - 1, l2 / 2 / (4 * step) + extra(g));
      if (c.n * step * 4 <= l2 / 2) {  // (an L2 that holds NC columns at that depth: no such panel)
        WARN("no panel of " << gemm::to_string(isa) << "'s blocking outgrows half this L2 at k = " << c.k);
        continue;
      }
      c.allocate(g);
      gemm::sgemm(c.problem(), bk, isa);
      check(c, gemm::to_string(isa) + " panel case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                   " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
    }
}

TEST_CASE("gemm: one or two rows of A (a vector times a matrix), B read along its rows", "[gemm]") {
  std::mt19937 g(1);
  std::uniform_int_distribution<i64> rows(1, 3), cols(1, 2600), depth(1, 70);
  for (gemm::Isa isa : isas())
    for (int t = 0; t < 30; ++t) {
      // columns past a vector, and past one run of 4 KiB (METAGRAD_GEMM_FEW_BYTES), k past a step of
      // 4; a B with padded or reversed rows; 3 rows as the tiles' control
      Case c = random_case(g, 2);
      c.m = rows(g), c.n = t % 3 ? cols(g) : rows(g) * 7, c.k = depth(g), c.tb = false;
      c.allocate(g);
      gemm::sgemm(c.problem(), gemm::default_blocking(isa), isa);
      check(c, gemm::to_string(isa) + " few-rows case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                   " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + (c.ta ? " A transposed" : "") +
                   (c.flip_b ? " B reversed" : ""));
    }
}

TEST_CASE("gemm: a header-only unit's kernel (few tiles) over edge shapes, strides and blockings", "[gemm]") {
  // Gemm<float, false>: the copy a unit without the library compiles (cpu/gemm.hpp, kAllTiles), one
  // tile shape in place and one packed, edges copied into a tile of MR rows; under this unit's flags.
  using Few = cpu::detail::Gemm<float, false>;
  std::mt19937 g(35);
  const i64 mr = Few::MR;
  std::vector<i64> dims{1, 2, 3, 5, 7, 13, 17, 31, 64, 97, 100, mr - 1, mr + 1, 2 * mr - 1, 2 * mr + 1};
  std::uniform_int_distribution<i64> pick(0, static_cast<i64>(dims.size()) - 1);
  for (int t = 0; t < 90; ++t) {
    Case c = random_case(g, t < 60 ? 2 : 300);
    if (t < 60) c.m = dims[pick(g)], c.n = dims[pick(g)], c.k = dims[pick(g)];
    // deep: edge rows copied a chunk of k at a time (A row-major, B row-major: not dot products)
    if (t % 10 == 9) c.k = std::uniform_int_distribution<i64>(700, 2500)(g), c.tb = false;
    c.allocate(g);
    cpu::GemmBlocking bk = Few::host_blocking();
    if (t % 3 == 1)
      bk = {std::uniform_int_distribution<i64>(1, 50)(g), std::uniform_int_distribution<i64>(1, 40)(g),
            std::uniform_int_distribution<i64>(1, 80)(g)};
    const gemm::Problem p = c.problem();
    Few::run(p.m, p.n, p.k, p.a, p.ars, p.acs, p.b, p.brs, p.bcs, p.c, p.ldc, bk);
    check(c, "few tiles case " + std::to_string(t) + " m=" + std::to_string(c.m) +
                 " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + (c.ta ? " A transposed" : "") +
                 (c.tb ? " B transposed" : "") + (c.flip_b ? " B reversed" : "") + " blocking " +
                 std::to_string(bk.mc) + "/" + std::to_string(bk.kc) + "/" + std::to_string(bk.nc));
  }
}

// C += A B (the static path's sum of a product and a bias, or of a gradient and one already there):
// through every path (tiles over several k steps, dot products, one or two rows, a first product up
// to a cache line, threads, k = 0), on the library's copy for this CPU and on a header-only unit's.
TEST_CASE("gemm: accumulating into C (C += A B) over random shapes, strides and blockings", "[gemm]") {
  using Lib = cpu::detail::Gemm<float>;
  using Few = cpu::detail::Gemm<float, false>;
  std::mt19937 g(23);
  std::uniform_real_distribution<float> u(-2, 2);
  const int saved = fixed::threads();
  for (int t = 0; t < 120; ++t) {
    Case c = random_case(g, t % 4 == 3 ? 300 : 70);
    if (t % 6 == 1) c.m = std::uniform_int_distribution<i64>(1, 2)(g), c.tb = false;  // one or two rows
    if (t % 6 == 2)                                                                   // dot products
      c.m = std::uniform_int_distribution<i64>(1, 9)(g), c.n = std::uniform_int_distribution<i64>(1, 9)(g),
      c.k = std::uniform_int_distribution<i64>(300, 2000)(g), c.ta = false, c.tb = true;
    if (t % 10 == 5) c.k = 0;
    c.allocate(g);
    for (float& x : c.c)
      if (x == 7.f) x = u(g);
    const gemm::Problem p = c.problem();
    for (i64 i = 0; i < c.m; ++i)  // (the padding stays 7: written, it fails)
      std::fill(p.c + i * p.ldc + c.n, p.c + i * p.ldc + c.n + c.pad_c, 7.f);
    const std::vector<float> before = c.c;
    cpu::GemmBlocking bk = t % 2 ? Few::host_blocking() : Lib::host_blocking();
    if (t % 3 == 1)
      bk = {std::uniform_int_distribution<i64>(1, 50)(g), std::uniform_int_distribution<i64>(1, 40)(g),
            std::uniform_int_distribution<i64>(1, 80)(g)};
    fixed::set_threads(t % 5 == 4 ? 2 : 1);
    if (t % 2)
      Few::run(p.m, p.n, p.k, p.a, p.ars, p.acs, p.b, p.brs, p.bcs, p.c, p.ldc, bk, true);
    else
      Lib::run(p.m, p.n, p.k, p.a, p.ars, p.acs, p.b, p.brs, p.bcs, p.c, p.ldc, bk, true);
    check(c,
          std::string(t % 2 ? "few tiles" : "library") + " acc case " + std::to_string(t) +
              " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
              (c.ta ? " A transposed" : "") + (c.tb ? " B transposed" : "") +
              (c.flip_b ? " B reversed" : "") + " blocking " + std::to_string(bk.mc) + "/" +
              std::to_string(bk.kc) + "/" + std::to_string(bk.nc),
          before);
  }
  fixed::set_threads(saved);
}

TEST_CASE("gemm: splits over 2 and 3 threads give one thread's result bitwise", "[gemm]") {
  std::mt19937 g(7);
  int saved = fixed::threads();
  // n = 1500: each product is above the split's threshold; 6 and 16 rows split the columns (too
  // few row strips), 200 too (A is the smaller read), 800 the rows; with k = 1024, A's rows are 4
  // KiB apart: one thread copies them, each column part reads them in place; 1 and 2 rows split the
  // columns of B's rows; 12 and 5 rows read B in place (5: from memory, asking for strips ahead)
  for (auto [m, k] : {std::pair<i64, i64>{6, 150},
                      {16, 150},
                      {200, 150},
                      {800, 150},
                      {200, 1024},
                      {1, 800},
                      {2, 400},
                      {12, 600},
                      {5, cpu::host_caches().from_memory() / 6000 + 1}}) {
    Case c{m, 1500, k, false, false, 0, 0, 0, 0, {}, {}, {}};
    c.a.resize(static_cast<std::size_t>(m * k)), c.b.resize(static_cast<std::size_t>(1500 * k)),
        c.c.resize(static_cast<std::size_t>(m * 1500));
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : c.a) x = u(g);
    for (auto& x : c.b) x = u(g);
    fixed::set_threads(1);
    gemm::sgemm(c.problem());
    std::vector<float> one = c.c;
    for (int t : {2, 3}) {
      fixed::set_threads(t);
      std::fill(c.c.begin(), c.c.end(), 0.f);
      gemm::sgemm(c.problem(), gemm::default_blocking());
      INFO("m = " << m << ", k = " << k << ", " << t << " threads");
      REQUIRE(c.c == one);
    }
  }
  fixed::set_threads(saved);
}

TEST_CASE("gemm: the host devices' float32 contractions run it and agree with CPU", "[gemm]") {
  using test::require_close;
  std::mt19937 g(11);
  auto rnd = [&](const Dims& s) {
    return Tensor(test::random_values(prod(s), g()), s, {.device = "CPU"}).cast(dtypes::float32).realize();
  };
  struct Form {
    const char* what;
    std::function<Tensor(const Tensor&, const Tensor&)> f;
    Dims a, b;
  };
  std::uniform_int_distribution<i64> d(1, 40);
  for (const char* dev : {"CLANG", "LLVM"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    for (int t = 0; t < 8; ++t) {
      i64 m = d(g), n = d(g), k = 1 + d(g), bt = 1 + t % 3;  // (k = 1 is no reduce: elementwise)
      const Form forms[] = {
          {"a @ b", [](auto& a, auto& b) { return a.matmul(b); }, {m, k}, {k, n}},
          {"a.T @ b",
           [](auto& a, auto& b) {
             return a.permute({1, 0}).matmul(b);
           },
           {k, m},
           {k, n}},
          {"a @ b.T",
           [](auto& a, auto& b) {
             return a.matmul(b.permute({1, 0}));
           },
           {m, k},
           {n, k}},
          {"(a @ b).T",
           [](auto& a, auto& b) {
             return a.matmul(b).permute({1, 0}).contiguous();
           },
           {m, k},
           {k, n}},
          {"batched", [](auto& a, auto& b) { return a.matmul(b); }, {bt, m, k}, {bt, k, n}},
          {"broadcast b", [](auto& a, auto& b) { return a.matmul(b); }, {bt, m, k}, {k, n}},
          {"matrix-vector", [](auto& a, auto& b) { return a.matmul(b); }, {m, k}, {k}},
          {"vector-matrix", [](auto& a, auto& b) { return a.matmul(b); }, {k}, {k, n}},
          {"flipped slice",
           [m, k](auto& a, auto& b) {
             return a.flip(0).shrink({{1, m + 1}, {0, k}}).matmul(b);
           },
           {m + 2, k},
           {k, n}},
          // attention's head merge: no strided view reads it, so it is gathered first
          {"head merge @ b",
           [=](auto& a, auto& b) {
             return a.transpose(1, 2).reshape({bt, m, 2 * k}).matmul(b);
           },
           {bt, 2, m, k},
           {2 * k, n}},
          // its weight gradient: a sum over batch and time, one k of bt * m
          {"head merge^T dy",
           [=](auto& a, auto& b) {
             Tensor x = a.transpose(1, 2).reshape({bt, m, 2 * k});
             return (x.reshape({bt, m, 2 * k, 1}) * b.reshape({bt, m, 1, n})).sum({0, 1});
           },
           {bt, 2, m, k},
           {bt, m, n}},
      };
      for (const Form& f : forms) {
        INFO(dev << " " << f.what << " m=" << m << " n=" << n << " k=" << k << " batch=" << bt);
        Tensor a = rnd(f.a), b = rnd(f.b);
        Tensor want = f.f(a, b), got = f.f(a.to(dev), b.to(dev));
        auto src = test::kernel_sources(got);
        bool gemm_ran = false;
        for (const auto& s : src) gemm_ran |= s.rfind("// gemm_", 0) == 0;
        CHECK(gemm_ran);
        require_close(got.to_vector<double>(), want.to_vector<double>(), 1e-5 * k, 1e-5 * k, f.what);
      }
    }
  }
}

namespace {
// An epilogue on C's rows (cpu::GemmRowsDone): checks that the rows it is handed are final (equal to
// the product run without it) and new, then applies ReLU to them in place.
struct RowsSeen {
  const float* want;  // C of the product without an epilogue
  float* c;
  i64 n, ldc;
  std::vector<std::atomic<int>>* calls;  // per row
  std::atomic<int>* stale;               // rows handed over before they were final
};
void rows_seen(const void* ctx, i64 i0, i64 i1) {
  const auto& r = *static_cast<const RowsSeen*>(ctx);
  for (i64 i = i0; i < i1; ++i) {
    ++(*r.calls)[static_cast<std::size_t>(i)];
    for (i64 j = 0; j < r.n; ++j) {
      float& x = r.c[i * r.ldc + j];
      if (x != r.want[i * r.ldc + j]) ++*r.stale;
      x = std::max(x, 0.f);
    }
  }
}
}  // namespace

TEST_CASE("gemm: an epilogue hook sees each block of C's rows once and final on every path and split",
          "[gemm]") {
  std::mt19937 g(23);
  const int saved = fixed::threads();
  // Random small shapes (one block; few rows; deep products as dot products; B off a line: a lead
  // product apart), then products above the split's threshold by rows and by columns (6, 16 rows),
  // deep, and with A's rows 4 KiB apart.
  std::vector<std::array<i64, 3>> shapes;
  std::uniform_int_distribution<i64> dim(1, 70);
  for (int t = 0; t < 12; ++t) shapes.push_back({dim(g), dim(g), dim(g)});
  for (auto s : {std::array<i64, 3>{6, 1500, 150},
                 {16, 1500, 150},
                 {200, 1500, 150},
                 {800, 700, 150},
                 {200, 600, 1024},
                 {3, 9, 40000},
                 {2, 4096, 300}})
    shapes.push_back(s);
  for (gemm::Isa isa : isas())
    for (int threads : {1, 2}) {
      fixed::set_threads(threads);
      for (auto [m, n, k] : shapes) {
        // (B transposed, its rows along k, for the dot products and the few-row products' gemv)
        Case c{m,
               n,
               k,
               g() % 2 == 0,
               k >= 16 * std::max(m, n) || g() % 2 == 0,
               0,
               0,
               0,
               static_cast<i64>(g() % 3),
               {},
               {},
               {}};
        c.allocate(g);
        gemm::Problem p = c.problem();
        gemm::sgemm(p, {}, isa);
        const std::vector<float> want = c.c;
        std::fill(c.c.begin(), c.c.end(), 7.f);
        std::vector<std::atomic<int>> calls(static_cast<std::size_t>(m));
        std::atomic<int> stale{0};
        const RowsSeen seen{want.data() + (p.c - c.c.data()), p.c, n, p.ldc, &calls, &stale};
        const cpu::GemmRowsDone done{&rows_seen, &seen};
        p.done = &done;
        gemm::sgemm(p, {}, isa);
        INFO(gemm::to_string(isa) << " " << threads << " threads: " << m << " x " << n << " x " << k);
        REQUIRE(stale == 0);
        for (i64 i = 0; i < m; ++i) {
          REQUIRE(calls[static_cast<std::size_t>(i)] == 1);
          for (i64 j = 0; j < n; ++j)
            REQUIRE(p.c[i * p.ldc + j] ==
                    std::max(want[static_cast<std::size_t>(p.c - c.c.data() + i * p.ldc + j)], 0.f));
        }
      }
    }
  fixed::set_threads(saved);
}

TEST_CASE("gemm: products followed by an epilogue agree with the product and its epilogue apart", "[gemm]") {
  // The GEMM's epilogue (the ops the scheduler fuses with a product: a linear layer's bias, added
  // before the summed axis is dropped) runs on C's blocks of rows inside the product, into the
  // output itself; against the same product realized first and its bias added by a kernel of its
  // own. (Ops after a product's reshape are a kernel of their own: docs/gemm.md.)
  using test::require_close;
  std::mt19937 g(31);
  auto rnd = [&](const Dims& s) {
    return Tensor(test::random_values(prod(s), g()), s, {.dtype = dtypes::float32}).realize();
  };
  const int saved = fixed::threads();
  std::uniform_int_distribution<i64> d(1, 90);
  for (const char* dev : {"CLANG", "LLVM"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    for (int t = 0; t < 6; ++t) {
      fixed::set_threads(1 + t % 2);
      // (ragged: any size; t >= 4 above the threads' threshold, split by rows or columns)
      const i64 m = t >= 4 ? 150 + d(g) : d(g), n = t >= 4 ? 200 + d(g) : d(g), k = 2 + d(g), bt = 1 + t % 3;
      Tensor x = rnd({m, k}), w = rnd({k, n}), bias = rnd({n}), bk = rnd({k}), dy = rnd({m, n});
      Tensor xb = rnd({bt, m, k});  // (a batch of sequences: one product of bt m rows)
      struct Kind {
        const char* what;
        std::function<Tensor()> fused, apart;
      } kinds[] = {
          {"linear bias", [&] { return x.linear(w, bias); }, [&] { return x.matmul(w).realize() + bias; }},
          {"batched linear bias", [&] { return xb.linear(w, bias); },
           [&] { return xb.matmul(w).realize() + bias; }},
          {"transposed linear bias", [&] { return dy.transpose(0, 1).linear(x, bk); },
           [&] { return dy.transpose(0, 1).matmul(x).realize() + bk; }},
      };
      for (const Kind& kd : kinds) {
        INFO(dev << " " << kd.what << " m=" << m << " n=" << n << " k=" << k << " batch=" << bt
                 << " threads=" << fixed::threads());
        Tensor apart = kd.apart().realize(), fused = kd.fused();
        bool gemm_ran = false;
        for (const auto& src : test::kernel_sources(fused))  // (realizes it)
          gemm_ran |= src.rfind("// gemm_", 0) == 0 && src.find("then the epilogue") != std::string::npos;
        CHECK(gemm_ran);
        require_close(fused.to_vector<double>(), apart.to_vector<double>(), 1e-6, 1e-6, kd.what);
      }
    }
  }
  fixed::set_threads(saved);
}

TEST_CASE("gemm: a conv's bias, ReLU and residual add are its GEMM's epilogue, one kernel a conv", "[gemm]") {
  // A ResNet block and the conv after it: y = relu(conv1(x) + b1), out = relu(conv2(y) + b2 + x),
  // z = conv3(out) + b3 + out. On a host device each conv is one kernel, a GEMM whose epilogue is
  // its bias, ReLU and residual add, and `out`, which the next conv and the residual add both
  // read, is computed once: three kernels, three GEMMs. The CPU device's interpreter runs the ops
  // after a conv's reshape apart. Against float64 on CPU with each conv realized before its ops
  // (apart), on 1 and 2 threads, ragged shapes (any channels and sizes).
  using test::require_close;
  std::mt19937 g(47);
  auto rnd = [&](const Dims& s) {
    return Tensor(test::random_values(prod(s), g()), s, {.device = "CPU", .dtype = dtypes::float64})
        .realize();
  };
  const int saved = fixed::threads();
  std::uniform_int_distribution<i64> d(1, 8);
  for (int t = 0; t < 3; ++t) {
    // (t == 2: above the threads' threshold)
    const i64 bs = 1 + t % 2, c = (t == 2 ? 16 : 2) + d(g), hw = (t == 2 ? 14 : 5) + d(g);
    Tensor x = rnd({bs, c, hw, hw}), w1 = rnd({c, c, 3, 3}), b1 = rnd({c}), w2 = rnd({c, c, 3, 3}),
           b2 = rnd({c}), w3 = rnd({c, c, 1, 1}), b3 = rnd({c});
    auto block = [&](const Tensor& in, const Tensor& W1, const Tensor& W2, const Tensor& W3, const Tensor& B1,
                     const Tensor& B2, const Tensor& B3, bool apart) {
      auto conv = [&](const Tensor& a, const Tensor& w, const Tensor& b, i64 pad) {
        if (!apart) return a.conv2d(w, b, 1, {1}, {1}, {pad});
        return a.conv2d(w, std::nullopt, 1, {1}, {1}, {pad}).realize() + b.reshape({1, c, 1, 1});
      };
      Tensor y = conv(in, W1, B1, 1).relu();
      Tensor out = (conv(y, W2, B2, 1) + in).relu();
      return conv(out, W3, B3, 0) + out;
    };
    Tensor want = block(x, w1, w2, w3, b1, b2, b3, true).realize();
    const std::vector<double> wanted = want.to_vector<double>();
    double scale = 0;
    for (double v : wanted) scale = std::max(scale, std::fabs(v));
    for (const char* dev : {"CPU", "CLANG", "LLVM"}) {
      test::DeviceScope scope(dev);
      if (!scope.ok) continue;
      for (int threads : {1, 2}) {
        fixed::set_threads(threads);
        INFO(dev << " batch=" << bs << " channels=" << c << " size=" << hw << " threads=" << threads);
        auto on = [&](const Tensor& a) { return a.cast(dtypes::float32).to(dev).realize(); };
        Tensor got = block(on(x), on(w1), on(w2), on(w3), on(b1), on(b2), on(b3), false);
        const i64 before = GlobalCounters::kernel_count;
        auto src = test::kernel_sources(got);
        if (std::string(dev) != "CPU") {  // (the interpreter runs a conv's ops after its reshape apart)
          CHECK(GlobalCounters::kernel_count - before == 3);
          int epilogues = 0;
          for (const auto& s : src)
            epilogues += s.rfind("// gemm_", 0) == 0 && s.find("then the epilogue") != std::string::npos;
          CHECK(epilogues == 3);
        }
        require_close(got.to_vector<double>(), wanted, 1e-5 * scale, 1e-4, dev);
      }
    }
  }
  fixed::set_threads(saved);
}

TEST_CASE("gemm: a model's products are each one GEMM of the right extent", "[gemm]") {
  // A batch of sequences times a weight: one product of batch * time rows, not a batch of products;
  // a head merge times a weight gathers the merged operand first (no rendered loops); its weight
  // gradient sums over batch and time as one k.
  for (const char* dev : {"CLANG", "LLVM"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    Tensor x = Tensor::rand({4, 16, 24}).realize(), w = Tensor::rand({24, 40}).realize();
    Tensor heads = Tensor::rand({4, 2, 16, 12}).realize(), dy = Tensor::rand({4, 16, 40}).realize();
    Tensor merged = heads.transpose(1, 2).reshape({4, 16, 24});
    struct Case {
      Tensor t;
      const char* name;
      bool gathered;
    } cases[] = {{x.matmul(w), "// gemm_1x64x40x24", false},
                 {merged.matmul(w), "// gemm_1x64x40x24", true},
                 {(merged.reshape({4, 16, 24, 1}) * dy.reshape({4, 16, 1, 40})).sum({0, 1}),
                  "// gemm_1x24x40x64", true}};
    for (Case& c : cases) {
      auto src = test::kernel_sources(c.t);
      INFO(dev << " " << c.name);
      REQUIRE(src.size() == 1);
      CHECK(src[0].rfind(c.name, 0) == 0);
      CHECK((src[0].find("gathered first") != std::string::npos) == c.gathered);
    }
  }
}

TEST_CASE("gemm BEAM child process", "[.][gemm]") {
  const char* out = std::getenv("METAGRAD_TEST_CHILD_OUT");
  if (!out) return;  // only as a child of the test below
  std::vector<float> a(300 * 200), b(200 * 250), c1(300 * 250), c2(300 * 250);
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(g);
  for (auto& x : b) x = u(g);
  gemm::Problem p{300, 250, 200, a.data(), 200, 1, b.data(), 250, 1, c1.data(), 250};
  gemm::GemmBlocking chosen = gemm::choose_blocking(300, 250, 200);
  gemm::sgemm(p, chosen);
  p.c = c2.data();
  gemm::sgemm(p, gemm::default_blocking());
  double worst = 0;
  for (std::size_t i = 0; i < c1.size(); ++i) worst = std::max(worst, double(std::abs(c1[i] - c2[i])));
  auto s = gemm::tune_stats();
  std::ofstream(out) << s.searches << " " << s.disk_hits << " " << worst << " " << chosen.mc << " "
                     << chosen.kc << " " << chosen.nc << "\n";
}

// Runs the BEAM child process under `beam` on `dir`'s cache; its searches, cache hits and blocking.
std::tuple<long, long, gemm::GemmBlocking> run_beam_child(const test::TempDir& dir, const char* name,
                                                          const char* beam) {
  pid_t pid =
      test::spawn_child("gemm BEAM child process", {"METAGRAD_CACHE=" + (dir.path / "cache").string(),
                                                    "METAGRAD_TEST_CHILD_OUT=" + (dir.path / name).string(),
                                                    std::string("BEAM=") + beam, "THREADS=1"});
  REQUIRE(pid > 0);
  REQUIRE(test::wait_for(pid) == 0);
  std::ifstream f(dir.path / name);
  long searches = -1, hits = -1;
  double worst = 1;
  gemm::GemmBlocking b;
  f >> searches >> hits >> worst >> b.mc >> b.kc >> b.nc;
  CHECK(worst < 1e-3);  // another blocking sums in another order: close, not equal
  return {searches, hits, b};
}

TEST_CASE("gemm: BEAM's choice matches the default's results and a second process reuses it", "[gemm]") {
  test::TempDir dir("metagrad_beam_test");
  auto run = [&](const char* name) { return run_beam_child(dir, name, "2"); };
  auto [s1, h1, b1] = run("first");
  auto [s2, h2, b2] = run("second");
  CHECK(s1 == 1);
  CHECK(h1 == 0);
  CHECK(s2 == 0);  // the choice came from disk
  CHECK(h2 == 1);
  CHECK(b1 == b2);
}

// Issue 38 item 10: a kc of INT64_MAX in the choices file killed every later matmul with SIGFPE.
TEST_CASE("gemm: a damaged line in BEAM's choices is dropped, never used, and the file rewritten", "[gemm]") {
  test::TempDir dir("metagrad_beam_damaged");
  auto [s1, h1, b1] = run_beam_child(dir, "first", "2");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir.path / "cache" / "gemm")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  std::string good;
  {
    std::ifstream g(files[0]);
    std::getline(g, good);
  }
  std::istringstream in(good);
  std::string isa, m, n, k, threads;
  REQUIRE(in >> isa >> m >> n >> k >> threads);
  {  // a later line for the same product would replace the good one
    std::ofstream f(files[0], std::ios::app);
    f << isa << " " << m << " " << n << " " << k << " " << threads << " 96 9223372036854775807 4096\n"
      << isa << " " << m << " " << n << " " << k << " " << threads << " 0 -3 12\n"
      << "a damaged line\n";
  }
  auto [s2, h2, b2] = run_beam_child(dir, "second", "0");
  CHECK(h2 == 1);  // the good line, from disk
  CHECK(b2 == b1);
  std::ifstream f(files[0]);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(all == good + "\n");
}

// The static path's cache reader (<cstdio>, compiled into every static unit) against a plain
// reading of the same sysfs files with streams.
TEST_CASE("fixed: the cache sizes read from sysfs agree with a stream reading of its files", "[gemm]") {
  auto expected = [](int level) -> std::int64_t {
    for (int i = 0; i < 8; ++i) {
      std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
      int l = 0;
      std::string type, size;
      if (!(lv >> l) || !(ty >> type) || !(sz >> size)) break;
      if (l != level || type == "Instruction") continue;
      std::int64_t v = std::stoll(size);
      char unit = size.back();
      return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
    }
    return 0;
  };
  for (int level = 1; level <= 4; ++level)
    CHECK(metagrad::cpu::detail::sysfs_cache(level) == expected(level));
  auto path = std::filesystem::temp_directory_path() / "metagrad_read_word_test";
  std::ofstream(path) << "  12345678901234567890 tail\n";
  char w[8];
  REQUIRE(metagrad::cpu::detail::read_word(path.c_str(), w, sizeof w));
  CHECK(std::string(w) == "1234567");  // at most n - 1 characters
  std::filesystem::remove(path);
  CHECK_FALSE(metagrad::cpu::detail::read_word(path.c_str(), w, sizeof w));
  const auto& c = metagrad::cpu::host_caches();
  CHECK(c.l1 >= 4096);
  CHECK(c.l2 >= c.l1);
}

// A unit built without ISA flags (a plain Release build, as this one) runs its products on the
// widest copy the CPU has: the library's baseline copy hands them over (runtime/gemm/sgemm_generic.cpp).
TEST_CASE("fixed: a unit built without ISA flags runs its products on the widest copy the CPU has",
          "[gemm]") {
#if defined(__AVX__)
  WARN("skipped: this unit has ISA flags; it calls its own ISA's copy");
#else
  if (metagrad::gemm::isa() == metagrad::gemm::Isa::generic) {
    WARN("skipped: the widest copy this CPU runs is the generic one");
    return;
  }
  namespace fx = metagrad::fixed;
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-1, 1);
  fx::Tensor<float, 37, 53> a;
  fx::Tensor<float, 53, 29> b;
  for (float& v : a) v = u(g);
  for (float& v : b) v = u(g);
  fx::Tensor<double, 37, 53> ad;
  for (long i = 0; i < 37 * 53; ++i) ad.data()[i] = a.data()[i];
  fx::Tensor<double, 53, 29> bd;
  for (long i = 0; i < 53 * 29; ++i) bd.data()[i] = b.data()[i];
  std::int64_t before = metagrad::gemm::widened_products();
  fx::Tensor<float, 37, 29> c = fx::matmul(a, b);
  fx::Tensor<double, 37, 29> cd = fx::matmul(ad, bd);
  CHECK(metagrad::gemm::widened_products() >= before + 2);
  for (long i = 0; i < 37; ++i)
    for (long j = 0; j < 29; ++j) {
      double want = 0;
      for (long k = 0; k < 53; ++k) want += double(a(i, k)) * double(b(k, j));
      CHECK(std::abs(c(i, j) - want) <= 1e-5);
      CHECK(std::abs(cd(i, j) - want) <= 1e-12);
    }
#endif
}

// A static unit linked against the library (this one, through metagrad::metagrad's
// METAGRAD_PREBUILT) calls the library's copies of the GEMM for its ISA and of the thread pool
// rather than compiling its own (cpu/gemm.hpp, cpu/parallel.hpp): the functions it calls live
// in libmetagrad, not in this program.
TEST_CASE("fixed: a unit linked against the library calls the library's GEMM and thread pool", "[gemm]") {
#ifndef METAGRAD_FIXED_GEMM_PREBUILT
  FAIL("METAGRAD_PREBUILT did not reach this unit, or no library copy has its ISA");
#endif
  namespace d = metagrad::cpu::detail;
  for (void* f : {reinterpret_cast<void*>(&d::Gemm<float>::run),
                  reinterpret_cast<void*>(&d::Gemm<double>::run), reinterpret_cast<void*>(&d::Pool::get)}) {
    Dl_info info{};
    REQUIRE(dladdr(f, &info) != 0);
    CHECK(std::string(info.dli_fname).find("libmetagrad.so") != std::string::npos);
  }
}
