// The functional forms of the neural-network layers (PyTorch's torch.nn.functional, tinygrad's
// processing hlops): matmul and linear, conv, pooling, interpolation, normalisation, dropout and
// attention. Each is a composition of movement views, elementwise ops and one reduce, so it stays
// lazy, fuses, and differentiates through the mlops alone.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "attention.hpp"
#include "matmul_bf16.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {
using V = std::vector<std::int64_t>;
using PV = std::vector<std::pair<std::int64_t, std::int64_t>>;

std::string str(std::int64_t v) { return std::to_string(v); }
std::string str(const V& v) { return detail::dims_string(v); }  // (any length: an error may name too many)

// A per-dimension argument given as one value for all `n` dimensions or one per dimension.
// `where` names the op and its operands' shapes, and starts every message.
V per_dim(const std::string& where, const char* what, const V& v, std::size_t n, std::int64_t min_value) {
  if (v.size() != 1 && v.size() != n)
    throw std::invalid_argument(detail::cat(where, ": ", what, " ", str(v), " needs 1 or ",
                                            str(static_cast<std::int64_t>(n)), " values"));
  for (std::int64_t x : v)
    if (x < min_value)
      throw std::invalid_argument(
          detail::cat(where, ": ", what, " ", str(v), " must be at least ", str(min_value)));
  return v.size() == n ? v : V(n, v[0]);
}

// tinygrad's slice: per axis [begin, end), padded with value where the range leaves the tensor.
Tensor slice(const Tensor& x, const PV& arg, double value = 0) {
  PV pads, keep;
  bool padded = false;
  for (std::size_t i = 0; i < arg.size(); ++i) {
    auto [b, e] = arg[i];
    std::int64_t before = std::max<std::int64_t>(0, -b), after = std::max<std::int64_t>(0, e - x.shape()[i]);
    padded = padded || before || after;
    pads.push_back({before, after});
    keep.push_back({b + before, e + before});
  }
  return (padded ? x.pad(pads, value) : x).shrink(keep);
}

// Per-side pads of the last p.size()/2 axes, last axis first as torch's F.pad: (left, right,
// top, bottom, front, back, ...); negative values crop.
Tensor pad_spatial(const Tensor& x, const V& p) {
  PV arg;
  std::size_t n = static_cast<std::size_t>(x.ndim()), np = p.size() / 2;
  for (std::size_t i = 0; i < n - np; ++i) arg.push_back({0, x.shape()[i]});
  for (std::size_t j = np; j-- > 0;) arg.push_back({-p[2 * j], x.shape()[n - 1 - j] + p[2 * j + 1]});
  return slice(x, arg);
}

// A convolution's padding for n spatial axes: one value for every side, one per axis (both
// sides), or one per side (last axis first, as pad_spatial takes it).
V per_side(const std::string& where, const V& padding, std::size_t n) {
  V p;
  if (padding.size() == 1) {
    p = V(2 * n, padding[0]);
  } else if (padding.size() == n) {
    for (std::size_t j = n; j-- > 0;) p.insert(p.end(), {padding[j], padding[j]});
  } else if (padding.size() == 2 * n) {
    p = padding;
  } else {
    throw std::invalid_argument(detail::cat(where, ": padding ", str(padding), " needs 1, ",
                                            str(static_cast<std::int64_t>(n)), " or ",
                                            str(static_cast<std::int64_t>(2 * n)), " values"));
  }
  return p;
}

// The padded size of spatial axis j (first spatial axis is 0) of n, from per-side pads p.
std::int64_t padded(std::int64_t size, const V& p, std::size_t j, std::size_t n) {
  std::size_t r = n - 1 - j;  // p holds the last axis first
  return size + p[2 * r] + p[2 * r + 1];
}

