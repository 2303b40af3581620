// Tensor core: the shared-state handle, creation, data access and autograd.
#include "metagrad/tensor.hpp"

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/format.hpp"

#include <cmath>
#include <mutex>
#include <numbers>
#include <ostream>
#include <random>
#include <unordered_set>

namespace metagrad {

namespace {
// The process's generator (manual_seed); threads drawing from it take turns.
struct Rng {
  std::mutex mu;
  std::mt19937_64 gen{0};
};
Rng& global_rng() {
  static Rng r;
  return r;
}

std::string device_of(const TensorOptions& o) { return o.device.empty() ? Device::DEFAULT : o.device; }
DType dtype_of_opts(const TensorOptions& o, DType fallback = dtypes::float32) {
  return o.dtype.value_or(fallback);
}

Tensor from_host(const std::vector<float>& data, const Dims& shape, const TensorOptions& opts) {
  return Tensor(data, shape, opts);
}
}  // namespace

// ---- the handle ----

void detail::undefined_tensor(const char* op) {
  throw std::invalid_argument(detail::cat(op, ": the tensor is undefined (default-constructed)"));
}
void detail::undefined_input(const char* mlop) {
  std::string_view n = mlop;  // "metagrad::mlops::Relu" (demangled) or the seed's "Sigmoid"
  if (auto at = n.rfind("::"); at != std::string_view::npos) n.remove_prefix(at + 2);
  undefined_tensor(detail::cat("mlops::", n).c_str());
}

Tensor::Tensor(std::shared_ptr<detail::TensorState> s)
    : lazydata(s.get()), grad(s.get()), requires_grad(s.get()), _ctx(s.get()), state_(std::move(s)) {}
Tensor::Tensor() : Tensor(std::make_shared<detail::TensorState>()) {}
Tensor::Tensor(const Tensor& o) : Tensor(o.state_) {}
Tensor::~Tensor() = default;
Tensor& Tensor::operator=(const Tensor& o) {
  state_ = o.state_;
  rebind();
  return *this;
}
void Tensor::rebind() {
  lazydata.rebind(state_.get());
  grad.rebind(state_.get());
  requires_grad.rebind(state_.get());
  _ctx.rebind(state_.get());
}

Tensor::Tensor(std::shared_ptr<LazyBuffer> data, std::optional<bool> rg)
    : Tensor(std::make_shared<detail::TensorState>()) {
  if (!data) throw std::invalid_argument("Tensor: no LazyBuffer given");
  state_->lazydata = std::move(data);
  state_->requires_grad = rg;
}

Tensor::GradField& Tensor::GradField::operator=(const GradField& o) {
  s_->grad = o.s_->grad;
  return *this;
}
Tensor::GradField& Tensor::GradField::operator=(const Tensor& t) {
  s_->grad = t.state_;
  return *this;
}
Tensor::GradField& Tensor::GradField::operator=(std::nullopt_t) {
  s_->grad = nullptr;
  return *this;
}
Tensor Tensor::GradField::operator*() const {
  if (!s_->grad) throw std::logic_error("Tensor.grad: no gradient (call backward() first)");
  return Tensor(s_->grad);
}
Tensor::GradField::Arrow Tensor::GradField::operator->() const { return {std::make_shared<Tensor>(**this)}; }

// ---- construction from data ----

namespace {
template <class L>
void flatten_into(const L& list, std::vector<float>& out, Dims& shape, std::size_t depth) {
  if (shape.size() <= depth)
    shape.push_back(static_cast<std::int64_t>(list.size()));
  else if (shape[depth] != static_cast<std::int64_t>(list.size()))
    throw std::invalid_argument(detail::cat("Tensor: ragged nested list: ", std::to_string(list.size()),
                                            " elements where ", std::to_string(shape[depth]),
                                            " came before"));
  for (const auto& x : list) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>)
      out.push_back(x);
    else
      flatten_into(x, out, shape, depth + 1);
  }
}
template <class L>
Tensor from_nested(const L& list, const TensorOptions& opts) {
  std::vector<float> data;
  Dims shape;
  flatten_into(list, data, shape, 0);
  return from_host(data, shape, opts);
}
}  // namespace

