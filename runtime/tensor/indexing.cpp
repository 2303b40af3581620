// Indexing by data: gather, index_select, topk and multinomial. The kernel language has no load at a
// computed address, so gather and its scatter-add gradient are host loops over the picked elements
// (a LoadOps::CUSTOM fill, O(result)), which a TinyJit step replays (replayable_fill.hpp): they read
// only their buffers and check the index themselves.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/raw_buffer.hpp"
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

  // Each index value in [0, src[dim]): checked_index checks them when the graph is built; a TinyJit
  // replay reads new ones, checked here before any is used.
  void check(const std::int64_t* idx) const {
    const char* who = select ? "index_select" : "gather";
    std::int64_t n = select ? out[static_cast<std::size_t>(dim)] : prod(out),
                 size = src[static_cast<std::size_t>(dim)];
    for (std::int64_t k = 0; k < n; ++k)
      if (idx[k] < 0 || idx[k] >= size)
        throw std::out_of_range(detail::cat(who, ": index value ", std::to_string(idx[k]), " (element ",
                                            std::to_string(k), ") is out of range for dim ",
                                            std::to_string(dim), " of size ", std::to_string(size),
                                            " in input ", to_string(src)));
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

// A source may be larger than its shape: TinyJit's memory plan lends a scratch slot a buffer shared with
// larger ones (the GPT's position indices, 64 elements, in a 128-element buffer).
void check_sizes(const RawBuffer& b, const Dims& shape, const char* who) {
  if (static_cast<std::int64_t>(b.size) < prod(shape))
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
    return custom(out, x->dtype, x->device, {x, index},
                  ReplayableFill{[p = pick](RawBuffer& o, const std::vector<RawBuffer*>& in) {
                    check_sizes(*in[0], p.src, "gather"),
                        check_sizes(*in[1], p.select ? Dims{p.out[static_cast<std::size_t>(p.dim)]} : p.out,
                                    "gather");
                    HostIn src(*in[0]), ix(*in[1]);
                    const auto* iv = reinterpret_cast<const std::int64_t*>(ix.p);
                    p.check(iv);
                    HostOut dst(o);
                    auto w = static_cast<std::size_t>(o.dtype.itemsize);
                    p.each(iv, [&](std::int64_t oi, std::int64_t si) {
                      std::memcpy(dst.p + static_cast<std::size_t>(oi) * w,
                                  src.p + static_cast<std::size_t>(si) * w, w);
                    });
                    dst.done();
                  }});
  }
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override {
    if (g->dtype != dtypes::float32 && g->dtype != dtypes::float64)
      throw std::invalid_argument(
          detail::cat("gather: the gradient of a ", g->dtype.name, " tensor is not supported"));
    auto gx = custom(pick.src, g->dtype, g->device, {g, idx},
                     ReplayableFill{[p = pick](RawBuffer& o, const std::vector<RawBuffer*>& in) {
                       HostIn gv(*in[0]), ix(*in[1]);
                       const auto* iv = reinterpret_cast<const std::int64_t*>(ix.p);
                       p.check(iv);
                       HostOut dst(o);
                       if (o.dtype == dtypes::float32)
                         scatter_add<float>(p, iv, gv.p, dst.p, o.size);
                       else
                         scatter_add<double>(p, iv, gv.p, dst.p, o.size);
                       dst.done();
                     }});
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
  return Gather::apply(*this, i, d, true);
}

namespace {

void host_only(const Tensor& x, const char* who) {
  if (CaptureLog::active)
    throw std::logic_error(detail::cat(who, ": ", to_string(x.shape()),
                                       " is chosen on the host, which a TinyJit step cannot replay"));
}

enum class Reduce { NONE, SUM, PROD, MEAN, AMAX, AMIN };

template <class F>
void by_dtype(DType dt, F f) {  // f(T{}) with T the host type of dt (of those scatter computes in)
  if (dt == dtypes::float32) return f(float{});
  if (dt == dtypes::float64) return f(double{});
  if (dt == dtypes::int32) return f(std::int32_t{});
  if (dt == dtypes::int16) return f(std::int16_t{});
  if (dt == dtypes::uint16) return f(std::uint16_t{});
  if (dt == dtypes::uint32) return f(std::uint32_t{});
  if (dt == dtypes::uint64) return f(std::uint64_t{});
  if (dt == dtypes::int64) return f(std::int64_t{});
  if (dt == dtypes::int8) return f(std::int8_t{});
  if (dt == dtypes::uint8) return f(std::uint8_t{});
  throw std::logic_error(detail::cat("scatter: no host loop for ", dt.name));
}

// out = self, then each src element (src has index's shape) reduced into the slot index picks.
template <class T>
void scatter_into(const Pick& p, const std::int64_t* idx, const T* self, const T* src, T* out, std::size_t n,
                  Reduce r, bool include_self) {
  std::copy(self, self + n, out);
  if (r == Reduce::NONE) {
    p.each(idx, [&](std::int64_t e, std::int64_t o) { out[o] = src[e]; });
    return;
  }
  std::vector<std::int64_t> count(n, include_self ? 1 : 0);
  p.each(idx, [&](std::int64_t e, std::int64_t o) {
    T v = src[e];
    if (count[static_cast<std::size_t>(o)]++ == 0) {
      out[o] = v;  // the first value into a slot that leaves self out
      return;
    }
    T& a = out[o];
    switch (r) {
      case Reduce::SUM:
      case Reduce::MEAN:
        a = T(a + v);
        break;
      case Reduce::PROD:
        a = T(a * v);
        break;
      case Reduce::AMAX:
        a = v > a || v != v ? v : a;
        break;  // NaN wins, as PyTorch
      case Reduce::AMIN:
        a = v < a || v != v ? v : a;
        break;
      case Reduce::NONE:
        break;
    }
  });
  if (r == Reduce::MEAN)
    for (std::size_t i = 0; i < n; ++i)
      if (count[i] > 1) {
        if constexpr (std::is_floating_point_v<T>)
          out[i] = T(out[i] / T(count[i]));
        else  // floor division, as PyTorch's integer mean
          out[i] = T(std::floor(double(out[i]) / double(count[i])));
      }
}

// The autograd op: self and src (of index's shape, one dtype) and an int64 index (no gradient).
struct Scatter final : FunctionImpl<Scatter, 3> {
  Pick pick;
  LazyBufferPtr idx, self, src, ret;
  Reduce reduce;
  bool include_self;
  LazyBufferPtr forward(const LazyBufferPtr& x, const LazyBufferPtr& s, const LazyBufferPtr& index,
                        std::int64_t dim, Reduce r, bool incl) {
    pick = Pick{x->shape(), index->shape(), dim, false};
    idx = index, self = x, src = s, reduce = r, include_self = incl;
    return ret = custom(x->shape(), x->dtype, x->device, {x, s, index},
                        [p = pick, r, incl](RawBuffer& o, const std::vector<RawBuffer*>& in) {
                          check_sizes(*in[0], p.src, "scatter"), check_sizes(*in[1], p.out, "scatter"),
                              check_sizes(*in[2], p.out, "scatter");
                          HostIn a(*in[0]), b(*in[1]), ix(*in[2]);
                          HostOut dst(o);
                          by_dtype(o.dtype, [&]<class T>(T) {
                            scatter_into(p, reinterpret_cast<const std::int64_t*>(ix.p),
                                         reinterpret_cast<const T*>(a.p), reinterpret_cast<const T*>(b.p),
                                         reinterpret_cast<T*>(dst.p), o.size, r, incl);
                          });
                          dst.done();
                        });
  }
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g_) override;
};

// Gradients through Tensor ops on detached values (no graph): see Tensor::scatter_reduce's comment.
std::vector<std::int64_t> dims(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }
std::vector<LazyBufferPtr> Scatter::backward(const LazyBufferPtr& g_) {
  Tensor g(g_, false), index(idx, false), x(self, false), s(src, false), out(ret, false);
  std::int64_t d = pick.dim;
  if (reduce == Reduce::PROD)
    throw std::invalid_argument(detail::cat(
        "scatter_reduce: the gradient of \"prod\" is not supported (input ", to_string(x.shape()), ")"));
  // Slots some src element reaches, and how many (self counted where included).
  Tensor hits =
      Tensor::zeros(x.shape(), {.device = x.device(), .dtype = g.dtype()})
          .scatter_add(d, index, Tensor::ones(index.shape(), {.device = x.device(), .dtype = g.dtype()}));
  Tensor reached = hits.gt(hits.scalar_like(0));
  Tensor gx = g, gs = g.gather(d, index);
  if (reduce == Reduce::NONE || !include_self) gx = reached.where(gx.scalar_like(0), gx);
  if (reduce == Reduce::NONE) {  // only the write that stayed (the last into its slot) gets a gradient
    TensorOptions ints{.device = x.device(), .dtype = dtypes::int64};
    Tensor pos = Tensor::arange(static_cast<double>(index.numel()), ints).reshape(dims(index));
    Tensor last = Tensor::full(x.shape(), -1, ints).scatter(d, index, pos).gather(d, index);
    gs = last.eq(pos).where(gs, gs.scalar_like(0));
  }
  if (reduce == Reduce::MEAN) {
    Tensor n = hits + (include_self ? 1 : 0);
    n = n.maximum(1);
    gx = gx / n, gs = (g / n).gather(d, index);
  } else if (reduce == Reduce::AMAX || reduce == Reduce::AMIN) {  // ties share
    Tensor pick_out = out.gather(d, index);
    Tensor self_in = x.eq(out).cast(g.dtype());
    if (!include_self) self_in = reached.where(self_in.scalar_like(0), self_in);
    Tensor src_in = s.eq(pick_out).cast(g.dtype());
    Tensor n =
        Tensor::zeros(x.shape(), {.device = x.device(), .dtype = g.dtype()}).scatter_add(d, index, src_in) +
        self_in;
    n = n.maximum(1);
    gx = g * self_in / n, gs = (g / n).gather(d, index) * src_in;
  }
  return {needs_input_grad[0] ? gx.lazydata.get() : nullptr,
          needs_input_grad[1] ? gs.lazydata.get() : nullptr, nullptr};
}

Reduce reduce_of(std::string_view r) {
  if (r == "sum") return Reduce::SUM;
  if (r == "prod") return Reduce::PROD;
  if (r == "mean") return Reduce::MEAN;
  if (r == "amax") return Reduce::AMAX;
  if (r == "amin") return Reduce::AMIN;
  throw std::invalid_argument(
      detail::cat("scatter_reduce: reduce must be \"sum\", \"prod\", \"mean\", \"amax\" or "
                  "\"amin\", got \"",
                  std::string(r), "\""));
}

Tensor scatter_op(const char* who, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src_,
                  Reduce r, bool include_self) {
  std::int64_t nd = std::max<std::int64_t>(x.ndim(), 1), d = dim < 0 ? dim + nd : dim;
  auto shapes = [&] {
    return detail::cat(" (input ", to_string(x.shape()), ", index ", to_string(index.shape()), ", src ",
                       to_string(src_.shape()), ")");
  };
  if (d < 0 || d >= nd)
    throw std::invalid_argument(
        detail::cat(who, ": dim ", std::to_string(dim), " is out of range", shapes()));
  if (index.ndim() != x.ndim() || src_.ndim() != x.ndim())
    throw std::invalid_argument(detail::cat(who, ": index and src must have the input's rank", shapes()));
  for (std::int64_t a = 0; a < x.ndim(); ++a) {
    auto i = static_cast<std::size_t>(a);
    if (index.shape()[i] > src_.shape()[i] || (a != d && index.shape()[i] > x.shape()[i]))
      throw std::invalid_argument(detail::cat(who, ": index is larger than src, or than the input off dim ",
                                              std::to_string(d), ", on axis ", std::to_string(a), shapes()));
  }
  if (src_.device() != x.device())
    throw std::invalid_argument(
        detail::cat(who, ": src is on ", src_.device(), ", the input on ", x.device()));
  host_only(x, who);
  if (x.ndim() == 0) {
    Tensor one = x.reshape({1});
    return scatter_op(who, one, 0, index.reshape({1}), src_.reshape({1}), r, include_self).reshape({});
  }
  Tensor i = checked_index(who, x, index, d);
  std::vector<std::pair<std::int64_t, std::int64_t>> within;
  for (std::int64_t n : index.shape()) within.push_back({0, n});
  Tensor src = src_.cast(x.dtype()).shrink(within);
  // float16 and bool compute in float32 and int32 (a bool sum is an or, its max an or, its min an and)
  DType dt = x.dtype() == dtypes::float16 ? dtypes::float32
             : x.dtype() == dtypes::bool_ ? dtypes::int32
                                          : x.dtype();
  if (dt != x.dtype())
    return scatter_op(who, x.cast(dt), d, i, src.cast(dt), r, include_self).cast(x.dtype());
  if (index.numel() == 0) return x + src.sum().cast(x.dtype()) * 0;  // nothing moves; the graph still has src
  return Scatter::apply(x, src, i, d, r, include_self);
}

// value in x's dtype, broadcast to index's shape: scatter's source.
Tensor value_source(const Tensor& x, const Tensor& index, double value) {
  Tensor v = scalar_for(x, value, !dtypes::is_float(x.dtype())).cast(x.dtype());
  return v.reshape(std::vector<std::int64_t>(index.shape().size(), 1))
      .expand({index.shape().begin(), index.shape().end()});
}
// PyTorch's scatter(..., reduce=): "add" and "multiply" accumulate into this, as scatter_reduce's
// "sum" and "prod" with include_self.
Reduce scatter_reduce_of(std::string_view r) {
  if (r == "add") return Reduce::SUM;
  if (r == "multiply") return Reduce::PROD;
  throw std::invalid_argument(
      detail::cat("scatter: reduce must be \"add\" or \"multiply\", got \"", std::string(r), "\""));
}
}  // namespace