// tinygrad's _pool: the sliding windows of the last k.size() axes as a view of shape
// (prefix..., out..., k...). Nothing is copied: a strided window is a reshape/shrink of the input,
// and windows that overlap (k > s) or are dilated come from an expanded copy-free repetition.
// Callers guarantee every output size is at least 1.
Tensor pool(const Tensor& x, const V& k, const V& s, const V& d) {
  std::size_t nk = k.size(), np = x.shape().size() - nk;
  V prefix(x.shape().begin(), x.shape().begin() + static_cast<std::ptrdiff_t>(np)),
      in(x.shape().begin() + static_cast<std::ptrdiff_t>(np), x.shape().end());
  auto with_prefix = [&](auto each) {
    V out = prefix;
    for (std::size_t j = 0; j < nk; ++j) each(out, j);
    return out;
  };
  auto slices = [&](auto each) {
    PV out;
    for (std::int64_t p : prefix) out.push_back({0, p});
    for (std::size_t j = 0; j < nk; ++j) each(out, j);
    return out;
  };
  V order(np);
  for (std::size_t j = 0; j < np; ++j) order[j] = static_cast<std::int64_t>(j);
  bool overlap = false;
  for (std::size_t j = 0; j < nk; ++j) overlap = overlap || k[j] > s[j] || d[j] != 1;
  if (overlap) {
    V o(nk), e(nk);
    for (std::size_t j = 0; j < nk; ++j) {
      o[j] = (in[j] - d[j] * (k[j] - 1) - 1) / s[j] + 1;
      e[j] = (k[j] * (in[j] + d[j]) + in[j] - 1) / in[j];  // enough repeats that no padding is needed
    }
    // Repeat each axis e times; rows of length i+d then start d further along the input.
    Tensor xup = x.reshape(with_prefix([&](V& v, std::size_t j) {
                    v.insert(v.end(), {1, in[j]});
                  }))
                     .expand(with_prefix([&](V& v, std::size_t j) {
                       v.insert(v.end(), {e[j], in[j]});
                     }))
                     .reshape(with_prefix([&](V& v, std::size_t j) { v.push_back(e[j] * in[j]); }));
    xup = slice(xup, slices([&](PV& v, std::size_t j) { v.push_back({0, k[j] * (in[j] + d[j])}); }));
    xup = xup.reshape(with_prefix([&](V& v, std::size_t j) { v.insert(v.end(), {k[j], in[j] + d[j]}); }));
    xup = slice(xup, slices([&](PV& v, std::size_t j) { v.insert(v.end(), {{0, k[j]}, {0, o[j] * s[j]}}); }));
    // The stride: keep the first of every s columns.
    xup = xup.reshape(with_prefix([&](V& v, std::size_t j) { v.insert(v.end(), {k[j], o[j], s[j]}); }));
    xup = xup.shrink(slices([&](PV& v, std::size_t j) {
      v.insert(v.end(), {{0, k[j]}, {0, o[j]}, {0, 1}});
    }));
    xup = xup.reshape(with_prefix([&](V& v, std::size_t j) { v.insert(v.end(), {k[j], o[j]}); }));
    for (std::size_t j = 0; j < nk; ++j) order.push_back(static_cast<std::int64_t>(np + 2 * j + 1));
    for (std::size_t j = 0; j < nk; ++j) order.push_back(static_cast<std::int64_t>(np + 2 * j));
    return xup.permute(order);
  }
  V o(nk);
  for (std::size_t j = 0; j < nk; ++j) o[j] = (in[j] + s[j] - k[j]) / s[j];
  Tensor xup = slice(x, slices([&](PV& v, std::size_t j) { v.push_back({0, o[j] * s[j]}); }));
  xup = xup.reshape(with_prefix([&](V& v, std::size_t j) { v.insert(v.end(), {o[j], s[j]}); }));
  xup = xup.shrink(slices([&](PV& v, std::size_t j) { v.insert(v.end(), {{0, o[j]}, {0, k[j]}}); }));
  for (std::size_t j = 0; j < nk; ++j) order.push_back(static_cast<std::int64_t>(np + 2 * j));
  for (std::size_t j = 0; j < nk; ++j) order.push_back(static_cast<std::int64_t>(np + 2 * j + 1));
  return xup.permute(order);
}

// Checks that every window fits: (size - dilation*(kernel-1) - 1) / stride + 1 >= 1.
void check_windows(const std::string& where, const V& sizes, const V& k, const V& d) {
  for (std::size_t j = 0; j < k.size(); ++j)
    if (sizes[j] < d[j] * (k[j] - 1) + 1)
      throw std::invalid_argument(detail::cat(where, ": the spatial size ", str(sizes),
                                              " is smaller than the kernel ", str(k), " with dilation ",
                                              str(d)));
}

// A pooling over the last n axes: kernel, stride, dilation and padding per axis, and the output
// sizes, PyTorch's: floor (or with ceil_mode ceil) of (in + 2p - d(k-1) - 1) / s, plus 1, less a
// last window that would start in the right padding.
struct PoolPlan {
  std::string where;
  V k, s, d, lo, hi, in, out;  // lo, hi: each spatial axis's padding before and after
  bool overhang = false;       // padding or a ceil_mode window: some window reads outside the input
};

PoolPlan pool_plan(const char* op, const Tensor& x, std::size_t n, const V& kernel_size, const V& stride,
                   const V& dilation, const V& padding, bool ceil_mode) {
  PoolPlan q;
  q.where = detail::cat(op, ": input ", to_string(x.shape()));
  if (x.ndim() < static_cast<std::int64_t>(n))
    throw std::invalid_argument(detail::cat(q.where, " needs at least ", str(static_cast<std::int64_t>(n)),
                                            " dimensions (..., the spatial axes)"));
  q.k = per_dim(q.where, "kernel_size", kernel_size, n, 1);
  q.s = stride.empty() ? q.k : per_dim(q.where, "stride", stride, n, 1);
  q.d = per_dim(q.where, "dilation", dilation, n, 1);
  if (padding.size() == 2 * n) {  // one per side, last axis first (tinygrad's, as pad2d)
    V p = per_side(q.where, padding, n);
    for (std::size_t j = n; j-- > 0;) q.lo.push_back(p[2 * j]), q.hi.push_back(p[2 * j + 1]);
    for (std::int64_t v : p)
      if (v < 0)
        throw std::invalid_argument(detail::cat(q.where, ": padding ", str(padding), " must be at least 0"));
  } else {
    q.lo = q.hi = per_dim(q.where, "padding", padding, n, 0);
  }
  q.in.assign(x.shape().end() - static_cast<std::ptrdiff_t>(n), x.shape().end());
  for (std::size_t j = 0; j < n; ++j) {
    if (q.lo[j] > q.k[j] / 2 || q.hi[j] > q.k[j] / 2)
      throw std::invalid_argument(
          detail::cat(q.where, ": padding ", str(padding), " must be at most half the kernel ", str(q.k)));
    std::int64_t span = q.d[j] * (q.k[j] - 1) + 1, room = q.in[j] + q.lo[j] + q.hi[j] - span;
    if (room < 0)
      throw std::invalid_argument(detail::cat(q.where, ": the spatial size ", str(q.in), " with padding ",
                                              str(padding), " is smaller than the kernel ", str(q.k),
                                              " with dilation ", str(q.d)));
    std::int64_t o = (ceil_mode ? (room + q.s[j] - 1) / q.s[j] : room / q.s[j]) + 1;
    if (ceil_mode && (o - 1) * q.s[j] >= q.in[j] + q.lo[j]) --o;
    q.out.push_back(o);
    q.overhang =
        q.overhang || q.lo[j] > 0 || q.hi[j] > 0 || (o - 1) * q.s[j] + span > q.in[j] + q.lo[j] + q.hi[j];
  }
  return q;
}