Tensor::Tensor(std::initializer_list<float> data, TensorOptions opts) : Tensor(from_nested(data, opts)) {}
Tensor::Tensor(std::initializer_list<std::initializer_list<float>> data, TensorOptions opts)
    : Tensor(from_nested(data, opts)) {}
Tensor::Tensor(std::initializer_list<std::initializer_list<std::initializer_list<float>>> data,
               TensorOptions opts)
    : Tensor(from_nested(data, opts)) {}

// ---- creation ----

Tensor Tensor::empty(const Dims& shape, TensorOptions opts) {
  check_shape("Tensor.empty", shape);
  return Tensor(LazyBuffer::loadop(LoadOps::EMPTY, shape, dtype_of_opts(opts), device_of(opts)),
                opts.requires_grad);
}
Tensor Tensor::full(const Dims& shape, double value, TensorOptions opts) {
  check_shape("Tensor.full", shape);
  return Tensor(LazyBuffer::full(shape, value, dtype_of_opts(opts), device_of(opts)), opts.requires_grad);
}
Tensor Tensor::zeros(const Dims& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor Tensor::ones(const Dims& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor Tensor::full_like(const Tensor& t, double value, TensorOptions opts) {
  if (opts.device.empty()) opts.device = t.device();
  if (!opts.dtype) opts.dtype = t.dtype();
  return full(t.shape(), value, opts);
}
Tensor Tensor::zeros_like(const Tensor& t, TensorOptions opts) { return full_like(t, 0, opts); }
Tensor Tensor::ones_like(const Tensor& t, TensorOptions opts) { return full_like(t, 1, opts); }

Tensor Tensor::arange(double stop, TensorOptions opts) { return arange(0, stop, 1, opts); }
Tensor Tensor::arange(double start, double stop, double step, TensorOptions opts) {
  if (step == 0) throw std::invalid_argument("Tensor.arange: step must not be 0");
  double count = std::ceil((stop - start) / step);
  if (std::isnan(count) || count > 0x1p62)
    throw std::invalid_argument(detail::cat("Tensor.arange(", std::to_string(start), ", ",
                                            std::to_string(stop), ", ", std::to_string(step),
                                            "): not a countable number of elements"));
  auto n = static_cast<std::int64_t>(std::max(0.0, count));
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = start + static_cast<double>(i) * step;
  DType dt = dtype_of_opts(opts);
  opts.dtype = dt;
  return Tensor(v, {n}, opts);
}

Tensor Tensor::eye(std::int64_t n, TensorOptions opts) {
  if (n < 0) throw std::invalid_argument("Tensor.eye: n must be non-negative, got " + std::to_string(n));
  check_shape("Tensor.eye", {n, n});
  std::vector<float> v(static_cast<std::size_t>(n * n), 0.f);
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i * n + i)] = 1.f;
  return from_host(v, {n, n}, opts);
}

Tensor Tensor::eye(std::int64_t n, std::int64_t m, TensorOptions opts) {
  if (n < 0 || m < 0)
    throw std::invalid_argument(detail::cat("Tensor.eye: n and m must be non-negative, got ",
                                            std::to_string(n), " and ", std::to_string(m)));
  check_shape("Tensor.eye", {n, m});
  std::vector<float> v(static_cast<std::size_t>(n * m), 0.f);
  for (std::int64_t i = 0; i < std::min(n, m); ++i) v[static_cast<std::size_t>(i * m + i)] = 1.f;
  return from_host(v, {n, m}, opts);
}

Tensor Tensor::linspace(double start, double end, std::int64_t steps, TensorOptions opts) {
  if (steps < 0)
    throw std::invalid_argument("Tensor.linspace: steps must be non-negative, got " + std::to_string(steps));
  std::vector<double> v(static_cast<std::size_t>(steps));
  for (std::int64_t i = 0; i < steps; ++i)  // from both ends, so end is exact, as numpy
    v[static_cast<std::size_t>(i)] =
        i < steps / 2
            ? start + (end - start) * static_cast<double>(i) / static_cast<double>(steps - 1)
            : end - (end - start) * static_cast<double>(steps - 1 - i) / static_cast<double>(steps - 1);
  if (steps == 1) v[0] = start;
  if (!opts.dtype) opts.dtype = dtypes::float32;
  return Tensor(v, {steps}, opts);
}

