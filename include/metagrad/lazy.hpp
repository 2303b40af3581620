#pragma once
// LazyBuffer: a Tensor without derivatives (the seed's lazy.py). Unrealized, it holds the GraphOp
// that computes it; realized, a RawBuffer. Movement ops make views: a LazyBuffer whose op is the
// MovementOp on its parent and whose ShapeTracker maps its shape into the base's buffer, so no
// movement op copies. realize() schedules the graph into kernels (fusing elementwise work into
// its consumer) and runs them on the buffer's device. GRAPH=1 draws what each realize computes
// (DOT in GRAPH_PATH, SVG at exit), DEBUG=1 and 2 report it (docs/environment.md).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "metagrad/ast.hpp"
#include "metagrad/device.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/ops.hpp"
#include "metagrad/shape/shapetracker.hpp"

namespace metagrad {

struct LazyBuffer;
using LazyBufferPtr = std::shared_ptr<LazyBuffer>;
// A node of the lazy graph: an op on LazyBuffers. The scheduler (runtime/lazy/schedule.cpp) turns the
// graph into kernel ASTs (LazyOp, ast.hpp), whose leaves are buffer descriptors instead.
using GraphOp = OpNode<LazyBufferPtr>;
using GraphSrc = GraphOp::Src;

struct LazyBuffer : std::enable_shared_from_this<LazyBuffer> {
  std::string device;
  DType dtype;
  ShapeTracker st;
  std::shared_ptr<RawBuffer> realized;  // set once computed (bases only; a view reads its base's)
  std::shared_ptr<GraphOp> op;          // how to compute it; dropped once realized
  const std::uint64_t id = next_id++;   // unique in the process: names the buffer in GRAPH=1 output

  LazyBuffer(std::string device_, ShapeTracker st_, DType dtype_, std::shared_ptr<GraphOp> op_,
             std::shared_ptr<RawBuffer> realized_ = nullptr);
  LazyBuffer(const LazyBuffer&) = delete;
  LazyBuffer& operator=(const LazyBuffer&) = delete;
  ~LazyBuffer();

  const Dims& shape() const { return st.shape(); }
  // (fixed at construction: another thread's realize may drop a base's op while this one reads)
  bool is_view() const { return view_; }
  // The buffer a view reads: the first ancestor that is not a movement op (itself for a base).
  LazyBufferPtr base();
  // Computes this buffer (its base, for a view) and everything it needs. Safe from any thread:
  // realizes take turns under one process-wide lock, so a buffer is computed once.
  LazyBuffer& realize();
  // Computes these buffers (their bases) in one schedule: what they share runs once, and a cold
  // step's kernels compile together (an optimizer's parameters and states).
  static void realize_all(const std::vector<LazyBufferPtr>& buffers);

  // A realized buffer on `device` holding `raw` with `shape`.
  static LazyBufferPtr from_raw(std::shared_ptr<RawBuffer> raw, const Dims& shape, const std::string& device);
  static LazyBufferPtr loadop(LoadOps op, const Dims& shape, DType dtype, const std::string& device,
                              OpArg arg = {}, std::vector<LazyBufferPtr> src = {});
  // Elementwise op on same-shaped sources (Unary, Binary or Fused); CAST takes its dtype as arg.
  static LazyBufferPtr elementwise(Op op, const std::vector<LazyBufferPtr>& src, OpArg arg = {});
  LazyBufferPtr e(UnaryOps op, OpArg arg = {}) {
    return elementwise(op, {shared_from_this()}, std::move(arg));
  }
  LazyBufferPtr e(BinaryOps op, const LazyBufferPtr& y) { return elementwise(op, {shared_from_this(), y}); }
  // this is the condition: e(TernaryOps::WHERE, x, y)
  LazyBufferPtr e(TernaryOps op, const LazyBufferPtr& x, const LazyBufferPtr& y) {
    return elementwise(op, {shared_from_this(), x, y});
  }
  // Reduce to new_shape (same rank; reduced axes become 1).
  LazyBufferPtr r(ReduceOps op, const Dims& new_shape);
  LazyBufferPtr movement_op(MovementOps op, OpArg arg);
  LazyBufferPtr cast(DType to) { return to == dtype ? shared_from_this() : e(UnaryOps::CAST, to); }
  // A buffer of the same shape whose memory is this buffer's values in row-major order.
  LazyBufferPtr contiguous();
  LazyBufferPtr to(const std::string& device);
  // A constant of this buffer's shape, dtype and device, made of one CONST element expanded.
  LazyBufferPtr const_like(double value);
  static LazyBufferPtr full(const Dims& shape, double value, DType dtype, const std::string& device);

