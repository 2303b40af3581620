// The CUDA device (docs/cuda.md). [cuda_render] runs everywhere: the kernels real graphs make
// (elementwise over every dtype, reductions, block-wide reductions, matmul, conv and its gradients,
// masked views) rendered in the CUDA dialect compile to PTX with clang-14, one .entry per kernel, and
// with NVRTC where it is installed; the device is listed exactly where it starts. [cuda] needs a GPU:
// buffers, hand-written programs and launch sizes, errors naming the call and the kernel, the disk
// cache, TinyJit and ops against the CPU device. Without a driver each [cuda] case prints
// "skipped: no CUDA driver" and ctest reports the run skipped. Both tags are hidden: ctest runs them
// as "CUDA: [cuda_render]" and "CUDA: [cuda]" (test/CMakeLists.txt).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "child_process.hpp"
#include "gradcheck.hpp"
#include "metagrad/backends/cuda_gemm.hpp"
#include "metagrad/backends/ops_cuda.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;
namespace fs = std::filesystem;

namespace {

// ---- kernels rendered with no GPU ----

struct Rendered {
  std::string name, src;
  std::vector<i64> global, local;
};
std::vector<Rendered>& rendered() {
  static std::vector<Rendered> r;
  return r;
}

// A device that runs nothing: it records the CUDA source of each kernel the scheduler hands it, so
// the test gets the kernels real graphs make without a GPU. Its buffers are host memory, never read.
class NoProgram final : public Program {
 public:
  void operator()(const std::vector<i64>&, const std::vector<i64>&, const std::vector<RawBuffer*>&) override {
  }
};
std::unique_ptr<Backend> make_render_only() {
  return std::make_unique<Compiled>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); },
      [](const std::shared_ptr<LazyOp>& ast, DType dt) {
        ASTRunner r = cuda_runner(ast, dt);
        rendered().push_back({r.name, r.prg, r.global_size, r.local_size});
        return r;
      },
      [](const std::string&, const std::string&) { return std::make_shared<NoProgram>(); });
}
constexpr const char* kRenderOnly = "CUDA_SOURCE";
void register_render_only() { static const Device::Registrar reg{kRenderOnly, 1000, make_render_only}; }

Tensor rnd(const Dims& shape, std::uint64_t seed, DType dt = dtypes::float32, bool grad = false) {
  return Tensor(random_values(prod(shape), seed), shape, {.device = kRenderOnly, .requires_grad = grad})
      .cast(dt);
}

// Every kind of kernel the scheduler makes, rendered (each distinct AST once).
std::vector<Rendered> representative_kernels() {
  register_render_only();
  rendered().clear();
  Tensor a = rnd({37, 129}, 1), b = rnd({37, 129}, 2), c = rnd({129}, 3);
  // elementwise: arithmetic, transcendental, comparisons, where, activations
  ((a * b + c) / (b.abs() + 1)).realize();
  a.exp().log().sin().sqrt().realize();
  (a.relu() + a.sigmoid() + a.tanh() + a.gelu()).realize();
  (a < b).where(a, b).maximum(c) + a.eq(b).cast(dtypes::float32).realize();
  a.pow(b).realize();
  // every dtype, and casts between them
  for (DType d : {dtypes::float16, dtypes::float64, dtypes::int8, dtypes::uint8, dtypes::int32, dtypes::int64,
                  dtypes::bool_}) {
    Tensor x = a.cast(d), y = b.cast(d);
    (dtypes::is_float(d) ? (x * y + x).exp() : x * y + x).cast(dtypes::float32).realize();
    if (d != dtypes::bool_) (x / (y.abs() + 1)).realize();
    x.sum(1).realize();
  }
  (a.cast(dtypes::int32).pow(rnd({37, 129}, 4, dtypes::int32))).realize();
  // reductions: along memory, across memory, all, max, mean; softmax chains reduce and elementwise
  a.sum(1).realize(), a.sum(0).realize(), a.sum().realize(), a.max(0).realize(), a.mean(1).realize();
  a.softmax(1).realize(), a.log_softmax(0).realize();
  // block-wide reductions: long contiguous rows, few outputs (float32)
  rnd({4, 8192}, 5).sum(1).realize();
  rnd({16384}, 6).max().realize();
  // matmul, batched matmul, and a masked (padded, flipped, strided) view inside a reduce
  rnd({64, 96}, 7).matmul(rnd({96, 48}, 8)).realize();
  rnd({3, 16, 24}, 9).matmul(rnd({3, 24, 8}, 10)).realize();
  a.pad({{1, 2}, {3, 0}}).flip({1}).sum(0).realize();
  a.permute({1, 0}).shrink({{2, 100}, {1, 30}}).realize();
  // conv2d forward and backward, pooling
  Tensor x = rnd({2, 3, 9, 9}, 11, dtypes::float32, true), w = rnd({4, 3, 3, 3}, 12, dtypes::float32, true);
  Tensor y = x.conv2d(w, {}, 1, {1}, {1}, {1});
  y.max_pool2d().sum().backward();
  x.grad->realize(), w.grad->realize();
  return rendered();
}

