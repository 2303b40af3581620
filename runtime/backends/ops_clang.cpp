#include "metagrad/backends/ops_clang.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "metagrad/detail/cat.hpp"
#include "metagrad/device/disk_cache.hpp"

extern char** environ;

namespace metagrad {

namespace fs = std::filesystem;

namespace {

// No -ffast-math: NaN and inf must behave. No contraction (gcc's default is -ffp-contract=fast):
// whether a*b+c becomes an FMA then depends on how each kernel vectorizes, and two kernels that
// compute one expression must agree to the bit (a max's backward compares a value recomputed in
// one kernel with the forward's). -fvect-cost-model=dynamic: -O2's default model vectorizes little.
// -fopenmp-simd: a sum's `#pragma omp simd reduction` (cstyle.cpp), no OpenMP runtime.
const char* kFlags =
    "-shared -fPIC -O2 -fvect-cost-model=dynamic -ffp-contract=off -march=native -fno-math-errno "
    "-fopenmp-simd "
    "-lm";

std::string compiler() { return getenv("CC", "cc"); }

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Runs argv (argv[0] looked up in PATH) with no shell in between: no path or name is ever parsed as
// shell syntax. stdin reads `in` (when given); stdout and stderr go to `log` (/dev/null when empty).
// The exit status, or -1 when the program could not be started or did not exit normally.
int run_program(const std::vector<std::string>& args, const std::string& log, const std::string& in = "") {
  if (args.empty()) return -1;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_addopen(&fa, 2, log.empty() ? "/dev/null" : log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::posix_spawn_file_actions_adddup2(&fa, 2, 1);
  if (!in.empty()) ::posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  pid_t pid = 0;
  int err = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&fa);
  if (err != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The C compiler (env CC, split into words: `ccache cc` works) with its arguments, the source read
// from stdin: a named source file's name goes into the object (its symbol table's FILE entry), so two
// processes compiling one kernel from their private names wrote different bytes, and where their
// renames of the object and of its sidecar interleaved, the cache kept one's object with the other's
// sidecar, which every later process rejected and compiled again.
std::vector<std::string> compile_command(const std::string& cc, const std::string& so_file) {
  std::vector<std::string> args = split_words(cc);
  for (const char* a : {"-x", "c", "-", "-o", so_file.c_str()}) args.emplace_back(a);
  for (std::string& w : split_words(kFlags)) args.push_back(std::move(w));
  return args;
}

// What the compiler makes of `-march=native` on this CPU, and which compiler it is: its predefined
// macros under kFlags' target (`__AVX512F__`, `__znver4__`, `__VERSION__`, ...), hashed. The disk
// cache key holds it, so a cache shared between machines (a network home, an MPI job) never hands
// one CPU's object to another, nor one compiler's to another that `cc` names after an upgrade.
// One compiler run per process and compiler.
std::string target_identity(const std::string& cc, const fs::path& dir) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard lock(mu);
  if (auto it = known.find(cc); it != known.end()) return it->second;
  std::vector<std::string> args = split_words(cc);
  for (const char* a : {"-march=native", "-E", "-dM", "-x", "c", "/dev/null"}) args.emplace_back(a);
  std::string out = (dir / detail::cat(".target.", std::to_string(::getpid()))).string();
  int rc = run_program(args, out);
  std::string macros = read_file_bytes(out).value_or("");
  std::error_code ec;
  fs::remove(out, ec);
  // A compiler that cannot say is keyed by its name alone; compiling will report what is wrong.
  return known[cc] = rc == 0 ? stable_hash(macros) : "unknown";
}

// A kernel's object in the disk cache: named by the hash of the compiler, its flags, the CPU it
// targets and the source.
fs::path object_path(const std::string& cc, const std::string& src) {
  fs::path dir = fs::path(kernel_cache_dir()) / "clang";
  fs::create_directories(dir);
  return dir /
         (stable_hash(detail::cat(cc, "\n", kFlags, "\n", target_identity(cc, dir), "\n", src)) + ".so");
}

// A kernel compiled in a group (ClangProgram::compile_together) is the function k_<its object's
// hash>: kernel names repeat (two E_128s), one translation unit's functions cannot.
std::string group_symbol(const fs::path& so) { return "k_" + so.stem().string(); }

}  // namespace

void ClangProgram::compile_together(const std::vector<std::pair<std::string, std::string>>& kernels) {
  const std::string cc = compiler(), &prelude = codegen::c_prelude(ClangCodegen::lang);
  // One unit: the prelude once, then each kernel not in the cache with its function renamed.
  std::string unit = prelude;
  std::vector<fs::path> objects;
  std::vector<std::string> names;
  for (const auto& [name, src] : kernels) {
    fs::path so = object_path(cc, src);
    // (One source twice, as two products' equal epilogues, is one function. An object on disk is
    // verified when its program loads it, which rebuilds it alone if it does not match.)
    if (src.compare(0, prelude.size(), prelude) != 0 || std::count(objects.begin(), objects.end(), so) ||
        fs::exists(so))
      continue;
    unit += detail::cat("#define ", name, " ", group_symbol(so), "\n", src.substr(prelude.size()),
                        "\n#undef ", name, "\n");
    objects.push_back(std::move(so)), names.push_back(name);
  }
  if (objects.empty()) return;
  auto t0 = std::chrono::steady_clock::now();
  static std::atomic<unsigned> counter{0};
  std::string tmp =
      detail::cat(objects[0].string(), ".group.", std::to_string(::getpid()), ".", std::to_string(counter++));
  std::ofstream(tmp + ".c") << unit;
  int rc = run_program(compile_command(cc, tmp + ".so"), "", tmp + ".c");
  std::error_code ec;
  fs::remove(tmp + ".c", ec);
  std::optional<std::string> bytes = rc == 0 ? read_file_bytes(tmp + ".so") : std::nullopt;
  // Each kernel's cache entry is a hard link to the one object (the dynamic loader maps a file
  // once however many links it is opened by), made under a private name and renamed into place.
  double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
  const bool debug = getenv_int("DEBUG") >= 2;
  for (std::size_t i = 0; i < objects.size(); ++i) {
    if (!bytes) break;  // a failed group: each kernel is compiled alone, reporting its own error
    const fs::path& so = objects[i];
    if (debug)  // (each kernel's share of the group's time: the lines add up to it)
      std::fprintf(stderr, "CLANG: compiled %s in %.2f ms (one of %zu compiled together)\n", names[i].c_str(),
                   ms / static_cast<double>(objects.size()), objects.size());
    std::string link = tmp + "." + so.stem().string();
    fs::create_hard_link(tmp + ".so", link, ec);
    if (!ec) fs::rename(link, so, ec);
    if (ec) {
      fs::remove(link, ec);
      continue;
    }
    write_sidecar(so, *bytes);
    ++compiles;
  }
  fs::remove(tmp + ".so", ec);
}

namespace {
// Set while ClangProgram::build_together generates a realize's kernels: programs made then only
// note their sources here, and load at first use, from what the group compile put in the cache.
thread_local std::vector<std::pair<std::string, std::string>>* deferring = nullptr;
}  // namespace

void ClangProgram::build_together(const std::function<void()>& generate) {
  std::vector<std::pair<std::string, std::string>> pending;
  deferring = &pending;
  try {
    generate();
  } catch (...) {
    deferring = nullptr;
    throw;
  }
  deferring = nullptr;
  // One kernel of each source (two products' equal epilogues are one object), in groups of at most
  // kGroup, so a later process that loads a few kernels from the disk cache does not read and map a
  // step's worth; as many groups on each core (3 groups on 2 cores took as long as 4), the largest
  // sources dealt first, each to the group with the least source so far, so the groups take alike.
  constexpr std::size_t kGroup = 32;
  std::sort(pending.begin(), pending.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  pending.erase(std::unique(pending.begin(), pending.end(),
                            [](const auto& a, const auto& b) { return a.second == b.second; }),
                pending.end());
  std::stable_sort(pending.begin(), pending.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency()),
                    groups = std::min(pending.size(),
                                      cores * ((pending.size() + kGroup * cores - 1) / (kGroup * cores)));
  std::vector<std::vector<std::pair<std::string, std::string>>> group(groups);
  std::vector<std::size_t> bytes(groups, 0);
  for (auto& kernel : pending) {
    std::size_t g = static_cast<std::size_t>(std::min_element(bytes.begin(), bytes.end()) - bytes.begin());
    bytes[g] += kernel.second.size();
    group[g].push_back(std::move(kernel));
  }
  std::atomic<std::size_t> next = 0;
  auto work = [&] {
    for (std::size_t g; (g = next++) < groups;) try {
        compile_together(group[g]);
      } catch (...) {}  // each kernel then compiles alone at its first use, reporting its own error
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < std::min(cores, groups); ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
}

ClangProgram::ClangProgram(std::string name, const std::string& src) : name_(std::move(name)), src_(src) {
  if (deferring) {
    deferring->emplace_back(name_, src_);
    return;
  }
  std::call_once(loaded_, [this] { load(); });
}

void* ClangProgram::host_function() const {
  std::call_once(loaded_, [this] { const_cast<ClangProgram*>(this)->load(); });
  return fn_;
}

void ClangProgram::load() {
  const std::string& src = src_;
  std::string cc = compiler();
  fs::path so = object_path(cc, src);
  // A cached object is loaded only when its bytes match its sidecar (size and hash): a truncated or
  // corrupted one would crash dlopen. One that does not match is removed and rebuilt.
  if (load_verified(so)) lib_ = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    // Compile to a private name, load that, then rename the object and then its sidecar into place:
    // concurrent processes never see a partial object, and this one never depends on the final
    // path (another process may replace or remove it meanwhile).
    auto t0 = std::chrono::steady_clock::now();
    static std::atomic<unsigned> counter{0};
    std::string tmp = detail::cat(so.string(), ".", std::to_string(::getpid()), ".",
                                  std::to_string(counter++), ".", stable_hash(name_ + src).substr(0, 6));
    std::ofstream(tmp + ".c") << src;
    int rc = run_program(compile_command(cc, tmp + ".so"), tmp + ".log", tmp + ".c");
    std::string log = read_file_bytes(tmp + ".log").value_or("");
    std::error_code ec;
    fs::remove(tmp + ".c", ec);
    fs::remove(tmp + ".log", ec);
    std::optional<std::string> bytes = rc == 0 ? read_file_bytes(tmp + ".so") : std::nullopt;
    if (bytes) lib_ = ::dlopen((tmp + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      std::string why = bytes ? detail::cat("dlopen failed: ", ::dlerror()) : log;
      fs::remove(tmp + ".so", ec);
      throw std::runtime_error(detail::cat("CLANG: compiling kernel ", name_, " with `", cc, "` failed",
                                           rc == -1 ? " (the compiler could not be run)" : "", ":\n", why,
                                           "\n--- source ---\n", src));
    }
    fs::rename(tmp + ".so", so, ec);
    if (ec)
      fs::remove(tmp + ".so", ec);  // a cache that cannot be written only costs a recompile
    else
      write_sidecar(so, *bytes);
    ++compiles;
    if (getenv_int("DEBUG") >= 2)
      std::fprintf(stderr, "CLANG: compiled %s in %.2f ms\n", name_.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
  }
  fn_ = ::dlsym(lib_, name_.c_str());
  if (!fn_) fn_ = ::dlsym(lib_, group_symbol(so).c_str());  // compiled in a group
  if (!fn_)
    throw std::runtime_error(detail::cat("CLANG: no function ", name_, " in the compiled kernel:\n", src));
}

ClangProgram::~ClangProgram() {
  if (lib_) ::dlclose(lib_);
}

void ClangProgram::operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>&,
                              const std::vector<RawBuffer*>& bufs) {
  void* fn = host_function();
  std::vector<void*> ptrs = host_pointers("CLANG", bufs);
  if (global_size.empty()) return call_host(fn, ptrs.data(), ptrs.size());
  run_host(fn, ptrs.data(), ptrs.size(), global_size[0], op_estimate);
}

namespace {

std::unique_ptr<Backend> make_clang_backend() {
  // Probe the compiler once so a missing one says so clearly at the first use of the device.
  std::vector<std::string> probe = split_words(compiler());
  probe.emplace_back("--version");
  if (run_program(probe, "") != 0)
    throw std::runtime_error(detail::cat("the C compiler `", compiler(), "` (env CC) cannot be run"));
  return std::make_unique<Compiled>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); },
      [](const std::shared_ptr<LazyOp>& ast, DType dt) {
        return host_runner(
            ast, dt,
            [](const codegen::LinearizedKernel& k) { return codegen::render_cstyle(k, ClangCodegen::lang); },
            [](const std::string& name, const std::string& src) {
              return std::make_shared<ClangProgram>(name, src);
            },
            [](std::size_t n, DType dt) { return Device::get("CLANG").alloc(n, dt); },
            [] {
              codegen::Opts o = codegen::Opts::host();
              o.row_max_lanes = 1;  // (see Opts::row_max_lanes)
              return o;
            }());
      },
      [](const std::string& name, const std::string& src) {
        return std::make_shared<ClangProgram>(name, src);
      },
      /*concurrent_compiles=*/true,  // each a compiler process of its own
      [](const std::string& src) { return fs::exists(object_path(compiler(), src)); },
      ClangProgram::build_together);
}

[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kClang{"CLANG", 10,
                                                                                     make_clang_backend};

}  // namespace

}  // namespace metagrad
