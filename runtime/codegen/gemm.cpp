#include "metagrad/codegen/gemm.hpp"

#include <algorithm>

namespace metagrad::codegen {

namespace {

constexpr std::size_t none = ~std::size_t{0};

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

// An operand no single strided view reads, gathered into a contiguous buffer laid out with the full
// shape's axes in `order` (outermost first), the axes its outermost view reads with stride 0 left
// out (a broadcast stays a stride of 0): the view the product reads it through, or none.
const View* gather(const Kernel& k, std::size_t i, const Dims& order, GemmPlan& p,
                   std::optional<View>& storage, int& pack) {
  const View& outer = k.sts[i].views().back();
  const Dims& shape = k.full_shape();
  Dims packed = shape;
  Pairs shrink;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    bool broadcast = outer.strides[d] == 0 && shape[d] > 1;
    if (broadcast && !outer.mask.empty() && outer.mask[d] != Pair{0, shape[d]}) return nullptr;
    if (broadcast) packed[d] = 1;
    shrink.push_back(Pair{0, packed[d]});
  }
  ShapeTracker st = k.sts[i];
  st.shrink(shrink).permute(order);
  Dims laid = packed, strides = packed;
  for (std::size_t j = 0; j < order.size(); ++j) laid[j] = packed[static_cast<std::size_t>(order[j])];
  const Dims s = strides_for_shape(laid);
  for (std::size_t j = 0; j < order.size(); ++j) strides[static_cast<std::size_t>(order[j])] = s[j];
  pack = static_cast<int>(p.packs.size());
  p.packs.push_back({i, st, laid});
  return &storage.emplace(shape, strides);
}

// The plan for operand layouts `order` (per operand; empty: read in place, else gathered in that
// order), and the axes of C's columns (the column axis and those joined to it) in `cols`.
std::optional<GemmPlan> plan_for(const Kernel& k, std::size_t ia, std::size_t ib, const Dims order[2],
                                 std::vector<std::size_t>& cols) {
  const LazyOp* r = k.reduceop;
  GemmPlan p;
  std::optional<View> packed[2];
  const View *va = order[0].empty() ? plain_view(k.sts[ia]) : gather(k, ia, order[0], p, packed[0], p.a_pack),
             *vb = order[1].empty() ? plain_view(k.sts[ib]) : gather(k, ib, order[1], p, packed[1], p.b_pack),
             *vc = plain_view(k.sts[0]);
  if (!va || !vb || !vc) return std::nullopt;

  p.a = ia, p.b = ib;
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
  // Axes that only A reads are rows of C, those only B reads its columns; of each kind the one C
  // reads with stride 1 (a conv's output width: its output height joins it below), else the largest,
  // is the product's, the rest (and axes both read, or neither) are batch loops.
  auto unit = [&](std::size_t d) { return d != none && vc->strides[d] == 1; };
  auto better = [&](std::size_t d, std::size_t than) {
    return than == none || (unit(d) != unit(than) ? unit(d) : shape[d] > shape[than]);
  };
  std::size_t row = none, col = none;
  for (std::size_t d = 0; d < red; ++d) {
    bool in_a = va->strides[d] != 0, in_b = vb->strides[d] != 0;
    if (in_a && !in_b && better(d, row)) row = d;
    if (in_b && !in_a && better(d, col)) col = d;
  }
  // C's columns need stride 1: else compute C^T = B^T A^T. (With no column axis, n is 1 and any
  // row stride will do.)
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
  // layer's weight) adds rows: one product of m * batch rows rather than a batch of small ones; one
  // just outside the columns in B and C adds columns (a conv's output height, outside its width).
  std::vector<bool> taken(red, false);
  if (row != none) taken[row] = true;
  cols.clear();
  if (col != none) taken[col] = true, cols.push_back(col);
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t d = 0; d < red; ++d) {
      if (taken[d]) continue;
      if (row != none && vb->strides[d] == 0 && va->strides[d] == p.ars * p.m &&
          vc->strides[d] == p.ldc * p.m)
        p.m *= shape[d], taken[d] = grew = true;
      else if (col != none && va->strides[d] == 0 && vb->strides[d] == p.bcs * p.n && vc->strides[d] == p.n)
        p.n *= shape[d], taken[d] = grew = true, cols.push_back(d);
    }
  }
  for (std::size_t d = 0; d < red; ++d)
    if (!taken[d]) p.batch.push_back({shape[d], va->strides[d], vb->strides[d], vc->strides[d], d});
  return p;
}

// Adds scale x the linear form `n` (in the variables idx<d>, the kernel's axes) to coef and c; false
// where it is not linear (a division, a modulo, a comparison).
bool linear(const symbolic::Node& n, std::int64_t scale, std::vector<std::int64_t>& coef, std::int64_t& c) {
  using symbolic::NodeKind;
  switch (n.kind()) {
    case NodeKind::Num:
      c += scale * n.b();
      return true;
    case NodeKind::Variable: {
      const std::string& name = n.name();
      if (name.rfind("idx", 0) != 0 || name.size() == 3) return false;
      std::size_t d = 0;
      for (std::size_t i = 3; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return false;
        d = d * 10 + static_cast<std::size_t>(name[i] - '0');
      }
      if (d >= coef.size()) return false;
      coef[d] += scale;
      return true;
    }
    case NodeKind::Mul:
      return linear(n.a(), scale * n.b(), coef, c);
    case NodeKind::Sum:
      for (const symbolic::Node& x : n.nodes())
        if (!linear(x, scale, coef, c)) return false;
      return true;
    default:
      return false;
  }
}

}  // namespace