// Runs argv (no shell) with stdout to `out` and stderr to `err`; its exit status, or -1.
int run(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
        e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(o, 1), ::dup2(e, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return metagrad::test::wait_for(pid);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// What NVRTC's built-in headers give a kernel and clang's -nocudainc does not: the CUDA keywords,
// the thread and block indices (clang's own header) and the math functions, here as calls of
// libdevice's (left external: the PTX is checked, not linked).
const char* kClangPrelude = R"(#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#include <__clang_cuda_builtin_vars.h>
static __device__ __forceinline__ float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
static __device__ __forceinline__ float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
static __device__ __forceinline__ unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
static __device__ __forceinline__ double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
#define MG_MATH(f, nv, T) extern "C" __device__ T nv(T); static __device__ __forceinline__ T f(T x) { return nv(x); }
#define MG_MATH2(f, nv, T) extern "C" __device__ T nv(T, T); static __device__ __forceinline__ T f(T x, T y) { return nv(x, y); }
MG_MATH(exp2f, __nv_exp2f, float) MG_MATH(log2f, __nv_log2f, float) MG_MATH(sinf, __nv_sinf, float)
MG_MATH(sqrtf, __nv_sqrtf, float) MG_MATH2(powf, __nv_powf, float)
MG_MATH(exp2, __nv_exp2, double) MG_MATH(log2, __nv_log2, double) MG_MATH(sin, __nv_sin, double)
MG_MATH(sqrt, __nv_sqrt, double) MG_MATH2(pow, __nv_pow, double)
)";

}  // namespace

TEST_CASE("CUDA dialect: every kind of kernel compiles to PTX with clang-14, one .entry each",
          "[.cuda_render]") {
  // clang-14 is a build dependency (tools/setup.sh); a GPU machine that runs this binary may lack it.
  bool have_clang = false;
  for (std::string_view path = std::getenv("PATH") ? std::getenv("PATH") : "";
       !have_clang && !path.empty();) {
    std::size_t colon = std::min(path.find(':'), path.size());
    have_clang = ::access((fs::path(path.substr(0, colon)) / "clang-14").c_str(), X_OK) == 0;
    path.remove_prefix(std::min(colon + 1, path.size()));
  }
  if (!have_clang) {
    WARN("skipped: clang-14 is not on PATH");
    return;
  }
  std::vector<Rendered> kernels = representative_kernels();
  REQUIRE(kernels.size() >= 30);
  // The set covers what the dialect has to say: block-wide reduces through shared memory, half.
  bool grouped = false, half = false, wide = false;
  for (const Rendered& k : kernels) {
    grouped = grouped ||
              (!k.local.empty() && count(k.src, "__shared__") > 0 && count(k.src, "__syncthreads()") > 0);
    half = half || count(k.src, "half") > 0;
    wide = wide || count(k.src, "long long") > 0;
  }
  CHECK(grouped);
  CHECK(half);
  metagrad::test::TempDir dir("metagrad_cuda_ptx");
  REQUIRE(!dir.path.empty());
  { std::ofstream(dir.path / "prelude.cuh") << kClangPrelude; }
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const Rendered& k = kernels[i];
    INFO("kernel " << k.name << ":\n" << k.src);
    fs::path cu = dir.path / (std::to_string(i) + ".cu"), ptx = dir.path / (std::to_string(i) + ".ptx"),
             err = dir.path / (std::to_string(i) + ".err");
    { std::ofstream(cu) << k.src; }
    // --cuda-path: no CUDA installation is looked for (none is needed; a newer one only warns).
    int rc = run(
        {"clang-14", "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "--cuda-path=/nonexistent",
         "-nocudainc", "-nocudalib", "-O2", "-Werror=implicit-function-declaration", "-include",
         (dir.path / "prelude.cuh").string(), "-S", "-o", ptx.string(), cu.string()},
        dir.path / "stdout", err);
    INFO("clang-14: " << slurp(err));
    REQUIRE(rc == 0);
    std::string out = slurp(ptx);
    CHECK(count(out, ".entry ") == 1);
    CHECK(count(out, ".entry " + k.name + "(") == 1);
  }
}

