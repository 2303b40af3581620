// LazyBuffer construction, the scheduler (which buffers become kernels, what fuses), and realize().
#include "metagrad/lazy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace metagrad {

namespace {

std::string shape_error(const char* op, const std::vector<LazyBufferPtr>& src) {
  std::string out = std::string(op) + ": sources must share one shape and device, got";
  for (const auto& s : src) out += detail::cat(" ", to_string(s->shape()), "@", s->device);
  return out;
}

std::shared_ptr<LazyOp> make_op(Op op, std::vector<LazySrc> src = {}, OpArg arg = {}) {
  return std::make_shared<LazyOp>(op, std::move(src), std::move(arg));
}

// A host value of a realized buffer's element i, as double.
double element_as_double(const std::byte* p, DType dt, std::size_t i) {
  switch (dt.priority) {
    case dtypes::bool_.priority:
      return reinterpret_cast<const bool*>(p)[i];
    case dtypes::int8.priority:
      return reinterpret_cast<const std::int8_t*>(p)[i];
    case dtypes::uint8.priority:
      return reinterpret_cast<const std::uint8_t*>(p)[i];
    case dtypes::int32.priority:
      return reinterpret_cast<const std::int32_t*>(p)[i];
    case dtypes::int64.priority:
      return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
    case dtypes::float16.priority:
      return half::to_float(reinterpret_cast<const std::uint16_t*>(p)[i]);
    case dtypes::float32.priority:
      return reinterpret_cast<const float*>(p)[i];
    default:
      return reinterpret_cast<const double*>(p)[i];
  }
}

}  // namespace

void add_child(const LazyBufferPtr& parent, const LazyBufferPtr& child) {
  auto& c = parent->children_;
  c.erase(std::remove_if(c.begin(), c.end(), [](const auto& w) { return w.expired(); }), c.end());
  c.push_back(child);
}

void write_from_double(RawBuffer& buf, const std::vector<double>& v) {
  std::vector<std::byte> bytes(buf.nbytes());
  auto put = [&]<class T>(T*) {
    for (std::size_t i = 0; i < buf.size; ++i) reinterpret_cast<T*>(bytes.data())[i] = static_cast<T>(v[i]);
  };
  switch (buf.dtype.priority) {
    case dtypes::bool_.priority:
      for (std::size_t i = 0; i < buf.size; ++i) reinterpret_cast<bool*>(bytes.data())[i] = v[i] != 0;
      break;
    case dtypes::int8.priority:
      put(static_cast<std::int8_t*>(nullptr));
      break;
    case dtypes::uint8.priority:
      put(static_cast<std::uint8_t*>(nullptr));
      break;
    case dtypes::int32.priority:
      put(static_cast<std::int32_t*>(nullptr));
      break;
    case dtypes::int64.priority:
      put(static_cast<std::int64_t*>(nullptr));
      break;
    case dtypes::float16.priority:
      for (std::size_t i = 0; i < buf.size; ++i)
        reinterpret_cast<std::uint16_t*>(bytes.data())[i] = half::from_float(static_cast<float>(v[i]));
      break;
    case dtypes::float32.priority:
      put(static_cast<float*>(nullptr));
      break;
    default:
      put(static_cast<double*>(nullptr));
      break;
  }
  buf.copyin(bytes.data());
}

std::vector<double> read_as_double(const RawBuffer& buf) {
  std::vector<std::byte> bytes(buf.nbytes());
  buf.copyout(bytes.data());
  std::vector<double> out(buf.size);
  for (std::size_t i = 0; i < buf.size; ++i) out[i] = element_as_double(bytes.data(), buf.dtype, i);
  return out;
}

void note_assign(const LazyBufferPtr& before, const LazyBufferPtr& after) {
  CaptureLog* log = CaptureLog::active;
  if (!log || before == after) return;
  for (auto& a : log->assigns)
    if (a.after == before) return void(a.after = after);
  LazyBufferPtr b = before->base();
  bool whole = before->st.contiguous() && b->realized &&
               static_cast<std::int64_t>(b->realized->size) == before->st.size();
  log->assigns.push_back({whole ? b->realized : nullptr, after});
}

