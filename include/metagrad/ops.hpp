#pragma once
// The op vocabulary (the seed's 27 ops), the LazyOp AST, and the interfaces every device implements:
// Backend (allocate, run one kernel's AST), Interpreted (a table of functions), and the Device registry.
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "metagrad/helpers.hpp"
#include "metagrad/runtime/lib.hpp"
#include "metagrad/shape/view.hpp"

namespace metagrad {

enum class UnaryOps : std::uint8_t { NOOP, EXP2, LOG2, CAST, SIN };
enum class BinaryOps : std::uint8_t { ADD, SUB, MUL, DIV, POW, CMPEQ, MAX };
enum class ReduceOps : std::uint8_t { SUM, MAX };
enum class MovementOps : std::uint8_t { RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, STRIDE };
enum class FusedOps : std::uint8_t { MULACC };
enum class LoadOps : std::uint8_t { EMPTY, RAND, CONST, FROM, CONTIGUOUS, CUSTOM };

enum class OpType : std::uint8_t { Unary, Binary, Reduce, Movement, Fused, Load };

// Any one of the six enums; compares equal to the enum value it holds (`op == BinaryOps::ADD`).
struct Op {
  OpType type;
  std::uint8_t value;
  constexpr Op(UnaryOps o) : type(OpType::Unary), value(static_cast<std::uint8_t>(o)) {}        // NOLINT
  constexpr Op(BinaryOps o) : type(OpType::Binary), value(static_cast<std::uint8_t>(o)) {}      // NOLINT
  constexpr Op(ReduceOps o) : type(OpType::Reduce), value(static_cast<std::uint8_t>(o)) {}      // NOLINT
  constexpr Op(MovementOps o) : type(OpType::Movement), value(static_cast<std::uint8_t>(o)) {}  // NOLINT
  constexpr Op(FusedOps o) : type(OpType::Fused), value(static_cast<std::uint8_t>(o)) {}        // NOLINT
  constexpr Op(LoadOps o) : type(OpType::Load), value(static_cast<std::uint8_t>(o)) {}          // NOLINT
  friend constexpr bool operator==(Op, Op) = default;
  friend constexpr auto operator<=>(Op, Op) = default;
};
std::string to_string(Op op);  // "BinaryOps.ADD", as the seed prints

struct LazyBuffer;
struct LazyOp;
using LazySrc = std::variant<std::shared_ptr<LazyOp>, std::shared_ptr<LazyBuffer>>;

// A constant (LoadOps::CONST) with the dtype and, inside a kernel's AST, the shape it stands for.
// As a LoadOps::RAND arg, `value` is the seed.
struct ConstArg {
  double value;
  DType dtype;
  Dims shape{};
};
struct CustomArg;  // LoadOps::CUSTOM: a host function that fills the output buffer
// The static argument of an op: a shape (RESHAPE, EXPAND, STRIDE, a reduce's output shape), axes
// (PERMUTE), pairs (PAD, SHRINK), a constant, a target dtype (CAST), or a custom filler.
using OpArg = std::variant<std::monostate, Dims, Pairs, ConstArg, DType, std::shared_ptr<const CustomArg>>;
struct CustomArg {
  std::function<void(RawBuffer& out, const std::vector<RawBuffer*>& inputs)> fill;
};

// One node of a kernel's AST. Sources are other LazyOps or LazyBuffers (the leaves).
struct LazyOp {
  Op op;
  std::vector<LazySrc> src;
  OpArg arg;
  LazyOp(Op op_, std::vector<LazySrc> src_ = {}, OpArg arg_ = {})
      : op(op_), src(std::move(src_)), arg(std::move(arg_)) {}
  // The LazyBuffer leaves of this AST, each once, in first-seen order.
  std::vector<std::shared_ptr<LazyBuffer>> buffers() const;
};
std::string to_string(const LazyOp& op);  // indented tree, for DEBUG=3

// What every device provides to the scheduler.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::shared_ptr<RawBuffer> alloc(std::size_t size, DType dtype) = 0;
  // Runs one kernel. Leaves of `ast` are CONST ops and LazyBuffers whose base is realized on this
  // device, read through their ShapeTracker; the result goes to `output`, row-major.
  virtual void exec_ast(const LazyOp& ast, const std::shared_ptr<RawBuffer>& output) = 0;
};

// A compiled kernel, the seed's Runtime: built from a name and source, called with the buffers
// (output first). CPU programs split the global range across the thread pool.
class Program {
 public:
  virtual ~Program() = default;
  virtual void operator()(const std::vector<std::int64_t>& global_size,
                          const std::vector<std::int64_t>& local_size,
                          const std::vector<RawBuffer*>& bufs) = 0;
  std::int64_t op_estimate = 0;  // lets a CPU program run small kernels on one thread
};

// One kernel ready to run (the seed's ASTRunner): its source, launch sizes and program.
struct ASTRunner {
  std::string name, prg;
  std::vector<std::int64_t> global_size, local_size;
  std::int64_t op_estimate = 0, mem_estimate = 0;
  std::shared_ptr<Program> clprg;
  // Runs on the buffers (output first), timing it into GlobalCounters; DEBUG>=2 prints it.
  void exec(const std::vector<RawBuffer*>& bufs) const;
};

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
  Compiled(BufferFactory buffer, Codegen codegen, Runtime runtime);
  std::shared_ptr<RawBuffer> alloc(std::size_t size, DType dtype) override;
  void exec_ast(const LazyOp& ast, const std::shared_ptr<RawBuffer>& output) override;
  // The compiled kernel for an AST (built on first use).
  const ASTRunner& runner(const LazyOp& ast, DType out_dtype);
  const ASTRunner& runner(const LazyOp& ast, DType out_dtype,
                          const std::vector<std::shared_ptr<LazyBuffer>>& leaves);  // ast.buffers()
  BufferPool& pool() { return *pool_; }

 private:
  std::shared_ptr<BufferPool> pool_;  // shared: buffers freed after the device return to it safely
  Codegen codegen_;
  Runtime runtime_;
  std::unordered_map<std::string, ASTRunner> cache_;
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
  void exec_ast(const LazyOp& ast, const std::shared_ptr<RawBuffer>& output) override;
};

// The registry of devices by name: CPU always; CLANG, LLVM, OPENCL where built and available.
class Device {
 public:
  // From env DEVICE=NAME, or a NAME=1 flag (CLANG=1), else the fastest available device.
  static std::string DEFAULT;
  static Backend& get(const std::string& name);  // throws std::runtime_error naming what is available
  static std::vector<std::string> available();
  static std::string canonicalize(const std::string& name);  // "cpu" -> "CPU"

 private:
  static Backend& get_slow(const std::string& name);
};

}  // namespace metagrad