namespace {
// NVRTC's version, or nothing after printing why it is not there (the test then skips).
std::optional<std::string> nvrtc_or_skip() {
  try {
    return nvrtc_version();
  } catch (const std::exception& e) {
    WARN("skipped: no NVRTC: " << e.what());
    return std::nullopt;
  }
}
}  // namespace

TEST_CASE("CUDA dialect: every kind of kernel compiles with NVRTC, where it is installed", "[.cuda_render]") {
  std::optional<std::string> version = nvrtc_or_skip();
  if (!version) return;
  INFO(*version);
  std::vector<Rendered> kernels = representative_kernels();
  for (int arch : {80, 90}) {
    for (const Rendered& k : kernels) {
      INFO("kernel " << k.name << " for sm_" << arch << ":\n" << k.src);
      CudaImage img = nvrtc_compile(k.name, k.src, arch);
      REQUIRE(!img.bytes.empty());
      if (img.ptx)
        CHECK(count(img.bytes, ".entry " + k.name + "(") == 1);
      else
        CHECK(img.bytes.rfind("\x7f"
                              "ELF",
                              0) == 0);
    }
  }
  // A kernel that does not compile: NVRTC's log and the source, naming the kernel.
  CHECK_THROWS_WITH(
      nvrtc_compile("broken", "extern \"C\" __global__ void broken(float* x) { x[0] = y; }", 80),
      Contains("broken") && Contains("--- log ---") && Contains("x[0] = y"));
}

TEST_CASE("CUDA dialect: the SGEMM kernel compiles with NVRTC for every operand layout and tile",
          "[.cuda_render]") {
  std::optional<std::string> version = nvrtc_or_skip();
  if (!version) return;
  INFO(*version);
  for (int layout = 0; layout < 4; ++layout) {
    codegen::GemmPlan p;
    p.m = 100, p.n = 70, p.k = 33, p.ldc = 70, p.c_offset = 5;
    p.ars = layout & 1 ? 1 : p.k, p.acs = layout & 1 ? p.m : 1;  // A row- or column-major
    p.brs = layout & 2 ? 1 : p.n, p.bcs = layout & 2 ? p.k : 1;
    if (layout == 3) p.batch = {{3, 9, 11, 7000}, {2, 1, 0, 21000}};
    for (CudaSgemmShape shape : {CudaSgemmShape{32, 1, 33}, CudaSgemmShape{64, 1, 33},
                                 CudaSgemmShape{128, 1, 33}, CudaSgemmShape{32, 3, 16}}) {
      std::string src = cuda_sgemm_source("sgemm", p, shape);
      INFO("layout " << layout << ", tile " << shape.tile << ", split " << shape.split << ":\n" << src);
      CudaImage img = nvrtc_compile("sgemm", src, 90);
      CHECK(!img.bytes.empty());
      if (shape.split > 1)
        CHECK(!nvrtc_compile("sgemm_sum", cuda_sgemm_sum_source("sgemm_sum", p, shape), 90).bytes.empty());
      auto [global, local] = cuda_sgemm_launch(p, shape);
      CHECK(global == std::vector<std::int64_t>{(p.n + shape.tile - 1) / shape.tile * 256,
                                                (p.m + shape.tile - 1) / shape.tile,
                                                (layout == 3 ? 6 : 1) * shape.split});
      CHECK(local == std::vector<std::int64_t>{256, 1, 1});
    }
  }
  // The shapes chosen: big products in 128-tiles, weight gradients split along the depth.
  codegen::GemmPlan big, grad;
  big.m = big.n = big.k = 4096, grad.m = grad.n = 128, grad.k = 2048;
  CHECK(cuda_sgemm_shape(big, 132).tile == 128);
  CHECK(cuda_sgemm_shape(big, 132).split == 1);
  CudaSgemmShape g = cuda_sgemm_shape(grad, 132);
  CHECK(g.tile == 32);
  CHECK(g.split >= 2);
  CHECK(g.split * g.depth >= 2048);
  CHECK((g.split - 1) * g.depth < 2048);
}