LazyBuffer::LazyBuffer(std::string device_, ShapeTracker st_, DType dtype_, std::shared_ptr<LazyOp> op_,
                       std::shared_ptr<RawBuffer> realized_)
    : device(Device::canonicalize(device_)),
      dtype(dtype_),
      st(std::move(st_)),
      realized(std::move(realized_)),
      op(std::move(op_)) {
  ++live_count;
}

LazyBuffer::~LazyBuffer() { --live_count; }

std::size_t LazyBuffer::live_children() const {
  return static_cast<std::size_t>(
      std::count_if(children_.begin(), children_.end(), [](const auto& w) { return !w.expired(); }));
}

LazyBufferPtr LazyBuffer::base() {
  LazyBufferPtr b = shared_from_this();
  while (b->is_view()) b = std::get<LazyBufferPtr>(b->op->src[0]);
  return b;
}

LazyBufferPtr LazyBuffer::from_raw(std::shared_ptr<RawBuffer> raw, const Dims& shape,
                                   const std::string& device) {
  if (static_cast<std::int64_t>(raw->size) != prod(shape))
    throw std::invalid_argument(detail::cat("LazyBuffer.from_raw: ", std::to_string(raw->size),
                                            " elements cannot have shape ", to_string(shape)));
  DType dt = raw->dtype;
  return std::make_shared<LazyBuffer>(device, ShapeTracker(shape), dt, nullptr, std::move(raw));
}

LazyBufferPtr LazyBuffer::loadop(LoadOps op, const Dims& shape, DType dtype, const std::string& device,
                                 OpArg arg, std::vector<LazyBufferPtr> src) {
  Device::get(device);  // a device that does not exist or is unavailable fails here, not at realize
  std::vector<LazySrc> s(src.begin(), src.end());
  auto out = std::make_shared<LazyBuffer>(device, ShapeTracker(shape), dtype,
                                          make_op(op, std::move(s), std::move(arg)));
  for (const auto& x : src) add_child(x, out);
  return out;
}

LazyBufferPtr LazyBuffer::elementwise(Op op, const std::vector<LazyBufferPtr>& src, OpArg arg) {
  for (const auto& s : src)
    if (s->shape() != src[0]->shape() || s->device != src[0]->device)
      throw std::invalid_argument(shape_error("elementwise", src));
  DType dt = op == BinaryOps::CMPEQ ? dtypes::bool_
             : op == UnaryOps::CAST ? std::get<DType>(arg)
                                    : src[0]->dtype;
  auto out =
      std::make_shared<LazyBuffer>(src[0]->device, ShapeTracker(src[0]->shape()), dt,
                                   make_op(op, std::vector<LazySrc>(src.begin(), src.end()), std::move(arg)));
  for (const auto& s : src) add_child(s, out);
  return out;
}

LazyBufferPtr LazyBuffer::r(ReduceOps op, const Dims& new_shape) {
  if (new_shape.size() != shape().size())
    throw std::invalid_argument(detail::cat("reduce of shape ", to_string(shape()), " to ",
                                            to_string(new_shape), ": the rank must stay the same"));
  for (std::size_t i = 0; i < new_shape.size(); ++i)
    if (new_shape[i] != shape()[i] && new_shape[i] != 1)
      throw std::invalid_argument(detail::cat("reduce of shape ", to_string(shape()), " to ",
                                              to_string(new_shape), ": reduced axes must become 1"));
  if (new_shape == shape()) return shared_from_this();
  auto out = std::make_shared<LazyBuffer>(device, ShapeTracker(new_shape), dtype,
                                          make_op(op, {shared_from_this()}, new_shape));
  add_child(shared_from_this(), out);
  return out;
}

