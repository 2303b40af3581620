#include "metagrad/runtime/ops_clang.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "metagrad/runtime/disk_cache.hpp"

namespace metagrad {

namespace fs = std::filesystem;

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

ClangProgram::~ClangProgram() {
  if (lib_) ::dlclose(lib_);
}

void ClangProgram::operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>&,
                              const std::vector<RawBuffer*>& bufs) {
  std::vector<void*> ptrs = host_pointers("CLANG", name_, bufs);
  if (global_size.empty()) return call_host(fn_, ptrs.data(), ptrs.size());
  run_host(fn_, ptrs.data(), ptrs.size(), global_size[0], op_estimate);
}

namespace {

std::unique_ptr<Backend> make_clang_backend() {
  // Probe the compiler once so a missing one says so clearly at the first use of the device.
  if (std::system((compiler() + " --version > /dev/null 2>&1").c_str()) != 0)
    throw std::runtime_error(detail::cat("the C compiler `", compiler(), "` (env CC) cannot be run"));
  return std::make_unique<Compiled>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); },
      [](const std::shared_ptr<LazyOp>& ast, DType dt) {
        return lower_host(
            ast, dt,
            [](const codegen::LinearizedKernel& k) { return codegen::render_cstyle(k, ClangCodegen::lang); },
            [](const std::string& name, const std::string& src) {
              return std::make_shared<ClangProgram>(name, src);
            });
      },
      [](const std::string& name, const std::string& src) {
        return std::make_shared<ClangProgram>(name, src);
      });
}

[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kClang{"CLANG", 10,
                                                                                     make_clang_backend};

}  // namespace

}  // namespace metagrad