Tensor Tensor::scatter(std::int64_t dim, const Tensor& index, const Tensor& src) const {
  return scatter_op("scatter", *this, dim, index, src, Reduce::NONE, true);
}
Tensor Tensor::scatter(std::int64_t dim, const Tensor& index, double value) const {
  return scatter_op("scatter", *this, dim, index, value_source(*this, index, value), Reduce::NONE, true);
}
Tensor Tensor::scatter(std::int64_t dim, const Tensor& index, const Tensor& src,
                       std::string_view reduce) const {
  return scatter_op("scatter", *this, dim, index, src, scatter_reduce_of(reduce), true);
}
Tensor Tensor::scatter(std::int64_t dim, const Tensor& index, double value, std::string_view reduce) const {
  Reduce r = scatter_reduce_of(reduce);
  return scatter_op("scatter", *this, dim, index, value_source(*this, index, value), r, true);
}
Tensor Tensor::scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src) const {
  return scatter_op("scatter_add", *this, dim, index, src, Reduce::SUM, true);
}
// Gradients (PyTorch's): scatter passes g to the slots not written and g gathered to the writes that stay;
// sum passes g to this and g gathered to src; mean divides both by the slot's count;
// amax and amin pass it to the elements equal to the result, shared among ties; without include_self the
// slots that receive give this nothing.
Tensor Tensor::scatter_reduce(std::int64_t dim, const Tensor& index, const Tensor& src,
                              std::string_view reduce, bool include_self) const {
  return scatter_op("scatter_reduce", *this, dim, index, src, reduce_of(reduce), include_self);
}

