// Reductions over any set of axes, built on the Sum and Max mlops, and the hlops built on them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "metagrad/detail/cat.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {

std::string axes_string(const Axes& axis) {
  if (axis.all) return "None";
  std::string s = "(";
  for (std::size_t i = 0; i < axis.axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axis.axes[i]);
  return s + (axis.axes.size() == 1 ? ",)" : ")");
}

// One reduction's shapes: `kept` has the reduced axes as 1 (what the mlops take), `out` drops them
// (the result without keepdim), `n` is how many elements reduce into each output element.
struct Plan {
  Dims kept;
  std::vector<std::int64_t> out;
  std::int64_t n = 1;
};

// Resolves and checks the axes; `op` names the caller in errors. A 0-d tensor has axes 0 and -1,
// as in PyTorch.
Plan plan(const Dims& shape, const Axes& axis, const char* op) {
  auto nd = static_cast<std::int64_t>(shape.size());
  std::vector<bool> gone(shape.size(), axis.all);
  for (std::int64_t a : axis.axes) {
    std::int64_t r = a < 0 ? a + std::max<std::int64_t>(nd, 1) : a;
    if (r < 0 || r >= std::max<std::int64_t>(nd, 1))
      throw std::invalid_argument(detail::cat(op, ": axis ", std::to_string(a), " is out of range for shape ",
                                              to_string(shape), " (axes ", axes_string(axis), ")"));
    if (nd == 0) continue;
    if (gone[static_cast<std::size_t>(r)])
      throw std::invalid_argument(detail::cat(op, ": axis ", std::to_string(r), " appears twice in axes ",
                                              axes_string(axis), " for shape ", to_string(shape)));
    gone[static_cast<std::size_t>(r)] = true;
  }
  Plan p{shape, {}, 1};
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (gone[i])
      p.n *= shape[i], p.kept[i] = 1;
    else
      p.out.push_back(shape[i]);
  }
  return p;
}

// Max has no identity: reducing an empty axis into a non-empty result is an error, as in PyTorch.
void check_nonempty(const Plan& p, const Dims& shape, const Axes& axis, const char* op) {
  if (p.n == 0 && prod(p.kept) > 0)
    throw std::invalid_argument(detail::cat(op, ": cannot reduce shape ", to_string(shape), " over axes ",
                                            axes_string(axis), ", which hold no elements"));
}

// Integer and bool sums accumulate in int64, as in PyTorch (a bool sum counts, it does not OR);
// uint64 in uint64 (tinygrad's sum_acc_dtype), whose values past 2^63 int64 would show negative.
DType sum_dtype(DType dt) { return dtypes::is_float(dt) || dt == dtypes::uint64 ? dt : dtypes::int64; }

std::int64_t checked_axis(const Tensor& x, std::int64_t axis, const char* op) {
  std::int64_t nd = std::max<std::int64_t>(x.ndim(op), 1), a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd)
    throw std::invalid_argument(detail::cat(op, ": axis ", std::to_string(axis),
                                            " is out of range for shape ", to_string(x.shape())));
  return a;
}

std::vector<std::int64_t> dims_of(const Tensor& x) { return {x.shape().begin(), x.shape().end()}; }
std::vector<std::int64_t> dims_of_dims(const Dims& d) { return {d.begin(), d.end()}; }

// (before, after) for the last axis, nothing elsewhere.
std::vector<std::pair<std::int64_t, std::int64_t>> on_last(const Tensor& x, std::int64_t before,
                                                           std::int64_t after) {
  std::vector<std::pair<std::int64_t, std::int64_t>> arg(x.shape().size(), {0, 0});
  arg.back() = {before, after};
  return arg;
}
// [begin, end) of the last axis, all of the others.
std::vector<std::pair<std::int64_t, std::int64_t>> slice_last(const Tensor& x, std::int64_t begin,
                                                              std::int64_t end) {
  std::vector<std::pair<std::int64_t, std::int64_t>> arg;
  for (std::int64_t d : x.shape()) arg.push_back({0, d});
  arg.back() = {begin, end};
  return arg;
}

// A block of B costs B additions per element and the levels are log_B(n): 16 balances the two (the
// interpreter runs n = 1e5 in 0.2 s; B = 256, tinygrad's choice, takes 3 s).
constexpr std::int64_t kCumsumBlock = 16;