// The windows (..., out..., k...): the input padded with value (or cut) to exactly the span the
// windows read, then tinygrad's pool.
Tensor windows(const Tensor& x, const PoolPlan& q, double value) {
  std::size_t n = q.k.size(), np = x.shape().size() - n;
  PV arg;
  for (std::size_t i = 0; i < np; ++i) arg.push_back({0, x.shape()[i]});
  for (std::size_t j = 0; j < n; ++j)
    arg.push_back({-q.lo[j], -q.lo[j] + (q.out[j] - 1) * q.s[j] + q.d[j] * (q.k[j] - 1) + 1});
  return pool(slice(x, arg, value), q.k, q.s, q.d);
}

V last_axes(std::size_t n) {
  V axes;
  for (std::size_t j = n; j > 0; --j) axes.push_back(-static_cast<std::int64_t>(j));
  return axes;
}

Tensor avg_pool(const char* op, const Tensor& x, std::size_t n, const V& kernel_size, const V& stride,
                const V& dilation, const V& padding, bool ceil_mode, bool count_include_pad) {
  PoolPlan q = pool_plan(op, x, n, kernel_size, stride, dilation, padding, ceil_mode);
  Tensor mean = windows(x, q, 0).mean(last_axes(n));
  if (!q.overhang) return mean;
  // The mean over k elements, rescaled to the divisor of each window: the window's elements inside
  // the padded input (count_include_pad) or inside the input. It factors per axis.
  std::vector<double> factor{1};
  for (std::size_t j = 0; j < n; ++j) {
    std::int64_t lo = count_include_pad ? -q.lo[j] : 0, hi = count_include_pad ? q.in[j] + q.hi[j] : q.in[j];
    std::vector<double> next;
    for (double f : factor)
      for (std::int64_t i = 0; i < q.out[j]; ++i) {
        std::int64_t count = 0;
        for (std::int64_t t = 0; t < q.k[j]; ++t) {
          std::int64_t at = i * q.s[j] - q.lo[j] + t * q.d[j];
          count += at >= lo && at < hi;
        }
        next.push_back(f * static_cast<double>(q.k[j]) / static_cast<double>(count));
      }
    factor = std::move(next);
  }
  Tensor f = Tensor(factor, Dims(q.out), {.device = x.device(), .dtype = mean.dtype()});
  return mean * f;
}

Tensor max_pool(const char* op, const Tensor& x, std::size_t n, const V& kernel_size, const V& stride,
                const V& dilation, const V& padding, bool ceil_mode) {
  PoolPlan q = pool_plan(op, x, n, kernel_size, stride, dilation, padding, ceil_mode);
  return windows(x, q, dtypes::min_value(x.dtype())).max(last_axes(n));
}

// The maxima and the flat index (in the unpadded plane) of the first element equal to each: the
// plane's indices pooled the same way, the largest index standing in for the padding.
std::pair<Tensor, Tensor> max_pool_with_indices(const char* op, const Tensor& x, std::size_t n,
                                                const V& kernel_size, const V& stride, const V& dilation,
                                                const V& padding, bool ceil_mode) {
  PoolPlan q = pool_plan(op, x, n, kernel_size, stride, dilation, padding, ceil_mode);
  V axes = last_axes(n);
  Tensor w = windows(x, q, dtypes::min_value(x.dtype()));
  Tensor m = w.max(axes, true);
  std::int64_t plane = 1;
  for (std::int64_t v : q.in) plane *= v;
  bool narrow = plane < (std::int64_t{1} << 31) - 1;
  DType it = narrow ? dtypes::int32 : dtypes::int64;
  double none = narrow ? 2147483647.0 : 4611686018427387904.0;  // past every index
  Tensor index = windows(
      Tensor::arange(static_cast<double>(plane), {.device = x.device(), .dtype = it}).reshape(q.in), q, none);
  Tensor hit = w.eq(m);
  if (dtypes::is_float(x.dtype())) {  // a NaN is the maximum
    Tensor nan = w.isnan();
    hit = nan.where(nan, hit);
  }
  Tensor first = hit.where(index, none).min(axes).cast(dtypes::int64);
  V out(x.shape().begin(), x.shape().end() - static_cast<std::ptrdiff_t>(n));
  out.insert(out.end(), q.out.begin(), q.out.end());
  return {m.reshape(out), first};
}