TEST_CASE("CUDA dialect: launch sizes cover every output, with 64-bit indices where they must be",
          "[.cuda_render]") {
  // An elementwise kernel over every element of a 2-D view that cannot merge into one axis: the
  // threads cover both axes (not only the outer one), the bound is checked in the kernel.
  register_render_only();
  rendered().clear();
  Tensor a = rnd({300, 70}, 21).realize();
  rendered().clear();
  a.permute({1, 0}).pad({{0, 0}, {0, 5}}).exp().realize();
  for (const Rendered& r : rendered()) UNSCOPED_INFO(r.name << ":\n" << r.src);
  REQUIRE(rendered().size() == 1);
  const Rendered& k = rendered()[0];
  INFO(k.src);
  REQUIRE(k.global.size() == 1);
  CHECK(k.global[0] == 70 * 305);
  CHECK(k.local.empty());
  CHECK(count(k.src, std::to_string(70 * 305)) >= 1);
  // More than 2^31 elements: rendered only (no buffer is allocated), indices in 64 bits.
  const i64 n = 2147483659;
  MemBuffer in{1, dtypes::float32, ShapeTracker({n})};
  ASTRunner r =
      cuda_runner(std::make_shared<LazyOp>(UnaryOps::EXP2, std::vector<LazySrc>{in}), dtypes::float32);
  INFO(r.prg);
  CHECK(r.global_size == std::vector<i64>{n});
  CHECK(count(r.prg, "long long") >= 1);
  CHECK(count(r.prg, std::to_string(n)) >= 1);
}

TEST_CASE("CUDA: the device is listed exactly where it starts", "[.cuda_render]") {
  std::vector<std::string> avail = Device::available();
  bool listed = std::find(avail.begin(), avail.end(), "CUDA") != avail.end();
  try {
    auto* cuda = dynamic_cast<CUDABackend*>(&Device::get("CUDA"));
    REQUIRE(cuda);
    CHECK(listed);
    CHECK(!cuda->device_name().empty());
  } catch (const std::runtime_error& e) {
    CHECK(!listed);
    CHECK_THAT(e.what(), Contains("CUDA"));
    // Every other device is unaffected: the CPU reference still works.
    CHECK(std::find(avail.begin(), avail.end(), "CPU") != avail.end());
  }
}

// ---- on a GPU ----

namespace {

// The device, or nullptr after printing why it is not there (ctest then reports the run skipped).
CUDABackend* cuda() {
  try {
    auto* c = dynamic_cast<CUDABackend*>(&Device::get("CUDA"));
    if (!c) FAIL("Device::get(\"CUDA\") is not a CUDABackend");
    return c;
  } catch (const std::runtime_error& e) {
    WARN("skipped: no CUDA driver: " << e.what());
    return nullptr;
  }
}

// f on CPU inputs and on their copies on CUDA agree (tolerances for float32 math on another libm).
void agree(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& f,
           const std::vector<Tensor>& cpu, double tol = 2e-5) {
  INFO(what);
  std::vector<Tensor> on;
  for (const Tensor& t : cpu) on.push_back(t.to("CUDA"));
  Tensor want = f(cpu), got = f(on);
  REQUIRE(got.device() == "CUDA");
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  require_close(got.to_vector<double>(), want.to_vector<double>(), tol, tol, what);
}

Tensor cpu_rnd(const Dims& shape, std::uint64_t seed, DType dt = dtypes::float32) {
  return Tensor(random_values(prod(shape), seed), shape, {.device = "CPU"}).cast(dt).realize();
}

const char* kAdd = R"(extern "C" __global__ void add(float* out, const float* a, const float* b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 96) out[i] = a[i] + b[i];
})";

}  // namespace

