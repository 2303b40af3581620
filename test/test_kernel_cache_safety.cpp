// The CLANG disk kernel cache is safe to point anywhere and to find damaged: a cache path with shell
// syntax in it (`;`, spaces) is only ever a path (the compiler runs with no shell), an object
// truncated, corrupted or deleted between two processes is rebuilt rather than loaded (loading a
// truncated one crashed the process), and without HOME the cache is a private per-user directory,
// not one shared by every user of /tmp. The processes are this test binary, running the hidden
// child test case below.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "child_process.hpp"
#include "device_scope.hpp"

#include "metagrad/metagrad.hpp"
#include "metagrad/device/disk_cache.hpp"

using namespace metagrad;
namespace fs = std::filesystem;

namespace {

constexpr const char* kChild = "kernel cache safety child process";

struct Report {
  int compiles = -1;
  std::string dir;
};

Report read_report(const fs::path& file) {
  Report r;
  std::ifstream f(file);
  f >> r.compiles;
  f >> std::ws;
  std::getline(f, r.dir);
  return r;
}

// Runs the child with `env`; its exit code and report.
std::pair<int, Report> run_child(const fs::path& out, std::vector<std::string> env) {
  std::error_code ec;
  fs::remove(out, ec);
  env.push_back("METAGRAD_TEST_CHILD_OUT=" + out.string());
  env.emplace_back("THREADS=1");
  pid_t pid = test::spawn_child(kChild, env);
  int rc = pid > 0 ? test::wait_for(pid) : -1;
  return {rc, read_report(out)};
}

std::vector<fs::path> objects(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".so") out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("kernel cache safety child process", "[.][kernel_cache]") {
  const char* out = std::getenv("METAGRAD_TEST_CHILD_OUT");
  if (!out) return;  // only as a child of the tests below
  Device::DEFAULT = "CLANG";
  std::vector<float> va(64), vb(64);
  for (std::size_t i = 0; i < va.size(); ++i)
    va[i] = 0.5f * static_cast<float>(i) - 7, vb[i] = std::cos(static_cast<float>(i));
  Tensor a(va, {8, 8}), b(vb, {8, 8});
  auto prod = (a * b - 1).to_vector<float>();
  auto sum = (a + b).sum(1).to_vector<float>();
  for (std::size_t i = 0; i < 64; ++i)
    REQUIRE(prod[i] == Approx(static_cast<double>(va[i]) * vb[i] - 1).margin(1e-5));
  for (std::size_t r = 0; r < 8; ++r) {
    double s = 0;
    for (std::size_t j = 0; j < 8; ++j) s += va[r * 8 + j] + vb[r * 8 + j];
    REQUIRE(sum[r] == Approx(s).margin(1e-4));
  }
  std::ofstream(out) << ClangProgram::compiles.load() << "\n" << kernel_cache_dir() << "\n";
}

TEST_CASE("kernel_cache: a cache path with a semicolon and spaces is a path, never a shell command",
          "[kernel_cache]") {
  if (!test::available("CLANG")) return;
  test::TempDir tmp("metagrad_cache_safety");
  REQUIRE(!tmp.path.empty());
  fs::path pwned = tmp.path / "pwned";
  fs::path cache = tmp.path.string() + "/x;touch " + pwned.string() + ";y z";
  auto [rc, report] = run_child(tmp.path / "out", {"METAGRAD_CACHE=" + cache.string()});
  CHECK(rc == 0);
  CHECK_FALSE(fs::exists(pwned));
  CHECK(report.compiles > 0);
  CHECK(report.dir == cache.string());
  CHECK(objects(cache / "clang").size() >= 2);
}

TEST_CASE("kernel_cache: an object truncated, corrupted or deleted between processes is rebuilt",
          "[kernel_cache]") {
  if (!test::available("CLANG")) return;
  test::TempDir tmp("metagrad_cache_damage");
  REQUIRE(!tmp.path.empty());
  fs::path cache = tmp.path / "cache", out = tmp.path / "out";
  std::vector<std::string> env{"METAGRAD_CACHE=" + cache.string()};
  auto [rc0, first] = run_child(out, env);
  REQUIRE(rc0 == 0);
  REQUIRE(first.compiles > 0);
  auto [rc1, warm] = run_child(out, env);
  REQUIRE(rc1 == 0);
  REQUIRE(warm.compiles == 0);  // all from the cache

  auto truncate = [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); };
  auto flip = [](const fs::path& p) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64 && i < bytes.size(); ++i)
      bytes[i] ^= 0x5a;
    f.seekp(0);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  auto remove_object = [](const fs::path& p) { fs::remove(p); };
  auto remove_sidecar = [](const fs::path& p) { fs::remove(p.string() + ".sum"); };
  auto corrupt_sidecar = [](const fs::path& p) {
    std::ofstream(p.string() + ".sum") << "12 0123456789abcdef\n";
  };
  struct Damage {
    const char* what;
    std::function<void(const fs::path&)> apply;
  };
  for (const Damage& d :
       {Damage{"truncated", truncate}, Damage{"bytes flipped", flip}, Damage{"object deleted", remove_object},
        Damage{"sidecar deleted", remove_sidecar}, Damage{"sidecar corrupt", corrupt_sidecar}}) {
    INFO(d.what);
    std::vector<fs::path> objs = objects(cache / "clang");
    REQUIRE(objs.size() >= 2);
    for (const fs::path& p : objs) d.apply(p);
    auto [rc, damaged] = run_child(out, env);
    CHECK(rc == 0);                                            // no crash, correct results
    CHECK(damaged.compiles >= static_cast<int>(objs.size()));  // every damaged object rebuilt
    auto [rc2, again] = run_child(out, env);
    CHECK(rc2 == 0);
    CHECK(again.compiles == 0);  // and the rebuilt ones are used
  }
}