// The elements where the (broadcast) mask holds: an index_select of the flattened tensor, so differentiable.
Tensor Tensor::masked_select(const Tensor& mask) const {
  if (mask.dtype() != dtypes::bool_)
    throw std::invalid_argument(detail::cat("masked_select: the mask ", to_string(mask.shape()), " is ",
                                            mask.dtype().name, ", not bool"));
  std::size_t n = std::max(shape().size(), mask.shape().size());
  std::vector<std::int64_t> out(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t a = i + shape().size() >= n ? shape()[i + shape().size() - n] : 1,
                 b = i + mask.shape().size() >= n ? mask.shape()[i + mask.shape().size() - n] : 1;
    if (a != b && a != 1 && b != 1)
      throw std::invalid_argument(detail::cat("masked_select: mask ", to_string(mask.shape()), " and input ",
                                              to_string(shape()), " do not broadcast"));
    out[i] = a == 1 ? b : a;
  }
  auto to = [&](const Tensor& t) {
    std::vector<std::int64_t> s(n - t.shape().size(), 1);
    s.insert(s.end(), t.shape().begin(), t.shape().end());
    return t.reshape(s).expand(out);
  };
  host_only(*this, "masked_select");
  std::vector<std::int32_t> m = to(mask).cast(dtypes::int32).to_vector<std::int32_t>();
  std::vector<std::int64_t> at;
  for (std::size_t k = 0; k < m.size(); ++k)
    if (m[k]) at.push_back(static_cast<std::int64_t>(k));
  Tensor flat = to(*this).reshape({-1});
  if (at.empty()) return flat.shrink({{0, 0}});
  return flat.index_select(0, Tensor(at, {static_cast<std::int64_t>(at.size())}, {.device = device()}));
}