TEST_CASE("CUDA: the device reports itself", "[.cuda]") {
  CUDABackend* c = cuda();
  if (!c) return;
  INFO(c->device_name());
  CHECK_THAT(c->device_name(), Contains("sm_"));
  CHECK(c->arch() >= 50);
  CHECK(&Device::get("cuda") == c);  // names are case-insensitive
}

TEST_CASE("CUDA: buffers round-trip every dtype, empty ones too", "[.cuda]") {
  if (!cuda()) return;
  for (DType d : dtypes::all) {
    INFO(d.name);
    Tensor t = cpu_rnd({7, 3}, 1, d);
    CHECK(t.to("CUDA").to("CPU").to_vector<double>() == t.to_vector<double>());
    CHECK(Tensor::zeros({0, 3}, {.device = "CUDA", .dtype = d}).to_vector<double>().empty());
  }
}

TEST_CASE("CUDA: a hand-written program runs with and without a block size", "[.cuda]") {
  CUDABackend* c = cuda();
  if (!c) return;
  auto prg = c->compile("add", kAdd);
  const std::size_t n = 96;
  auto out = c->alloc(n, dtypes::float32), a = c->alloc(n, dtypes::float32), b = c->alloc(n, dtypes::float32);
  std::vector<float> ha(n), hb(n);
  for (std::size_t i = 0; i < n; ++i) ha[i] = static_cast<float>(i), hb[i] = 0.5f * static_cast<float>(i);
  a->copyin(ha.data()), b->copyin(hb.data());
  for (std::vector<i64> local : {std::vector<i64>{}, std::vector<i64>{32}, std::vector<i64>{1}}) {
    std::vector<float> zero(n, 0);
    out->copyin(zero.data());
    (*prg)({static_cast<i64>(n)}, local, {out.get(), a.get(), b.get()});
    auto r = out->toCPU<float>();
    for (std::size_t i = 0; i < n; ++i) REQUIRE(r[i] == 1.5f * static_cast<float>(i));
  }
  CHECK_THROWS_WITH((*prg)({static_cast<i64>(n)}, {7}, {out.get(), a.get(), b.get()}),
                    Contains("add") && Contains("does not divide"));
  CHECK_THROWS_WITH((*prg)({1 << 20}, {1 << 12}, {out.get(), a.get(), b.get()}),
                    Contains("add") && Contains("threads per block"));
  RawMallocBuffer host(n, dtypes::float32);
  CHECK_THROWS_WITH((*prg)({static_cast<i64>(n)}, {}, {&host, a.get(), b.get()}),
                    Contains("not a CUDA buffer"));
  CHECK_NOTHROW((*prg)({0}, {}, {out.get(), a.get(), b.get()}));
  CHECK_NOTHROW(c->synchronize());
}

TEST_CASE("CUDA: compile and driver errors name the call and the kernel", "[.cuda]") {
  CUDABackend* c = cuda();
  if (!c) return;
  const std::string bad =
      R"(extern "C" __global__ void broken(float* out) { out[0] = not_declared_anywhere; })";
  CHECK_THROWS_WITH(c->compile("broken", bad), Contains("broken") && Contains("--- log ---") &&
                                                   Contains("not_declared_anywhere") &&
                                                   Contains("--- source ---"));
  // The module has no such function: the driver's error, naming the call and the kernel.
  CHECK_THROWS_WITH(c->compile("missing", kAdd), Contains("cuModuleGetFunction") && Contains("missing"));
  // The device still works afterwards.
  agree("after", [](const std::vector<Tensor>& x) { return x[0] + 1; }, {cpu_rnd({3}, 2)});
}

