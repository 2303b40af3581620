// Indexing by data: gather, index_select, topk and multinomial. The kernel language has no load at a
// computed address, so gather and its scatter-add gradient are host loops over the picked elements
// (a LoadOps::CUSTOM fill, O(result)); inside a TinyJit step, where a custom load cannot replay, they
// fall back to one-hot selects, which are kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "metagrad/runtime/lib.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {

// Which element of the source each element of the result reads. select: index_select (a 1-D index of
// n entries replaces axis dim); otherwise gather (the index has the result's shape).
struct Pick {
  Dims src, out;
  std::int64_t dim;
  bool select;

  // f(out_offset, src_offset) for every element of the result, idx being the int64 index's values.
  template <class F>
  void each(const std::int64_t* idx, F f) const {
    auto d = static_cast<std::size_t>(dim);
    std::int64_t outer = 1, inner = 1;
    for (std::size_t a = 0; a < d; ++a) outer *= src[a];
    for (std::size_t a = d + 1; a < src.size(); ++a) inner *= src[a];
    std::int64_t S = src[d];
    if (select) {
      std::int64_t n = out[d];
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < n; ++j) {
          std::int64_t ob = (o * n + j) * inner, sb = (o * S + idx[j]) * inner;
          for (std::int64_t k = 0; k < inner; ++k) f(ob + k, sb + k);
        }
      return;
    }
    // gather: walk the result's multi-index (an odometer), keeping the source offset without axis dim.
    std::size_t r = out.size();
    std::vector<std::int64_t> stride(r, 1), i(r, 0);
    for (std::size_t a = r; a-- > 1;) stride[a - 1] = stride[a] * src[a];
    std::int64_t n = prod(out), base = 0;
    for (std::int64_t e = 0; e < n; ++e) {
      f(e, base + idx[e] * stride[d]);
      for (std::size_t a = r; a-- > 0;) {
        if (a != d) base += stride[a];
        if (++i[a] < out[a]) break;
        if (a != d) base -= stride[a] * out[a];
        i[a] = 0;
      }
    }
  }
};

// Host memory of a buffer: its own for malloc-backed devices (CPU, CLANG, LLVM), else a copy.
struct HostIn {
  std::vector<std::byte> copy;
  const std::byte* p;
  explicit HostIn(const RawBuffer& b) {
    if (const auto* m = dynamic_cast<const RawMallocBuffer*>(&b)) {
      p = static_cast<const std::byte*>(m->data());
    } else {
      copy.resize(b.nbytes());
      b.copyout(copy.data());
      p = copy.data();
    }
  }
};
struct HostOut {
  RawBuffer& b;
  std::vector<std::byte> copy;
  std::byte* p;
  explicit HostOut(RawBuffer& b_) : b(b_) {
    if (auto* m = dynamic_cast<RawMallocBuffer*>(&b)) {
      p = static_cast<std::byte*>(m->data());
    } else {
      copy.resize(b.nbytes());
      p = copy.data();
    }
  }
  void done() {
    if (!copy.empty()) b.copyin(copy.data());
  }
};

template <class T>
void scatter_add(const Pick& pick, const std::int64_t* idx, const std::byte* g, std::byte* out,
                 std::size_t n) {
  auto* o = reinterpret_cast<T*>(out);
  const auto* gv = reinterpret_cast<const T*>(g);
  std::fill(o, o + n, T(0));
  pick.each(idx, [&](std::int64_t oi, std::int64_t si) { o[si] += gv[oi]; });
}

// A CUSTOM load of `shape` and `dtype` computed by `fill` from realized, contiguous sources.
LazyBufferPtr custom(const Dims& shape, DType dtype, const std::string& device,
                     std::vector<LazyBufferPtr> src,
                     std::function<void(RawBuffer&, const std::vector<RawBuffer*>&)> fill) {
  for (auto& s : src) s = s->contiguous();
  auto arg = std::make_shared<const CustomArg>(CustomArg{std::move(fill)});
  return LazyBuffer::loadop(LoadOps::CUSTOM, shape, dtype, device, arg, std::move(src));
}