// Zeros of the pooling's input size, this written at indices: a scatter along the flattened plane.
Tensor max_unpool(const char* op, const Tensor& x, const Tensor& indices, std::size_t n, const V& kernel_size,
                  const V& stride, const V& dilation, const V& padding, const std::optional<V>& output_size) {
  std::string where =
      detail::cat(op, ": input ", to_string(x.shape()), ", indices ", to_string(indices.shape()));
  auto fail = [&](const std::string& why) { throw std::invalid_argument(detail::cat(where, ": ", why)); };
  if (x.ndim() < static_cast<std::int64_t>(n))
    fail(detail::cat("needs at least ", str(static_cast<std::int64_t>(n)),
                     " dimensions (..., the spatial axes)"));
  if (indices.shape() != x.shape()) fail("the indices must have the input's shape");
  if (!dtypes::is_int(indices.dtype()))
    fail(detail::cat("the indices must be integer, got ", indices.dtype().name));
  V k = per_dim(where, "kernel_size", kernel_size, n, 1);
  V s = stride.empty() ? k : per_dim(where, "stride", stride, n, 1);
  V d = per_dim(where, "dilation", dilation, n, 1), p = per_dim(where, "padding", padding, n, 0);
  V prefix(x.shape().begin(), x.shape().end() - static_cast<std::ptrdiff_t>(n)), out;
  if (output_size) {
    if (output_size->size() < n)
      fail(detail::cat("output_size ", str(*output_size), " needs the spatial sizes"));
    out.assign(output_size->end() - static_cast<std::ptrdiff_t>(n), output_size->end());
  } else {
    for (std::size_t j = 0; j < n; ++j)
      out.push_back((x.shape()[prefix.size() + j] - 1) * s[j] - 2 * p[j] + d[j] * (k[j] - 1) + 1);
  }
  std::int64_t plane = 1;
  for (std::int64_t v : out) {
    if (v < 1) fail(detail::cat("the output size ", str(out), " is empty"));
    plane *= v;
  }
  V flat = prefix, full = prefix;
  flat.push_back(-1);
  full.insert(full.end(), out.begin(), out.end());
  V zeros = prefix;
  zeros.push_back(plane);
  try {
    return Tensor::zeros(Dims(zeros), {.device = x.device(), .dtype = x.dtype()})
        .scatter(-1, indices.reshape(flat), x.reshape(flat))
        .reshape(full);
  } catch (const std::out_of_range& e) {  // an index outside the output: say whose
    throw std::out_of_range(detail::cat(where, ": output size ", str(out), ": ", e.what()));
  }
  return x;  // not reached
}
}  // namespace

// x (..., n, k) @ w (..., k, m) as one reduce over a product of two broadcast views, in one of two
// forms that the scheduler both fuses into a multiply-accumulate kernel:
//   (x.reshape(..., n, k, 1) * w.reshape(..., 1, k, m)).sum(-2)   when w's k axis is outer in its buffer
//   (x.reshape(..., n, 1, k) * w^T.reshape(..., 1, m, k)).sum(-1) when it is inner (w = W^T, nn::Linear).
// w's gradient is a reduce with w's axes in the product's order: so it comes out in the layout of
// w's own buffer, and the optimizer's update reads it in order (read transposed, the update of W5's
// 784 x 512 weight took 8% of a step). A 1-D operand is a vector (its axis dropped from the result);
// batch dimensions broadcast as in numpy. The reduce keeps its axis: elementwise work on that result
// (linear's bias) fuses into the kernel before the final reshape drops it.
namespace {
struct KeptAxis {
  Tensor t;
  std::size_t axis;  // the reduced axis, size 1
  Tensor drop() const {
    V s(t.shape().begin(), t.shape().end());
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(axis));
    return t.reshape(s);
  }
};

KeptAxis matmul_keepdim(const Tensor& x, const Tensor& w) {
  const Dims &xs = x.shape("matmul"), &ws = w.shape("matmul");
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(detail::cat("matmul: ", to_string(xs), " @ ", to_string(ws), ": ", why));
  };
  std::int64_t n1 = x.ndim(), n2 = w.ndim();
  if (n1 == 0 || n2 == 0) fail("both operands need at least one dimension");
  std::int64_t k = xs[xs.size() - 1], kw = ws[static_cast<std::size_t>(n2 - std::min<std::int64_t>(n2, 2))];
  if (k != kw) fail(detail::cat("the inner sizes differ (", str(k), " vs ", str(kw), ")"));
  for (std::int64_t i = 3; i <= std::min(n1, n2); ++i) {
    std::int64_t a = xs[static_cast<std::size_t>(n1 - i)], b = ws[static_cast<std::size_t>(n2 - i)];
    if (a != b && a != 1 && b != 1)
      fail(detail::cat("the batch dimensions do not broadcast (", str(a), " vs ", str(b), ")"));
  }
  if (n2 == 1) {  // a dot with a vector: reduce the last axis
    Tensor t = (x * w).sum(-1, true);
    return {t, static_cast<std::size_t>(t.ndim() - 1)};
  }
  const auto& views = w.lazydata->st.views();
  const auto& st = views.back().strides;
  const std::int64_t sk = std::abs(st[st.size() - 2]), sm = std::abs(st[st.size() - 1]);
  const bool k_inner = views.size() == 1 && sk != 0 && sm != 0 && sk < sm;
  V xr(xs.begin(), xs.end()), wr(ws.begin(), ws.end() - 2);
  if (k_inner)
    xr.insert(xr.end() - 1, 1);
  else
    xr.push_back(1);
  if (n1 > 1) wr.push_back(1);
  wr.insert(wr.end(), ws.end() - 2, ws.end());
  Tensor wt = w.reshape(wr);
  if (k_inner) {
    V order;
    for (std::int64_t i = 0; i < wt.ndim(); ++i) order.push_back(i);
    std::swap(order[order.size() - 1], order[order.size() - 2]);
    wt = wt.permute(order);
  }
  const std::int64_t reduced = k_inner ? -1 : -2;
  Tensor t = (x.reshape(xr) * wt).sum(reduced, true);
  return {t, static_cast<std::size_t>(t.ndim() + reduced)};
}
}  // namespace

Tensor Tensor::matmul(const Tensor& w) const {
  if (std::optional<Tensor> y = matmul_bf16(*this, w)) return *y;
  return matmul_keepdim(*this, w).drop();
}

