// Processing hlops (tinygrad's matmul, conv, pooling and normalisation): each is a composition of
// movement views, elementwise ops and one reduce, so it stays lazy, fuses, and differentiates
// through the mlops alone.
#include <algorithm>

#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {
using V = std::vector<std::int64_t>;
using PV = std::vector<std::pair<std::int64_t, std::int64_t>>;

std::string str(std::int64_t v) { return std::to_string(v); }
std::string str(const V& v) { return to_string(Dims(v)); }

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

// tinygrad's slice: per axis [begin, end), zero-padded where the range leaves the tensor.
Tensor slice(const Tensor& x, const PV& arg) {
  PV pads, keep;
  bool padded = false;
  for (std::size_t i = 0; i < arg.size(); ++i) {
    auto [b, e] = arg[i];
    std::int64_t before = std::max<std::int64_t>(0, -b), after = std::max<std::int64_t>(0, e - x.shape()[i]);
    padded = padded || before || after;
    pads.push_back({before, after});
    keep.push_back({b + before, e + before});
  }
  return (padded ? x.pad(pads) : x).shrink(keep);
}

// (left, right, top, bottom) on the last two axes; negative values crop.
Tensor pad_hw(const Tensor& x, const V& p) {
  PV arg;
  std::int64_t n = x.ndim();
  for (std::int64_t i = 0; i < n - 2; ++i) arg.push_back({0, x.shape()[i]});
  arg.push_back({-p[2], x.shape()[n - 2] + p[3]});
  arg.push_back({-p[0], x.shape()[n - 1] + p[1]});
  return slice(x, arg);
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

Tensor pool2d(const char* op, const Tensor& x, const V& kernel_size, const V& stride) {
  std::string where = detail::cat(op, ": input ", to_string(x.shape()));
  if (x.ndim() < 2)
    throw std::invalid_argument(detail::cat(where, " needs at least 2 dimensions (..., H, W)"));
  V k = per_dim(where, "kernel_size", kernel_size, 2, 1);
  V s = stride.empty() ? k : per_dim(where, "stride", stride, 2, 1);
  V d{1, 1};
  check_windows(where, {x.shape()[x.shape().size() - 2], x.shape()[x.shape().size() - 1]}, k, d);
  return pool(x, k, s, d);
}
}  // namespace

// x (..., n, k) @ w (..., k, m) as one reduce over a product of two broadcast views:
// (x.reshape(..., n, 1, k) * w^T.reshape(..., 1, m, k)).sum(-1), which the scheduler fuses into a
// multiply-accumulate kernel. A 1-D operand is a vector (its axis dropped from the result); batch
// dimensions broadcast as in numpy. The reduce keeps its axis: elementwise work on that result
// (linear's bias) fuses into the kernel before the final reshape drops it.
namespace {
Tensor matmul_keepdim(const Tensor& x, const Tensor& w) {
  const Dims &xs = x.shape(), &ws = w.shape();
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
  V xr(xs.begin(), xs.end() - 1), wr(ws.begin(), ws.end() - std::min<std::int64_t>(n2, 2));
  if (n1 > 1 && n2 > 1) xr.push_back(1), wr.push_back(1);
  xr.push_back(k);
  wr.insert(wr.end(), ws.end() - std::min<std::int64_t>(n2, 2), ws.end());
  Tensor wt = w.reshape(wr);
  if (n2 > 1) {
    V order;
    for (std::int64_t i = 0; i < wt.ndim(); ++i) order.push_back(i);
    std::swap(order[order.size() - 1], order[order.size() - 2]);
    wt = wt.permute(order);
  }
  return (x.reshape(xr) * wt).sum(-1, true);
}

Tensor drop_last_axis(const Tensor& x) { return x.reshape(V(x.shape().begin(), x.shape().end() - 1)); }
}  // namespace

Tensor Tensor::matmul(const Tensor& w) const { return drop_last_axis(matmul_keepdim(*this, w)); }

Tensor Tensor::linear(const Tensor& weight, const std::optional<Tensor>& bias) const {
  if (weight.ndim() == 1) return bias ? *this * weight + *bias : *this * weight;
  Tensor x = matmul_keepdim(*this, weight);
  if (bias) {
    V b(bias->shape().begin(), bias->shape().end());
    b.push_back(1);
    x = x + bias->reshape(b);
  }
  return drop_last_axis(x);
}

