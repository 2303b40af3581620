// The CLANG disk kernel cache across processes: two processes started at once on a fresh
// METAGRAD_CACHE both compile and compute correctly (objects appear by atomic rename, so neither
// loads a half-written one), and a third process finds every kernel there and compiles nothing.
// The processes are this test binary itself, running the hidden child test case below.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "child_process.hpp"
#include "device_scope.hpp"

#include "metagrad/metagrad.hpp"
#include "metagrad/device/disk_cache.hpp"
#include "metagrad/backends/ops_clang.hpp"

using namespace metagrad;
namespace fs = std::filesystem;

namespace {

constexpr const char* kChild = "kernel cache child process";

int compiles_reported(const fs::path& file) {
  std::ifstream f(file);
  int n = -1;
  f >> n;
  return n;
}

}  // namespace

TEST_CASE("kernel cache child process", "[.][kernel_cache]") {
  const char* out = std::getenv("METAGRAD_TEST_CHILD_OUT");
  if (!out) return;  // only as a child of the test below
  Device::DEFAULT = "CLANG";
  std::vector<float> va(100), vb(100);
  for (std::size_t i = 0; i < va.size(); ++i)
    va[i] = 0.25f * static_cast<float>(i) - 9, vb[i] = std::sin(static_cast<float>(i));
  Tensor a(va, {10, 10}), b(vb, {10, 10});
  auto relu = (a * b + 2).relu().to_vector<float>();
  auto sum = (a - b).sum(1).to_vector<float>();
  auto mm = (a.matmul(b) + 1).to_vector<float>();  // (the GEMM's epilogue: a kernel to compile)
  for (std::size_t i = 0; i < 100; ++i)
    REQUIRE(relu[i] == Approx(std::max(0.0, static_cast<double>(va[i]) * vb[i] + 2)).margin(1e-5));
  for (std::size_t r = 0; r < 10; ++r) {
    double s = 0;
    for (std::size_t j = 0; j < 10; ++j) s += va[r * 10 + j] - vb[r * 10 + j];
    REQUIRE(sum[r] == Approx(s).margin(1e-4));
    for (std::size_t c = 0; c < 10; ++c) {
      double m = 0;
      for (std::size_t k = 0; k < 10; ++k) m += static_cast<double>(va[r * 10 + k]) * vb[k * 10 + c];
      REQUIRE(mm[r * 10 + c] == Approx(m + 1).margin(1e-3));
    }
  }
  std::ofstream(out) << ClangProgram::compiles.load() << "\n";
}

TEST_CASE("two processes share a fresh disk kernel cache, and a third compiles nothing", "[kernel_cache]") {
  if (!test::available("CLANG")) return;
  test::TempDir tmp("metagrad_cache_test");
  REQUIRE(!tmp.path.empty());
  const fs::path& dir = tmp.path;
  auto env = [&](const char* out) {
    return std::vector<std::string>{"METAGRAD_CACHE=" + (dir / "cache").string(),
                                    "METAGRAD_TEST_CHILD_OUT=" + (dir / out).string(), "THREADS=1"};
  };
  pid_t first = test::spawn_child(kChild, env("first")), second = test::spawn_child(kChild, env("second"));
  REQUIRE(first > 0);
  REQUIRE(second > 0);
  REQUIRE(test::wait_for(first) == 0);
  REQUIRE(test::wait_for(second) == 0);
  int compiled = compiles_reported(dir / "first"), compiled2 = compiles_reported(dir / "second");
  REQUIRE(compiled >= 0);
  REQUIRE(compiled2 >= 0);
  REQUIRE(compiled + compiled2 >= 3);  // the kernels were compiled, by one process or both
  int objects = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "cache")) {
    if (!e.is_regular_file()) continue;
    INFO(e.path());
    // No temporary source, log or half-renamed object left: objects and their sidecars only.
    fs::path object = e.path().extension() == ".sum" ? e.path().stem() : e.path();
    REQUIRE(object.extension() == ".so");
    REQUIRE(object.stem().string().find('.') == std::string::npos);
    if (e.path().extension() == ".so") {
      REQUIRE(fs::exists(e.path().string() + ".sum"));
      ++objects;
    }
  }
  REQUIRE(objects >= 3);
  pid_t third = test::spawn_child(kChild, env("third"));
  REQUIRE(test::wait_for(third) == 0);
  REQUIRE(compiles_reported(dir / "third") == 0);
}