std::vector<Tensor> Tensor::meshgrid(const std::vector<Tensor>& ts, std::string_view indexing) {
  if (indexing != "ij" && indexing != "xy")
    throw std::invalid_argument(
        detail::cat("meshgrid: indexing must be \"ij\" or \"xy\", got \"", std::string(indexing), "\""));
  std::vector<std::int64_t> shape;
  for (const Tensor& t : ts) {  // a 0-d tensor counts as 1-D of one element, as in PyTorch
    if (t.ndim() > 1)
      throw std::invalid_argument(
          detail::cat("meshgrid: every tensor must be 0-D or 1-D, got shape ", to_string(t.shape())));
    shape.push_back(t.numel());
  }
  bool xy = indexing == "xy" && ts.size() >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    std::size_t at = xy && i < 2 ? 1 - i : i;  // "xy": the first two vary along the other's axis
    std::vector<std::int64_t> s(ts.size(), 1);
    s[at] = ts[i].numel();
    out.push_back(ts[i].reshape(s).expand(shape));
  }
  return out;
}

void Tensor::manual_seed(std::uint64_t seed) {
  std::lock_guard lock(global_rng().mu);
  global_rng().gen.seed(seed);
}

Tensor Tensor::rand(const Dims& shape, TensorOptions opts) {
  check_shape("Tensor.rand", shape);
  std::unique_lock lock(global_rng().mu);
  auto seed =
      static_cast<double>(global_rng().gen() >> 12);  // 52 bits: exact as the RAND op's double argument
  lock.unlock();
  auto lb = LazyBuffer::loadop(LoadOps::RAND, shape, dtypes::float32, device_of(opts),
                               ConstArg{seed, dtypes::int64});
  return Tensor(lb->cast(dtype_of_opts(opts)), opts.requires_grad);
}

Tensor Tensor::randn(const Dims& shape, TensorOptions opts) {
  // Box-Muller on the host generator: the same numbers on every device.
  std::vector<float> v(static_cast<std::size_t>(check_shape("Tensor.randn", shape)));
  {
    std::lock_guard lock(global_rng().mu);
    auto u = [] { return (static_cast<double>(global_rng().gen() >> 11) + 0.5) * 0x1.0p-53; };
    for (float& x : v)
      x = static_cast<float>(std::sqrt(-2 * std::log(u())) * std::cos(2 * std::numbers::pi * u()));
  }
  TensorOptions o = opts;
  o.dtype = dtypes::float32;
  o.requires_grad = {};
  return Tensor(from_host(v, shape, o).cast(dtype_of_opts(opts)).lazydata.get(), opts.requires_grad);
}

Tensor Tensor::uniform(const Dims& shape, double low, double high, TensorOptions opts) {
  TensorOptions o = opts;
  o.requires_grad = {};
  Tensor r = rand(shape, o) * (high - low) + low;
  return Tensor(r.lazydata.get(), opts.requires_grad);
}
Tensor Tensor::scaled_uniform(const Dims& shape, TensorOptions opts) {
  double s = std::pow(static_cast<double>(check_shape("Tensor.scaled_uniform", shape)), -0.5);
  return uniform(shape, -s, s, opts);
}
Tensor Tensor::glorot_uniform(const Dims& shape, TensorOptions opts) {
  check_shape("Tensor.glorot_uniform", shape);
  double fan = static_cast<double>(
      shape.empty() ? 1 : shape[0] + metagrad::prod(shape) / std::max<std::int64_t>(shape[0], 1));
  double s = std::sqrt(6.0 / fan);
  return uniform(shape, -s, s, opts);
}
Tensor Tensor::kaiming_uniform(const Dims& shape, double a, TensorOptions opts) {
  check_shape("Tensor.kaiming_uniform", shape);
  double fan_in = static_cast<double>(shape.size() < 2 ? 1 : metagrad::prod(shape) / shape[0]);
  double bound = std::sqrt(3.0) * std::sqrt(2.0 / (1 + a * a)) / std::sqrt(fan_in);
  return uniform(shape, -bound, bound, opts);
}

// ---- properties and data ----