void check_sizes(const RawBuffer& b, const Dims& shape, const char* who) {
  if (static_cast<std::int64_t>(b.size) != prod(shape))
    throw std::logic_error(detail::cat(who, ": a source buffer of ", std::to_string(b.size), " elements for ",
                                       to_string(shape)));
}

// The autograd op: x (any dtype) and an int64 index; the gradient goes to x only.
struct Gather final : FunctionImpl<Gather, 2> {
  Pick pick;
  LazyBufferPtr idx;
  LazyBufferPtr forward(const LazyBufferPtr& x, const LazyBufferPtr& index, std::int64_t dim, bool select) {
    Dims out = x->shape();
    if (select)
      out[static_cast<std::size_t>(dim)] = index->shape()[0];
    else
      out = index->shape();
    pick = Pick{x->shape(), out, dim, select};
    idx = index;
    return custom(
        out, x->dtype, x->device, {x, index}, [p = pick](RawBuffer& o, const std::vector<RawBuffer*>& in) {
          check_sizes(*in[0], p.src, "gather"),
              check_sizes(*in[1], p.select ? Dims{p.out[static_cast<std::size_t>(p.dim)]} : p.out, "gather");
          HostIn src(*in[0]), ix(*in[1]);
          HostOut dst(o);
          auto w = static_cast<std::size_t>(o.dtype.itemsize);
          p.each(reinterpret_cast<const std::int64_t*>(ix.p), [&](std::int64_t oi, std::int64_t si) {
            std::memcpy(dst.p + static_cast<std::size_t>(oi) * w, src.p + static_cast<std::size_t>(si) * w,
                        w);
          });
          dst.done();
        });
  }
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override {
    if (g->dtype != dtypes::float32 && g->dtype != dtypes::float64)
      throw std::invalid_argument(
          detail::cat("gather: the gradient of a ", g->dtype.name, " tensor is not supported"));
    auto gx = custom(pick.src, g->dtype, g->device, {g, idx},
                     [p = pick](RawBuffer& o, const std::vector<RawBuffer*>& in) {
                       HostIn gv(*in[0]), ix(*in[1]);
                       HostOut dst(o);
                       const auto* iv = reinterpret_cast<const std::int64_t*>(ix.p);
                       if (o.dtype == dtypes::float32)
                         scatter_add<float>(p, iv, gv.p, dst.p, o.size);
                       else
                         scatter_add<double>(p, iv, gv.p, dst.p, o.size);
                       dst.done();
                     });
    return {gx, nullptr};
  }
};

// The index as int64, realized, each value checked to lie in [0, n) (negative values are errors, as
// in PyTorch's gather).
Tensor checked_index(const char* who, const Tensor& x, const Tensor& index, std::int64_t dim) {
  if (dtypes::is_float(index.dtype()) || index.dtype() == dtypes::bool_)
    throw std::invalid_argument(
        detail::cat(who, ": the index ", to_string(index), " must be an integer tensor"));
  if (index.device() != x.device())
    throw std::invalid_argument(
        detail::cat(who, ": the index is on ", index.device(), ", the input on ", x.device()));
  Tensor i = index.cast(dtypes::int64).detach();
  std::int64_t n = x.shape()[static_cast<std::size_t>(dim)];
  std::vector<std::int64_t> v = i.realize().to_vector<std::int64_t>();
  for (std::size_t k = 0; k < v.size(); ++k)
    if (v[k] < 0 || v[k] >= n)
      throw std::out_of_range(detail::cat(who, ": index value ", std::to_string(v[k]), " (element ",
                                          std::to_string(k), " of index ", to_string(index.shape()),
                                          ") is out of range for dim ", std::to_string(dim), " of size ",
                                          std::to_string(n), " in input ", to_string(x.shape())));
  return i;
}

// One-hot form for TinyJit steps: out = sum over axis dim's values v of (index == v) * x(v).
Tensor one_hot_gather(const Tensor& x, std::int64_t dim, const Tensor& index) {
  std::int64_t r = x.ndim(), n = x.shape()[static_cast<std::size_t>(dim)];
  std::vector<std::pair<std::int64_t, std::int64_t>> keep;
  for (std::int64_t a = 0; a < r; ++a)
    keep.push_back({0, a == dim ? n : index.shape()[static_cast<std::size_t>(a)]});
  std::vector<std::int64_t> order;
  for (std::int64_t a = 0; a < r; ++a)
    if (a != dim) order.push_back(a);
  order.push_back(dim);
  Tensor xs = x.shrink(keep).permute(order).unsqueeze(dim);  // index's shape with 1 at dim, then n
  std::vector<std::int64_t> full(index.shape().begin(), index.shape().end());
  full.push_back(n);
  Tensor hot = index.unsqueeze(-1).eq(
      Tensor::arange(static_cast<double>(n), {.device = x.device(), .dtype = dtypes::int64}));
  return hot.where(xs.expand(full), 0.0).sum(-1);
}

}  // namespace