Tensor Tensor::linear(const Tensor& weight, const std::optional<Tensor>& bias) const {
  if (weight.ndim() == 1) return bias ? *this * weight + *bias : *this * weight;
  if (std::optional<Tensor> y = matmul_bf16(*this, weight)) return bias ? *y + *bias : *y;
  KeptAxis x = matmul_keepdim(*this, weight);
  if (bias) {  // (..., m) against (..., 1, m) or (..., m, 1): a 1 where the reduced axis is
    V b(bias->shape().begin(), bias->shape().end());
    auto after = static_cast<std::ptrdiff_t>(x.t.ndim()) - 1 - static_cast<std::ptrdiff_t>(x.axis);
    b.insert(b.end() - std::min(after, static_cast<std::ptrdiff_t>(b.size())), 1);
    x.t = x.t + bias->reshape(b);
  }
  return x.drop();
}

// tinygrad's conv2d, for any number n >= 1 of spatial axes (the weight's rank - 2): the padded
// input's sliding windows, broadcast against the weight, summed over (cin, k...) in one reduce.
Tensor Tensor::conv2d(const Tensor& weight, const std::optional<Tensor>& bias, std::int64_t groups, V stride,
                      V dilation, V padding) const {
  std::string where =
      detail::cat("conv2d: input ", to_string(shape()), ", weight ", to_string(weight.shape()));
  auto fail = [&](const std::string& why) { throw std::invalid_argument(detail::cat(where, ": ", why)); };
  if (weight.ndim() < 3) fail("the weight must be (cout, cin/groups, k...) with at least one spatial axis");
  auto n = static_cast<std::size_t>(weight.ndim() - 2);
  if (ndim() != weight.ndim())
    fail(detail::cat("the input must be ", str(weight.ndim()), "-D (N, C and ",
                     str(static_cast<std::int64_t>(n)), " spatial axes, as the weight has)"));
  if (groups < 1) fail(detail::cat("groups must be positive, got ", str(groups)));
  std::int64_t bs = shape()[0], cin_ = shape()[1], cout = weight.shape()[0], cin = weight.shape()[1];
  if (groups * cin != cin_)
    fail(detail::cat("the input has ", str(cin_), " channels, the weight expects ", str(groups * cin), " (",
                     str(cin), " per group x ", str(groups), " groups)"));
  if (cout % groups != 0)
    fail(detail::cat(str(cout), " output channels do not split into ", str(groups), " groups"));
  if (bias && (bias->ndim() != 1 || bias->shape()[0] != cout))
    fail(detail::cat("the bias ", to_string(bias->shape()), " must be (", str(cout), ",)"));
  V s = per_dim(where, "stride", stride, n, 1), d = per_dim(where, "dilation", dilation, n, 1);
  V p = per_side(where, padding, n);
  V k(weight.shape().begin() + 2, weight.shape().end()), sizes;
  for (std::size_t j = 0; j < n; ++j) sizes.push_back(padded(shape()[2 + j], p, j, n));
  check_windows(detail::cat(where, ", padding ", str(p)), sizes, k, d);

  // A depthwise conv (one input channel a group, which no GEMM runs: a one-column product a channel)
  // copies its padded input first: the rendered kernel's window reads then have no edge masks, and
  // it vectorizes across the output's width.
  Tensor padded_in = pad_spatial(*this, p);
  if (cin == 1 && groups > 1 && std::any_of(p.begin(), p.end(), [](std::int64_t v) { return v != 0; }))
    padded_in = padded_in.contiguous();
  Tensor x = pool(padded_in, k, s, d);  // (bs, groups*cin, o..., k...)
  std::int64_t rcout = cout / groups;
  V o(x.shape().begin() + 2, x.shape().begin() + 2 + static_cast<std::ptrdiff_t>(n));
  auto dims = [](std::initializer_list<V> parts) {
    V out;
    for (const V& v : parts) out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  V ones(n, 1), order{0, 1, 3};  // (bs, groups, rcout, o..., cin, k...)
  for (std::size_t j = 0; j < n; ++j) order.push_back(static_cast<std::int64_t>(4 + j));
  order.push_back(2);
  for (std::size_t j = 0; j < n; ++j) order.push_back(static_cast<std::int64_t>(4 + n + j));
  x = x.reshape(dims({{bs, groups, cin, 1}, o, k}))
          .expand(dims({{bs, groups, cin, rcout}, o, k}))
          .permute(order);
  std::vector<std::int64_t> axes;
  for (std::int64_t j = 0; j <= static_cast<std::int64_t>(n); ++j) axes.push_back(-1 - j);
  Tensor ret = (x * weight.reshape(dims({{1, groups, rcout}, ones, {cin}, k}))).sum(axes, true);
  // The bias is added before the reshape, so it fuses into the reduce's kernel.
  if (bias) ret = ret + bias->reshape(dims({{1, groups, rcout}, ones, {1}, ones}));
  return ret.reshape(dims({{bs, cout}, o}));
}

// tinygrad's conv_transpose2d, for any number of spatial axes: a conv2d of the stride-dilated
// input (zeros between the elements) with the flipped, channel-swapped weight (cin, cout/groups,
// k...). Padding takes conv2d's forms (one value, one per axis, or one per side) and removes
// that much from each side of the output.
Tensor Tensor::conv_transpose2d(const Tensor& weight, const std::optional<Tensor>& bias, std::int64_t groups,
                                V stride, V dilation, V padding, V output_padding) const {
  std::string where =
      detail::cat("conv_transpose2d: input ", to_string(shape()), ", weight ", to_string(weight.shape()));
  auto fail = [&](const std::string& why) { throw std::invalid_argument(detail::cat(where, ": ", why)); };
  if (weight.ndim() < 3) fail("the weight must be (cin, cout/groups, k...) with at least one spatial axis");
  auto n = static_cast<std::size_t>(weight.ndim() - 2);
  if (ndim() != weight.ndim())
    fail(detail::cat("the input must be ", str(weight.ndim()), "-D (N, C and ",
                     str(static_cast<std::int64_t>(n)), " spatial axes, as the weight has)"));
  if (groups < 1) fail(detail::cat("groups must be positive, got ", str(groups)));
  std::int64_t cin = weight.shape()[0], rcout = weight.shape()[1];
  if (shape()[1] != cin)
    fail(detail::cat("the input has ", str(shape()[1]), " channels, the weight expects ", str(cin)));
  if (cin % groups != 0)
    fail(detail::cat(str(cin), " input channels do not split into ", str(groups), " groups"));
  if (bias && (bias->ndim() != 1 || bias->shape()[0] != groups * rcout))
    fail(detail::cat("the bias ", to_string(bias->shape()), " must be (", str(groups * rcout), ",)"));
  V s = per_dim(where, "stride", stride, n, 1), d = per_dim(where, "dilation", dilation, n, 1),
    op_ = per_dim(where, "output_padding", output_padding, n, 0), p = per_side(where, padding, n);
  for (std::int64_t x : p)
    if (x < 0) fail(detail::cat("padding ", str(padding), " must be at least 0"));
  V k(weight.shape().begin() + 2, weight.shape().end());
  V pads;  // the conv's per-side pads, last axis first
  for (std::size_t j = n; j-- > 0;) {
    std::size_t r = n - 1 - j;
    if (op_[j] >= std::max(s[j], d[j]))
      fail(detail::cat("output_padding ", str(op_), " must be smaller than the stride ", str(s),
                       " or the dilation ", str(d)));
    std::int64_t full = (k[j] - 1) * d[j];
    if ((shape()[2 + j] - 1) * s[j] + full + op_[j] + 1 - p[2 * r] - p[2 * r + 1] < 1)
      fail(detail::cat("padding ", str(padding), " leaves no output"));
    pads.insert(pads.end(), {full - p[2 * r], full - p[2 * r + 1] + op_[j]});
  }
  V wshape{groups, cin / groups, rcout}, order{0, 2, 1}, flip_axes, wflat{groups * rcout, cin / groups};
  for (std::size_t j = 0; j < n; ++j) {
    wshape.push_back(k[j]), wflat.push_back(k[j]);
    order.push_back(static_cast<std::int64_t>(3 + j)), flip_axes.push_back(static_cast<std::int64_t>(3 + j));
  }
  Tensor w = weight.reshape(wshape).permute(order).flip(flip_axes).reshape(wflat);
  Tensor x = *this;
  if (std::any_of(s.begin(), s.end(), [](std::int64_t v) { return v > 1; })) {
    V up{shape()[0], cin}, flat{shape()[0], cin};  // each axis (h) -> (h, 1) -> (h, s) -> h*s - (s-1)
    PV zeros{{0, 0}, {0, 0}}, keep{{0, shape()[0]}, {0, cin}};
    for (std::size_t j = 0; j < n; ++j) {
      std::int64_t h = shape()[2 + j];
      up.insert(up.end(), {h, 1});
      zeros.insert(zeros.end(), {{0, 0}, {0, s[j] - 1}});
      flat.push_back(h * s[j]);
      keep.push_back({0, h * s[j] - (s[j] - 1)});
    }
    x = x.reshape(up).pad(zeros).reshape(flat).shrink(keep);
  }
  return x.conv2d(w, bias, groups, {1}, d, pads);
}

#define METAGRAD_POOLS(N)                                                                                 \
  Tensor Tensor::avg_pool##N##d(V kernel_size, V stride, V dilation, V padding, bool ceil_mode,           \
                                bool count_include_pad) const {                                           \
    return avg_pool("avg_pool" #N "d", *this, N, kernel_size, stride, dilation, padding, ceil_mode,       \
                    count_include_pad);                                                                   \
  }                                                                                                       \
  Tensor Tensor::max_pool##N##d(V kernel_size, V stride, V dilation, V padding, bool ceil_mode) const {   \
    return max_pool("max_pool" #N "d", *this, N, kernel_size, stride, dilation, padding, ceil_mode);      \
  }                                                                                                       \
  std::pair<Tensor, Tensor> Tensor::max_pool##N##d_with_indices(V kernel_size, V stride, V dilation,      \
                                                                V padding, bool ceil_mode) const {        \
    return max_pool_with_indices("max_pool" #N "d_with_indices", *this, N, kernel_size, stride, dilation, \
                                 padding, ceil_mode);                                                     \
  }                                                                                                       \
  Tensor Tensor::max_unpool##N##d(const Tensor& indices, V kernel_size, V stride, V dilation, V padding,  \
                                  std::optional<V> output_size) const {                                   \
    return max_unpool("max_unpool" #N "d", *this, indices, N, kernel_size, stride, dilation, padding,     \
                      output_size);                                                                       \
  }