const Dims& Tensor::shape(const char* op) const { return defined_data(op)->shape(); }
DType Tensor::dtype(const char* op) const { return defined_data(op)->dtype; }
const std::string& Tensor::device(const char* op) const { return defined_data(op)->device; }
std::int64_t Tensor::numel(const char* op) const { return metagrad::prod(shape(op)); }
std::int64_t Tensor::ndim(const char* op) const { return static_cast<std::int64_t>(shape(op).size()); }

Tensor& Tensor::realize() {
  defined_data()->realize();
  return *this;
}
Tensor Tensor::to(const std::string& dev) const {
  Tensor ret(defined_data()->to(dev), state_->requires_grad);
  if (state_->grad) ret.grad = Tensor(state_->grad).to(dev);
  return ret;
}
Tensor Tensor::detach() const { return Tensor(defined_data(), false); }
Tensor& Tensor::requires_grad_(bool on) {
  defined_data();
  state_->requires_grad = on;
  return *this;
}
Tensor& Tensor::assign(const Tensor& x) {
  if (x.shape() != shape() || x.dtype() != dtype() || x.device() != device())
    throw std::invalid_argument(
        detail::cat("Tensor.assign: ", to_string(x), " cannot replace ", to_string(*this)));
  note_assign(state_->lazydata, x.state_->lazydata);  // TinyJit learns which state a step updates
  state_->lazydata = x.state_->lazydata;
  return *this;
}

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "<Tensor undefined>";
  return detail::cat("<Tensor shape=", to_string(t.shape()), " dtype=", t.dtype().name,
                     " device=", t.device(), t.requires_grad.get().value_or(false) ? " requires_grad" : "",
                     ">");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  DType dt = t.dtype();
  detail::ValueKind kind = dtypes::is_float(dt)  ? detail::ValueKind::floating
                           : dt == dtypes::bool_ ? detail::ValueKind::boolean
                                                 : detail::ValueKind::integer;
  std::vector<double> v = t.to_vector<double>();
  Dims shape = t.shape();
  std::vector<std::int64_t> dims(shape.begin(), shape.end());
  std::string s = detail::format_values(v, dims, kind, "tensor(");
  if (dt != dtypes::float32 && dt != dtypes::bool_) s += detail::cat(", dtype=", dt.name);
  if (t.device() != Device::DEFAULT) s += detail::cat(", device=", t.device());
  if (t.requires_grad.get().value_or(false)) s += ", requires_grad=True";
  return os << s << ')';
}

// ---- autograd ----

void Tensor::backward() {
  defined_data();
  if (!state_->requires_grad.value_or(false) && !state_->ctx)
    throw std::invalid_argument("Tensor.backward: " + to_string(*this) + " does not require grad");
  if (numel() != 1)
    throw std::invalid_argument("Tensor.backward: needs a scalar (one element), got shape " +
                                to_string(shape()));
  // Topological order by an iterative depth-first walk: deep graphs must not overflow the stack.
  std::vector<std::shared_ptr<detail::TensorState>> order;
  std::unordered_set<detail::TensorState*> visited{state_.get()};
  std::vector<std::pair<std::shared_ptr<detail::TensorState>, std::size_t>> stack{{state_, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    const auto& parents = node->ctx ? node->ctx->parents : std::vector<Tensor>{};
    if (next < parents.size()) {
      const auto& p = parents[next++].state_;
      if (visited.insert(p.get()).second) stack.emplace_back(p, 0);
      continue;
    }
    if (node->ctx) order.push_back(node);
    stack.pop_back();
  }
  state_->grad = Tensor(state_->lazydata->const_like(1), false).state_;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    detail::TensorState& t = **it;
    if (!t.grad) continue;
    std::vector<LazyBufferPtr> grads = t.ctx->backward(t.grad->lazydata);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Tensor& p = t.ctx->parents[i];
      if (!grads[i] || !p.requires_grad.get().value_or(false)) continue;
      if (grads[i]->shape() != p.shape())
        throw std::logic_error(detail::cat("backward of ", t.ctx->name(), ": gradient shape ",
                                           to_string(grads[i]->shape()), " for an input of shape ",
                                           to_string(p.shape())));
      Tensor g(grads[i], false);
      p.state_->grad = p.state_->grad ? (Tensor(p.state_->grad) + g).state_ : g.state_;
    }
    t.ctx = nullptr;  // the graph is used once; free it
  }
}

}  // namespace metagrad