  // The values in row-major order, converted from the buffer's dtype to T.
  template <class T>
  std::vector<T> to_vector();

  // Consumers that are still alive: an unrealized elementwise buffer with at most one is fused
  // into it; one with more is computed once (a kernel of its own).
  std::size_t live_children() const;
  static inline std::atomic<std::int64_t> live_count = 0;
  // Sets `realized` and drops `op`, under this buffer's lock (for the scheduler).
  void set_realized(std::shared_ptr<RawBuffer> raw);

 private:
  static inline std::atomic<std::uint64_t> next_id = 0;
  const bool view_;
  // Guards children_ (graphs are built from shared buffers on many threads) and the step from
  // unrealized to realized as seen by graph building outside realize().
  mutable std::mutex mu_;
  std::vector<std::weak_ptr<LazyBuffer>> children_;
  std::size_t children_swept_ = 4;  // children_'s size after its last sweep of expired entries
  friend void add_child(const LazyBufferPtr& parent, const LazyBufferPtr& child);
};

// A LazyBuffer leaf's dtype and shape, for node_dtype and node_shape (ast.hpp) over GraphOps.
inline DType leaf_dtype(const LazyBufferPtr& b) { return b->dtype; }
inline Dims leaf_shape(const LazyBufferPtr& b) { return b->shape(); }

// What realize() and Tensor::assign report while a CaptureLog is installed (TinyJit's capture):
// which tensors were replaced by assign, and work that a replay of the launched kernels would not
// repeat (copies from a compiled device, random numbers, custom loads other than the replayable
// gathers, interpreted kernels).
struct CaptureLog {
  struct Assign {
    std::shared_ptr<RawBuffer> before;  // the replaced value's buffer (null when it was unrealized)
    LazyBufferPtr after;                // the value the tensor holds now
  };
  std::vector<Assign> assigns;  // one per tensor: a second assign extends the first
  std::vector<std::string> not_replayable;
  static inline thread_local CaptureLog* active = nullptr;  // per thread, as GlobalCounters::cache
};
// Called by Tensor::assign; records into CaptureLog::active when one is installed.
void note_assign(const LazyBufferPtr& before, const LazyBufferPtr& after);

template <class T>
std::vector<T> LazyBuffer::to_vector() {
  LazyBufferPtr c = contiguous();
  c->realize();
  std::shared_ptr<RawBuffer> raw = c->base()->realized;
  if (dtype_of<T> == raw->dtype && static_cast<std::int64_t>(raw->size) == st.size()) return raw->toCPU<T>();
  std::vector<double> v = read_as_double(*raw);
  // To an integer as `cast` converts (docs/design-changes.md): toward zero, saturating to T's range,
  // NaN giving 0 (a plain static_cast of NaN or 1e30 is undefined).
  auto convert = [](double x) -> T {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (std::isnan(x)) return 0;
      if (x <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
      if (x >= std::ldexp(1.0, std::numeric_limits<T>::digits)) return std::numeric_limits<T>::max();
    }
    return static_cast<T>(x);
  };
  std::vector<T> out(static_cast<std::size_t>(st.size()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = convert(v[i]);
  return out;
}

}  // namespace metagrad