Tensor Tensor::gather(std::int64_t dim, const Tensor& index) const {
  std::int64_t d = resolve_axis(dim);
  if (index.ndim() != ndim())
    throw std::invalid_argument(detail::cat("gather: index ", to_string(index.shape()),
                                            " must have the rank of input ", to_string(shape())));
  for (std::int64_t a = 0; a < ndim(); ++a)
    if (a != d && index.shape()[static_cast<std::size_t>(a)] > shape()[static_cast<std::size_t>(a)])
      throw std::invalid_argument(detail::cat("gather: index ", to_string(index.shape()),
                                              " is larger than input ", to_string(shape()), " on axis ",
                                              std::to_string(a)));
  if (ndim() == 0) return *this;
  Tensor i = checked_index("gather", *this, index, d);
  if (CaptureLog::active) return one_hot_gather(*this, d, i);
  return Gather::apply(*this, i, d, false);
}

// A comparison with arange; the values are checked on the host first (a realize), as PyTorch
// raises for a class out of range where a comparison would give a row of zeros.
Tensor Tensor::one_hot(std::int64_t num_classes) const {
  if (!dtypes::is_int(dtype()))
    throw std::invalid_argument(detail::cat("one_hot: needs an integer tensor, got ", dtype().name,
                                            " of shape ", to_string(shape())));
  if (num_classes <= 0)
    throw std::invalid_argument(
        detail::cat("one_hot: num_classes must be positive, got ", std::to_string(num_classes)));
  if (numel() > 0) {
    auto lo = min().item<std::int64_t>(), hi = max().item<std::int64_t>();
    if (lo < 0 || hi >= num_classes)
      throw std::invalid_argument(detail::cat("one_hot: values must be in [0, ", std::to_string(num_classes),
                                              "), got ", std::to_string(lo < 0 ? lo : hi), " in shape ",
                                              to_string(shape())));
  }
  Tensor classes = Tensor::arange(static_cast<double>(num_classes), {.device = device(), .dtype = dtype()});
  return unsqueeze(-1).eq(classes).cast(dtypes::int64);
}

Tensor Tensor::index_select(std::int64_t dim, const Tensor& index) const {
  std::int64_t d = resolve_axis(dim);
  if (index.ndim() != 1 || ndim() == 0)
    throw std::invalid_argument(detail::cat("index_select: index ", to_string(index.shape()),
                                            " must be 1-D and input ", to_string(shape()), " at least 1-D"));
  Tensor i = checked_index("index_select", *this, index, d);
  if (CaptureLog::active) {  // the 1-D index broadcast to the result's shape, then gather's one-hot form
    std::vector<std::int64_t> s(static_cast<std::size_t>(ndim()), 1), out(shape().begin(), shape().end());
    s[static_cast<std::size_t>(d)] = out[static_cast<std::size_t>(d)] = index.shape()[0];
    return one_hot_gather(*this, d, i.reshape(s).expand(out));
  }
  return Gather::apply(*this, i, d, true);
}

