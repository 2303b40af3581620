// AstBuilder (ast_builder.hpp): what fuses into one kernel, and the kernel's AST.
#include "ast_builder.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace metagrad::scheduler {

namespace {

DType graph_dtype(const GraphSrc& src) { return node_dtype<LazyBufferPtr>(src); }
Dims graph_shape(const GraphSrc& src) { return node_shape<LazyBufferPtr>(src); }

bool is_elementwise(const LazyBuffer& b) {
  return !b.realized && b.op &&
         (b.op->op.type == OpType::Unary || b.op->op.type == OpType::Binary ||
          b.op->op.type == OpType::Ternary || b.op->op.type == OpType::Fused);
}

// The constant a source stands for, when it is one everywhere: a CONST, or one element of a host
// buffer coming to this device, seen through a view without padding.
std::optional<ConstArg> folded_constant(LazyBuffer& s) {
  if (s.st.views().back().mask.size() || s.st.views().size() > 1) return std::nullopt;
  LazyBufferPtr b = s.base();
  if (b->realized || !b->op) return std::nullopt;
  if (b->op->op == LoadOps::CONST) return ConstArg{std::get<ConstArg>(b->op->arg).value, s.dtype, s.shape()};
  if (b->op->op == LoadOps::FROM && b->st.size() == 1) {
    LazyBufferPtr host = std::get<LazyBufferPtr>(b->op->src[0])->base();
    if (host->realized && host->device == "CPU" && host->realized->size == 1) {
      double v = read_as_double(*host->realized)[0];
      DType hd = host->realized->dtype;  // a 64-bit integer past 2^53 may have no double: kept a buffer
      if ((hd == dtypes::int64 || hd == dtypes::uint64) && std::fabs(v) >= 0x1p53) return std::nullopt;
      return ConstArg{v, s.dtype, s.shape()};
    }
  }
  return std::nullopt;
}

bool is_reduce(const LazyBuffer& b) {
  return !b.realized && b.op && (b.op->op.type == OpType::Reduce || b.op->op == FusedOps::MULACC);
}

// Walks the buffers b's fused ops read (at most 16 ops deep): visit(src, push) for each, which
// returns true to end the search with true, and calls push(op) to walk on into a buffer's op.
template <class Visit>
bool search_sources(const LazyBuffer& b, Visit visit) {
  int budget = 16;
  std::vector<const GraphOp*> stack{b.op.get()};
  auto push = [&](const GraphOp* o) { stack.push_back(o); };
  while (!stack.empty() && --budget >= 0) {
    const GraphOp* o = stack.back();
    stack.pop_back();
    for (const GraphSrc& x : o->src)
      if (auto* op = std::get_if<std::shared_ptr<GraphOp>>(&x))
        push(op->get());
      else if (visit(std::get<LazyBufferPtr>(x), push))
        return true;
  }
  return false;
}

// Whether b's elementwise ops (through views that add no elements) read an unrealized reduce as it
// is laid out (whole, or through a reshape of it: a product's result). Whoever computes b computes
// that product too, with b's ops as its GEMM's epilogue; a consumer that recomputed b would need
// the product as a buffer of its own, a second GEMM of the same product (ResNet's block output,
// read by the next conv and by the next residual add).
bool reads_product(const LazyBuffer& b) {
  return search_sources(b, [](const LazyBufferPtr& src, const auto& push) {
    const LazyBufferPtr base = src->base();
    if (base->realized || !base->op || prod(src->shape()) > prod(base->shape())) return false;
    if (is_reduce(*base)) return true;
    if (is_elementwise(*base)) push(base->op.get());
    return false;
  });
}

// A product's result (a sum of a multiply: matmul, conv) read only through a reshape of it (the
// output's layout: a batched matmul's or a conv's axes, the reduced ones dropped): the reading
// kernel computes it, reading it as it is laid out, so that ops after a product are its GEMM's
// epilogue rather than a second pass over memory (the kernel's leaves of the reshaped shape are
// read in the reduce's, as Kernel reshapes them).
bool is_product(const LazyBuffer& base) {
  if (!is_reduce(base) || base.op->op != ReduceOps::SUM || base.live_children() > 1) return false;
  const GraphSrc& x = base.op->src.at(0);
  auto* mul = std::get_if<std::shared_ptr<GraphOp>>(&x);
  const LazyBufferPtr* in = std::get_if<LazyBufferPtr>(&x);
  if (!(mul && (*mul)->op == BinaryOps::MUL) &&
      !(in && (*in)->base() == *in && (*in)->op && (*in)->op->op == BinaryOps::MUL && !(*in)->realized))
    return false;
  return true;
}
bool reshaped_product(LazyBuffer& b) {
  if (!b.is_view() || b.live_children() > 1) return false;
  const LazyBufferPtr base = b.base();
  if (!is_product(*base)) return false;
  for (const LazyBuffer* v = &b; v != base.get(); v = std::get<LazyBufferPtr>(v->op->src[0]).get())
    if (v->live_children() > 1 || v->op->op != MovementOps::RESHAPE) return false;
  return b.st.views().size() == 1 && b.st.contiguous() && base->st.contiguous();
}

}  // namespace