// An inclusive scan along the last axis from movement ops and one reduction, so it is
// differentiable: `fill` is the reduction's identity, `reduce` reduces the last axis, `combine` joins
// a block's scan with what the blocks before it give. Pad n - 1 fills in front (length L = 2n - 1),
// lay the row out n times with one extra element per copy so copy i starts i later, and reduce
// n-wide windows: out[i] = reduce_j xp[i + j]. That is n^2 work per row, so rows longer than a block
// are cut into blocks, scanned inside each block, and each block combined with the (recursive) scan
// of the blocks before it. A sum never multiplies (an inf stays where it belongs instead of making
// 0 * inf = NaN elsewhere).
struct Scan {
  double fill;
  Tensor (*reduce)(const Tensor&);  // over the last axis
  Tensor (*combine)(const Tensor& inner, const Tensor& before);
};
Tensor scan_last(const Tensor& x, const Scan& op) {
  std::int64_t n = x.shape().back();
  std::vector<std::int64_t> lead = dims_of(x);
  lead.pop_back();
  auto with = [&](std::initializer_list<std::int64_t> tail) {
    std::vector<std::int64_t> s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  if (n <= kCumsumBlock) {
    std::int64_t L = 2 * n - 1;
    Tensor t = x.pad(on_last(x, n - 1, 0), op.fill)
                   .reshape(with({1, L}))
                   .expand(with({n, L}))
                   .reshape(with({n * L}));
    t = t.pad(on_last(t, 0, n), op.fill).reshape(with({n, L + 1}));
    return op.reduce(t.shrink(slice_last(t, 0, n)));
  }
  std::int64_t nb = (n + kCumsumBlock - 1) / kCumsumBlock;
  Tensor blocks = x.pad(on_last(x, 0, nb * kCumsumBlock - n), op.fill).reshape(with({nb, kCumsumBlock}));
  Tensor inner = scan_last(blocks, op);
  Tensor totals = inner.shrink(slice_last(inner, kCumsumBlock - 1, kCumsumBlock)).reshape(with({nb}));
  Tensor before = scan_last(totals, op);
  before = before.pad(on_last(before, 1, 0), op.fill);  // shifted right by one: the earlier blocks
  before = before.shrink(slice_last(before, 0, nb)).reshape(with({nb, 1}));
  Tensor out = op.combine(inner, before).reshape(with({nb * kCumsumBlock}));
  return out.shrink(slice_last(out, 0, n));
}

// The product over the last axis as a tree of multiplications of halves (odd lengths padded with a
// 1): exact where a log-sum-exp is not, zeros and signs included, and its gradient (the product of
// the others, through the tree) needs no division by a value that may be 0.
Tensor prod_last(const Tensor& x) {
  Tensor t = x;
  std::int64_t n = x.shape().back();
  if (n == 0) {
    std::vector<std::int64_t> s = dims_of(x);
    s.pop_back();
    return Tensor::ones(Dims(s), {.device = x.device(), .dtype = x.dtype()});
  }
  while (n > 1) {
    std::int64_t h = (n + 1) / 2;
    if (2 * h != n) t = t.pad(on_last(t, 0, 1), 1);
    t = t.shrink(slice_last(t, 0, h)) * t.shrink(slice_last(t, h, 2 * h));
    n = h;
  }
  std::vector<std::int64_t> s = dims_of(t);
  s.pop_back();
  return t.reshape(s);
}

// x with axis a last (a swap, its own inverse), f applied, and the axis put back.
template <class F>
Tensor along_last(const Tensor& x, std::int64_t a, F f) {
  std::int64_t last = x.ndim() - 1;
  if (a == last) return f(x);
  std::vector<std::int64_t> order(static_cast<std::size_t>(x.ndim()));
  for (std::int64_t i = 0; i < x.ndim(); ++i) order[static_cast<std::size_t>(i)] = i;
  std::swap(order[static_cast<std::size_t>(a)], order.back());
  return f(x.permute(order)).permute(order);
}

const Scan kSumScan{0, [](const Tensor& t) { return t.sum(-1); },
                    [](const Tensor& a, const Tensor& b) { return a + b; }};
const Scan kProdScan{1, prod_last, [](const Tensor& a, const Tensor& b) { return a * b; }};
const Scan kLogSumExpScan{-std::numeric_limits<double>::infinity(),
                          [](const Tensor& t) { return t.logsumexp(-1); },
                          [](const Tensor& a, const Tensor& b) { return a.logaddexp(b); }};

// A scan along any axis: 0-d and empty tensors are their own scan.
Tensor scan(const Tensor& x, std::int64_t axis, const Scan& op, const char* name) {
  std::int64_t a = checked_axis(x, axis, name);
  if (x.ndim() == 0 || x.numel() == 0) return x;
  return along_last(x, a, [&](const Tensor& t) { return scan_last(t, op); });
}

}  // namespace