Tensor Tensor::nonzero() const {
  host_only(*this, "nonzero");
  std::vector<std::int32_t> m = ne(scalar_for(*this, 0, true)).cast(dtypes::int32).to_vector<std::int32_t>();
  std::vector<std::int64_t> coords;
  std::vector<std::int64_t> i(shape().size(), 0);
  std::int64_t count = 0;
  for (std::int32_t v : m) {
    if (v) coords.insert(coords.end(), i.begin(), i.end()), ++count;
    for (std::size_t a = i.size(); a-- > 0;) {
      if (++i[a] < shape()[a]) break;
      i[a] = 0;
    }
  }
  return Tensor(coords, {count, ndim()}, {.device = device()});
}

namespace {
// x along axis d as rows on the host (d moved last, as float64), and the way back: rows of k int64
// indices as a tensor of x's layout with k at d. Host choices cannot replay in a TinyJit step.
struct HostRows {
  std::vector<std::int64_t> order, back;
  std::vector<double> v;
  std::int64_t n, rows;
  HostRows(const Tensor& x, std::int64_t d, const char* who) {
    host_only(x, who);
    for (std::int64_t a = 0; a < x.ndim(); ++a)
      if (a != d) order.push_back(a);
    order.push_back(d);
    back.resize(order.size());
    for (std::size_t a = 0; a < order.size(); ++a) back[static_cast<std::size_t>(order[a])] = std::int64_t(a);
    v = x.detach().permute(order).cast(dtypes::float64).to_vector<double>();
    n = x.shape()[static_cast<std::size_t>(d)];
    rows = n ? static_cast<std::int64_t>(v.size()) / n : 0;
  }
  Tensor indices(const Tensor& x, const std::vector<std::int64_t>& idx, std::int64_t k) const {
    Dims ps;
    for (std::int64_t a : order) ps.push_back(x.shape()[static_cast<std::size_t>(a)]);
    ps.back() = k;
    return Tensor(idx, ps, {.device = x.device(), .requires_grad = false}).permute(back).contiguous();
  }
};
}  // namespace

