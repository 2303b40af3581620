#include "metagrad/codegen/gemm.hpp"

#include <algorithm>

namespace metagrad::codegen {

namespace {

// The kernel buffer index of a leaf source.
std::optional<std::size_t> leaf_index(const LazySrc& s) {
  auto* leaf = std::get_if<MemBuffer>(&s);
  if (!leaf) return std::nullopt;
  return leaf->index;
}

// A single unmasked view: its strides and offset.
const View* plain_view(const ShapeTracker& st) {
  if (st.views().size() != 1 || !st.views()[0].mask.empty()) return nullptr;
  return &st.views()[0];
}

}  // namespace

std::optional<GemmPlan> match_gemm(const Kernel& k) {
  const LazyOp* r = k.reduceop;
  if (!r || r->op != FusedOps::MULACC || r->src.size() != 2 || k.out_dtype != dtypes::float32)
    return std::nullopt;
  if (k.shape_len() > k.first_reduce + 1) return std::nullopt;  // one reduce axis (none: k = 1)
  auto ia = leaf_index(r->src[0]), ib = leaf_index(r->src[1]);
  if (!ia || !ib || *ia == 0 || *ib == 0 || *ia >= k.sts.size() || *ib >= k.sts.size()) return std::nullopt;
  if (k.bufs[*ia - 1].dtype != dtypes::float32 || k.bufs[*ib - 1].dtype != dtypes::float32)
    return std::nullopt;
  const View *va = plain_view(k.sts[*ia]), *vb = plain_view(k.sts[*ib]), *vc = plain_view(k.sts[0]);
  if (!va || !vb || !vc) return std::nullopt;

  GemmPlan p;
  p.a = *ia, p.b = *ib;
  p.epilogue = r != k.ast.get();
  p.a_offset = va->offset, p.b_offset = vb->offset, p.c_offset = vc->offset;
  const Dims& shape = k.full_shape();
  const std::size_t red = k.first_reduce;
  auto reduce_stride = [&](const View* v) { return red < shape.size() ? v->strides[red] : 0; };
  if (red < shape.size()) p.k = shape[red];
  p.acs = reduce_stride(va), p.brs = reduce_stride(vb);
  // Axes that only A reads are rows of C, those only B reads its columns; the largest of each
  // kind is the product's, the rest (and axes both read, or neither) are batch loops.
  constexpr std::size_t none = ~std::size_t{0};
  std::size_t row = none, col = none;
  for (std::size_t d = 0; d < red; ++d) {
    bool in_a = va->strides[d] != 0, in_b = vb->strides[d] != 0;
    if (in_a && !in_b && (row == none || shape[d] > shape[row])) row = d;
    if (in_b && !in_a && (col == none || shape[d] > shape[col])) col = d;
  }
  // C's columns need stride 1: else compute C^T = B^T A^T. (With no column axis, n is 1 and any
  // row stride will do.)
  auto unit = [&](std::size_t d) { return d != none && vc->strides[d] == 1; };
  bool swap = !unit(col) && unit(row);
  if (col != none && !unit(col) && !swap) return std::nullopt;  // no unit-stride axis of C
  if (swap) {
    std::swap(row, col), std::swap(va, vb), std::swap(p.a, p.b), std::swap(p.a_offset, p.b_offset);
    p.acs = reduce_stride(va), p.brs = reduce_stride(vb);
  }
  if (row != none) p.m = shape[row], p.ars = va->strides[row], p.ldc = vc->strides[row];
  if (col != none) p.n = shape[col], p.bcs = vb->strides[col];
  for (std::size_t d = 0; d < red; ++d)
    if (d != row && d != col) p.batch.push_back({shape[d], va->strides[d], vb->strides[d], vc->strides[d]});
  return p;
}

}  // namespace metagrad::codegen