// B's window when its views read an affine one (GemmPlan::Window): the index a linear form of the
// kernel's axes and its validity bounds on linear forms, none on axes B does not vary along.
std::optional<GemmPlan::Window> gemm_window(const Kernel& k, const GemmPlan& p) {
  if (p.b_pack < 0) return std::nullopt;
  const Dims& shape = k.full_shape();
  const std::size_t rank = shape.size();
  auto [idx, valid] = k.sts[p.b].expr_idxs();
  GemmPlan::Window w;
  w.index.assign(rank, 0);
  if (!linear(idx, 1, w.index, w.offset)) return std::nullopt;
  std::vector<symbolic::Node> terms;
  if (valid.is_num()) {
    if (valid.b() != 1) return std::nullopt;  // (nothing valid: the copy)
  } else if (valid.kind() == symbolic::NodeKind::And) {
    terms = valid.nodes();
  } else {
    terms.push_back(valid);
  }
  for (const symbolic::Node& t : terms) {
    if (t.kind() != symbolic::NodeKind::Lt) return std::nullopt;
    std::vector<std::int64_t> coef(rank, 0);
    std::int64_t c = 0;
    if (!linear(t.a(), 1, coef, c)) return std::nullopt;
    w.bounds.push_back(coef), w.below.push_back(t.b() - c);
  }
  // B[p][j] may vary only along its rows (the reduce axes), its columns and the batch loops
  std::vector<bool> used(rank, false);
  for (std::size_t d = k.first_reduce; d < rank; ++d) used[d] = true, w.rows.push_back(d);
  for (std::size_t d : p.cols) used[d] = true;
  for (const GemmPlan::Loop& l : p.batch) used[l.axis] = true;
  for (std::size_t d = 0; d < rank; ++d) {
    bool varies = w.index[d] != 0;
    for (const auto& b : w.bounds) varies = varies || b[d] != 0;
    if (varies && !used[d]) return std::nullopt;
  }
  w.cols = p.cols;
  w.shape = shape;
  return w;
}

std::optional<GemmPlan> match_gemm(const Kernel& k) {
  const LazyOp* r = k.reduceop;
  if (!r || r->op != FusedOps::MULACC || r->src.size() != 2 || k.out_dtype != dtypes::float32)
    return std::nullopt;
  auto ia = leaf_index(r->src[0]), ib = leaf_index(r->src[1]);
  if (!ia || !ib || *ia == 0 || *ib == 0 || *ia >= k.sts.size() || *ib >= k.sts.size()) return std::nullopt;
  if (k.bufs[*ia - 1].dtype != dtypes::float32 || k.bufs[*ib - 1].dtype != dtypes::float32)
    return std::nullopt;
  // An operand no single strided view reads (attention's head merge, a conv's padded windows) is
  // gathered first, at first in the kernel's axis order (its reduce axes inner: rows of A along k).
  const std::size_t rank = k.full_shape().size(), red = k.first_reduce;
  Dims natural;
  for (std::size_t d = 0; d < rank; ++d) natural.push_back(static_cast<std::int64_t>(d));
  // So is one whose reduce axes are not one stride run (a conv's output gradient, summed over batch
  // and pixels for the weight's: the channels lie between them).
  auto one_run = [&](const View& v) {
    for (std::size_t d = red; d + 1 < rank; ++d)
      if (v.strides[d] != v.strides[d + 1] * k.full_shape()[d + 1]) return false;
    return true;
  };
  Dims order[2];
  for (int i = 0; i < 2; ++i)
    if (const View* v = plain_view(k.sts[i == 0 ? *ia : *ib]); !v || !one_run(*v)) order[i] = natural;
  std::vector<std::size_t> cols;
  std::optional<GemmPlan> p = plan_for(k, *ia, *ib, order, cols);
  if (!p) return std::nullopt;
  // A gathered B (a conv's windows: im2col) is laid out as B's rows: the batch axes, then k, then the
  // columns, so that its rows are contiguous (packed row by row, or read in place) and the copy
  // writes along the output's width.
  if (p->b_pack >= 0) {
    const int i = p->b == *ia ? 0 : 1;
    Dims laid;
    for (std::size_t d = 0; d < red; ++d)
      if (std::find(cols.begin(), cols.end(), d) == cols.end()) laid.push_back(static_cast<std::int64_t>(d));
    for (std::size_t d = red; d < rank; ++d) laid.push_back(static_cast<std::int64_t>(d));
    for (std::size_t d = 0; d < red; ++d)
      if (std::find(cols.begin(), cols.end(), d) != cols.end()) laid.push_back(static_cast<std::int64_t>(d));
    Dims relaid[2] = {order[0], order[1]};
    relaid[i] = laid;
    std::vector<std::size_t> cols2;
    if (auto q = plan_for(k, *ia, *ib, relaid, cols2); q && q->b == p->b && q->m == p->m && q->n == p->n)
      p = std::move(q), cols = cols2;
  }
  p->cols.assign(cols.rbegin(), cols.rend());
  // A dot product is a sum, which a rendered kernel vectorizes at memory speed; a batch of them (a
  // LayerNorm weight's gradient: one per channel, over every token) a column sum of products,
  // vectorized across the batch. The GEMM would run each as a 1 x 1 tile.
  if (p->m == 1 && p->n == 1) return std::nullopt;
  // A depthwise convolution (groups = channels): per channel, a one-column product of its gathered
  // windows (m pixels, k the window) whose batch axis both operands read. A rendered kernel
  // vectorized over the output's width reads each input once, with no copy.
  if ((p->a_pack >= 0 || p->b_pack >= 0) && std::min(p->m, p->n) == 1)
    for (const GemmPlan::Loop& l : p->batch)
      if (l.a != 0 && l.b != 0 && l.size > 1) return std::nullopt;
  return p;
}

}  // namespace metagrad::codegen