Dims Tensor::reduced_shape(const Axes& axis) const { return plan(shape(), axis, "reduce").kept; }

Tensor Tensor::sum(const Axes& axis, bool keepdim, std::optional<DType> dt) const {
  Plan p = plan(shape(), axis, "sum");
  Tensor ret = mlops::Sum::apply(cast(dt ? *dt : sum_dtype(dtype())), p.kept);
  return keepdim ? ret : ret.reshape(p.out);
}

Tensor Tensor::max(const Axes& axis, bool keepdim) const {
  Plan p = plan(shape(), axis, "max");
  check_nonempty(p, shape(), axis, "max");
  Tensor ret = mlops::Max::apply(*this, p.kept);
  return keepdim ? ret : ret.reshape(p.out);
}

// -max(-x). Integers narrower than int64 (and unsigned, bool) go through int64, where negating
// never wraps; int64's own minimum, whose negation wraps, is found by a comparison; uint64's is
// ~max(~x), with ~x = (2^64 - 1) - x.
Tensor Tensor::min(const Axes& axis, bool keepdim) const {
  Plan p = plan(shape(), axis, "min");
  check_nonempty(p, shape(), axis, "min");
  if (dtype() == dtypes::uint64) {  // all bits set: -1 wraps
    Tensor r = (scalar_for(*this, -1, true) - *this).max(axis, keepdim);
    return scalar_for(r, -1, true) - r;
  }
  if ((dtypes::is_int(dtype()) && dtype() != dtypes::int64) || dtype() == dtypes::bool_)
    return cast(dtypes::int64).min(axis, keepdim).cast(dtype());
  if (dtype() == dtypes::int64) {  // kept axes, so that `lowest` (this rank) broadcasts to the result
    Tensor lowest = scalar_like(dtypes::min_value(dtypes::int64));
    Tensor has_lowest = eq(lowest).cast(dtypes::int32).max(axis, true).cast(dtypes::bool_);
    Tensor clamped = eq(lowest).where(scalar_like(0), *this);
    Tensor ret = has_lowest.where(lowest, -((-clamped).max(axis, true)));
    return keepdim ? ret : ret.reshape(p.out);
  }
  return -((-*this).max(axis, keepdim));
}

// Integers average in float32, float16 and bfloat16 accumulate in float32. An empty reduction is 0/0 = NaN,
// as in PyTorch.
Tensor Tensor::mean(const Axes& axis, bool keepdim, std::optional<DType> dt) const {
  if (dt) {
    if (!dtypes::is_float(*dt))
      throw std::invalid_argument(
          detail::cat("mean of ", to_string(shape()), ": dtype must be floating, got ", dt->name));
    return cast(*dt).mean(axis, keepdim);
  }
  Plan p = plan(shape(), axis, "mean");
  bool narrow = dtype().itemsize == 2 && dtypes::is_float(dtype());
  DType acc = dtypes::is_float(dtype()) && !narrow ? dtype() : dtypes::float32;
  Tensor ret = cast(acc).sum(axis, keepdim) / p.n;
  return narrow ? ret.cast(dtype()) : ret;
}