LazyBufferPtr LazyBuffer::movement_op(MovementOps op, OpArg arg) {
  ShapeTracker s = st;
  switch (op) {
    case MovementOps::RESHAPE:
      s.reshape(std::get<Dims>(arg));
      break;
    case MovementOps::PERMUTE:
      s.permute(std::get<Dims>(arg));
      break;
    case MovementOps::EXPAND:
      s.expand(std::get<Dims>(arg));
      break;
    case MovementOps::PAD:
      s.pad(std::get<Pairs>(arg));
      break;
    case MovementOps::SHRINK:
      s.shrink(std::get<Pairs>(arg));
      break;
    case MovementOps::STRIDE:
      s.stride(std::get<Dims>(arg));
      break;
  }
  if (s == st) return shared_from_this();  // a no-op movement (same views) is the buffer itself
  auto out = std::make_shared<LazyBuffer>(device, std::move(s), dtype,
                                          make_op(op, {shared_from_this()}, std::move(arg)));
  add_child(shared_from_this(), out);
  return out;
}

LazyBufferPtr LazyBuffer::contiguous() {
  LazyBufferPtr b = base();
  if (st.contiguous() && (b.get() == this || b->st.contiguous()) &&
      (b->realized || b->op->op.type != OpType::Load || b->op->op == LoadOps::CONTIGUOUS))
    return shared_from_this();
  return loadop(LoadOps::CONTIGUOUS, shape(), dtype, device, {}, {shared_from_this()});
}

LazyBufferPtr LazyBuffer::to(const std::string& dev) {
  if (Device::canonicalize(dev) == device) return shared_from_this();
  return loadop(LoadOps::FROM, shape(), dtype, dev, {}, {shared_from_this()});
}

LazyBufferPtr LazyBuffer::full(const Dims& shape, double value, DType dtype, const std::string& device) {
  Dims ones = Dims::filled(shape.size(), 1);
  return loadop(LoadOps::CONST, ones, dtype, device, ConstArg{value, dtype})
      ->movement_op(MovementOps::EXPAND, shape);
}

LazyBufferPtr LazyBuffer::const_like(double value) { return full(shape(), value, dtype, device); }

DType ast_dtype(const LazySrc& src) {
  if (auto* b = std::get_if<LazyBufferPtr>(&src)) return (*b)->dtype;
  const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(src);
  if (op.op == LoadOps::CONST) return std::get<ConstArg>(op.arg).dtype;
  if (op.op == UnaryOps::CAST) return std::get<DType>(op.arg);
  if (op.op == BinaryOps::CMPEQ) return dtypes::bool_;
  return ast_dtype(op.src.at(0));
}

namespace {
// The key is binary (raw integers, the constant's bits): building it runs on every kernel launch.
void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, const Dims& d) {
  put(out, static_cast<std::int64_t>(d.size()));
  for (std::int64_t x : d) put(out, x);
}

void put(std::string& out, const Pairs& p) {
  put(out, static_cast<std::int64_t>(p.size()));
  for (const auto& [a, b] : p) put(out, a), put(out, b);
}

void key_of(const LazyOp& op, const std::vector<LazyBufferPtr>& bufs, std::string& out) {
  out += static_cast<char>(op.op.type), out += static_cast<char>(op.op.value), out += '(';
  if (auto* c = std::get_if<ConstArg>(&op.arg)) {
    std::int64_t bits;
    std::memcpy(&bits, &c->value, sizeof bits);  // exact: a constant is part of the source
    put(out, bits), put(out, c->dtype.priority), put(out, c->shape);
  }
  if (auto* d = std::get_if<Dims>(&op.arg)) put(out, *d);
  if (auto* p = std::get_if<Pairs>(&op.arg)) put(out, *p);
  if (auto* t = std::get_if<DType>(&op.arg)) put(out, t->priority);
  for (const LazySrc& x : op.src) {
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&x)) {
      key_of(**o, bufs, out);
      continue;
    }
    const LazyBufferPtr& b = std::get<LazyBufferPtr>(x);
    out += 'b';
    put(out, std::find(bufs.begin(), bufs.end(), b) - bufs.begin());
    put(out, b->dtype.priority);
    for (const View& v : b->st.views()) {
      out += 'v';
      put(out, v.shape), put(out, v.strides), put(out, v.offset), put(out, v.mask);
    }
  }
  out += ')';
}
}  // namespace

std::string ast_key(const LazyOp& ast, DType out_dtype, const std::vector<LazyBufferPtr>& leaves) {
  std::string out;
  out.reserve(256);
  put(out, out_dtype.priority);
  key_of(ast, leaves, out);
  return out;
}