std::pair<Tensor, Tensor> Tensor::topk(std::int64_t k, std::int64_t dim, bool largest) const {
  std::int64_t d = resolve_axis(dim), n = ndim() == 0 ? 1 : shape()[static_cast<std::size_t>(d)];
  if (k < 0 || k > n)
    throw std::invalid_argument(detail::cat("topk: k = ", std::to_string(k), " is outside [0, ",
                                            std::to_string(n), "] for dim ", std::to_string(dim), " of ",
                                            to_string(shape())));
  if (ndim() == 0) {
    host_only(*this, "topk");
    return {*this, Tensor::zeros({}, {.device = device(), .dtype = dtypes::int64})};
  }
  HostRows h(*this, d, "topk");
  std::vector<std::int64_t> idx(static_cast<std::size_t>(h.rows * k)), row(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < h.rows; ++r) {
    const double* x = h.v.data() + r * n;
    std::iota(row.begin(), row.end(), 0);
    auto before = [&](std::int64_t a, std::int64_t b) {  // NaN first when largest, as PyTorch
      double xa = x[a], xb = x[b];
      if (std::isnan(xa) || std::isnan(xb))
        return largest ? std::isnan(xa) && !std::isnan(xb) : !std::isnan(xa) && std::isnan(xb);
      return largest ? xa > xb : xa < xb;
    };
    auto order = [&](std::int64_t a, std::int64_t b) { return before(a, b) || (!before(b, a) && a < b); };
    if (k == n)
      std::sort(row.begin(), row.end(), order);
    else
      std::partial_sort(row.begin(), row.begin() + k, row.end(), order);
    std::copy(row.begin(), row.begin() + k, idx.begin() + r * k);
  }
  Tensor indices = h.indices(*this, idx, k);
  return {gather(d, indices), indices};
}

