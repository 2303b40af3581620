#pragma once
// The interfaces every device implements, and the registry of devices. A device gets a kernel as an
// AST over buffer descriptors (ast.hpp) and the buffers themselves, output first: it never sees the
// lazy graph. Backend: allocate, run one kernel. Compiled: a code generator and a runtime, kernels
// cached by AST. Interpreted: a table of functions. Each device registers itself (Device::Registrar
// in its runtime/backends/ops_X.cpp), so adding one touches no shared file.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "metagrad/ast.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/helpers.hpp"

namespace metagrad {

// A captured step's launches recorded once and replayed by the device as one unit (a CUDA graph):
// one submission for the whole step instead of one per kernel.
class LaunchGraph {
 public:
  virtual ~LaunchGraph() = default;
  // Runs every launch as last recorded, in order.
  virtual void launch() = 0;
  // Records kernel k's launches again (its buffers changed): false when they differ from the graph's
  // in more than their buffers, and the graph must be made again.
  virtual bool update(std::size_t k, const std::function<void()>& launches) = 0;
};

// What every device provides to the scheduler.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::shared_ptr<RawBuffer> alloc(std::size_t size, DType dtype) = 0;
  // Runs one kernel: bufs[0] is the output (written row-major), bufs[i] the buffer that the AST's
  // MemBuffer leaves with index i read through their ShapeTrackers. All are on this device.
  virtual void exec_ast(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs) = 0;
  // Whether kernels are compiled programs (which TinyJit can capture and replay).
  virtual bool compiled() const { return false; }
  // The launches that launches(k) makes for k < kernels, recorded (not run) as one graph; null where
  // the device has no such thing (TinyJit then replays kernel by kernel).
  virtual std::unique_ptr<LaunchGraph> graph(std::size_t kernels,
                                             const std::function<void(std::size_t)>& launches) {
    (void)kernels, (void)launches;
    return nullptr;
  }
};

// A compiled kernel, the seed's Runtime: built from a name and source, called with the buffers
// (output first). CPU programs split the global range across the thread pool.
class Program {
 public:
  virtual ~Program() = default;
  virtual void operator()(const std::vector<std::int64_t>& global_size,
                          const std::vector<std::int64_t>& local_size,
                          const std::vector<RawBuffer*>& bufs) = 0;
  // A kernel that runs on the host (CLANG, LLVM) returns its function
  // fn(buffer pointers..., int64 start, int64 end), which TinyJit's replay calls directly through
  // run_host (backends/host_program.hpp); other programs return null.
  virtual void* host_function() const { return nullptr; }
  // The sources of the kernels a program made at code generation builds and runs besides its
  // runner's own source (a contraction's epilogue and gathers; on CUDA the product too): where
  // DEBUG=1 looks them up in the disk cache.
  virtual std::vector<const std::string*> parts() const { return {}; }
  std::int64_t op_estimate = 0;  // lets a CPU program run small kernels on one thread
};

// One kernel ready to run (the seed's ASTRunner): its source, launch sizes and program.
struct ASTRunner {
  std::string name, prg;
  std::vector<std::int64_t> global_size, local_size;
  std::int64_t op_estimate = 0, mem_estimate = 0;
  std::uint64_t same_index_reads = 0;  // of the AST (ast.hpp): buffers the output may overwrite
  std::uint64_t writes = 1;            // bit j: the kernel writes its buffer j (a multi-store: several)
  std::shared_ptr<Program> clprg;
  // Runs on the buffers (output first), timing it into GlobalCounters; DEBUG>=2 prints it.
  void exec(const std::vector<RawBuffer*>& bufs) const;
  // Runs on the buffers, untimed and uncounted (TinyJit's replay, which counts a step at once).
  void launch(const std::vector<RawBuffer*>& bufs) const { (*clprg)(global_size, local_size, bufs); }
};

// DEBUG>=2's line for one kernel run: its number (GlobalCounters::kernel_count), name, buffers,
// time, GFLOP/s, GB/s and the memory in use (GlobalCounters::mem_used).
void print_kernel_line(const std::string& name, std::size_t nbufs, double seconds, std::int64_t ops,
                       std::int64_t bytes);
// A byte count for people: "512 B", "12.3 kB", "1.50 MB", "2.10 GB" (powers of 1000).
std::string human_bytes(std::int64_t bytes);

// An entry of GlobalCounters::cache: `const auto& [prg, bufs] = cache[0]; std::cout << prg.prg;`.
struct CacheEntry {
  ASTRunner prg;
  std::vector<std::shared_ptr<RawBuffer>> bufs;
};

class BufferPool;