std::string ast_key(const LazyOp& ast, DType out_dtype) { return ast_key(ast, out_dtype, ast.buffers()); }

Dims ast_shape(const LazySrc& src) {
  if (auto* b = std::get_if<LazyBufferPtr>(&src)) return (*b)->shape();
  const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(src);
  if (op.op == LoadOps::CONST) return std::get<ConstArg>(op.arg).shape;
  if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) return std::get<Dims>(op.arg);
  return ast_shape(op.src.at(0));
}

// ---------------------------------------------------------------------------------------------
// The scheduler. Each unrealized base buffer is either a direct load (EMPTY, CONST, FROM, RAND,
// CUSTOM, a CONTIGUOUS that can share its source) or a kernel: its op's AST with fusable sources
// inlined. A source is inlined when it is an unrealized elementwise base read whole (not through a
// view) with no other live consumer; constants are folded into the AST; anything else is a leaf
// whose base is realized first.

namespace {

struct Plan {
  LazyBufferPtr buf;
  std::shared_ptr<LazyOp> ast;  // a kernel; null for a direct load
  std::vector<LazyBufferPtr> deps;
  LazyBufferPtr from;  // FROM: the contiguous source on its own device
};

bool is_elementwise(const LazyBuffer& b) {
  return !b.realized && b.op &&
         (b.op->op.type == OpType::Unary || b.op->op.type == OpType::Binary ||
          b.op->op.type == OpType::Fused);
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
    if (host->realized && host->device == "CPU" && host->realized->size == 1)
      return ConstArg{read_as_double(*host->realized)[0], s.dtype, s.shape()};
  }
  return std::nullopt;
}

bool is_reduce(const LazyBuffer& b) {
  return !b.realized && b.op && (b.op->op.type == OpType::Reduce || b.op->op == FusedOps::MULACC);
}

// Builds one kernel's AST from a buffer's op, inlining what fuses:
//  - an unrealized elementwise source with no other consumer, read whole or through views that
//    neither pad nor add elements (its leaves then read through those views: movement ops move
//    through elementwise ops instead of forcing a copy);
//  - an unrealized reduce with no other consumer read whole by elementwise work, when the kernel
//    holds no reduce yet (elementwise after a reduce runs in the reduce's kernel);
//  - constants, folded.
// A SUM of a MUL becomes FusedOps::MULACC. Anything else is a leaf whose base is realized first.
struct AstBuilder {
  LazyBuffer& consumer;
  std::vector<LazyBufferPtr>& deps;
  bool has_reduce = false;