METAGRAD_POOLS(1)
METAGRAD_POOLS(2)
METAGRAD_POOLS(3)
#undef METAGRAD_POOLS

// The windows of one axis, as pooling's: that axis moved last, pooled, and its window count moved back.
Tensor Tensor::unfold(std::int64_t dim, std::int64_t size, std::int64_t step) const {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(detail::cat("unfold of shape ", to_string(shape()), " (dim ", str(dim),
                                            ", size ", str(size), ", step ", str(step), "): ", why));
  };
  if (ndim() == 0) fail("needs at least one dimension");
  if (dim < -ndim() || dim >= ndim()) fail("dim is out of range");
  std::int64_t d = dim < 0 ? dim + ndim() : dim;
  if (step < 1) fail("step must be positive");
  std::int64_t n = shape()[static_cast<std::size_t>(d)];
  if (size < 0 || size > n) fail("size must be in [0, the dim's size]");
  if (size == 0) {  // n / step + 1 empty windows, as PyTorch's
    Dims s = shape();
    s[static_cast<std::size_t>(d)] = n / step + 1;
    s.push_back(0);
    return Tensor::zeros(s, {.device = device(), .dtype = dtype()});
  }
  V order, back;
  for (std::int64_t i = 0; i < ndim(); ++i)
    if (i != d) order.push_back(i);
  order.push_back(d);
  for (std::int64_t i = 0; i < ndim(); ++i) back.push_back(i < d ? i : i == d ? ndim() - 1 : i - 1);
  back.push_back(ndim());
  return pool(permute(order), {size}, {step}, {1}).permute(back);
}

