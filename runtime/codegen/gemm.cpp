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
  auto ia = leaf_index(r->src[0]), ib = leaf_index(r->src[1]);
  if (!ia || !ib || *ia == 0 || *ib == 0 || *ia >= k.sts.size() || *ib >= k.sts.size()) return std::nullopt;
  if (k.bufs[*ia - 1].dtype != dtypes::float32 || k.bufs[*ib - 1].dtype != dtypes::float32)
    return std::nullopt;
  GemmPlan p;
  std::optional<View> packed[2];
  auto operand = [&](std::size_t i, std::optional<View>& storage, int& pack) -> const View* {
    if (const View* v = plain_view(k.sts[i])) return v;
    // Gathered first: the axes its outermost view reads with stride 0 stay broadcast (not copied).
    const View& outer = k.sts[i].views().back();
    Dims shape = k.full_shape(), packed_shape = shape;
    Pairs shrink;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      bool broadcast = outer.strides[d] == 0 && shape[d] > 1;
      if (broadcast && !outer.mask.empty() && outer.mask[d] != Pair{0, shape[d]}) return nullptr;
      if (broadcast) packed_shape[d] = 1;
      shrink.push_back(Pair{0, packed_shape[d]});
    }
    ShapeTracker st = k.sts[i];
    st.shrink(shrink);
    pack = static_cast<int>(p.packs.size());
    p.packs.push_back({i, st, packed_shape});
    return &storage.emplace(shape, strides_for_shape(packed_shape));
  };
  const View *va = operand(*ia, packed[0], p.a_pack), *vb = operand(*ib, packed[1], p.b_pack),
             *vc = plain_view(k.sts[0]);
  if (!va || !vb || !vc) return std::nullopt;

  p.a = *ia, p.b = *ib;
  p.epilogue = r != k.ast.get();
  p.a_offset = va->offset, p.b_offset = vb->offset, p.c_offset = vc->offset;
  const Dims& shape = k.full_shape();
  const std::size_t red = k.first_reduce;
  // The reduce axes are one k when both operands read them as one stride run (a weight gradient
  // sums over batch and time); none: k = 1.
  for (std::size_t d = red; d + 1 < shape.size(); ++d)
    for (const View* v : {va, vb})
      if (v->strides[d] != v->strides[d + 1] * shape[d + 1]) return std::nullopt;
  for (std::size_t d = red; d < shape.size(); ++d) p.k *= shape[d];
  auto reduce_stride = [&](const View* v) { return red < shape.size() ? v->strides.back() : 0; };
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
    std::swap(p.a_pack, p.b_pack);
    p.acs = reduce_stride(va), p.brs = reduce_stride(vb);
  }
  if (row != none) p.m = shape[row], p.ars = va->strides[row], p.ldc = vc->strides[row];
  if (col != none) p.n = shape[col], p.bcs = vb->strides[col];
  // A batch axis laid out just outside the rows in A and C (a batch of sequences times a linear
  // layer's weight) adds rows: one product of m * batch rows rather than a batch of small ones.
  std::vector<bool> taken(red, false);
  if (row != none) taken[row] = true;
  if (col != none) taken[col] = true;
  for (bool grew = row != none; grew;) {
    grew = false;
    for (std::size_t d = 0; d < red; ++d)
      if (!taken[d] && vb->strides[d] == 0 && va->strides[d] == p.ars * p.m && vc->strides[d] == p.ldc * p.m)
        p.m *= shape[d], taken[d] = grew = true;
  }
  for (std::size_t d = 0; d < red; ++d)
    if (!taken[d]) p.batch.push_back({shape[d], va->strides[d], vb->strides[d], vc->strides[d]});
  // A dot product is a sum, which a rendered kernel vectorizes at memory speed; a batch of them (a
  // LayerNorm weight's gradient: one per channel, over every token) a column sum of products,
  // vectorized across the batch. The GEMM would run each as a 1 x 1 tile.
  if (p.m == 1 && p.n == 1) return std::nullopt;
  return p;
}

}  // namespace metagrad::codegen