  // `above`: views (relative to the current base's contiguous layout) the kernel reads through.
  LazySrc build(const LazySrc& src, const std::vector<View>& above) {
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&src)) return build_op(**o, above);
    const LazyBufferPtr& b = std::get<LazyBufferPtr>(src);
    if (auto c = folded_constant(*b)) {
      if (!above.empty()) c->shape = above.back().shape;
      return make_op(LoadOps::CONST, {}, *c);
    }
    LazyBufferPtr base = b->base();
    if (base == b && is_elementwise(*b) && b->device == consumer.device &&
        (b->live_children() <= 1 || cheap_to_recompute(*b)))
      return build(b->op, above);
    if (auto through = pushable_views(*b, above)) return build(base->op, *through);
    if (base == b && above.empty() && !has_reduce && is_reduce(*b) && b->device == consumer.device &&
        b->live_children() <= 1)
      return build(b->op, above);
    if (!base->realized && std::find(deps.begin(), deps.end(), base) == deps.end()) deps.push_back(base);
    return read_through(b, above);
  }

  LazySrc build_op(const LazyOp& op, const std::vector<View>& above) {
    if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) {
      if (!above.empty()) throw std::logic_error("scheduler: a reduce cannot be read through views");
      // Reducing nothing gives the identity: no loop over an empty axis reaches a kernel.
      if (prod(ast_shape(op.src.at(0))) == 0) {
        DType dt = ast_dtype(op.src.at(0));
        double init = op.op == ReduceOps::MAX ? dtypes::min_value(dt) : 0.0;
        return make_op(LoadOps::CONST, {}, ConstArg{init, dt, std::get<Dims>(op.arg)});
      }
      has_reduce = true;
    }
    std::vector<LazySrc> s;
    for (const LazySrc& x : op.src) s.push_back(build(x, above));
    if (op.op == ReduceOps::SUM)
      if (auto* m = std::get_if<std::shared_ptr<LazyOp>>(&s[0]); m && (*m)->op == BinaryOps::MUL)
        return make_op(FusedOps::MULACC, (*m)->src, op.arg);
    return make_op(op.op, std::move(s), op.arg);
  }

  // The views from b's base to the kernel when b is a chain of views of an unrealized elementwise
  // base that nothing else reads, with no padding and no more elements than the base.
  std::optional<std::vector<View>> pushable_views(LazyBuffer& b, const std::vector<View>& above) {
    if (!b.is_view() || b.live_children() > 1) return std::nullopt;
    LazyBufferPtr base = b.base();
    if (!is_elementwise(*base) || base->device != consumer.device || base->live_children() > 1)
      return std::nullopt;
    for (LazyBufferPtr v = b.shared_from_this(); v != base; v = std::get<LazyBufferPtr>(v->op->src[0]))
      if (v->live_children() > 1) return std::nullopt;
    if (b.st.size() > base->st.size()) return std::nullopt;
    for (const View& v : b.st.views())
      if (!v.mask.empty()) return std::nullopt;
    std::vector<View> out = b.st.views();
    out.insert(out.end(), above.begin(), above.end());
    return out;
  }

  // Several consumers may each recompute a small elementwise buffer: rereading its few inputs costs
  // about what writing and rereading it would, and saves a kernel (softmax's exp(x - max)). The
  // size cap also bounds repeated inlining through chains of shared buffers.
  static bool cheap_to_recompute(LazyBuffer& b) {
    int budget = 6;
    std::vector<const LazyOp*> stack{b.op.get()};
    while (!stack.empty()) {
      const LazyOp* o = stack.back();
      stack.pop_back();
      if (--budget < 0) return false;
      for (const LazySrc& x : o->src) {
        if (auto* op = std::get_if<std::shared_ptr<LazyOp>>(&x)) {
          stack.push_back(op->get());
        } else {
          const LazyBufferPtr& src = std::get<LazyBufferPtr>(x);
          if (src->base() == src && is_elementwise(*src)) stack.push_back(src->op.get());
        }
      }
    }
    return true;
  }

  // A leaf that reads b through more views: a fresh view buffer (not registered as a consumer).
  static LazySrc read_through(const LazyBufferPtr& b, const std::vector<View>& above) {
    if (above.empty()) return b;
    std::vector<View> views = b->st.views();
    views.insert(views.end(), above.begin(), above.end());
    ShapeTracker st(views);
    st.simplify();
    return std::make_shared<LazyBuffer>(b->device, st, b->dtype,
                                        make_op(MovementOps::RESHAPE, {b}, Dims(st.shape())));
  }
};

std::shared_ptr<LazyOp> kernel_ast(const std::shared_ptr<LazyOp>& op, LazyBuffer& out,
                                   std::vector<LazyBufferPtr>& deps) {
  AstBuilder builder{out, deps};
  return std::get<std::shared_ptr<LazyOp>>(builder.build(op, {}));
}

Plan make_plan(const LazyBufferPtr& b) {
  Plan p{b, nullptr, {}, nullptr};
  const LazyOp& op = *b->op;
  if (op.op.type != OpType::Load) {
    p.ast = kernel_ast(b->op, *b, p.deps);
  } else if (op.op == LoadOps::CONTIGUOUS) {
    p.ast = kernel_ast(make_op(UnaryOps::NOOP, op.src), *b, p.deps);
  } else if (op.op == LoadOps::FROM) {
    p.from = std::get<LazyBufferPtr>(op.src[0])->contiguous();
    if (!p.from->base()->realized) p.deps.push_back(p.from->base());
  } else if (op.op == LoadOps::CUSTOM) {
    for (const LazySrc& s : op.src) {
      LazyBufferPtr base = std::get<LazyBufferPtr>(s)->base();
      if (!base->realized) p.deps.push_back(base);
    }
  }
  return p;
}