// Separable: each spatial axis resized in turn by index_select of the source rows (computed here),
// blended by their weights for the linear modes, so the gradient is index_select's scatter-add.
Tensor Tensor::interpolate(const std::vector<std::int64_t>& size, std::string_view mode,
                           bool align_corners) const {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(detail::cat("interpolate of ", to_string(shape()), " to ", str(size), " (",
                                            std::string(mode), "): ", why));
  };
  std::int64_t k = ndim() - 2;
  bool exact = mode == "nearest-exact", nearest = mode == "nearest" || exact;
  if (!nearest && mode != "linear" && mode != "bilinear" && mode != "trilinear")
    fail("mode must be \"nearest\", \"nearest-exact\", \"linear\", \"bilinear\" or \"trilinear\"");
  if (k < 1) fail("needs (N, C, spatial...) input");
  if (static_cast<std::int64_t>(size.size()) != k)
    fail(detail::cat("needs one size per spatial axis, ", std::to_string(k)));
  if (!nearest && k != (mode == "linear" ? 1 : mode == "bilinear" ? 2 : 3))
    fail("linear is for 3-D input, bilinear for 4-D, trilinear for 5-D");
  if (nearest && align_corners) fail("align_corners is for the linear modes");
  for (std::int64_t s : size)
    if (s <= 0) fail("sizes must be positive");
  Tensor x = nearest || dtypes::is_float(dtype()) ? *this : cast(dtypes::float32);
  for (std::int64_t a = 0; a < k; ++a) {
    std::int64_t axis = a + 2, in = x.shape()[static_cast<std::size_t>(axis)],
                 out = size[static_cast<std::size_t>(a)];
    if (in == out) continue;
    if (in == 0) fail("a spatial axis is empty");
    double scale = static_cast<double>(in) / static_cast<double>(out);
    std::vector<std::int64_t> i0, i1;
    std::vector<double> w;
    for (std::int64_t i = 0; i < out; ++i) {
      if (nearest) {
        double at = (static_cast<double>(i) + (exact ? 0.5 : 0.0)) * scale;  // exact: the pixel's centre
        i0.push_back(std::min(static_cast<std::int64_t>(std::floor(at)), in - 1));
        continue;
      }
      double src =
          align_corners
              ? (out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) / static_cast<double>(out - 1)
                         : 0)
              : std::max((static_cast<double>(i) + 0.5) * scale - 0.5, 0.0);
      auto lo = std::min(static_cast<std::int64_t>(std::floor(src)), in - 1);
      i0.push_back(lo), i1.push_back(std::min(lo + 1, in - 1)), w.push_back(src - static_cast<double>(lo));
    }
    auto index = [&](const std::vector<std::int64_t>& v) { return Tensor(v, {out}, {.device = device()}); };
    if (nearest) {
      x = x.index_select(axis, index(i0));
      continue;
    }
    std::vector<std::int64_t> col(static_cast<std::size_t>(x.ndim()), 1);
    col[static_cast<std::size_t>(axis)] = out;
    Tensor wt = Tensor(w, {out}, {.device = device(), .dtype = x.dtype()}).reshape(col);
    x = x.index_select(axis, index(i0)) * (1 - wt) + x.index_select(axis, index(i1)) * wt;
  }
  return x;
}

Tensor Tensor::layernorm(const Axes& axis, double eps) const {
  Tensor y = *this - mean(axis, true);
  return y * ((y * y).mean(axis, true) + eps).pow(-0.5);
}

// The norm is clamped below at eps before its root (max(s, eps^p)^(1/p) = max(s^(1/p), eps)), so a
// zero vector's gradient is finite (1/eps), not 0 * inf = NaN. As PyTorch's vector norms: p = 0
// counts the non-zero elements (no gradient), a negative p is (sum |x|^p)^(1/p) clamped at eps
// after the root (a zero element makes it 0), -INFINITY the min of |x|.
Tensor Tensor::normalize(double p, std::int64_t dim, double eps) const {
  if (std::isnan(p))
    throw std::invalid_argument(detail::cat("normalize of shape ", to_string(shape()), ": p is NaN"));
  std::int64_t n = std::max<std::int64_t>(ndim(), 1);
  if (dim < -n || dim >= n)
    throw std::invalid_argument(
        detail::cat("normalize of shape ", to_string(shape()), ": dim ", str(dim), " is out of range"));
  Tensor x = dtypes::is_float(dtype()) ? *this : cast(dtypes::float32);
  Tensor norm = p == INFINITY    ? x.abs().max(dim, true).maximum(eps)
                : p == -INFINITY ? x.abs().min(dim, true).maximum(eps)
                : p == 0         ? x.ne(x.scalar_like(0)).cast(x.dtype()).sum(dim, true).detach().maximum(eps)
                : p < 0          ? x.abs().pow(p).sum(dim, true).pow(1 / p).maximum(eps)
                : p == 1         ? x.abs().sum(dim, true).maximum(eps)
                : p == 2         ? x.square().sum(dim, true).maximum(eps * eps).sqrt()
                                 : x.abs().pow(p).sum(dim, true).maximum(std::pow(eps, p)).pow(1 / p);
  return x / norm;
}

