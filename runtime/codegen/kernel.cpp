#include "metagrad/codegen/kernel.hpp"

#include <algorithm>
#include <numeric>

namespace metagrad::codegen {

namespace {

void find_reduce(const LazyOp& op, const LazyOp*& found) {
  if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) {
    if (found && found != &op) throw std::logic_error("Kernel: an AST may hold at most one reduce");
    found = &op;
  }
  for (const LazySrc& s : op.src)
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s)) find_reduce(**o, found);
}

// A row kernel's node shapes: an EXPAND has its argument's, elementwise work its widest source's.
Dims row_shape(const LazySrc& s) {
  if (auto* b = std::get_if<MemBuffer>(&s)) return b->st.shape();
  const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(s);
  if (op.op == MovementOps::EXPAND || op.op.type == OpType::Reduce || op.op == FusedOps::MULACC)
    return std::get<Dims>(op.arg);
  if (op.op == LoadOps::CONST) return std::get<ConstArg>(op.arg).shape;
  Dims best = row_shape(op.src.at(0));
  for (std::size_t i = 1; i < op.src.size(); ++i)
    if (Dims d = row_shape(op.src[i]); prod(d) > prod(best)) best = d;
  return best;
}

bool has_expand(const LazyOp& op) {
  if (op.op == MovementOps::EXPAND) return true;
  for (const LazySrc& s : op.src)
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s); o && has_expand(**o)) return true;
  return false;
}

const LazyOp* any_reduce(const LazyOp& op) {
  if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) return &op;
  for (const LazySrc& s : op.src)
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s))
      if (const LazyOp* r = any_reduce(**o)) return r;
  return nullptr;
}

std::int64_t count_alu(const LazyOp& op) {
  std::int64_t n =
      op.op.type == OpType::Unary || op.op.type == OpType::Binary || op.op.type == OpType::Ternary ? 1
      : op.op == FusedOps::MULACC                                                                  ? 2
      : op.op.type == OpType::Reduce                                                               ? 1
                                                                                                   : 0;
  for (const LazySrc& s : op.src)
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s)) n += count_alu(**o);
  return n;
}

// Per axis of `coarse`, the run of `fine`'s axes whose product it is (size-1 axes of fine dropped),
// or a whole number of such a run, that number first (a pad or a repeat of the fine view along the
// axis: a chunk's gradient, (B, T, 3*H*E) from three (B, T, H, E) pieces): fine refines coarse.
// nullopt when it does not.
std::optional<std::vector<Dims>> refinement(const Dims& coarse, const Dims& fine) {
  Dims f;
  for (std::int64_t x : fine)
    if (x != 1) f.push_back(x);
  std::vector<Dims> out;
  std::size_t i = 0;
  for (std::int64_t c : coarse) {
    Dims run;
    std::int64_t p = 1;
    while (c != 1 && p < c && i < f.size() && c % (p * f[i]) == 0) p *= f[i], run.push_back(f[i++]);
    if (p != c) {
      if (p == 1) return std::nullopt;
      Dims whole{c / p};
      for (std::int64_t x : run) whole.push_back(x);
      run = whole;
    }
    out.push_back(c == 1 ? Dims{1} : run);
  }
  if (i != f.size()) return std::nullopt;
  return out;
}

}  // namespace