LazySrc AstBuilder::build(const GraphSrc& src, const std::vector<View>& above) {
  if (auto* o = std::get_if<std::shared_ptr<GraphOp>>(&src)) return build_op(**o, above);
  const LazyBufferPtr& b = std::get<LazyBufferPtr>(src);
  if (auto c = folded_constant(*b)) {
    if (!above.empty()) c->shape = above.back().shape;
    return kernel_op(LoadOps::CONST, {}, *c);
  }
  LazyBufferPtr base = b->base();
  bool room = depth < kMaxFusedDepth && !(targets && targets->count(base.get()));
  if (room && base == b && is_elementwise(*b) && b->device == consumer.device &&
      (b->live_children() <= 1 ||
       (cheap_to_recompute(*b) && !recomputes_rows_elsewhere(*b) && !reads_product(*b))))
    return build(b->op, above);
  if (room && rows && above.empty())  // (before pushable_views: a one-row reduce is one element)
    if (auto r = broadcast_reduce(*b)) return *r;
  if (auto through = room ? pushable_views(*b, above) : std::nullopt) return build(base->op, *through);
  // (a product read through a reshape of views pushed down from above it, a conv's bias added
  // before its output's reshape: the same)
  const bool reshaped = reshaped_products && above.size() == 1 && above[0].contiguous &&
                        prod(above[0].shape) == prod(b->shape());
  if (room && !has_reduce && base->device == consumer.device &&
      (above.empty()
           ? base == b ? is_reduce(*b) && b->live_children() <= 1 : reshaped_products && reshaped_product(*b)
           : reshaped && base == b && is_product(*b)))
    return build(base->op, {});
  if (!base->realized && std::find(deps.begin(), deps.end(), base) == deps.end()) deps.push_back(base);
  return read_through(b, above);
}

LazySrc AstBuilder::build_op(const GraphOp& op, const std::vector<View>& above) {
  if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) {
    if (!above.empty()) throw std::logic_error("scheduler: a reduce cannot be read through views");
    // Reducing nothing gives the identity: no loop over an empty axis reaches a kernel.
    if (prod(graph_shape(op.src.at(0))) == 0) {
      DType dt = graph_dtype(op.src.at(0));
      double init = op.op == ReduceOps::MAX ? dtypes::min_value(dt) : 0.0;
      return kernel_op(LoadOps::CONST, {}, ConstArg{init, dt, std::get<Dims>(op.arg)});
    }
    has_reduce = true;
  }
  std::vector<LazySrc> s;
  ++depth;
  for (const GraphSrc& x : op.src) s.push_back(build(x, above));
  --depth;
  if (op.op == ReduceOps::SUM)
    if (auto* m = std::get_if<std::shared_ptr<LazyOp>>(&s[0]); m && (*m)->op == BinaryOps::MUL)
      return kernel_op(FusedOps::MULACC, (*m)->src, op.arg);
  return kernel_op(op.op, std::move(s), op.arg);
}

bool AstBuilder::reduce_result(const LazyBuffer& b, int level) {
  if (is_reduce(b)) return true;
  if (!is_elementwise(b) || level > 8) return false;
  std::vector<const GraphOp*> stack{b.op.get()};
  while (!stack.empty()) {
    const GraphOp* o = stack.back();
    stack.pop_back();
    for (const GraphSrc& x : o->src) {
      if (auto* op = std::get_if<std::shared_ptr<GraphOp>>(&x)) {
        stack.push_back(op->get());
      } else if (const LazyBufferPtr& s = std::get<LazyBufferPtr>(x);
                 s->base() == s && s->live_children() <= 1 && reduce_result(*s, level + 1)) {
        return true;
      }
    }
  }
  return false;
}

std::optional<LazySrc> AstBuilder::broadcast_reduce(LazyBuffer& b) {
  if (!b.is_view() || b.live_children() > 1) return std::nullopt;
  LazyBufferPtr r = b.base();
  if (!reduce_result(*r) || r->device != consumer.device || r->live_children() > 1) return std::nullopt;
  for (LazyBufferPtr v = b.shared_from_this(); v != r; v = std::get<LazyBufferPtr>(v->op->src[0]))
    if (v->live_children() > 1) return std::nullopt;
  Dims in = b.shape(), out = r->shape();
  if (b.st.views().size() != 1 || in.size() != out.size()) return std::nullopt;
  const View& v = b.st.views()[0];
  if (!v.mask.empty() || v.offset != 0) return std::nullopt;
  Dims strides = strides_for_shape(out);
  std::int64_t n = 1;
  for (std::size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    if (out[d] == 1) {
      if (v.strides[d] != 0) return std::nullopt;
      n *= in[d];
    } else if (v.strides[d] != strides[d]) {
      return std::nullopt;
    }
  }
  if (n > 4096 || n < 2) return std::nullopt;
  bool saved = has_reduce;
  has_reduce = false;  // (the reduce it reads is inlined below the EXPAND)
  ++depth;
  LazySrc red = build_op(*r->op, {});
  --depth;
  has_reduce = saved;
  ++row_reduces;
  return kernel_op(MovementOps::EXPAND, {red}, in);
}