// tinygrad's conv2d: the padded input's sliding windows, broadcast against the weight, summed over
// (cin, kh, kw) in one reduce. Padding is 1 value, (ph, pw), or (left, right, top, bottom).
Tensor Tensor::conv2d(const Tensor& weight, const std::optional<Tensor>& bias, std::int64_t groups, V stride,
                      V dilation, V padding) const {
  std::string where =
      detail::cat("conv2d: input ", to_string(shape()), ", weight ", to_string(weight.shape()));
  auto fail = [&](const std::string& why) { throw std::invalid_argument(detail::cat(where, ": ", why)); };
  if (ndim() != 4) fail("the input must be 4-D (N, C, H, W)");
  if (weight.ndim() != 4) fail("the weight must be 4-D (cout, cin/groups, kh, kw)");
  if (groups < 1) fail(detail::cat("groups must be positive, got ", str(groups)));
  std::int64_t bs = shape()[0], cin_ = shape()[1], cout = weight.shape()[0], cin = weight.shape()[1];
  if (groups * cin != cin_)
    fail(detail::cat("the input has ", str(cin_), " channels, the weight expects ", str(groups * cin), " (",
                     str(cin), " per group x ", str(groups), " groups)"));
  if (cout % groups != 0)
    fail(detail::cat(str(cout), " output channels do not split into ", str(groups), " groups"));
  if (bias && (bias->ndim() != 1 || bias->shape()[0] != cout))
    fail(detail::cat("the bias ", to_string(bias->shape()), " must be (", str(cout), ",)"));
  V s = per_dim(where, "stride", stride, 2, 1), d = per_dim(where, "dilation", dilation, 2, 1);
  V p;
  if (padding.size() == 1)
    p = V(4, padding[0]);
  else if (padding.size() == 2)
    p = {padding[1], padding[1], padding[0], padding[0]};
  else if (padding.size() == 4)
    p = padding;
  else
    fail(detail::cat("padding ", str(padding), " needs 1, 2 or 4 values"));
  V k{weight.shape()[2], weight.shape()[3]};
  check_windows(detail::cat(where, ", padding ", str(p)),
                {shape()[2] + p[2] + p[3], shape()[3] + p[0] + p[1]}, k, d);

  Tensor x = pool(pad_hw(*this, p), k, s, d);  // (bs, groups*cin, oy, ox, kh, kw)
  std::int64_t rcout = cout / groups, oy = x.shape()[2], ox = x.shape()[3];
  x = x.reshape({bs, groups, cin, 1, oy, ox, k[0], k[1]})
          .expand({bs, groups, cin, rcout, oy, ox, k[0], k[1]})
          .permute({0, 1, 3, 4, 5, 2, 6, 7});  // (bs, groups, rcout, oy, ox, cin, kh, kw)
  Tensor ret = (x * weight.reshape({1, groups, rcout, 1, 1, cin, k[0], k[1]})).sum({-1, -2, -3}, true);
  // The bias is added before the reshape, so it fuses into the reduce's kernel.
  if (bias) ret = ret + bias->reshape({1, groups, rcout, 1, 1, 1, 1, 1});
  return ret.reshape({bs, cout, oy, ox});
}

// tinygrad's conv_transpose2d: a conv2d of the stride-dilated input (zeros between the pixels)
// with the flipped, channel-swapped weight (cin, cout/groups, kh, kw).
Tensor Tensor::conv_transpose2d(const Tensor& weight, const std::optional<Tensor>& bias, std::int64_t groups,
                                V stride, V dilation, V padding, V output_padding) const {
  std::string where =
      detail::cat("conv_transpose2d: input ", to_string(shape()), ", weight ", to_string(weight.shape()));
  auto fail = [&](const std::string& why) { throw std::invalid_argument(detail::cat(where, ": ", why)); };
  if (ndim() != 4) fail("the input must be 4-D (N, C, H, W)");
  if (weight.ndim() != 4) fail("the weight must be 4-D (cin, cout/groups, kh, kw)");
  if (groups < 1) fail(detail::cat("groups must be positive, got ", str(groups)));
  std::int64_t cin = weight.shape()[0], rcout = weight.shape()[1];
  if (shape()[1] != cin)
    fail(detail::cat("the input has ", str(shape()[1]), " channels, the weight expects ", str(cin)));
  if (cin % groups != 0)
    fail(detail::cat(str(cin), " input channels do not split into ", str(groups), " groups"));
  if (bias && (bias->ndim() != 1 || bias->shape()[0] != groups * rcout))
    fail(detail::cat("the bias ", to_string(bias->shape()), " must be (", str(groups * rcout), ",)"));
  V s = per_dim(where, "stride", stride, 2, 1), d = per_dim(where, "dilation", dilation, 2, 1),
    p = per_dim(where, "padding", padding, 2, 0),
    op_ = per_dim(where, "output_padding", output_padding, 2, 0);
  V k{weight.shape()[2], weight.shape()[3]};
  for (std::size_t j = 0; j < 2; ++j) {
    if (op_[j] >= std::max(s[j], d[j]))
      fail(detail::cat("output_padding ", str(op_), " must be smaller than the stride ", str(s),
                       " or the dilation ", str(d)));
    if ((shape()[2 + j] - 1) * s[j] - 2 * p[j] + d[j] * (k[j] - 1) + op_[j] + 1 < 1)
      fail(detail::cat("padding ", str(p), " leaves no output"));
  }
  Tensor w = weight.reshape({groups, cin / groups, rcout, k[0], k[1]})
                 .permute({0, 2, 1, 3, 4})
                 .flip({3, 4})
                 .reshape({groups * rcout, cin / groups, k[0], k[1]});
  Tensor x = *this;
  if (s[0] > 1 || s[1] > 1) {
    std::int64_t bs = shape()[0], h = shape()[2], wd = shape()[3];
    x = x.reshape({bs, cin, h, 1, wd, 1})
            .pad({{0, 0}, {0, 0}, {0, 0}, {0, s[0] - 1}, {0, 0}, {0, s[1] - 1}})
            .reshape({bs, cin, h * s[0], wd * s[1]})
            .shrink({{0, bs}, {0, cin}, {0, h * s[0] - (s[0] - 1)}, {0, wd * s[1] - (s[1] - 1)}});
  }
  V pad4;
  for (std::size_t j = 2; j-- > 0;) {  // (left, right, top, bottom)
    std::int64_t before = (k[j] - 1) * d[j] - p[j];
    pad4.insert(pad4.end(), {before, before + op_[j]});
  }
  return x.conv2d(w, bias, groups, {1}, d, pad4);
}

Tensor Tensor::avg_pool2d(V kernel_size, V stride) const {
  return pool2d("avg_pool2d", *this, kernel_size, stride).mean({-2, -1});
}
Tensor Tensor::max_pool2d(V kernel_size, V stride) const {
  return pool2d("max_pool2d", *this, kernel_size, stride).max({-2, -1});
}

Tensor Tensor::layernorm(const Axes& axis, double eps) const {
  Tensor y = *this - mean(axis, true);
  return y * ((y * y).mean(axis, true) + eps).pow(-0.5);
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

}  // namespace metagrad
