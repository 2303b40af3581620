#pragma once
// The kernel AST: a tree of ops whose leaves are memory-buffer descriptors (MemBuffer: which of the
// kernel's buffers, its dtype, the ShapeTracker it is read through) and constants (LoadOps::CONST
// nodes with a ConstArg). It is what the scheduler hands a device and what codegen lowers: nothing
// here knows how a buffer came to be (the lazy graph, lazy.hpp, is the scheduler's alone).
//
// OpNode is one node type for both trees: LazyOp (= OpNode<MemBuffer>) is the kernel AST, and the
// lazy graph's nodes (GraphOp in lazy.hpp) are OpNodes whose leaves are LazyBuffers.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "metagrad/helpers.hpp"
#include "metagrad/ops.hpp"
#include "metagrad/shape/shapetracker.hpp"

namespace metagrad {

class RawBuffer;  // device/raw_buffer.hpp: only CustomArg names it

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

// One node: an op, its sources (other nodes, or leaves) and its static argument.
template <class Leaf>
struct OpNode {
  using Src = std::variant<std::shared_ptr<OpNode>, Leaf>;
  Op op;
  std::vector<Src> src;
  OpArg arg;
  OpNode(Op op_, std::vector<Src> src_ = {}, OpArg arg_ = {})
      : op(op_), src(std::move(src_)), arg(std::move(arg_)) {}
};

// A kernel's buffer as its AST reads it: buffer `index` of the kernel (0 is the output, inputs are
// numbered from 1 in first-seen order), its dtype, and the views from the buffer's memory to the
// shape the AST sees.
struct MemBuffer {
  std::size_t index;
  DType dtype;
  ShapeTracker st;
};

using LazyOp = OpNode<MemBuffer>;  // a kernel's AST
using LazySrc = LazyOp::Src;

// A kernel that writes several buffers of one shape (multi-output: an optimizer's parameter and
// its states in one pass): a root UnaryOps::NOOP with a Dims arg naming, for each of its sources,
// the kernel buffer that source is stored into; the first is 0, the others follow the inputs. Its
// sources hold no reduce and all have the output's shape.
inline bool is_multi_store(const LazyOp& ast) {
  return ast.op == UnaryOps::NOOP && std::holds_alternative<Dims>(ast.arg);
}
// The kernel buffers an AST writes: {0}, or a multi-store's arg.
Dims stored_buffers(const LazyOp& ast);

std::string to_string(const LazyOp& op);  // indented tree, for DEBUG=3
// The MemBuffer leaves of an AST, each index once, ordered by index.
std::vector<MemBuffer> mem_buffers(const LazyOp& ast);
// Bit i set: the kernel reads its buffer i (1 <= i < 64) only at the element it writes, as a pure
// elementwise kernel reading it contiguously does. Its output may then be that very buffer, updated
// in place (TinyJit's state updates: an optimizer's p - lr * g).
std::uint64_t same_index_reads(const LazyOp& ast);
// Calls f on every leaf of the tree under `root`, without recursion: each node's own leaves, last
// first, then its subtrees (the order the scheduler numbers a kernel's buffers in).
template <class Leaf, class F>
void for_each_leaf(const OpNode<Leaf>& root, F&& f) {
  std::vector<const OpNode<Leaf>*> stack{&root};
  while (!stack.empty()) {
    const OpNode<Leaf>* o = stack.back();
    stack.pop_back();
    for (auto it = o->src.rbegin(); it != o->src.rend(); ++it) {
      if (auto* b = std::get_if<Leaf>(&*it))
        f(*b);
      else
        stack.push_back(std::get<std::shared_ptr<OpNode<Leaf>>>(*it).get());
    }
  }
}

inline DType leaf_dtype(const MemBuffer& b) { return b.dtype; }
inline Dims leaf_shape(const MemBuffer& b) { return b.st.shape(); }
// The dtype and shape a node of either tree produces; a leaf's come from leaf_dtype(leaf) and
// leaf_shape(leaf), found by argument-dependent lookup.
template <class Leaf>
DType node_dtype(const typename OpNode<Leaf>::Src& src) {
  if (auto* b = std::get_if<Leaf>(&src)) return leaf_dtype(*b);
  const OpNode<Leaf>& op = *std::get<std::shared_ptr<OpNode<Leaf>>>(src);
  if (op.op == LoadOps::CONST) return std::get<ConstArg>(op.arg).dtype;
  if (op.op == UnaryOps::CAST) return std::get<DType>(op.arg);
  if (op.op == BinaryOps::CMPEQ) return dtypes::bool_;
  if (op.op == TernaryOps::WHERE) return node_dtype<Leaf>(op.src.at(1));  // src[0] is the condition
  return node_dtype<Leaf>(op.src.at(0));
}
template <class Leaf>
Dims node_shape(const typename OpNode<Leaf>::Src& src) {
  if (auto* b = std::get_if<Leaf>(&src)) return leaf_shape(*b);
  const OpNode<Leaf>& op = *std::get<std::shared_ptr<OpNode<Leaf>>>(src);
  if (op.op == LoadOps::CONST) return std::get<ConstArg>(op.arg).shape;
  if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) return std::get<Dims>(op.arg);
  return node_shape<Leaf>(op.src.at(0));
}
inline DType ast_dtype(const LazySrc& src) { return node_dtype<MemBuffer>(src); }
inline Dims ast_shape(const LazySrc& src) { return node_shape<MemBuffer>(src); }
// Identity of a kernel (binary, not for printing): ops, args, constants (exactly), and each leaf's
// index, dtype and views.
std::string ast_key(const LazyOp& ast, DType out_dtype);

}  // namespace metagrad
