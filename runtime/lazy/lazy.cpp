// LazyBuffer construction: loads, elementwise, reduce and movement ops build the lazy graph
// (runtime/lazy/schedule.cpp turns it into kernels).
#include "metagrad/lazy.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/helpers.hpp"

namespace metagrad {

namespace {

std::string shape_error(const char* op, const std::vector<LazyBufferPtr>& src) {
  std::string out = std::string(op) + ": sources must share one shape and device, got";
  for (const auto& s : src) out += detail::cat(" ", to_string(s->shape()), "@", s->device);
  return out;
}

std::shared_ptr<GraphOp> make_op(Op op, std::vector<GraphSrc> src = {}, OpArg arg = {}) {
  return std::make_shared<GraphOp>(op, std::move(src), std::move(arg));
}

}  // namespace

void add_child(const LazyBufferPtr& parent, const LazyBufferPtr& child) {
  std::lock_guard lock(parent->mu_);
  auto& c = parent->children_;
  // Expired entries are swept when the list has doubled since the last sweep: sweeping on every
  // add made a buffer read by n live consumers (x in y = y + x, n times) cost n^2.
  if (c.size() >= parent->children_swept_ * 2) {
    c.erase(std::remove_if(c.begin(), c.end(), [](const auto& w) { return w.expired(); }), c.end());
    parent->children_swept_ = std::max<std::size_t>(c.size(), 4);
  }
  c.push_back(child);
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

LazyBuffer::LazyBuffer(std::string device_, ShapeTracker st_, DType dtype_, std::shared_ptr<GraphOp> op_,
                       std::shared_ptr<RawBuffer> realized_)
    : device(Device::canonicalize(std::move(device_))),
      dtype(dtype_),
      st(std::move(st_)),
      realized(std::move(realized_)),
      op(std::move(op_)),
      view_(op && op->op.type == OpType::Movement) {
  ++live_count;
}

// Dropping a graph releases it without recursion (10^5 ops overflowed the stack).
LazyBuffer::~LazyBuffer() {
  --live_count;
  if (op) detail::release_flat(std::move(op));
}

std::size_t LazyBuffer::live_children() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(children_.begin(), children_.end(), [](const auto& w) { return !w.expired(); }));
}

void LazyBuffer::set_realized(std::shared_ptr<RawBuffer> raw) {
  std::shared_ptr<GraphOp> graph;  // freed outside the lock: it may hold the last reference to much
  std::lock_guard lock(mu_);
  realized = std::move(raw);
  graph.swap(op);
}

LazyBufferPtr LazyBuffer::base() {
  LazyBuffer* b = this;  // (walked by raw pointer: each view holds its source alive)
  while (b->is_view()) b = std::get<LazyBufferPtr>(b->op->src[0]).get();
  return b->shared_from_this();
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
  std::vector<GraphSrc> s(src.begin(), src.end());
  auto out = std::make_shared<LazyBuffer>(device, ShapeTracker(shape), dtype,
                                          make_op(op, std::move(s), std::move(arg)));
  for (const auto& x : src) add_child(x, out);
  return out;
}

LazyBufferPtr LazyBuffer::elementwise(Op op, const std::vector<LazyBufferPtr>& src, OpArg arg) {
  for (const auto& s : src)
    if (s->shape() != src[0]->shape() || s->device != src[0]->device)
      throw std::invalid_argument(shape_error("elementwise", src));
  if (op == TernaryOps::WHERE && (src.size() != 3 || src[1]->dtype != src[2]->dtype))
    throw std::invalid_argument(shape_error("where: the two branches must have one dtype;", src));
  DType dt = op == BinaryOps::CMPEQ    ? dtypes::bool_
             : op == UnaryOps::CAST    ? std::get<DType>(arg)
             : op == TernaryOps::WHERE ? src[1]->dtype
                                       : src[0]->dtype;
  auto out = std::make_shared<LazyBuffer>(
      src[0]->device, ShapeTracker(src[0]->shape()), dt,
      make_op(op, std::vector<GraphSrc>(src.begin(), src.end()), std::move(arg)));
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
  auto computed_in_place = [&] {  // (a realize on another thread may be setting b's buffer now)
    std::lock_guard lock(b->mu_);
    return b->realized || b->op->op.type != OpType::Load || b->op->op == LoadOps::CONTIGUOUS;
  };
  if (st.contiguous() && (b.get() == this || b->st.contiguous()) && computed_in_place())
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

}  // namespace metagrad