// A compiled device: a buffer type, a code generator (AST -> ASTRunner with source) and a
// runtime (name, source -> Program). Kernels are cached in memory by their AST; freed buffers are
// kept in a BufferPool and reused by size and dtype.
class Compiled : public Backend {
 public:
  using BufferFactory = std::function<std::shared_ptr<RawBuffer>(std::size_t, DType)>;
  using Codegen = std::function<ASTRunner(const std::shared_ptr<LazyOp>& ast, DType out_dtype)>;
  using Runtime = std::function<std::shared_ptr<Program>(const std::string& name, const std::string& src)>;
  // Whether the runtime would load a program of this source from its disk cache, not compile it.
  using DiskProbe = std::function<bool(const std::string& src)>;
  // Runs a cold realize's code generation (the function it is given) and builds the programs that
  // made, together: one compiler run for many kernels (CLANG's ClangProgram::build_together).
  using Precompile = std::function<void(const std::function<void()>& generate)>;
  // `concurrent_compiles`: `runtime` may build several programs at once (prebuild uses threads).
  // `on_disk` (optional) lets DEBUG=1 say how many of a realize's kernels come from the disk cache.
  Compiled(BufferFactory buffer, Codegen codegen, Runtime runtime, bool concurrent_compiles = false,
           DiskProbe on_disk = nullptr, Precompile precompile = {});
  std::shared_ptr<RawBuffer> alloc(std::size_t size, DType dtype) override;
  void exec_ast(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs) override;
  bool compiled() const override { return true; }
  // The compiled kernel for an AST run on `bufs` (output first), built on first use.
  const ASTRunner& runner(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs);
  // Runs one of runner()'s kernels on `bufs` (exec_ast with the kernel known).
  void exec(const ASTRunner& r, const std::vector<std::shared_ptr<RawBuffer>>& bufs);
  // Builds the kernels of these ASTs (each writing its dtype) that runner() does not have yet, their
  // programs compiled concurrently over the cores where the device allows: a cold step's many
  // kernels, which runner() would otherwise build one after another as they run.
  void prebuild(const std::vector<std::pair<const LazyOp*, DType>>& kernels);
  // DEBUG>=1's build: every kernel of these not built yet, however few (on one thread where the
  // device allows no concurrent compiles), calling notice(n, from_disk) after generating their code
  // and before compiling any: n kernels to build, from_disk of them found in the disk cache.
  using Notice = std::function<void(std::size_t n, std::size_t from_disk)>;
  void prebuild(const std::vector<std::pair<const LazyOp*, DType>>& kernels, const Notice& notice);
  // The name of the kernel runner() built for that AST (DEBUG=2's and GRAPH=1's), "" when none.
  std::string kernel_name(const LazyOp& ast, DType out_dtype) const;
  // Whether runner() has that AST's kernel already (writing `out_dtype`), and how many it has.
  bool cached(const LazyOp& ast, DType out_dtype) const;
  std::size_t kernels() const;
  BufferPool& pool() { return *pool_; }

 private:
  std::shared_ptr<BufferPool> pool_;  // shared: buffers freed after the device return to it safely
  Codegen codegen_;
  Runtime runtime_;
  bool concurrent_compiles_;
  DiskProbe on_disk_;
  Precompile precompile_;
  std::unordered_map<std::string, ASTRunner> cache_;
  void build(const std::vector<std::pair<const LazyOp*, DType>>& kernels, bool all, const Notice& notice);
};

// A dense row-major array the interpreter computes on: float dtypes as double (rounded to the
// dtype after every op), integer and bool dtypes as int64 (wrapped to the dtype's width).
struct Values {
  DType dtype;
  std::vector<double> f;
  std::vector<std::int64_t> i;
  std::size_t size() const { return dtypes::is_float(dtype) ? f.size() : i.size(); }
};

// An interpreted device: a backing buffer type and a table from op to function (the seed's
// fxn_for_op). Unary and binary functions take their sources; a reduce's also gets the LazyOp
// (its arg is the output shape) and the input shape.
class Interpreted : public Backend {
 public:
  using BufferFactory = std::function<std::shared_ptr<RawBuffer>(std::size_t, DType)>;
  using Fxn = std::function<Values(const LazyOp& op, const std::vector<Values>& srcs, const Dims& src_shape)>;
  struct OpHash {
    std::size_t operator()(Op op) const { return static_cast<std::size_t>(op.type) * 64 + op.value; }
  };

  BufferFactory buffer;
  std::unordered_map<Op, Fxn, OpHash> fxn_for_op;

  Interpreted(BufferFactory buffer_, std::unordered_map<Op, Fxn, OpHash> fxn_for_op_)
      : buffer(std::move(buffer_)), fxn_for_op(std::move(fxn_for_op_)) {}
  std::shared_ptr<RawBuffer> alloc(std::size_t size, DType dtype) override { return buffer(size, dtype); }
  void exec_ast(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs) override;
};

// The registry of devices by name: CPU always; CLANG, LLVM, OPENCL where built and available.
class Device {
 public:
  // From env DEVICE=NAME, or a NAME=1 flag (CLANG=1), else the fastest available device.
  static std::string DEFAULT;
  static Backend& get(const std::string& name);  // throws std::runtime_error naming what is available
  static std::vector<std::string> available();
  static std::string canonicalize(std::string name);  // "cpu" -> "CPU"

  // Builds the device; throws when it is not available here (no compiler, no OpenCL platform).
  using Factory = std::unique_ptr<Backend> (*)();
  // Registers a device where it is defined (runtime/backends/ops_X.cpp):
  //   [[gnu::init_priority(kRegistrationPriority)]] const Device::Registrar reg{"CLANG", 10, make};
  // `rank` orders available() and the choice of DEFAULT: lower is preferred (faster). The priority
  // runs registrations before any ordinary static initializer, DEFAULT's included.
  struct Registrar {
    Registrar(std::string name, int rank, Factory make);
  };
  static constexpr int kRegistrationPriority = 200;

 private:
  static Backend& get_slow(const std::string& name);
};

}  // namespace metagrad