std::pair<Tensor, Tensor> Tensor::topk(std::int64_t k, std::int64_t dim, bool largest) const {
  std::int64_t d = resolve_axis(dim), n = ndim() == 0 ? 1 : shape()[static_cast<std::size_t>(d)];
  if (k < 0 || k > n)
    throw std::invalid_argument(detail::cat("topk: k = ", std::to_string(k), " is outside [0, ",
                                            std::to_string(n), "] for dim ", std::to_string(dim), " of ",
                                            to_string(shape())));
  if (CaptureLog::active)
    throw std::logic_error(detail::cat("topk: ", to_string(shape()),
                                       " is chosen on the host, which a TinyJit step cannot replay"));
  if (ndim() == 0) return {*this, Tensor::zeros({}, {.device = device(), .dtype = dtypes::int64})};
  // Rows along the last axis: move dim there, sort each row's indices on the host.
  std::vector<std::int64_t> order;
  for (std::int64_t a = 0; a < ndim(); ++a)
    if (a != d) order.push_back(a);
  order.push_back(d);
  std::vector<double> v = detach().permute(order).cast(dtypes::float64).to_vector<double>();
  std::int64_t rows = n ? static_cast<std::int64_t>(v.size()) / n : 0;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(rows * k)), row(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* x = v.data() + r * n;
    std::iota(row.begin(), row.end(), 0);
    auto before = [&](std::int64_t a, std::int64_t b) {  // NaN first when largest, as PyTorch
      double xa = x[a], xb = x[b];
      if (std::isnan(xa) || std::isnan(xb))
        return largest ? std::isnan(xa) && !std::isnan(xb) : !std::isnan(xa) && std::isnan(xb);
      return largest ? xa > xb : xa < xb;
    };
    std::partial_sort(row.begin(), row.begin() + k, row.end(), [&](std::int64_t a, std::int64_t b) {
      return before(a, b) || (!before(b, a) && a < b);
    });
    std::copy(row.begin(), row.begin() + k, idx.begin() + r * k);
  }
  Dims ps;
  for (std::int64_t a : order) ps.push_back(shape()[static_cast<std::size_t>(a)]);
  ps.back() = k;
  std::vector<std::int64_t> back(order.size());
  for (std::size_t a = 0; a < order.size(); ++a)
    back[static_cast<std::size_t>(order[a])] = static_cast<std::int64_t>(a);
  Tensor indices = Tensor(idx, ps, {.device = device(), .requires_grad = false}).permute(back).contiguous();
  return {gather(d, indices), indices};
}

Tensor Tensor::multinomial(std::int64_t num_samples, bool replacement) const {
  if (ndim() != 1 && ndim() != 2)
    throw std::invalid_argument(
        detail::cat("multinomial: the weights ", to_string(shape()), " must be 1-D or 2-D"));
  std::int64_t n = shape().back();
  if (num_samples < 1 || (!replacement && num_samples > n))
    throw std::invalid_argument(detail::cat("multinomial: cannot draw ", std::to_string(num_samples),
                                            " samples", replacement ? "" : " without replacement",
                                            " from weights ", to_string(shape())));
  Tensor w = detach().cast(dtypes::float32).reshape({-1, n});
  std::vector<float> v = w.to_vector<float>();
  for (std::int64_t r = 0; r < w.shape()[0]; ++r) {
    double s = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      float x = v[static_cast<std::size_t>(r * n + j)];
      if (!(x >= 0) || std::isinf(x))
        throw std::invalid_argument(detail::cat("multinomial: weight ", std::to_string(x), " at (",
                                                std::to_string(r), ", ", std::to_string(j), ") of ",
                                                to_string(shape()), " must be finite and non-negative"));
      s += x;
    }
    if (s <= 0)
      throw std::invalid_argument(detail::cat("multinomial: row ", std::to_string(r), " of weights ",
                                              to_string(shape()), " sums to 0"));
  }
  auto draw = [&] {
    if (replacement || num_samples == 1) {  // how many CDF steps each uniform number in [0, 1) passes
      Tensor cdf = w.cumsum(1);
      cdf = cdf / cdf[{Slice{}, Slice{-1, {}}}];  // the last step is exactly 1, so at most n - 1 pass
      Tensor u = Tensor::rand({w.shape()[0], num_samples, 1}, {.device = device()});
      return (u >= cdf.unsqueeze(1)).cast(dtypes::int64).sum(2).cast(dtypes::int64);
    }
    // Gumbel top-k: the k largest of log w - log(-log u) are a draw without replacement.
    Tensor u = Tensor::rand(w.shape(), {.device = device()}) * (1 - 0x1p-24) + 0x1p-25;
    return (w.log() - (-u.log()).log()).topk(num_samples, 1).second;
  };
  Tensor out = draw();
  return ndim() == 1 ? out.reshape({num_samples}) : out;
}

}  // namespace metagrad
