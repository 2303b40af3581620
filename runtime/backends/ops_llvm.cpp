#include "metagrad/backends/ops_llvm.hpp"

#include <llvm/AsmParser/Parser.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>

#include "metagrad/codegen/llvmir.hpp"
#include "metagrad/codegen/pipeline.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/disk_cache.hpp"

namespace metagrad {

namespace fs = std::filesystem;

namespace {

std::string message(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}
template <class T>
T unwrap(llvm::Expected<T> x, const std::string& what) {
  if (!x) throw std::runtime_error(detail::cat("LLVM: ", what, ": ", message(x.takeError())));
  if constexpr (std::is_reference_v<T>)
    return *x;
  else
    return std::move(*x);
}

// The process's one JIT, and how to make the host's target machine (for optimising and emitting
// objects). A TargetMachine emits one module at a time: each compiling thread has its own, so a
// step's kernels compile in parallel (Compiled::prebuild); ORC links from any thread.
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::optional<llvm::orc::JITTargetMachineBuilder> builder;
  std::string host;  // triple, CPU and features: part of the disk cache key
  std::atomic<std::uint64_t> dylibs = 0;
  llvm::TargetMachine& tm() {
    thread_local std::unique_ptr<llvm::TargetMachine> mine;
    if (!mine) mine = unwrap(builder->createTargetMachine(), "creating the host target machine");
    return *mine;
  }
};

std::shared_ptr<Jit> make_jit() {
  // Initialising a target twice is harmless, but not concurrently: the static below runs this once.
  if (llvm::InitializeNativeTarget() || llvm::InitializeNativeTargetAsmPrinter() ||
      llvm::InitializeNativeTargetAsmParser())
    throw std::runtime_error("LLVM: this build of LLVM cannot generate code for the host CPU");
  auto j = std::make_shared<Jit>();
  auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  j->builder = jtmb;
  j->tm();  // a host LLVM cannot target fails here, at the device's first use
  j->host =
      detail::cat(jtmb.getTargetTriple().str(), " ", jtmb.getCPU(), " ", jtmb.getFeatures().getString());
  j->lljit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(),
                    "creating the JIT");
  return j;
}

// Programs hold the JIT, so it outlives every kernel whatever order statics die in.
std::shared_ptr<Jit> jit() {
  static std::shared_ptr<Jit> j = make_jit();  // thread-safe, and retried if it threw
  return j;
}

// Parses, verifies, optimises and emits `src` as an ELF object for the host.
std::unique_ptr<llvm::MemoryBuffer> compile(Jit& j, const std::string& name, const std::string& src) {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count() * 1e3;
  };
  auto t0 = clock::now();
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(src, diag, ctx);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (!m)
    diag.print(name.c_str(), os);
  else if (llvm::verifyModule(*m, &os))
    os << "(the module does not verify)\n";
  else if (!m->getFunction(name))
    os << "no function @" << name << " is defined\n";
  if (!os.str().empty())
    throw std::runtime_error(
        detail::cat("LLVM: compiling kernel ", name, " failed:\n", os.str(), "--- IR ---\n", src));
  llvm::SmallVector<char, 0> obj;
  {
    llvm::TargetMachine& tm = j.tm();
    auto t1 = clock::now();
    codegen::optimize_llvm_module(*m, tm);
    auto t2 = clock::now();
    if (getenv_int("DEBUG") >= 6) m->print(llvm::errs(), nullptr);  // the optimised IR
    llvm::raw_svector_ostream out(obj);
    llvm::legacy::PassManager pm;
    if (tm.addPassesToEmitFile(pm, out, nullptr, llvm::CGFT_ObjectFile))
      throw std::runtime_error("LLVM: the host target machine cannot emit object files");
    pm.run(*m);
    if (getenv_int("DEBUG") >= 2)
      std::fprintf(stderr, "LLVM: compiled %s in %.2f ms (parse %.2f, O2 %.2f, object %.2f)\n", name.c_str(),
                   ms(t0, clock::now()), ms(t0, t1), ms(t1, t2), ms(t2, clock::now()));
  }
  return llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(obj.data(), obj.size()), name);
}

// Where the disk cache keeps the object of `src`.
fs::path object_path(const Jit& j, const std::string& src) {
  fs::path dir = fs::path(kernel_cache_dir()) / "llvm";
  fs::create_directories(dir);
  return dir / (stable_hash(detail::cat("LLVM " LLVM_VERSION_STRING "\n", j.host, "\n", src)) + ".o");
}

}  // namespace

struct LLVMProgram::Linked {
  std::shared_ptr<Jit> jit;
  llvm::orc::JITDylib* dylib = nullptr;  // one per program: kernels of different ASTs share names
  std::string src;                       // kept until it is compiled
  std::once_flag loaded;
  ~Linked() {
    if (dylib) llvm::consumeError(jit->lljit->getExecutionSession().removeJITDylib(*dylib));
  }
  static void compile_and_link(LLVMProgram& p);
  // p's function, compiled (or loaded from the disk cache) and linked once; throws while it fails.
  static void* load(LLVMProgram& p) {
    std::call_once(p.linked_->loaded, [&] { compile_and_link(p); });
    return p.fn_;
  }
};

namespace {
// A program made while build_together generates a realize's kernels: compiled after, together.
struct Deferred {
  std::weak_ptr<Program> program;  // set by llvm_runtime; a program made otherwise loads at first use
  std::function<void()> load;
  const std::string* src;
};
thread_local std::vector<Deferred>* deferring = nullptr;
}  // namespace

LLVMProgram::LLVMProgram(std::string name, const std::string& src)
    : name_(std::move(name)), linked_(std::make_unique<Linked>()) {
  linked_->jit = jit();
  linked_->src = src;
  if (deferring)
    deferring->push_back({{}, [this] { Linked::load(*this); }, &linked_->src});
  else
    Linked::load(*this);
}

