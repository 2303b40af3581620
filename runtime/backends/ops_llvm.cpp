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

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
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
  ~Linked() {
    if (dylib) llvm::consumeError(jit->lljit->getExecutionSession().removeJITDylib(*dylib));
  }
};

LLVMProgram::LLVMProgram(std::string name, const std::string& src)
    : name_(std::move(name)), linked_(std::make_unique<Linked>()) {
  linked_->jit = jit();
  Jit& j = *linked_->jit;
  fs::path path = object_path(j, src);
  auto& es = j.lljit->getExecutionSession();
  // Links obj into a JITDylib of its own and finds the kernel (ORC links at the first lookup); an
  // error leaves no dylib behind.
  auto link = [&](std::unique_ptr<llvm::MemoryBuffer> obj) -> llvm::Error {
    auto& dylib = unwrap(es.createJITDylib(detail::cat("mg", std::to_string(j.dylibs++), "_", name_)),
                         "creating a JITDylib");
    // Kernels call libm (exp2f, sinf, powf) found in the process.
    dylib.addGenerator(unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                                  j.lljit->getDataLayout().getGlobalPrefix()),
                              "searching the process's symbols"));
    llvm::Error e = j.lljit->addObjectFile(dylib, std::move(obj));
    if (!e) {
      llvm::Expected<llvm::orc::ExecutorAddr> addr = j.lljit->lookup(dylib, name_);
      if (addr)
        fn_ = addr->toPtr<void*>();
      else
        e = addr.takeError();
    }
    if (e) {
      llvm::consumeError(es.removeJITDylib(dylib));
      return e;
    }
    linked_->dylib = &dylib;
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
    std::unique_ptr<llvm::MemoryBuffer> obj = compile(j, name_, src);
    // Written to a private name, then renamed, then its sidecar: concurrent processes never see a
    // partial object, and a damaged one is rebuilt.
    store_verified(path, std::string(obj->getBufferStart(), obj->getBufferSize()));
    ++compiles;
    if (llvm::Error e = link(std::move(obj)))
      throw std::runtime_error(
          detail::cat("LLVM: linking kernel ", name_, " failed: ", message(std::move(e))));
  }
}

LLVMProgram::~LLVMProgram() = default;

void LLVMProgram::operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>&,
                             const std::vector<RawBuffer*>& bufs) {
  std::vector<void*> ptrs = host_pointers("LLVM", bufs);
  run_host(fn_, ptrs.data(), ptrs.size(), global_size.empty() ? 1 : global_size[0], op_estimate);
}

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
  return std::make_shared<LLVMProgram>(name, src);
}

std::unique_ptr<Backend> make_llvm_backend() {
  jit();  // a host LLVM cannot target says so at the device's first use
  return std::make_unique<Compiled>(
      [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); }, llvm_codegen,
      llvm_runtime, /*concurrent_compiles=*/true,
      [](const std::string& src) { return fs::exists(object_path(*jit(), src)); });
}

}  // namespace metagrad

extern "C" const metagrad::LLVMApi* metagrad_llvm_api() {
  static const metagrad::LLVMApi api{metagrad::llvm_runtime, metagrad::codegen::render_llvm,
                                     &metagrad::LLVMProgram::compiles};
  return &api;
}