// All of dim, in order: topk's order is total (ties by index), so the sort is stable.
std::pair<Tensor, Tensor> Tensor::sort(std::int64_t dim, bool descending) const {
  host_only(*this, "sort");
  std::int64_t d = resolve_axis(dim);
  return topk(ndim() == 0 ? 1 : shape()[static_cast<std::size_t>(d)], d, descending);
}
Tensor Tensor::argsort(std::int64_t dim, bool descending) const { return sort(dim, descending).second; }

namespace {
// PyTorch's rule: an element at least as large (small) as the running one takes over, so the last of
// equal values wins, and a NaN takes over and keeps the place until the next NaN.
std::pair<Tensor, Tensor> cumulative_extreme(const Tensor& x, std::int64_t axis, bool max, const char* who) {
  std::int64_t nd = std::max<std::int64_t>(x.ndim(), 1), d = axis < 0 ? axis + nd : axis;
  if (d < 0 || d >= nd)
    throw std::invalid_argument(detail::cat(who, ": axis ", std::to_string(axis),
                                            " is out of range for shape ", to_string(x.shape())));
  if (x.ndim() == 0) {
    auto [v, i] = cumulative_extreme(x.reshape({1}), 0, max, who);
    return {v.reshape({}), i.reshape({})};
  }
  HostRows h(x, d, who);
  std::vector<std::int64_t> idx(h.v.size());
  for (std::int64_t r = 0; r < h.rows; ++r) {
    const double* v = h.v.data() + r * h.n;
    double best = v[0];
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < h.n; ++i) {
      double c = v[i];
      if (std::isnan(c) || (!std::isnan(best) && (max ? c >= best : c <= best))) best = c, at = i;
      idx[static_cast<std::size_t>(r * h.n + i)] = at;
    }
  }
  Tensor indices = h.indices(x, idx, h.n);
  return {x.numel() ? x.gather(d, indices) : x, indices};
}
}  // namespace

std::pair<Tensor, Tensor> Tensor::cummax(std::int64_t axis) const {
  return cumulative_extreme(*this, axis, true, "cummax");
}
std::pair<Tensor, Tensor> Tensor::cummin(std::int64_t axis) const {
  return cumulative_extreme(*this, axis, false, "cummin");
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
