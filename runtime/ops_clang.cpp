#include "metagrad/runtime/ops_clang.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "metagrad/codegen/gemm.hpp"
#include "metagrad/codegen/lower.hpp"
#include "metagrad/runtime/gemm.hpp"
#include "metagrad/runtime/gemm_program.hpp"
#include "metagrad/runtime/threadpool.hpp"

namespace metagrad {

namespace fs = std::filesystem;

std::string stable_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string kernel_cache_dir() {
  std::string dir = getenv("METAGRAD_CACHE");
  if (dir.empty()) dir = getenv("HOME").empty() ? "/tmp/metagrad-cache" : getenv("HOME") + "/.cache/metagrad";
  return dir;
}

namespace {

// No -ffast-math: NaN and inf must behave. No contraction (gcc's default is -ffp-contract=fast):
// whether a*b+c becomes an FMA then depends on how each kernel vectorizes, and two kernels that
// compute one expression must agree to the bit (a max's backward compares a value recomputed in
// one kernel with the forward's). -fvect-cost-model=dynamic: -O2's default model vectorizes little.
const char* kFlags =
    "-shared -fPIC -O2 -fvect-cost-model=dynamic -ffp-contract=off -march=native -fno-math-errno -lm";

std::string compiler() { return getenv("CC", "cc"); }

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Calls fn with the buffer pointers (and the range) for up to kMaxArgs buffers.
constexpr std::size_t kMaxArgs = 32;
template <std::size_t... I>
void call_bufs(void* fn, void* const* a, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))...)>(fn)(a[I]...);
}
template <std::size_t... I>
void call_range(void* fn, void* const* a, int s, int e, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))..., int, int)>(fn)(a[I]..., s, e);
}
template <std::size_t... N>
constexpr auto make_table(std::index_sequence<N...>) {
  using Bufs = void (*)(void*, void* const*);
  using Range = void (*)(void*, void* const*, int, int);
  return std::pair{std::array<Bufs, sizeof...(N)>{
                       [](void* f, void* const* a) { call_bufs(f, a, std::make_index_sequence<N>{}); }...},
                   std::array<Range, sizeof...(N)>{[](void* f, void* const* a, int s, int e) {
                     call_range(f, a, s, e, std::make_index_sequence<N>{});
                   }...}};
}
constexpr auto kCallers = make_table(std::make_index_sequence<kMaxArgs + 1>{});

}  // namespace

ClangProgram::ClangProgram(std::string name, const std::string& src) : name_(std::move(name)) {
  std::string cc = compiler();
  fs::path dir = fs::path(kernel_cache_dir()) / "clang";
  fs::create_directories(dir);
  fs::path so = dir / (stable_hash(cc + "\n" + kFlags + "\n" + src) + ".so");
  if (!fs::exists(so)) {
    // Compile to a private name, then rename: concurrent processes never see a partial object.
    std::string tmp =
        detail::cat(so.string(), ".", std::to_string(::getpid()), ".", stable_hash(name_ + src).substr(0, 6));
    std::ofstream(tmp + ".c") << src;
    std::string cmd = detail::cat(cc, " -x c ", tmp, ".c -o ", tmp, ".so ", kFlags, " 2> ", tmp, ".log");
    int rc = std::system(cmd.c_str());
    std::string log = read_file(tmp + ".log");
    fs::remove(tmp + ".c");
    fs::remove(tmp + ".log");
    if (rc != 0) {
      fs::remove(tmp + ".so");
      throw std::runtime_error(detail::cat("CLANG: compiling kernel ", name_, " with `", cc, "` failed:\n",
                                           log, "\n--- source ---\n", src));
    }
    fs::rename(tmp + ".so", so);
    ++compiles;
  }
  lib_ = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_)
    throw std::runtime_error(detail::cat("CLANG: dlopen of ", so.string(), " failed: ", ::dlerror()));
  fn_ = ::dlsym(lib_, name_.c_str());
  if (!fn_)
    throw std::runtime_error(detail::cat("CLANG: no function ", name_, " in the compiled kernel:\n", src));
}

HostProgram::~HostProgram() = default;

ClangProgram::~ClangProgram() {
  if (lib_) ::dlclose(lib_);
}

void ClangProgram::operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>&,
                              const std::vector<RawBuffer*>& bufs) {
  std::vector<void*> ptrs = host_pointers("CLANG", name_, bufs);
  if (global_size.empty()) return kCallers.first[ptrs.size()](fn_, ptrs.data());
  run_host(fn_, ptrs.data(), ptrs.size(), global_size[0], op_estimate);
}

ASTRunner lower_to_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype,
                          const codegen::CStyleLanguage& lang, const codegen::Opts& opts) {
  return codegen::lower(
      ast, out_dtype, [&](const codegen::LinearizedKernel& k) { return codegen::render_cstyle(k, lang); },
      opts);
}

ASTRunner lower_host(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const codegen::Renderer& render,
                     const Compiled::Runtime& compile) {
  if (out_dtype == dtypes::float32 && gemm::enabled()) {
    codegen::Kernel k(ast, out_dtype);
    if (auto plan = codegen::match_gemm(k)) return gemm_runner(k, *plan, render, compile);
  }
  return codegen::lower(ast, out_dtype, render);
}

std::vector<void*> host_pointers(const char* device, const std::string& name,
                                 const std::vector<RawBuffer*>& bufs) {
  if (bufs.size() > kMaxArgs)
    throw std::runtime_error(detail::cat(device, ": ", name, " takes ", std::to_string(bufs.size()),
                                         " buffers; at most 32 are supported"));
  std::vector<void*> ptrs;
  for (RawBuffer* b : bufs) ptrs.push_back(host_pointer(device, b));
  return ptrs;
}

void* host_pointer(const char* device, RawBuffer* b) {
  auto* m = dynamic_cast<RawMallocBuffer*>(b);
  if (!m) throw std::invalid_argument(detail::cat(device, ": buffers must be RawMallocBuffers"));
  return m->data();
}

void run_host(void* fn, void* const* ptrs, std::size_t count, std::int64_t n, std::int64_t op_estimate) {
  auto call = kCallers.second[count];
  // Below ~a few hundred thousand ops, waking other threads costs more than it saves.
  if (op_estimate < (1 << 18)) return call(fn, ptrs, 0, static_cast<int>(n));
  parallel_for(
      n, [&](std::int64_t s, std::int64_t e) { call(fn, ptrs, static_cast<int>(s), static_cast<int>(e)); });
}

std::unique_ptr<Backend> make_clang_backend() {
  // Probe the compiler once so a missing one says so clearly at the first use of the device.
  if (std::system((compiler() + " --version > /dev/null 2>&1").c_str()) != 0)
    throw std::runtime_error(detail::cat("the C compiler `", compiler(), "` (env CC) cannot be run"));
  return std::make_unique<Compiled>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); },
      [](const std::shared_ptr<LazyOp>& ast, DType dt) {
        return lower_host(
            ast, dt, [](const codegen::LinearizedKernel& k) { return codegen::render_cstyle(k, ClangCodegen::lang); },
            [](const std::string& name, const std::string& src) { return std::make_shared<ClangProgram>(name, src); });
      },
      [](const std::string& name, const std::string& src) {
        return std::make_shared<ClangProgram>(name, src);
      });
}

}  // namespace metagrad
