#pragma once
// Kernel: one AST seen as loops over a single full shape (the reduce's input shape, or the output
// shape for elementwise kernels). Every buffer gets a ShapeTracker over that shape (the output's
// and output-shaped inputs' have stride 0 on reduced axes), axes are ordered [global..., reduce...,
// upcast...], and the optimiser reshapes and upcasts axes; the linearizer reads the result.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "metagrad/ast.hpp"
#include "metagrad/shape/shapetracker.hpp"

namespace metagrad::codegen {

// What the optimiser assumes of the target: tile sizes that fit its registers and caches.
struct Opts {
  std::int64_t tile_rows = 4, tile_cols = 8;  // matmul register tile (cols: the vector axis)
  std::int64_t matmul_block = 0;              // matmul reduce block (0: none)
  std::int64_t column_upcast = 8;             // column sums: outputs per pass over the rows
  std::int64_t column_block = 0;              // column sums: rows per block (0: none)
  std::int64_t group_reduce = 0;              // OpenCL: work-items that share a long reduce (0: none)
  // A sum along memory: partial sums in this many registers (0: one loop the code generator
  // vectorizes itself, its additions marked reassociable: LLVM's and gcc's loop vectorizers).
  std::int64_t row_upcast = 8;
  // A depthwise conv (a reduce over windows along the output's width): the width upcast by its
  // largest divisor up to this (0: as a column sum, below), or with window_loops none, the loops
  // left to the code generator (LLVM unrolls the window and vectorizes the width itself).
  std::int64_t window_upcast = 0;
  bool window_loops = false;
  // A GPU: any reduce of few outputs whose reduce axes hold at least 64 elements is shared by a
  // group of 32 to group_reduce threads, along whichever reduce axis that size divides (the one
  // along memory first): one thread per output would leave the GPU idle and walk memory alone.
  bool any_axis_groups = false;
  // Row kernels (Kernel::rows): a sum's partial sums, this many neighbours of the last axis a trip.
  // 1 where the code generator may reorder the additions alone (LLVM, and C under its sum's
  // `#pragma omp simd`: gcc vectorizes one accumulator, not 8 explicit ones).
  std::int64_t row_sum_lanes = 1;
  // Row kernels: a max's partial maxima, the same way (LLVM vectorizes 8; gcc's code for 8 took
  // 2.5x the time of one chain on a causal softmax's 64-element rows).
  std::int64_t row_max_lanes = 8;
  // The host CPU (CLANG, LLVM): AVX-512's 32 registers hold an 8 x 32 tile of floats, AVX2's 16 a
  // 4 x 16 one; a 128 x n block of B stays in L2; column sums read 8 rows of a 2048-wide strip;
  // sums along memory left to the compiler's loop vectorizer.
  static Opts host();
  // PoCL runs work-items in lock-step vectors of its own: small tiles, no blocking.
  // A long contiguous float reduce with few outputs is shared by a group of 16 work-items, which
  // read neighbouring elements and combine their sums through local memory.
  static Opts opencl() { return {8, 8, 0, 8, 0, 16}; }
};

class Kernel {
 public:
  explicit Kernel(std::shared_ptr<LazyOp> ast, DType out_dtype);

  std::shared_ptr<LazyOp> ast;
  const LazyOp* reduceop = nullptr;  // the single reduce (ReduceOps or MULACC), if any
  // A row kernel (the scheduler's broadcast reduces: softmax, LayerNorm): reduces of one shape read
  // back over the axes they reduced, as MovementOps::EXPAND nodes. Per position of the global axes
  // each reduce is a loop over the reduce axes (after those it reads), then, when the output has
  // the full shape, one more loop stores it. reduceop stays null (no GEMM, no reduce heuristics).
  bool rows = false;
  std::int64_t row_sum_lanes = 1, row_max_lanes = 8;  // Opts::row_sum_lanes, row_max_lanes
  DType out_dtype;
  std::vector<MemBuffer> bufs;    // inputs: bufs[i] is kernel buffer i + 1 (0 is the output)
  std::vector<ShapeTracker> sts;  // sts[0] output, sts[i + 1] for bufs[i]; all over full_shape

  const Dims& full_shape() const { return sts[0].shape(); }
  std::size_t shape_len() const { return full_shape().size(); }
  std::size_t first_reduce = 0;  // axes [first_reduce, shape_len - upcasted) are looped reductions
  std::size_t upcasted = 0;      // the last `upcasted` axes are unrolled into registers
  // Cache blocking: axis first_reduce (the outer part of a split reduce) loops just inside the
  // threaded axis, so one block of the reduce's inputs is reused across the other global axes.
  // Partial sums then carry across its iterations through the output buffer.
  bool blocked = false;
  // A sum whose additions may be reordered (a sum along memory): the code generator may keep
  // partial sums in vector lanes. Matmul tiles and column sums are vectorized across outputs instead.
  bool reassociate = false;
  // OpenCL: the last looped axis, of this size, runs across the work-items of a group.
  std::int64_t local_size = 0;
  Dims output_shape;  // of the kernel's result, in the AST's own rank
  std::size_t global_dims() const { return first_reduce; }
  bool is_reduce_axis(std::size_t axis) const;  // output stride 0 and size > 1

  // Shape edits applied to every ShapeTracker together.
  void reshape_and_permute(const std::vector<std::int64_t>& new_shape, const std::vector<std::int64_t>& axes);
  // Split `axis` into (size / amount, amount), the inner part becoming the last (upcast) axis.
  void upcast(std::size_t axis, std::int64_t amount);
  // Split reduce axis `axis` into (size / amount, amount), the outer part looping outside the
  // global axes after the first (see `blocked`).
  void block_reduce(std::size_t axis, std::int64_t amount);
  // Applies the hand-written heuristics (contiguous reduce accumulators, output tiling, blocking).
  void hand_coded_optimizations(const Opts& opts = Opts::host());

  std::string name() const;      // "E_..." elementwise, "r_..." reduce, then the full shape
  std::string key() const;       // identity for the kernel cache (AST, dtypes, views, constants)
  std::int64_t op_estimate = 0;  // ALU ops over the whole kernel (for GFLOPS)

 private:
  void simplify_ones();
  void simplify_merge_adjacent();
  std::optional<std::int64_t> stride_of(std::size_t buf, std::size_t axis) const;
};

}  // namespace metagrad::codegen