Kernel::Kernel(std::shared_ptr<LazyOp> ast_, DType out_dtype_) : ast(std::move(ast_)), out_dtype(out_dtype_) {
  bufs = mem_buffers(*ast);
  rows = has_expand(*ast);
  if (!rows) find_reduce(*ast, reduceop);
  const LazyOp* some_reduce = rows ? any_reduce(*ast) : reduceop;
  output_shape = rows ? row_shape(ast) : ast_shape(ast);
  Dims full = some_reduce ? ast_shape(some_reduce->src.at(0)) : output_shape;
  Dims reduced = some_reduce ? std::get<Dims>(some_reduce->arg) : output_shape;
  // A buffer read through a reshape of a permuted view (a head merge: (B, T, H*E) over (B, H, T, E)
  // memory) has no one stride along a merged axis, so no loop order would walk it along memory (a
  // bias gradient summed over B and T read one float a cache line). The kernel takes that view's
  // finer axes instead, (B, T, H, E): every buffer splits an axis as a reshape can, and the one read
  // through the permute is one view. (Not a row kernel, whose last axis is its row, nor a product,
  // whose operands the GEMM packs.)
  Dims out_shape = output_shape;
  if (!rows && !(reduceop && reduceop->op == FusedOps::MULACC))
    for (const MemBuffer& b : bufs) {
      if (b.st.views().size() < 2 || b.st.shape() != full) continue;
      auto runs = refinement(full, b.st.views()[0].shape);
      if (!runs) continue;
      Dims fine, fine_reduced;
      for (std::size_t d = 0; d < full.size(); ++d)
        for (std::int64_t x : (*runs)[d])
          fine.push_back(x), fine_reduced.push_back(reduced[d] == full[d] ? x : 1);
      if (fine.size() <= full.size() || fine.size() > kMaxDims) continue;
      full = fine, reduced = fine_reduced, out_shape = reduced;
      break;
    }
  sts.emplace_back(out_shape);
  for (const MemBuffer& b : bufs) sts.push_back(b.st);
  for (ShapeTracker& st : sts) {
    if (prod(st.shape()) == prod(full) && st.shape() != full) st.reshape(full);  // (refined axes)
    if (st.shape() != full) {
      if (st.shape() != reduced) st.reshape(reduced);
      st.expand(full);  // output-shaped: stride 0 along reduced axes
    }
  }
  op_estimate = count_alu(*ast) * prod(full);

  // Global axes first, then reduced ones.
  std::vector<std::int64_t> order;
  for (std::size_t d = 0; d < full.size(); ++d)
    if (!(reduced[d] == 1 && full[d] != 1)) order.push_back(static_cast<std::int64_t>(d));
  first_reduce = order.size();
  for (std::size_t d = 0; d < full.size(); ++d)
    if (reduced[d] == 1 && full[d] != 1) order.push_back(static_cast<std::int64_t>(d));
  reshape_and_permute({}, order);
  simplify_ones();
  simplify_merge_adjacent();
}

bool Kernel::is_reduce_axis(std::size_t axis) const {
  if (rows) return axis >= first_reduce && axis < shape_len() - upcasted;
  auto s = stride_of(0, axis);
  return full_shape()[axis] > 1 && s && *s == 0;
}

std::optional<std::int64_t> Kernel::stride_of(std::size_t buf, std::size_t axis) const {
  return sts[buf].real_strides()[axis];
}

void Kernel::reshape_and_permute(const std::vector<std::int64_t>& new_shape,
                                 const std::vector<std::int64_t>& axes) {
  for (ShapeTracker& st : sts) {
    if (!new_shape.empty()) st.reshape(Dims(new_shape));
    if (!axes.empty()) st.permute(Dims(axes));
  }
}

void Kernel::simplify_ones() {
  std::vector<std::int64_t> keep;
  std::size_t reduce_before = 0;
  for (std::size_t d = 0; d < shape_len(); ++d) {
    if (full_shape()[d] == 1) {
      if (d < first_reduce) ++reduce_before;
      continue;
    }
    keep.push_back(full_shape()[d]);
  }
  if (keep.size() == shape_len()) return;
  first_reduce -= reduce_before;
  reshape_and_permute(keep, {});
}

// Adjacent axes of the same kind merge when, in every buffer, they are one stride run.
void Kernel::simplify_merge_adjacent() {
  for (std::size_t d = shape_len(); d-- > 1;) {
    if ((d == first_reduce) || d >= shape_len() - upcasted) continue;
    bool ok = true;
    for (std::size_t b = 0; ok && b < sts.size(); ++b) {
      auto rs = sts[b].real_strides();
      ok = rs[d - 1] && rs[d] && *rs[d - 1] == *rs[d] * full_shape()[d];
    }
    if (!ok) continue;
    std::vector<std::int64_t> s(full_shape().begin(), full_shape().end());
    s[d - 1] *= s[d];
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
    if (d < first_reduce) --first_reduce;
    reshape_and_permute(s, {});
  }
}