// sqrt(sum((x - mean)^2) / (n - correction)); n <= correction divides by 0 (inf or NaN), as PyTorch.
Tensor Tensor::std(const Axes& axis, bool keepdim, std::int64_t correction) const {
  Plan p = plan(shape(), axis, "std");
  Tensor d = *this - mean(axis, true);
  return ((d * d).sum(axis, keepdim) / std::max<std::int64_t>(p.n - correction, 0)).sqrt();
}
Tensor Tensor::var(const Axes& axis, bool keepdim, std::int64_t correction) const {
  Plan p = plan(shape(), axis, "var");
  Tensor d = *this - mean(axis, true);
  return (d * d).sum(axis, keepdim) / std::max<std::int64_t>(p.n - correction, 0);
}
// One mean for both (PyTorch's var_mean, std_mean), the kept-axes mean reshaped where keepdim is off.
std::pair<Tensor, Tensor> Tensor::var_mean(const Axes& axis, bool keepdim, std::int64_t correction) const {
  Plan p = plan(shape(), axis, "var_mean");
  Tensor m = mean(axis, true), d = *this - m;
  Tensor v = (d * d).sum(axis, keepdim) / std::max<std::int64_t>(p.n - correction, 0);
  return {v, keepdim ? m : m.reshape(p.out)};
}
std::pair<Tensor, Tensor> Tensor::std_mean(const Axes& axis, bool keepdim, std::int64_t correction) const {
  auto [v, m] = var_mean(axis, keepdim, correction);
  return {v.sqrt(), m};
}

// max + log(sum(exp(x - max))), the max detached (the result does not depend on it) and taken as
// 0 where it is infinite, so all -inf gives -inf and a +inf gives +inf, not NaN.
Tensor Tensor::logsumexp(const Axes& axis, bool keepdim) const {
  Tensor x = dtypes::is_float(dtype()) ? *this : cast(dtypes::float32);
  Tensor m = x.max(axis, true).detach();
  m = m.isinf().where(m.scalar_like(0), m);
  Tensor out = (x - m).exp().sum(axis, true).log() + m;
  if (keepdim) return out;
  Plan p = plan(shape(), axis, "logsumexp");
  return out.reshape(p.out);
}
Tensor Tensor::softmin(std::int64_t axis) const {
  return (dtypes::is_float(dtype()) ? -*this : -cast(dtypes::float32)).softmax(axis);
}
Tensor Tensor::any(const Axes& axis, bool keepdim) const {
  return ne(scalar_like(0)).cast(dtypes::int32).max(axis, keepdim).cast(dtypes::bool_);
}
Tensor Tensor::all(const Axes& axis, bool keepdim) const {
  return logical_not().any(axis, keepdim).logical_not();
}
// The argmax of -x; integers through float64 (exact to 2^53), where -INT_MIN would wrap.
Tensor Tensor::argmin(std::optional<std::int64_t> axis, bool keepdim) const {
  Tensor x = dtypes::is_float(dtype()) ? *this : cast(dtypes::float64);
  return (-x).argmax(axis, keepdim);
}

namespace {
// Softmax as one Function: forward exp(x - max) / sum, backward y (g - sum(g y)) from its output
// alone. Nothing but y outlives the forward, so the max and the sum are read only by the kernel
// that uses them: the scheduler makes the forward one row kernel, and the backward another.
struct Softmax final : FunctionImpl<Softmax, 1> {
  LazyBufferPtr y;
  Dims kept;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Dims& kept_) {
    kept = kept_;
    const Dims& full = x->shape();
    LazyBufferPtr m =
        x->e(BinaryOps::SUB, x->r(ReduceOps::MAX, kept)->movement_op(MovementOps::EXPAND, full));
    // exp as the Exp mlop computes it (exp2 of x log2(e))
    LazyBufferPtr e = m->e(BinaryOps::MUL, m->const_like(1 / std::numbers::ln2))->e(UnaryOps::EXP2);
    return y = e->e(BinaryOps::DIV, e->r(ReduceOps::SUM, kept)->movement_op(MovementOps::EXPAND, full));
  }
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override {
    LazyBufferPtr s =
        g->e(BinaryOps::MUL, y)->r(ReduceOps::SUM, kept)->movement_op(MovementOps::EXPAND, y->shape());
    return {y->e(BinaryOps::MUL, g->e(BinaryOps::SUB, s))};
  }
};

// x - max(x), exp of it and the sum of that, over one axis. The max is detached: softmax does not
// depend on the shift, so its gradient through the max is 0 and need not be computed.
struct SoftmaxParts {
  Tensor m, e, ss;
};
SoftmaxParts softmax_parts(const Tensor& x_, std::int64_t axis) {
  Tensor x = dtypes::is_float(x_.dtype()) ? x_ : x_.cast(dtypes::float32);
  Tensor m = x - x.detach().max(axis, true);
  Tensor e = m.exp();
  return {m, e, e.sum(axis, true)};
}
}  // namespace