// A CONTIGUOUS whose source already is this buffer's values in order shares the source's memory.
std::shared_ptr<RawBuffer> shareable(const LazyOp& ast, const LazyBuffer& b) {
  if (ast.op != UnaryOps::NOOP || ast.src.size() != 1) return nullptr;
  const auto* leaf = std::get_if<LazyBufferPtr>(&ast.src[0]);
  if (!leaf || !(*leaf)->st.contiguous() || (*leaf)->dtype != b.dtype) return nullptr;
  auto raw = (*leaf)->base()->realized;
  return raw && static_cast<std::int64_t>(raw->size) == b.st.size() ? raw : nullptr;
}

std::shared_ptr<RawBuffer> run_kernel(Backend& dev, const LazyOp& ast, const LazyBuffer& b) {
  auto out = dev.alloc(static_cast<std::size_t>(b.st.size()), b.dtype);
  if (b.st.size() > 0) dev.exec_ast(ast, out);  // nothing to compute for an empty result
  return out;
}

// Copies a whole buffer between devices through host memory.
std::shared_ptr<RawBuffer> copy_to(Backend& dev, const RawBuffer& src) {
  auto out = dev.alloc(src.size, src.dtype);
  std::vector<std::byte> host(src.nbytes());
  src.copyout(host.data());
  out->copyin(host.data());
  return out;
}

// Under a capture, work that replaying the captured kernels would not redo.
void note_not_replayable(const LazyBuffer& b, Backend& dev, const Plan& p) {
  if (!CaptureLog::active) return;
  const LazyOp& op = *b.op;
  // A copy from host memory (CPU) is data the step made, constant for its replays (arange's values).
  bool from_host = p.from && !dynamic_cast<Compiled*>(&Device::get(p.from->device));
  std::string what = p.ast ? (dynamic_cast<Compiled*>(&dev) ? "" : "a kernel on an interpreted device")
                     : op.op == LoadOps::FROM   ? (from_host ? "" : "a copy from " + p.from->device)
                     : op.op == LoadOps::RAND   ? "random numbers"
                     : op.op == LoadOps::CUSTOM ? "a custom load"
                                                : "";
  if (!what.empty())
    CaptureLog::active->not_replayable.push_back(
        detail::cat(what, " (", to_string(b.shape()), " ", b.dtype.name, " on ", b.device, ")"));
}

void execute(Plan& p) {
  LazyBuffer& b = *p.buf;
  if (b.realized) return;
  Backend& dev = Device::get(b.device);
  const LazyOp& op = *b.op;
  note_not_replayable(b, dev, p);
  if (p.ast) {
    auto shared = op.op == LoadOps::CONTIGUOUS ? shareable(*p.ast, b) : nullptr;
    b.realized = shared ? shared : run_kernel(dev, *p.ast, b);
  } else if (op.op == LoadOps::FROM) {
    b.realized = copy_to(dev, *p.from->base()->realized);
  } else if (op.op == LoadOps::CONST) {  // a materialised constant: computed by a one-op kernel
    ConstArg c{std::get<ConstArg>(op.arg).value, b.dtype, b.shape()};
    b.realized = run_kernel(dev, LazyOp(UnaryOps::NOOP, {make_op(LoadOps::CONST, {}, c)}), b);
  } else if (op.op ==
             LoadOps::RAND) {  // uniform [0, 1) from the seed, made on the host: same on every device
    std::mt19937_64 gen(static_cast<std::uint64_t>(std::get<ConstArg>(op.arg).value));
    std::vector<double> v(static_cast<std::size_t>(b.st.size()));
    for (double& x : v) x = static_cast<double>(gen() >> 40) * 0x1.0p-24;  // 24 bits: exact in float32
    b.realized = dev.alloc(v.size(), b.dtype);
    write_from_double(*b.realized, v);
  } else if (op.op == LoadOps::EMPTY) {
    b.realized = dev.alloc(static_cast<std::size_t>(b.st.size()), b.dtype);
  } else if (op.op == LoadOps::CUSTOM) {
    b.realized = dev.alloc(static_cast<std::size_t>(b.st.size()), b.dtype);
    std::vector<RawBuffer*> inputs;
    for (const LazySrc& s : op.src) inputs.push_back(std::get<LazyBufferPtr>(s)->base()->realized.get());
    std::get<std::shared_ptr<const CustomArg>>(op.arg)->fill(*b.realized, inputs);
  } else {
    throw std::runtime_error("realize: " + to_string(op.op) + " cannot be realized directly");
  }
  b.op = nullptr;  // realized: the graph behind it can be freed
}