void Kernel::upcast(std::size_t axis, std::int64_t amount) {
  std::int64_t size = full_shape()[axis];
  if (amount <= 1 || size % amount != 0)
    throw std::logic_error(
        detail::cat("Kernel.upcast: axis of ", std::to_string(size), " by ", std::to_string(amount)));
  std::vector<std::int64_t> s(full_shape().begin(), full_shape().end());
  s[axis] = size / amount;
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, amount);
  std::vector<std::int64_t> order;
  for (std::size_t d = 0; d < s.size(); ++d)
    if (d != axis + 1) order.push_back(static_cast<std::int64_t>(d));
  order.push_back(static_cast<std::int64_t>(axis) + 1);
  reshape_and_permute(s, order);
  ++upcasted;
  simplify_ones();  // an axis split fully into the upcast leaves a loop of 1
}

void Kernel::block_reduce(std::size_t axis, std::int64_t amount) {
  std::int64_t size = full_shape()[axis];
  if (blocked || axis != first_reduce || amount <= 1 || size % amount != 0 || size == amount)
    throw std::logic_error(detail::cat("Kernel.block_reduce: axis ", std::to_string(axis), " of ",
                                       std::to_string(size), " by ", std::to_string(amount)));
  std::vector<std::int64_t> s(full_shape().begin(), full_shape().end());
  s[axis] = size / amount;
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, amount);
  reshape_and_permute(s, {});
  blocked = true;
}

Opts Opts::host() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return {8, 32, 128, 64, 8, 0, 0, 16};
#endif
  return {4, 16, 128, 64, 8, 0, 0, 16};
}

