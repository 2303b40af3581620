#pragma once
// Contractions that run as a GEMM. A kernel whose reduce is a multiply-accumulate (FusedOps::MULACC)
// of two float32 buffers read through plain strided views (matmul, batched matmul, linear) is a
// batch of products C = A B. The host devices run those through the runtime's blocked kernel
// (device/gemm.hpp) instead of rendering loops for them: no compile, and BLAS speed whatever
// the shape. Ops above the reduce (a bias, an activation) become an elementwise epilogue kernel
// that reads C from a scratch buffer.
#include <cstdint>
#include <optional>
#include <vector>

#include "metagrad/codegen/kernel.hpp"

namespace metagrad::codegen {

struct GemmPlan {
  std::size_t a = 0, b = 0;  // kernel buffer indices (0 is the output) of the operands
  std::int64_t m = 1, n = 1, k = 1;
  // Element strides and offsets: A[i][p] = a[a_offset + i * ars + p * acs], B[p][j] likewise,
  // C[i][j] = c[c_offset + i * ldc + j] (column stride 1).
  std::int64_t ars = 0, acs = 0, brs = 0, bcs = 0, ldc = 0;
  std::int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  struct Loop {
    std::int64_t size, a, b, c;  // a batch axis: its size and the three strides
    std::size_t axis = 0;        // the kernel's axis
  };
  std::vector<Loop> batch;            // outermost first
  std::int64_t batch_count() const {  // products in all: the batch axes' sizes multiplied
    std::int64_t n = 1;
    for (const Loop& l : batch) n *= l.size;
    return n;
  }
  bool epilogue = false;  // the AST has ops above the reduce
  // An operand no single strided view reads (a permuted reshape: attention's head merge) is first
  // gathered through its views into a contiguous buffer of `shape` (the kernel's full shape, 1 on
  // the axes it is constant along), which the product then reads.
  struct Pack {
    std::size_t buf;  // the kernel buffer it gathers
    ShapeTracker st;  // reads that buffer over `shape`
    Dims shape;
  };
  std::vector<std::size_t> cols;  // the kernel axes of C's columns, outermost first
  // A gathered B whose views read an affine window (a conv's padded, strided, dilated windows):
  // at kernel position i, B is buf[offset + sum_d index[d] i_d] where every bound q holds,
  // sum_d bounds[q][d] i_d < below[q], else 0 (gemm_window). The host GEMM can then gather each
  // panel of B in its packing (im2col folded into the packing, no copy of the whole operand); the
  // copy kernel of its Pack remains for the devices that run it (AOT libraries).
  struct Window {
    std::vector<std::int64_t> index;
    std::int64_t offset = 0;
    std::vector<std::vector<std::int64_t>> bounds;
    std::vector<std::int64_t> below;
    std::vector<std::size_t> rows, cols;  // B's row (reduce) and column axes, outermost first
    Dims shape;                           // the kernel's full shape
  };
  std::optional<Window> b_window;
  std::vector<Pack> packs;
  int a_pack = -1, b_pack = -1;  // the operands' packs (indices into packs), -1: read in place
};

// The plan for `k` when it is such a contraction (before hand_coded_optimizations).
std::optional<GemmPlan> match_gemm(const Kernel& k);
// The window of the plan's gathered B, where its views read an affine one.
std::optional<GemmPlan::Window> gemm_window(const Kernel& k, const GemmPlan& p);

}  // namespace metagrad::codegen