void LLVMProgram::Linked::compile_and_link(LLVMProgram& p) {
  Jit& j = *p.linked_->jit;
  const std::string& src = p.linked_->src;
  fs::path path = object_path(j, src);
  auto& es = j.lljit->getExecutionSession();
  // Links obj into a JITDylib of its own and finds the kernel (ORC links at the first lookup); an
  // error leaves no dylib behind.
  auto link = [&](std::unique_ptr<llvm::MemoryBuffer> obj) -> llvm::Error {
    auto& dylib = unwrap(es.createJITDylib(detail::cat("mg", std::to_string(j.dylibs++), "_", p.name_)),
                         "creating a JITDylib");
    // Kernels call libm (exp2f, sinf, powf) found in the process.
    dylib.addGenerator(unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                                  j.lljit->getDataLayout().getGlobalPrefix()),
                              "searching the process's symbols"));
    llvm::Error e = j.lljit->addObjectFile(dylib, std::move(obj));
    if (!e) {
      llvm::Expected<llvm::orc::ExecutorAddr> addr = j.lljit->lookup(dylib, p.name_);
      if (addr)
        p.fn_ = addr->toPtr<void*>();
      else
        e = addr.takeError();
    }
    if (e) {
      llvm::consumeError(es.removeJITDylib(dylib));
      return e;
    }
    p.linked_->dylib = &dylib;
    return llvm::Error::success();
  };
  bool linked = false;
  // Only an object whose bytes match its sidecar (size and hash) is linked; a damaged one is removed.
  if (std::optional<std::string> cached = load_verified(path)) {
    llvm::Error e = link(llvm::MemoryBuffer::getMemBufferCopy(*cached, path.string()));
    linked = !e;
    llvm::consumeError(std::move(e));  // a damaged cache entry is compiled again below
  }
  if (!linked) {
    std::unique_ptr<llvm::MemoryBuffer> obj = compile(j, p.name_, src);
    // Written to a private name, then renamed, then its sidecar: concurrent processes never see a
    // partial object, and a damaged one is rebuilt.
    store_verified(path, std::string(obj->getBufferStart(), obj->getBufferSize()));
    ++compiles;
    if (llvm::Error e = link(std::move(obj)))
      throw std::runtime_error(
          detail::cat("LLVM: linking kernel ", p.name_, " failed: ", message(std::move(e))));
  }
}

LLVMProgram::~LLVMProgram() = default;

void LLVMProgram::operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>&,
                             const std::vector<RawBuffer*>& bufs) {
  void* fn = Linked::load(*this);
  std::vector<void*> ptrs = host_pointers("LLVM", bufs);
  run_host(fn, ptrs.data(), ptrs.size(), global_size.empty() ? 1 : global_size[0], op_estimate);
}

namespace {
// Runs `generate` (a realize's code generation: its kernels, a GEMM's epilogue and packs), then
// compiles every program it made over the cores, the largest first so the cores finish together;
// a source made twice compiles once (its repeats, after, find the object in the disk cache). One
// that fails to compile throws again at its first use, naming the kernel.
void build_together(const std::function<void()>& generate) {
  std::vector<Deferred> pending;
  deferring = &pending;
  try {
    generate();
  } catch (...) {
    deferring = nullptr;
    throw;
  }
  deferring = nullptr;
  std::vector<std::pair<std::shared_ptr<Program>, const Deferred*>> order, repeats;
  for (const Deferred& d : pending)
    if (auto p = d.program.lock()) order.emplace_back(std::move(p), &d);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->src->size() > b.second->src->size();
  });
  std::unordered_set<std::string_view> seen;
  std::erase_if(order, [&](const auto& p) {
    bool repeat = !seen.insert(*p.second->src).second;
    if (repeat) repeats.push_back(p);
    return repeat;
  });
  for (const auto* programs : {&order, &repeats}) {
    std::atomic<std::size_t> next = 0;
    auto work = [&] {
      for (std::size_t i; (i = next++) < programs->size();) try {
          (*programs)[i].second->load();
        } catch (...) {}
    };
    std::size_t n =
        std::min<std::size_t>(programs->size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
  }
}
}  // namespace

ASTRunner llvm_codegen(const std::shared_ptr<LazyOp>& ast, DType out_dtype) {
  static const codegen::Opts opts = [] {
    codegen::Opts o = codegen::Opts::host();
    o.window_loops = true;  // (Opts::window_loops: most of MobileNet's depthwise convs ran faster so, to 5x)
    return o;
  }();
  return host_runner(
      ast, out_dtype, [](const codegen::LinearizedKernel& k) { return codegen::render_llvm(k); },
      llvm_runtime, [](std::size_t n, DType dt) { return Device::get("LLVM").alloc(n, dt); }, opts);
}

std::shared_ptr<Program> llvm_runtime(const std::string& name, const std::string& src) {
  auto p = std::make_shared<LLVMProgram>(name, src);
  if (deferring) deferring->back().program = p;  // (the constructor noted it)
  return p;
}

std::unique_ptr<Backend> make_llvm_backend() {
  jit();  // a host LLVM cannot target says so at the device's first use
  return std::make_unique<Compiled>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); }, llvm_codegen,
      llvm_runtime, /*concurrent_compiles=*/true,
      [](const std::string& src) { return fs::exists(object_path(*jit(), src)); }, build_together);
}

}  // namespace metagrad

extern "C" const metagrad::LLVMApi* metagrad_llvm_api() {
  static const metagrad::LLVMApi api{metagrad::llvm_runtime, metagrad::codegen::render_llvm,
                                     &metagrad::LLVMProgram::compiles};
  return &api;
}