void Kernel::hand_coded_optimizations(const Opts& opts) {
  // A row kernel: loops the code generator vectorizes, its float sums reassociable (the linearizer
  // splits a max's loop into row_max_lanes partial maxima itself).
  if (rows) {
    row_sum_lanes = opts.row_sum_lanes, row_max_lanes = opts.row_max_lanes;
    std::vector<const LazyOp*> stack{ast.get()};
    while (!stack.empty()) {
      const LazyOp* o = stack.back();
      stack.pop_back();
      if (o->op == ReduceOps::SUM || o->op == FusedOps::MULACC)
        reassociate = reassociate || dtypes::is_float(ast_dtype(o->src.at(0)));
      for (const LazySrc& x : o->src)
        if (auto* sub = std::get_if<std::shared_ptr<LazyOp>>(&x)) stack.push_back(sub->get());
    }
    return;
  }
  auto looped_end = [&] { return shape_len() - upcasted; };
  // LLVM (window_loops): a copy that pads (a load masked along the last axis) is a branch on each
  // element there, which LLVM does not vectorize; the whole row upcast makes each position's mask
  // along it a constant, and the row's loads one run under the row's own test. (Rows of 24 to 128:
  // MobileNet's 16-wide ones ran 3x slower so, LLVM's loop already vectorizing them.)
  if (!reduceop && opts.window_loops && shape_len() >= 2) {
    const std::size_t last = shape_len() - 1;
    const std::int64_t n = full_shape()[last];
    bool masked = false;
    for (std::size_t b = 1; b < sts.size(); ++b) {
      const View& v = sts[b].views().back();
      masked = masked || (sts[b].views().size() == 1 && v.mask.size() == shape_len() &&
                          (v.mask[last].first != 0 || v.mask[last].second != n));
    }
    if (masked && n >= 24 && n <= 128) upcast(last, n);
    return;
  }
  // One looped reduce axis, a multiple of 2 blocks, a sum straight into the output (which holds the
  // partial sums), and a global axis for the threads. At most 4096 blocks: the output sums them in
  // one chain, which must stay short (see the linearizer's levels).
  auto blockable = [&](std::int64_t block) {
    return first_reduce >= 1 && looped_end() == first_reduce + 1 && reduceop == ast.get() &&
           reduceop->op != ReduceOps::MAX && ast_dtype(reduceop->src.at(0)) == out_dtype &&
           full_shape()[first_reduce] % block == 0 && full_shape()[first_reduce] >= 2 * block &&
           full_shape()[first_reduce] / block <= 4096;
  };
  // How many input reads walk memory along `axis`.
  auto unit_reads = [&](std::size_t axis) {
    int n = 0;
    for (std::size_t b = 1; b < sts.size(); ++b)
      if (auto s = stride_of(b, axis); s && *s == 1) ++n;
    return n;
  };
  // How many input reads of a multiply-accumulate walk memory along `axis` through their last view:
  // a depthwise conv's windows (which the GEMM does not run), vectorized across the output's width.
  auto window_reads = [&](std::size_t axis) {
    int n = 0;
    for (std::size_t b = 1; b < sts.size() && reduceop->op == FusedOps::MULACC; ++b)
      if (sts[b].views().back().strides[axis] == 1) ++n;
    return n;
  };
  // Whether a multiply-accumulate or a max reads windows (a view of a view) along `axis` at a
  // stride of 1 to 4: a depthwise conv's or a max pool's, `axis` the output's width.
  auto windowed = [&](std::size_t axis) {
    const bool kind = reduceop->op == FusedOps::MULACC || reduceop->op == ReduceOps::MAX;
    for (std::size_t b = 1; b < sts.size() && kind; ++b)
      if (std::int64_t s = sts[b].views().back().strides[axis]; sts[b].views().size() > 1 && s >= 1 && s <= 4)
        return true;
    return false;
  };
  // A matmul: the multiply's two sides are an outer product over the rows and the columns, one side
  // constant along the rows (B), the other along the columns (A). A square (x - mean)^2 is not: a
  // register tile over its outputs would read neither side as a vector.
  auto outer_product = [&](std::size_t rows) {
    auto side = [&](const LazySrc& s) {
      std::vector<MemBuffer> leaves;
      if (auto* m = std::get_if<MemBuffer>(&s))
        leaves.push_back(*m);
      else
        for_each_leaf(*std::get<std::shared_ptr<LazyOp>>(s),
                      [&](const MemBuffer& m) { leaves.push_back(m); });
      auto constant_along = [&](std::size_t axis) {
        return !leaves.empty() && std::all_of(leaves.begin(), leaves.end(), [&](const MemBuffer& m) {
          auto s = stride_of(m.index, axis);
          return s && *s == 0;
        });
      };
      return std::pair{constant_along(rows), constant_along(rows + 1)};
    };
    if (reduceop->src.size() != 2) return false;
    auto [a_rows, a_cols] = side(reduceop->src[0]);
    auto [b_rows, b_cols] = side(reduceop->src[1]);
    return (a_cols && b_rows) || (a_rows && b_cols);
  };
  if (reduceop && looped_end() > first_reduce) {
    std::size_t r = looped_end() - 1;
    std::int64_t outputs = 1, L = opts.group_reduce;
    for (std::size_t d = 0; d < first_reduce; ++d) outputs *= full_shape()[d];
    const bool f32 = ast_dtype(reduceop->src.at(0)) == dtypes::float32;
    // Reduce axis `axis` split by g, the g part run by the group's threads: the last looped axis.
    auto share = [&](std::size_t axis, std::int64_t g) {
      std::vector<std::int64_t> s(full_shape().begin(), full_shape().end()), order;
      s[axis] /= g;
      s.insert(s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, g);
      for (std::size_t d = 0; d < s.size(); ++d)
        if (d != axis + 1) order.push_back(static_cast<std::int64_t>(d));
      order.push_back(static_cast<std::int64_t>(axis) + 1);
      reshape_and_permute(s, order);
      local_size = g;
    };
    if (L > 0 && outputs <= 4096 && unit_reads(r) > 0 && full_shape()[r] % L == 0 &&
        full_shape()[r] >= 16 * L && f32)
      return share(r, L);
    if (L > 0 && opts.any_axis_groups && outputs <= 65536 && f32) {
      std::int64_t total = 1;
      for (std::size_t d = first_reduce; d < looped_end(); ++d) total *= full_shape()[d];
      // The group along each axis: the largest power of two up to L that divides it, at least a warp.
      auto group_of = [&](std::size_t d) {
        std::int64_t g = L;
        while (g >= 32 && full_shape()[d] % g != 0) g /= 2;
        return g >= 32 ? g : 0;
      };
      std::size_t axis = r;
      for (std::size_t d = first_reduce; d < looped_end(); ++d)
        if (group_of(d) > group_of(axis) ||
            (group_of(d) == group_of(axis) && unit_reads(d) > unit_reads(axis)))
          axis = d;
      if (std::int64_t g = group_of(axis); g > 0 && total >= 64) return share(axis, g);
    }
    bool matmul_like =
        reduceop->op == FusedOps::MULACC && first_reduce >= 2 && outer_product(first_reduce - 2);
    // matmul: a register tile of outputs, rows x cols, each updated once per k; cols are the last
    // upcast axis, so a row of the tile is one contiguous vector of B and of the output. A long
    // reduce loops in blocks (see `blocked`) so that a block of B stays in cache while a thread's
    // rows walk across it. Shapes the tile does not divide try smaller ones.
    std::pair<std::int64_t, std::int64_t> tiles[] = {{opts.tile_rows, opts.tile_cols}, {4, 16}, {4, 8}};
    for (auto [R, C] : tiles) {
      if (!matmul_like || full_shape()[first_reduce - 1] % C != 0 || full_shape()[first_reduce - 2] % R != 0)
        continue;
      upcast(first_reduce - 2, R);
      upcast(first_reduce - 1, C);  // first_reduce - 1 is still the columns (a rows axis of R is dropped)
      if (opts.matmul_block > 0 && blockable(opts.matmul_block))
        block_reduce(first_reduce, opts.matmul_block);
      return;
    }
    // A reduce along memory: partial sums in 8 registers break the add-latency chain. (Along memory
    // for most inputs: a row of per-row statistics read beside column-major data is a column sum.)
    std::size_t col = first_reduce ? first_reduce - 1 : r;
    if (unit_reads(r) > 0 && (first_reduce == 0 || unit_reads(r) >= unit_reads(col)) &&
        full_shape()[r] % 8 == 0 && full_shape()[r] >= 16) {
      reassociate = reduceop->op != ReduceOps::MAX && dtypes::is_float(ast_dtype(reduceop->src.at(0)));
      if (opts.row_upcast > 1 || !reassociate) upcast(r, std::max<std::int64_t>(opts.row_upcast, 8));
      return;
    }
    // A depthwise conv (the GEMM's one-column products, a reduce over windows read along the
    // output's width at its stride): the width upcast by its largest divisor up to window_upcast
    // (MobileNet's rows of 28, 14 and 7 too), each tap then one row of loads and FMAs that gcc's SLP
    // vectorizes; or, with window_loops, left as loops that LLVM unrolls (the window) and
    // vectorizes (the width) itself, faster there than either upcast.
    if (std::size_t c = first_reduce - 1;
        first_reduce > 0 && (opts.window_loops || opts.window_upcast > 0) && windowed(c)) {
      if (opts.window_loops) return;
      std::int64_t u = opts.window_upcast, w = full_shape()[c];
      while (u > 1 && w % u != 0) --u;
      if (u >= 4 || u == w) upcast(c, u);
      return;
    }
    // A reduce across memory (column sums): neighbouring outputs in registers share each row read.
    // Where the reduce can be blocked, the columns split into a threaded part and a part that loops
    // inside the block, so a block of rows is read row-major, a strip of columns at a time, each
    // line once.
    for (std::int64_t u = opts.column_upcast; u >= 8; u /= 2) {
      std::size_t c = first_reduce - 1;
      if (first_reduce == 0 || (unit_reads(c) == 0 && window_reads(c) == 0) || full_shape()[c] % u != 0)
        continue;
      upcast(c, u);
      std::int64_t cols = first_reduce > 0 ? full_shape()[first_reduce - 1] : 1, g = 32;
      while (g > 1 && (cols % g != 0 || cols / g < 2)) g /= 2;
      if (first_reduce > 0 && opts.column_block > 0 && g > 1 && blockable(opts.column_block)) {
        std::vector<std::int64_t> s(full_shape().begin(), full_shape().end());
        s[first_reduce - 1] = cols / g;
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(first_reduce), g);
        reshape_and_permute(s, {});
        ++first_reduce;
        block_reduce(first_reduce, opts.column_block);
      }
      return;
    }
  }
}

std::string Kernel::name() const {
  std::string out = rows ? "s" : reduceop ? "r" : "E";
  for (std::int64_t d : full_shape()) out += "_" + std::to_string(d);
  return shape_len() == 0 ? out + "_1" : out;
}

std::string Kernel::key() const { return ast_key(*ast, out_dtype); }

}  // namespace metagrad::codegen