// -inf entries get 0; a row of only -inf, or one with +inf or NaN, is all NaN, as in PyTorch.
Tensor Tensor::softmax(std::int64_t axis) const {
  std::int64_t a = checked_axis(*this, axis, "softmax");
  if (ndim() == 0) return reshape({1}).softmax(0).reshape({});
  if (numel() == 0) return dtypes::is_float(dtype()) ? *this : cast(dtypes::float32);
  Tensor x = dtypes::is_float(dtype()) ? *this : cast(dtypes::float32);
  Dims kept = x.shape();
  kept[static_cast<std::size_t>(a)] = 1;
  return Softmax::apply(x, kept);
}

Tensor Tensor::log_softmax(std::int64_t axis) const {
  std::int64_t a = checked_axis(*this, axis, "log_softmax");
  if (ndim() == 0) return reshape({1}).log_softmax(0).reshape({});
  if (numel() == 0) return dtypes::is_float(dtype()) ? *this : cast(dtypes::float32);
  auto [m, e, ss] = softmax_parts(*this, a);
  return m - ss.log();
}

// The first index of the max, as in PyTorch (a NaN counts as the max). Elements equal to the max
// are weighted by their index counted from the end, so the largest weight is the first of them.
// axis = nullopt is over the flattened tensor; keepdim then gives all axes size 1.
Tensor Tensor::argmax(std::optional<std::int64_t> axis, bool keepdim) const {
  if (!axis) {
    if (numel() == 0)
      throw std::invalid_argument(
          detail::cat("argmax: the tensor of shape ", to_string(shape()), " is empty"));
    Tensor flat = reshape({numel()}).argmax(0);
    return keepdim ? flat.reshape(std::vector<std::int64_t>(shape().size(), 1)) : flat;
  }
  std::int64_t a = checked_axis(*this, *axis, "argmax");
  if (ndim() == 0) return reshape({1}).argmax(0, keepdim).reshape({});
  std::int64_t n = shape()[static_cast<std::size_t>(a)];
  if (n == 0 && metagrad::prod(reduced_shape(Axes(a))) > 0)
    throw std::invalid_argument(
        detail::cat("argmax: axis ", std::to_string(*axis), " of shape ", to_string(shape()), " is empty"));
  Tensor x = detach();
  Tensor hit = x.eq(x.max(a, true)).cast(dtypes::int64);
  if (dtypes::is_float(dtype())) hit = hit + x.ne(x).cast(dtypes::int64);
  std::vector<std::int64_t> col(static_cast<std::size_t>(ndim() - a), 1);
  col[0] = n;
  Tensor rev =
      Tensor::arange(static_cast<double>(n - 1), -1, -1, {.device = device(), .dtype = dtypes::int64});
  return (n - 1) - (hit * rev.reshape(col)).max(a, keepdim);
}

Tensor Tensor::cumsum(std::int64_t axis) const {
  return scan(cast(sum_dtype(dtype())), axis, kSumScan, "cumsum");
}
Tensor Tensor::cumprod(std::int64_t axis) const {
  return scan(cast(sum_dtype(dtype())), axis, kProdScan, "cumprod");
}
Tensor Tensor::logcumsumexp(std::int64_t axis) const {
  return scan(dtypes::is_float(dtype()) ? *this : cast(dtypes::float32), axis, kLogSumExpScan,
              "logcumsumexp");
}
// Integers and bool multiply in int64, as PyTorch's prod; the empty product is 1. The reduced axes
// (and any of size 1, which change nothing) go last as one, for prod_last.
Tensor Tensor::prod(const Axes& axis, bool keepdim) const {
  Plan p = plan(shape(), axis, "prod");
  Tensor x = cast(sum_dtype(dtype()));
  std::vector<std::int64_t> order, rows;
  for (std::size_t i = 0; i < p.kept.size(); ++i)
    if (p.kept[i] == shape()[i] && shape()[i] != 1)
      order.push_back(std::int64_t(i)), rows.push_back(shape()[i]);
  for (std::size_t i = 0; i < p.kept.size(); ++i)
    if (p.kept[i] != shape()[i] || shape()[i] == 1) order.push_back(std::int64_t(i));
  rows.push_back(p.n);
  Tensor ret = prod_last(x.permute(order).reshape(rows));
  return ret.reshape(keepdim ? dims_of_dims(p.kept) : p.out);
}

}  // namespace metagrad