// GRAPH=1: the buffers each realize computes, as nodes of one Graphviz graph rewritten after every
// realize: kernels are filled boxes labelled with their AST's root op, other loads ellipses, and
// buffers realized before (inputs) dashed. Edges run from what a buffer reads to it.
void graph(const std::vector<Plan>& order) {
  static std::mutex mu;
  static std::string body;
  static std::unordered_set<std::uint64_t> seen;
  std::lock_guard lock(mu);
  auto node = [&](const LazyBuffer& b, const std::string& op, const char* style) {
    if (!seen.insert(b.id).second) return;
    body += detail::cat("  n", std::to_string(b.id), " [label=\"", op, "\\n", to_string(b.shape()), " ",
                        b.dtype.name, "\", ", style, "];\n");
  };
  auto edge = [&](const LazyBufferPtr& from, const LazyBuffer& to) {
    LazyBufferPtr src = from->base();
    node(*src, "buffer", "style=dashed");
    body += detail::cat("  n", std::to_string(src->id), " -> n", std::to_string(to.id), ";\n");
  };
  for (const Plan& p : order) {
    const LazyBuffer& b = *p.buf;
    if (p.ast) {
      node(b, "kernel " + to_string(p.ast->op), "shape=box, style=filled, fillcolor=\"#ffd08a\"");
      for (const auto& leaf : p.ast->buffers()) edge(leaf, b);
    } else {
      node(b, to_string(b.op->op), "shape=ellipse");
      if (p.from) edge(p.from, b);
      if (b.op->op == LoadOps::CUSTOM)
        for (const LazySrc& s : b.op->src) edge(std::get<LazyBufferPtr>(s), b);
    }
  }
  std::string path = getenv("GRAPH_PATH", "/tmp/metagrad_graph.dot");
  std::ofstream(path) << "digraph metagrad {\n  node [fontname=monospace];\n" << body << "}\n";
  static bool announced = false;
  if (!std::exchange(announced, true))
    std::fprintf(stderr, "GRAPH=1: writing the graph to %s\n", path.c_str());
}

}  // namespace

LazyBuffer& LazyBuffer::realize() {
  LazyBufferPtr target = base();
  if (target->realized) return *this;
  Plan first = make_plan(target);
  bool graphing = getenv_int("GRAPH") >= 1;
  if (first.deps.empty()) {  // the eager case, one kernel on realized inputs: no walk
    if (graphing) graph({first});
    execute(first);
    return *this;
  }
  // Iterative post-order walk (deep graphs must not overflow the stack). A buffer may be pushed
  // by several consumers; the first time it is popped it runs after its own dependencies, and
  // later pops find it done.
  std::vector<Plan> order;
  std::unordered_set<LazyBuffer*> done;
  std::vector<std::pair<LazyBufferPtr, bool>> stack{{target, false}};
  std::unordered_map<LazyBuffer*, Plan> plans;
  plans.emplace(target.get(), std::move(first));
  while (!stack.empty()) {
    auto [buf, expanded] = stack.back();
    stack.pop_back();
    if (done.count(buf.get())) continue;
    if (expanded) {
      done.insert(buf.get());
      order.push_back(std::move(plans.at(buf.get())));
      continue;
    }
    auto it = plans.find(buf.get());
    if (it == plans.end()) it = plans.emplace(buf.get(), make_plan(buf)).first;
    const Plan& plan = it->second;
    stack.emplace_back(buf, true);
    for (const auto& d : plan.deps)
      if (!d->realized && !done.count(d.get())) stack.emplace_back(d, false);
  }
  if (graphing) graph(order);
  for (Plan& p : order) execute(p);
  return *this;
}

}  // namespace metagrad
