#pragma once
// AstBuilder: one kernel's AST built from a buffer's lazy graph, inlining what fuses (the
// scheduler's core, schedule.cpp). Private to the library's sources.
#include <cstddef>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "metagrad/lazy.hpp"

namespace metagrad::scheduler {

// Builds one kernel's AST from a buffer's op, inlining what fuses:
//  - an unrealized elementwise source with no other consumer, read whole or through views that
//    neither pad nor add elements (its leaves then read through those views: movement ops move
//    through elementwise ops instead of forcing a copy);
//  - an unrealized reduce with no other consumer read whole by elementwise work, when the kernel
//    holds no reduce yet (elementwise after a reduce runs in the reduce's kernel);
//  - constants, folded.
// A SUM of a MUL becomes FusedOps::MULACC. Anything else is a leaf whose base is realized first.
// Leaves are MemBuffers numbered, while building, by their place in `inputs` (a buffer read whole
// once however often it is read; one entry per read through views); number_leaves renumbers them.
struct AstBuilder {
  LazyBuffer& consumer;
  std::vector<LazyBufferPtr>& deps;
  // The realize's other targets: computed anyway, so read, never recomputed inline (merge_stores
  // may then make the reading kernel compute and store them).
  const std::unordered_set<const LazyBuffer*>* targets = nullptr;
  bool rows = false;  // reduces read back over the axes they reduced may be inlined (a row kernel)
  // A product read through its output's reshape may be inlined (its reads in the reduce's shape, the
  // ops after it in the output's): compiled devices, whose Kernel reshapes the leaves (the CPU
  // device's interpreter evaluates each op in its own shape).
  bool reshaped_products = false;
  bool has_reduce = false;
  std::size_t row_reduces = 0;
  // Ops on the path from the kernel's root to the node being built. A kernel fuses at most
  // kMaxFusedDepth levels: past them a source is a leaf, realized first by a kernel of its own, so a
  // chain of 10^6 ops runs in pieces and no walk of a kernel's AST (this one, codegen's, the
  // interpreter's) recurses deeper than that.
  static constexpr std::size_t kMaxFusedDepth = 256;
  std::size_t depth = 0;
  std::vector<LazyBufferPtr> inputs;  // per provisional index - 1: the buffer read
  std::vector<bool> whole;            // per provisional index - 1: read without further views

  // `above`: views (relative to the current base's contiguous layout) the kernel reads through.
  LazySrc build(const GraphSrc& src, const std::vector<View>& above);

  LazySrc build_op(const GraphOp& op, const std::vector<View>& above);

  // b computes a reduce's result: the reduce, or elementwise work on it (each step read by nothing
  // else).
  static bool reduce_result(const LazyBuffer& b, int level = 0);

  // A reduce read back, through one expanding view, over the axes it reduced (softmax's max and
  // sum, LayerNorm's mean and variance) that nothing else reads: computed in this kernel, a row
  // kernel (codegen/kernel.hpp), as MovementOps::EXPAND of the reduce. Rows of at most 4096
  // elements (one accumulator chain, as the linearizer's kChainLimit).
  std::optional<LazySrc> broadcast_reduce(LazyBuffer& b);

  // The views from b's base to the kernel when b is a chain of views of an unrealized elementwise
  // base that nothing else reads, with no padding and no more elements than the base (but for a
  // cheap scalar).
  std::optional<std::vector<View>> pushable_views(LazyBuffer& b, const std::vector<View>& above);

  // Several consumers may each recompute a small elementwise buffer: rereading its few inputs costs
  // about what writing and rereading it would, and saves a kernel (softmax's exp(x - max)). The
  // size cap also bounds repeated inlining through chains of shared buffers.
  static bool cheap_to_recompute(LazyBuffer& b);

  // A few ops over a reduce read back over its axes (softmax's y = e / sum(e), LayerNorm's output)
  // are a row kernel's work, not a few loads: when something outside this kernel reads b too (so
  // b is computed there or stored anyway), this kernel reads b rather than recomputing its rows.
  // (Measured on the GPT step: reading softmax's and LayerNorm's outputs where their backward and
  // the next product need them is 4-8% faster than recomputing them in each, and a cold step
  // compiles in half the time, for about 10% more, smaller kernels.)
  // Whether all of b's consumers are in this kernel is counted over what the kernel may inline:
  // softmax's e is read by y and by the sum in y's kernel, and nowhere else.
  bool recomputes_rows_elsewhere(LazyBuffer& b) const;
  // Whether b's op tree, through the elementwise bases it would inline, reads a reduce broadcast
  // back over its axes (a row kernel's reduce).
  static bool reads_row_reduce(LazyBuffer& b);

  static std::shared_ptr<LazyOp> kernel_op(Op op, std::vector<LazySrc> src = {}, OpArg arg = {});

  // A leaf that reads b, through more views when `above` has any.
  LazySrc read_through(const LazyBufferPtr& b, const std::vector<View>& above);
};

}  // namespace metagrad::scheduler