// Two processes that compile one kernel at once each rename their object and then its sidecar into
// place; only if both wrote the same bytes does every interleaving leave a matching pair. Compiled
// twice here (each a fresh cache, as a second process would), the objects must be byte for byte
// equal: no private file name may reach them.
TEST_CASE("CLANG writes the same object bytes for a kernel however often it is compiled", "[kernel_cache]") {
  if (!test::available("CLANG")) return;
  test::TempDir tmp("metagrad_cache_bytes");
  REQUIRE(!tmp.path.empty());
  const char* saved = std::getenv("METAGRAD_CACHE");
  const std::string before = saved ? saved : "";
  const std::string src = "void twice(float* out, const float* in) { out[0] = 2 * in[0]; }\n";
  std::vector<std::string> objects;
  for (const char* cache : {"one", "two"}) {
    ::setenv("METAGRAD_CACHE", (tmp.path / cache).string().c_str(), 1);
    const int compiles = ClangProgram::compiles.load();
    ClangProgram program("twice", src);
    REQUIRE(ClangProgram::compiles.load() == compiles + 1);  // compiled, not found
    for (const auto& e : fs::directory_iterator(tmp.path / cache / "clang"))
      if (e.path().extension() == ".so") objects.push_back(read_file_bytes(e.path()).value_or(""));
  }
  if (saved)
    ::setenv("METAGRAD_CACHE", before.c_str(), 1);
  else
    ::unsetenv("METAGRAD_CACHE");
  REQUIRE(objects.size() == 2);
  REQUIRE(!objects[0].empty());
  REQUIRE(objects[0] == objects[1]);
}

// The key holds what `-march=native` means to the compiler, not the text: a cache filled on one CPU
// and read on another (here: the same `CC` path whose compiler now targets the x86-64 baseline, as
// an older CPU's native target would) rebuilds its kernels rather than loading the first CPU's code.
TEST_CASE("a kernel cached under other CPU features is rebuilt and not loaded", "[kernel_cache]") {
  if (!test::available("CLANG")) return;
#if !defined(__x86_64__)
  return;  // the other target below is x86's baseline
#endif
  test::TempDir tmp("metagrad_cache_cpu_test");
  REQUIRE(!tmp.path.empty());
  const fs::path& dir = tmp.path;
  fs::path cc = dir / "cc";
  auto compiler = [&](const std::string& extra) {
    std::ofstream(cc) << "#!/bin/sh\nexec cc \"$@\"" << extra << "\n";
    fs::permissions(cc, fs::perms::owner_all);
  };
  auto run = [&](const char* out) {
    pid_t pid = test::spawn_child(kChild, {"CC=" + cc.string(), "METAGRAD_CACHE=" + (dir / "cache").string(),
                                           "METAGRAD_TEST_CHILD_OUT=" + (dir / out).string(), "THREADS=1"});
    REQUIRE(pid > 0);
    REQUIRE(test::wait_for(pid) == 0);
    return compiles_reported(dir / out);
  };
  compiler("");
  REQUIRE(run("native") >= 3);
  REQUIRE(run("native again") == 0);  // same CPU, same compiler: every kernel from the cache
  compiler(" -march=x86-64");         // a later -march wins over the kernel's -march=native
  REQUIRE(run("baseline") >= 3);
}

// A cold realize's kernels are compiled in groups, one compiler run for several (a compiler process
// costs about what a small kernel does): each kernel's cache entry is then a hard link to its
// group's object, every kernel computes what the CPU device does, and a later load finds them all.
TEST_CASE("CLANG compiles a cold realize's kernels together, one object serving several", "[kernel_cache]") {
  if (!test::available("CLANG")) return;
  test::TempDir tmp("metagrad_cache_group");
  REQUIRE(!tmp.path.empty());
  const char* saved = std::getenv("METAGRAD_CACHE");
  const std::string before = saved ? saved : "";
  ::setenv("METAGRAD_CACHE", (tmp.path / "cache").string().c_str(), 1);
  // Six reduce kernels in one realize, each with its own constant (kernels no earlier test built), none
  // read back over its axis (a row kernel would take it into its reader).
  auto graph = [](Tensor y) {
    Tensor acc = (y * 1.01234).exp().sum(1);
    for (int i = 1; i < 6; ++i) acc = acc + (y * (1.0 + 0.01234 * (i + 1))).exp().sum(1);
    return acc;
  };
  std::vector<double> v = test::random_floats(8 * 32, 77);
  Tensor x(v, {8, 32}, {.dtype = dtypes::float32});
  const int compiles = ClangProgram::compiles.load();
  std::vector<float> got = graph(x.to("CLANG")).to_vector<float>();
  const int compiled = ClangProgram::compiles.load() - compiles;
  std::vector<float> expect = graph(x.to("CPU")).to_vector<float>();
  int grouped = 0, objects = 0;
  for (const auto& e : fs::directory_iterator(tmp.path / "cache" / "clang"))
    if (e.path().extension() == ".so") ++objects, grouped += fs::hard_link_count(e.path()) > 1;
  if (saved)
    ::setenv("METAGRAD_CACHE", before.c_str(), 1);
  else
    ::unsetenv("METAGRAD_CACHE");
  INFO(compiled << " kernels compiled, " << objects << " objects, " << grouped << " of them links to a group's");
  REQUIRE(compiled >= 6);
  REQUIRE(grouped >= 2);
  REQUIRE(got.size() == expect.size());
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(expect[i]).margin(1e-4));
}