TEST_CASE("CUDA: compiled modules are cached on disk and verified", "[.cuda]") {
  CUDABackend* c = cuda();
  if (!c) return;
  std::string old = metagrad::getenv("METAGRAD_CACHE");
  metagrad::test::TempDir dir("metagrad_cuda_cache");
  ::setenv("METAGRAD_CACHE", dir.path.c_str(), 1);
  std::string src = "// " + std::to_string(::getpid()) + "\n" + kAdd;
  int before = c->compiles();
  auto p1 = c->compile("add", src);
  CHECK(c->compiles() == before + 1);
  auto p2 = c->compile("add", src);  // from the image on disk
  CHECK(c->compiles() == before + 1);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir.path / "cuda")) files.push_back(e.path());
  CHECK(files.size() == 2);  // the image and its sidecar
  // A damaged image is rebuilt, never given to the driver.
  for (const fs::path& f : files)
    if (f.extension() != ".sum") std::ofstream(f, std::ios::binary | std::ios::trunc) << "garbage";
  auto p3 = c->compile("add", src);
  CHECK(c->compiles() == before + 2);
  auto out = c->alloc(96, dtypes::float32), a = c->alloc(96, dtypes::float32);
  std::vector<float> h(96, 2.0f);
  a->copyin(h.data());
  (*p3)({96}, {}, {out.get(), a.get(), a.get()});
  CHECK(out->toCPU<float>() == std::vector<float>(96, 4.0f));
  if (old.empty())
    ::unsetenv("METAGRAD_CACHE");
  else
    ::setenv("METAGRAD_CACHE", old.c_str(), 1);
}

TEST_CASE("CUDA: kernels of every kind agree with the CPU device", "[.cuda]") {
  if (!cuda()) return;
  using V = std::vector<Tensor>;
  Tensor a = cpu_rnd({37, 129}, 1), b = cpu_rnd({37, 129}, 2);
  agree("elementwise",
        [](const V& x) { return (x[0] * x[1] + 1).relu() - x[0].sigmoid() / (x[1].abs() + 1); }, {a, b});
  agree(
      "math", [](const V& x) { return x[0].exp() + x[1].abs().log() + x[0].sin() + x[1].abs().sqrt(); },
      {a, b}, 1e-4);
  agree(
      "sums",
      [](const V& x) {
        return x[0].sum(1).reshape({37, 1}) + x[0].sum(0) + x[0].max();
      },
      {a}, 1e-4);
  agree(
      "block-wide sum", [](const V& x) { return x[0].sum(1); }, {cpu_rnd({4, 8192}, 3)}, 1e-3);
  agree(
      "softmax", [](const V& x) { return x[0].log_softmax(1); }, {a}, 1e-4);
  agree(
      "matmul", [](const V& x) { return x[0].matmul(x[1]); }, {cpu_rnd({64, 96}, 4), cpu_rnd({96, 48}, 5)},
      1e-4);
  agree(
      "conv2d", [](const V& x) { return x[0].conv2d(x[1], {}, 1, {1}, {1}, {1}).max_pool2d(); },
      {cpu_rnd({2, 3, 9, 9}, 6), cpu_rnd({4, 3, 3, 3}, 7)}, 1e-4);
  agree("masked views",
        [](const V& x) {
          return x[0].pad({{1, 2}, {3, 0}}).flip({1}).permute({1, 0}) * 2;
        },
        {a});
  for (DType d : {dtypes::float16, dtypes::float64, dtypes::int8, dtypes::uint8, dtypes::int32, dtypes::int64,
                  dtypes::bool_}) {
    INFO(d.name);
    agree(
        "dtype",
        [&](const V& x) { return (x[0].cast(d) * x[1].cast(d) + x[0].cast(d)).cast(dtypes::float32); },
        {a, b}, d == dtypes::float16 ? 1e-2 : 1e-5);
  }
}