TEST_CASE("kernel_cache: without HOME the cache is a private per-user directory", "[kernel_cache]") {
  if (!test::available("CLANG")) return;
  test::TempDir tmp("metagrad_cache_nohome");
  REQUIRE(!tmp.path.empty());
  auto [rc, report] = run_child(tmp.path / "out", {"METAGRAD_CACHE=", "HOME="});
  CHECK(rc == 0);
  std::string want = "/tmp/metagrad-cache-" + std::to_string(::getuid());
  CHECK(report.dir == want);
  struct stat st {};
  REQUIRE(::lstat(want.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK(st.st_uid == ::getuid());
  CHECK((st.st_mode & 0777) == 0700);
}

// The sidecar is bound to its object's name (the kernel's key): two kernels' object-and-sidecar
// pairs swapped on disk verify under neither name, so neither kernel loads the other's code.
TEST_CASE("kernel_cache: two kernels' objects swapped with their sidecars are rebuilt, not loaded",
          "[kernel_cache]") {
  test::TempDir tmp("metagrad_cache_swap");
  REQUIRE(!tmp.path.empty());
  fs::path a = tmp.path / "aaaa.so", b = tmp.path / "bbbb.so";
  store_verified(a, "the code of kernel a");
  store_verified(b, "the code of kernel b, longer");
  REQUIRE(load_verified(a) == std::optional<std::string>("the code of kernel a"));
  REQUIRE(load_verified(b) == std::optional<std::string>("the code of kernel b, longer"));
  fs::path t = tmp.path / "t";
  for (const char* ext : {"", ".sum"}) {  // swap the pairs
    fs::rename(a.string() + ext, t);
    fs::rename(b.string() + ext, a.string() + ext);
    fs::rename(t, b.string() + ext);
  }
  CHECK_FALSE(load_verified(a));
  CHECK_FALSE(load_verified(b));
  CHECK_FALSE(fs::exists(a));  // removed, to be rebuilt
  CHECK_FALSE(fs::exists(b));
}
