#pragma once
// Kernel: one AST seen as loops over a single full shape (the reduce's input shape, or the output
// shape for elementwise kernels). Every buffer gets a ShapeTracker over that shape (the output's
// and output-shaped inputs' have stride 0 on reduced axes), axes are ordered [global..., reduce...,
// upcast...], and the optimiser reshapes and upcasts axes; the linearizer reads the result.
#include <memory>
#include <string>
#include <vector>

#include "metagrad/lazy.hpp"

namespace metagrad::codegen {

class Kernel {
 public:
  explicit Kernel(std::shared_ptr<LazyOp> ast, DType out_dtype);

  std::shared_ptr<LazyOp> ast;
  const LazyOp* reduceop = nullptr;  // the single reduce (ReduceOps or MULACC), if any
  DType out_dtype;
  std::vector<LazyBufferPtr> bufs;  // inputs: bufs[i] is kernel buffer i + 1 (0 is the output)
  std::vector<ShapeTracker> sts;    // sts[0] output, sts[i + 1] for bufs[i]; all over full_shape

  const Dims& full_shape() const { return sts[0].shape(); }
  std::size_t shape_len() const { return full_shape().size(); }
  std::size_t first_reduce = 0;  // axes [first_reduce, shape_len - upcasted) are looped reductions
  std::size_t upcasted = 0;      // the last `upcasted` axes are unrolled into registers
  Dims output_shape;             // of the kernel's result, in the AST's own rank
  std::size_t global_dims() const { return first_reduce; }
  bool is_reduce_axis(std::size_t axis) const;  // output stride 0 and size > 1

  // Shape edits applied to every ShapeTracker together.
  void reshape_and_permute(const std::vector<std::int64_t>& new_shape, const std::vector<std::int64_t>& axes);
  // Split `axis` into (size / amount, amount), the inner part becoming the last (upcast) axis.
  void upcast(std::size_t axis, std::int64_t amount);
  // Applies the hand-written heuristics (contiguous reduce accumulators, output tiling).
  void hand_coded_optimizations();

  std::string name() const;      // "E_..." elementwise, "r_..." reduce, then the full shape
  std::string key() const;       // identity for the kernel cache (AST, dtypes, views, constants)
  std::int64_t op_estimate = 0;  // ALU ops over the whole kernel (for GFLOPS)

 private:
  void simplify_ones();
  void simplify_merge_adjacent();
  std::optional<std::int64_t> stride_of(std::size_t buf, std::size_t axis) const;
};

}  // namespace metagrad::codegen