TEST_CASE("CUDA: products through the SGEMM kernel agree with the CPU device over random shapes and layouts",
          "[.cuda]") {
  if (!cuda()) return;
  std::mt19937 g(7);
  auto dim = [&](int hi) { return std::uniform_int_distribution<std::int64_t>(1, hi)(g); };
  for (int trial = 0; trial < 40; ++trial) {
    std::int64_t m = dim(trial % 4 ? 150 : 600), n = dim(trial % 4 ? 150 : 600),
                 k = dim(trial % 3 ? 90 : 700), batch = trial % 5 == 0 ? dim(6) : 1;
    bool ta = trial % 2, tb = trial / 2 % 2, bias = trial % 3 == 0;
    Tensor a = cpu_rnd(ta ? Dims{batch, k, m} : Dims{batch, m, k}, 10 + trial),
           b = cpu_rnd(tb ? Dims{batch, n, k} : Dims{batch, k, n}, 100 + trial),
           c = cpu_rnd({n}, 200 + trial);
    agree(
        detail::cat("(", std::to_string(batch), ", ", std::to_string(m), ", ", std::to_string(k), ") x (",
                    std::to_string(k), ", ", std::to_string(n), ")", ta ? " A transposed" : "",
                    tb ? " B transposed" : "", bias ? " + bias, relu" : ""),
        [&](const std::vector<Tensor>& t) {
          Tensor x = ta ? t[0].transpose(1, 2) : t[0], y = tb ? t[1].transpose(1, 2) : t[1];
          Tensor r = x.matmul(y);
          return bias ? (r + t[2]).relu() : r;
        },
        {a, b, c}, 1e-4);
  }
  // The head merge of attention: a permuted operand gathered first, then the product.
  Tensor h = cpu_rnd({2, 4, 16, 8}, 1), w = cpu_rnd({32, 32}, 2);
  agree(
      "permuted operand",
      [](const std::vector<Tensor>& t) {
        return t[0].transpose(1, 2).reshape({2, 16, 32}).matmul(t[1]);
      },
      {h, w}, 1e-4);
}

TEST_CASE("CUDA: TinyJit replays captured CUDA kernels", "[.cuda]") {
  if (!cuda()) return;
  Tensor w = cpu_rnd({16, 8}, 1).to("CUDA").realize(), w_cpu = w.to("CPU").realize();
  int traced = 0;
  TinyJit jit([&](const Tensor& x) {
    ++traced;
    return std::vector<Tensor>{(x.matmul(w) + 1).relu().sum(1)};
  });
  for (unsigned call = 0; call < 5; ++call) {
    Tensor x = cpu_rnd({4, 16}, 10 + call);
    std::vector<Tensor> out = jit(x.to("CUDA").realize());
    REQUIRE(out[0].device() == "CUDA");
    require_close(out[0].to_vector<double>(), (x.matmul(w_cpu) + 1).relu().sum(1).to_vector<double>(), 1e-4,
                  1e-4, "call " + std::to_string(call));
  }
  CHECK(traced == 2);  // a plain call, a captured one; the rest replayed
  REQUIRE(jit.captured());
  CHECK(!jit.captured()->kernels.empty());
}

TEST_CASE("CUDA: TinyJit replays a training step as one graph, new inputs and updated weights each call",
          "[.cuda]") {
  if (!cuda()) return;
  // The same SGD steps on CPU (eager) and on CUDA under TinyJit: the graph's nodes must follow the
  // new input buffers, the weight's two alternating buffers and the product's scratch.
  for (int graph : {1, 0}) {
    INFO("METAGRAD_JIT_GRAPH=" << graph);
    setenv("METAGRAD_JIT_GRAPH", graph ? "1" : "0", 1);
    Tensor w_cpu = cpu_rnd({64, 48}, 3), w = w_cpu.to("CUDA").realize();
    auto step = [](Tensor& weight, const Tensor& x) {
      Tensor loss = (x.matmul(weight).relu() - 0.5).square().mean();
      Tensor g = x.transpose().matmul(((x.matmul(weight).relu() - 0.5) * 2.0 / 48.0 / 40.0) *
                                      (x.matmul(weight) > 0).cast(dtypes::float32));
      weight.assign(weight - g * 0.1);
      return loss;
    };
    TinyJit jit([&](const Tensor& x) { return std::vector<Tensor>{step(w, x)}; });
    for (unsigned call = 0; call < 6; ++call) {
      Tensor x = cpu_rnd({40, 64}, 100 + call);
      Tensor want = step(w_cpu, x);
      w_cpu.realize();
      std::vector<Tensor> got = jit(x.to("CUDA").realize());
      require_close(got[0].to_vector<double>(), want.to_vector<double>(), 1e-4, 1e-4,
                    "loss of call " + std::to_string(call));
      require_close(w.to_vector<double>(), w_cpu.to_vector<double>(), 1e-4, 1e-4,
                    "weight after call " + std::to_string(call));
      if (call >= 2) CHECK(jit.graphed() == (graph == 1));
    }
  }
  unsetenv("METAGRAD_JIT_GRAPH");
}
