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

std::int64_t count_alu(const LazyOp& op) {
  std::int64_t n = op.op.type == OpType::Unary || op.op.type == OpType::Binary ? 1
                   : op.op == FusedOps::MULACC                                 ? 2
                   : op.op.type == OpType::Reduce                              ? 1
                                                                               : 0;
  for (const LazySrc& s : op.src)
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s)) n += count_alu(**o);
  return n;
}

}  // namespace

Kernel::Kernel(std::shared_ptr<LazyOp> ast_, DType out_dtype_) : ast(std::move(ast_)), out_dtype(out_dtype_) {
  bufs = ast->buffers();
  find_reduce(*ast, reduceop);
  output_shape = ast_shape(ast);
  Dims full = reduceop ? ast_shape(reduceop->src.at(0)) : output_shape;
  sts.emplace_back(output_shape);
  for (const auto& b : bufs) sts.push_back(b->st);
  for (ShapeTracker& st : sts)
    if (st.shape() != full) st.expand(full);  // output-shaped: stride 0 along reduced axes
  op_estimate = count_alu(*ast) * prod(full);

  // Global axes first, then reduced ones.
  std::vector<std::int64_t> order;
  for (std::size_t d = 0; d < full.size(); ++d)
    if (!(output_shape[d] == 1 && full[d] != 1)) order.push_back(static_cast<std::int64_t>(d));
  first_reduce = order.size();
  for (std::size_t d = 0; d < full.size(); ++d)
    if (output_shape[d] == 1 && full[d] != 1) order.push_back(static_cast<std::int64_t>(d));
  reshape_and_permute({}, order);
  simplify_ones();
  simplify_merge_adjacent();
}

bool Kernel::is_reduce_axis(std::size_t axis) const {
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

void Kernel::hand_coded_optimizations() {
  auto looped_end = [&] { return shape_len() - upcasted; };
  auto contiguous_in_input = [&](std::size_t axis) {
    for (std::size_t b = 1; b < sts.size(); ++b)
      if (auto s = stride_of(b, axis); s && *s == 1) return true;
    return false;
  };
  if (reduceop && looped_end() > first_reduce) {
    std::size_t r = looped_end() - 1;
    bool matmul_like = reduceop->op == FusedOps::MULACC && first_reduce >= 2;
    // matmul: a register tile of outputs, 4 rows by 8 columns, each updated once per k.
    if (matmul_like && full_shape()[first_reduce - 1] % 8 == 0 && full_shape()[first_reduce - 2] % 4 == 0) {
      std::size_t rows = first_reduce - 2;  // before the first upcast, which may drop an axis after it
      upcast(first_reduce - 1, 8);
      upcast(rows, 4);
      return;
    }
    // A reduce along memory: partial sums in 8 registers break the add-latency chain.
    if (contiguous_in_input(r) && full_shape()[r] % 8 == 0 && full_shape()[r] >= 16) {
      upcast(r, 8);
      return;
    }
    // A reduce across memory (column sums): 8 neighbouring outputs per pass share each row read.
    if (first_reduce > 0 && contiguous_in_input(first_reduce - 1) &&
        full_shape()[first_reduce - 1] % 8 == 0) {
      upcast(first_reduce - 1, 8);
      return;
    }
  }
}

std::string Kernel::name() const {
  std::string out = reduceop ? "r" : "E";
  for (std::int64_t d : full_shape()) out += "_" + std::to_string(d);
  return shape_len() == 0 ? out + "_1" : out;
}

std::string Kernel::key() const { return ast_key(*ast, out_dtype); }

}  // namespace metagrad::codegen