// (x - mean) * weight * invstd + bias, the 1-D parameters broadcast along axis 1 (N, C, ...).
Tensor Tensor::batchnorm(const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                         const Tensor& mean, const Tensor& invstd) const {
  if (ndim() < 2)
    throw std::invalid_argument(
        detail::cat("batchnorm: input ", to_string(shape()), " needs at least 2 dimensions (N, C, ...)"));
  V per_channel(static_cast<std::size_t>(ndim()), 1);
  per_channel[1] = shape()[1];
  auto channel = [&](const Tensor& t, const char* what) {
    if (t.ndim() != 1) return t;  // already broadcastable, as tinygrad allows for invstd
    if (t.shape()[0] != shape()[1])
      throw std::invalid_argument(detail::cat("batchnorm: input ", to_string(shape()), " has ",
                                              str(shape()[1]), " channels, the ", what, " has shape ",
                                              to_string(t.shape())));
    return t.reshape(per_channel);
  };
  Tensor x = *this - channel(mean, "mean");
  if (weight) x = x * channel(*weight, "weight");
  x = x * channel(invstd, "invstd");
  return bias ? x + channel(*bias, "bias") : x;
}

Tensor Tensor::dropout(double p) const {
  if (!(p >= 0 && p <= 1))
    throw std::invalid_argument(detail::cat("dropout: p must be in [0, 1], got ", std::to_string(p)));
  if (!training || p == 0) return *this;
  if (p == 1) return *this * 0;
  Tensor keep = Tensor::rand(shape(), {.device = device()}) >= p;
  return *this * keep.cast(dtype()) * (1 / (1 - p));
}

Tensor Tensor::sequential(const std::vector<std::function<Tensor(const Tensor&)>>& layers) const {
  Tensor x = *this;
  for (const auto& f : layers) x = f(x);
  return x;
}

namespace {
// The causal mask of L queries over S keys on a device (bool, lower triangle), made once a process:
// a model that attends causally launches no kernel for it each step.
Tensor causal_mask(std::int64_t L, std::int64_t S, const std::string& device) {
  static std::mutex mu;
  // (never destroyed: its buffers must not outlive the devices at exit)
  static auto* made = new std::map<std::tuple<std::int64_t, std::int64_t, std::string>, Tensor>;
  std::lock_guard lock(mu);
  auto it = made->find({L, S, device});
  if (it == made->end()) {
    Tensor::NoGradGuard no_grad;
    Tensor m = Tensor::ones({L, S}, {.device = device}).tril(0).cast(dtypes::bool_).contiguous();
    it = made->emplace(std::tuple{L, S, device}, m.requires_grad_(false).realize()).first;
  }
  return it->second;
}
}  // namespace

Tensor Tensor::scaled_dot_product_attention(const Tensor& key, const Tensor& value,
                                            const std::optional<Tensor>& attn_mask, double dropout_p,
                                            bool is_causal) const {
  auto shapes = [&] {
    return detail::cat(
        "query ", to_string(shape()), ", key ", to_string(key.shape()), ", value ", to_string(value.shape()),
        attn_mask ? detail::cat(", attn_mask ", to_string(attn_mask->shape())) : std::string());
  };
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(detail::cat("scaled_dot_product_attention: ", why, " (", shapes(), ")"));
  };
  if (ndim() < 2 || key.ndim() < 2 || value.ndim() < 2) fail("query, key and value need at least 2 axes");
  std::int64_t L = shape()[shape().size() - 2], E = shape().back(), S = key.shape()[key.shape().size() - 2];
  if (key.shape().back() != E) fail("query and key must end in one size E");
  if (value.shape()[value.shape().size() - 2] != S) fail("key and value must have one length S");
  if (is_causal && attn_mask) fail("is_causal and attn_mask are exclusive");
  Tensor qk = [&] {
    try {
      return matmul(key.transpose(-2, -1)) * (1 / std::sqrt(static_cast<double>(E)));
    } catch (const std::invalid_argument& e) { fail(e.what()); }
    return *this;  // (not reached)
  }();
  std::optional<Tensor> mask = attn_mask;
  if (is_causal) mask = causal_mask(L, S, device());
  if (mask) {
    Dims q = qk.shape();
    bool fits = mask->ndim() <= qk.ndim();
    for (std::size_t i = 0; fits && i < mask->shape().size(); ++i) {
      std::int64_t m = mask->shape()[mask->shape().size() - 1 - i];
      fits = m == 1 || m == q[q.size() - 1 - i];
    }
    if (!fits) fail(detail::cat("the mask does not broadcast to the scores ", to_string(q)));
  }
  // (qk above is a graph not yet computed: dropped where the fused kernel applies)
  if (auto fused = fused_attention(*this, key, value, attn_mask, is_causal, dropout_p)) return *fused;
  if (mask) qk = mask->dtype() == dtypes::bool_ ? mask->where(qk, -INFINITY) : qk + *mask;
  return qk.softmax(-1).dropout(dropout_p).matmul(value);
}

}  // namespace metagrad