std::optional<std::vector<View>> AstBuilder::pushable_views(LazyBuffer& b, const std::vector<View>& above) {
  if (!b.is_view() || b.live_children() > 1) return std::nullopt;
  LazyBufferPtr base = b.base();
  if (!is_elementwise(*base) || base->device != consumer.device || base->live_children() > 1)
    return std::nullopt;
  for (LazyBufferPtr v = b.shared_from_this(); v != base; v = std::get<LazyBufferPtr>(v->op->src[0]))
    if (v->live_children() > 1) return std::nullopt;
  // More elements than the base would recompute it for each copy; a small computation on one
  // element (an optimizer's scalar cast to a parameter's dtype and broadcast) is cheaper so than
  // as a kernel of its own.
  if (b.st.size() > base->st.size() && !(base->st.size() == 1 && cheap_to_recompute(*base)))
    return std::nullopt;
  for (const View& v : b.st.views())
    if (!v.mask.empty()) return std::nullopt;
  std::vector<View> out = b.st.views();
  out.insert(out.end(), above.begin(), above.end());
  return out;
}

bool AstBuilder::cheap_to_recompute(LazyBuffer& b) {
  int budget = 6;
  std::vector<const GraphOp*> stack{b.op.get()};
  while (!stack.empty()) {
    const GraphOp* o = stack.back();
    stack.pop_back();
    if (--budget < 0) return false;
    for (const GraphSrc& x : o->src) {
      if (auto* op = std::get_if<std::shared_ptr<GraphOp>>(&x)) {
        stack.push_back(op->get());
      } else {
        const LazyBufferPtr& src = std::get<LazyBufferPtr>(x);
        if (src->base() == src && is_elementwise(*src)) stack.push_back(src->op.get());
      }
    }
  }
  return true;
}

bool AstBuilder::recomputes_rows_elsewhere(LazyBuffer& b) const {
  if (!reads_row_reduce(b)) return false;
  std::size_t within = 0, live = b.live_children();
  // (buffer, reached through a view that broadcasts: past one, a reduce is a row kernel's and
  // inlined; a reduce read directly, a product, is a kernel of its own, and past it lies the rest
  // of the graph)
  std::vector<std::pair<const LazyBuffer*, bool>> stack{{&consumer, false}};
  std::unordered_set<const LazyBuffer*> seen{&consumer};
  while (!stack.empty() && seen.size() < 256) {
    auto [x, broadcast] = stack.back();
    stack.pop_back();
    if (!x->op || x->realized) continue;
    std::vector<const GraphOp*> ops{x->op.get()};
    while (!ops.empty()) {
      const GraphOp* o = ops.back();
      ops.pop_back();
      for (const GraphSrc& src : o->src) {
        if (auto* sub = std::get_if<std::shared_ptr<GraphOp>>(&src)) {
          ops.push_back(sub->get());
          continue;
        }
        const LazyBuffer* s = std::get<LazyBufferPtr>(src).get();
        if (s == &b) ++within;
        bool expands = x->is_view() && prod(x->shape()) > prod(s->shape());
        bool inlinable = s->is_view() || is_elementwise(*s) || (is_reduce(*s) && (broadcast || expands));
        if (s != &b && inlinable && seen.insert(s).second)
          stack.emplace_back(s, !is_reduce(*s) && (broadcast || expands));
      }
    }
  }
  return within < live;
}

bool AstBuilder::reads_row_reduce(LazyBuffer& b) {
  return search_sources(b, [](const LazyBufferPtr& src, const auto& push) {
    if (src->is_view()) {  // (a product's reshaped result is no row reduce: not broadcast)
      LazyBufferPtr base = src->base();
      return !base->realized && prod(src->shape()) > prod(base->shape()) && reduce_result(*base);
    }
    if (is_elementwise(*src)) push(src->op.get());
    return false;
  });
}

std::shared_ptr<LazyOp> AstBuilder::kernel_op(Op op, std::vector<LazySrc> src, OpArg arg) {
  return std::make_shared<LazyOp>(op, std::move(src), std::move(arg));
}

LazySrc AstBuilder::read_through(const LazyBufferPtr& b, const std::vector<View>& above) {
  if (above.empty()) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (whole[i] && inputs[i] == b) return MemBuffer{i + 1, b->dtype, b->st};
    inputs.push_back(b), whole.push_back(true);
    return MemBuffer{inputs.size(), b->dtype, b->st};
  }
  std::vector<View> views = b->st.views();
  views.insert(views.end(), above.begin(), above.end());
  ShapeTracker st(views);
  st.simplify();
  inputs.push_back(b), whole.push_back(false);
  return MemBuffer{inputs.size(), b->dtype, std::move(st)};
}

}  // namespace metagrad::scheduler
