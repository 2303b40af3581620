// Advanced indexing, PyTorch's: subscripts holding integer or bool tensors, read (operator[]) and written
// (index_put). Both come down to the flat offsets, in x, of the elements the subscript names: computed on
// the host from the realized indices (O(result), as gather's own loop), then a flat index_select (a read,
// whose gradient is gather's scatter-add) or a flat scatter / scatter_add (a write, with scatter's
// gradients). Basic entries (integers, slices, new axes) take part through the same offsets.
#include <algorithm>
#include <stdexcept>

#include "metagrad/detail/cat.hpp"
#include "metagrad/tensor.hpp"
#include "subscript.hpp"

namespace metagrad {

Index::Index(const Tensor& t) : tensor(std::make_shared<const Tensor>(t)) {}

bool subscript::advanced(const std::vector<Index>& index) {
  return std::any_of(index.begin(), index.end(), [](const Index& i) { return i.tensor != nullptr; });
}

namespace {
using Shape = std::vector<std::int64_t>;

std::string str(const Shape& v) {
  return detail::dims_string(v);
}  // (any length: an error may name too many)

// The elements a subscript names: the result's shape and each element's flat offset in x, row-major.
struct Offsets {
  Shape shape;
  std::vector<std::int64_t> flat;
};

// A result axis made by a basic entry: count elements from start, step apart, along an x axis of the
// given stride (a new axis: one element, stride 0).
struct Axis {
  std::int64_t count, start, step, stride;
};

// An advanced index: the x axis it indexes and its values (in range, wrapped), of shape `shape`.
struct Adv {
  std::size_t xdim;
  Shape shape;
  std::vector<std::int64_t> v;
};

// Row-major offsets of the elements the axes take, each axis's offset added.
std::vector<std::int64_t> walk(const std::vector<Axis>& axes) {
  std::vector<std::int64_t> o{0};
  for (const Axis& a : axes) {
    std::vector<std::int64_t> next;
    next.reserve(o.size() * static_cast<std::size_t>(a.count));
    for (std::int64_t p : o)
      for (std::int64_t i = 0; i < a.count; ++i) next.push_back(p + (a.start + i * a.step) * a.stride);
    o = std::move(next);
  }
  return o;
}

Offsets offsets(const char* who, const Tensor& x, const std::vector<Index>& index) {
  const Dims& xs = x.shape(who);
  auto r = static_cast<std::size_t>(xs.size());
  auto fail = [&](const std::string& why) -> void {
    throw std::invalid_argument(detail::cat(who, ": indexing a tensor of shape ", to_string(xs), ": ", why));
  };
  std::int64_t consuming = 0, ellipses = 0;
  for (const Index& i : index) {
    if (const Tensor* t = i.tensor.get())
      consuming += t->dtype() == dtypes::bool_ ? t->ndim() : 1;
    else
      consuming += std::holds_alternative<std::int64_t>(i) || std::holds_alternative<Slice>(i);
    ellipses += std::holds_alternative<EllipsisT>(i);
  }
  if (ellipses > 1) fail("an index can only have a single Ellipsis");
  if (consuming > x.ndim())
    fail(detail::cat("too many indices (", std::to_string(consuming), ") for ", std::to_string(x.ndim()),
                     " dimensions"));
  std::vector<std::int64_t> stride(r, 1);
  for (std::size_t a = r; a-- > 1;) stride[a - 1] = stride[a] * xs[a];
  std::int64_t base = 0;  // the integers' offset
  std::vector<Axis> axes;
  std::vector<Adv> adv;
  std::vector<std::size_t> adv_at;  // how many basic axes come before each advanced index
  std::size_t d = 0;
  auto full = [&](std::size_t n) {
    for (std::size_t k = 0; k < n; ++k, ++d) axes.push_back({xs[d], 0, 1, stride[d]});
  };
  for (const Index& i : index) {
    if (const Tensor* t = i.tensor.get()) {
      if (t->dtype() == dtypes::bool_) {  // a mask: its coordinates, one integer index per axis it covers
        auto k = static_cast<std::size_t>(t->ndim());
        if (k == 0) fail("a 0-d bool index is not supported");
        for (std::size_t a = 0; a < k; ++a)
          if (t->shape()[a] != xs[d + a])
            fail(detail::cat("the bool mask ", to_string(t->shape()), " does not match the indexed axes ",
                             std::to_string(d), " to ", std::to_string(d + k - 1)));
        Tensor nz = t->nonzero();
        std::vector<std::int64_t> c = nz.to_vector<std::int64_t>();
        std::int64_t n = nz.shape()[0];
        for (std::size_t a = 0; a < k; ++a, ++d) {
          Adv& e = adv.emplace_back(Adv{d, {n}, {}});
          for (std::int64_t j = 0; j < n; ++j) e.v.push_back(c[static_cast<std::size_t>(j) * k + a]);
          adv_at.push_back(axes.size());
        }
        continue;
      }
      if (dtypes::is_float(t->dtype()))
        fail(detail::cat("an index tensor must be integer or bool, got ", t->dtype().name, " ",
                         to_string(t->shape())));
      std::int64_t n = xs[d];
      Adv& e = adv.emplace_back(Adv{d, Shape(t->shape().begin(), t->shape().end()),
                                    t->cast(dtypes::int64).detach().to_vector<std::int64_t>()});
      for (std::size_t k = 0; k < e.v.size(); ++k) {
        std::int64_t v = e.v[k];
        if (v < -n || v >= n)
          throw std::out_of_range(detail::cat(
              who, ": index ", std::to_string(v), " (element ", std::to_string(k), " of the index tensor ",
              to_string(t->shape()), ") is out of range for dimension ", std::to_string(d), " of size ",
              std::to_string(n), " of a tensor of shape ", to_string(xs)));
        e.v[k] = v < 0 ? v + n : v;
      }
      adv_at.push_back(axes.size());
      ++d;
    } else if (std::holds_alternative<EllipsisT>(i)) {
      full(r - static_cast<std::size_t>(consuming));
    } else if (std::holds_alternative<NewAxisT>(i)) {
      axes.push_back({1, 0, 0, 0});
    } else {
      subscript::Taken tk = subscript::taken(x, i, d);
      if (std::holds_alternative<std::int64_t>(i))
        base += tk.start * stride[d];
      else
        axes.push_back({tk.count, tk.start, tk.step, stride[d]});
      ++d;
    }
  }
  full(r - d);
  // The index tensors broadcast together (numpy's rule) to B.
  Shape B;
  for (const Adv& e : adv) {
    if (e.shape.size() > B.size()) B.insert(B.begin(), e.shape.size() - B.size(), 1);
    for (std::size_t k = 0; k < e.shape.size(); ++k) {
      std::int64_t& b = B[B.size() - e.shape.size() + k];
      std::int64_t s = e.shape[k];
      if (s != b && s != 1 && b != 1) {
        std::string all;
        for (const Adv& f : adv) all += (all.empty() ? "" : ", ") + str(f.shape);
        fail(detail::cat("the index tensors of shapes ", all, " do not broadcast together"));
      }
      if (b == 1) b = s;
    }
  }
  // Each element of B's offset: every index's value there (broadcast) times its axis's stride.
  std::int64_t nb = 1;
  for (std::int64_t b : B) nb *= b;
  std::vector<std::int64_t> boff(static_cast<std::size_t>(nb), 0), at(B.size(), 0);
  for (const Adv& e : adv) {
    Shape es(B.size(), 0);  // the index's stride along each axis of B, 0 where broadcast
    for (std::size_t k = e.shape.size(), s = 1; k-- > 0;) {
      std::size_t kb = B.size() - e.shape.size() + k;
      es[kb] = e.shape[k] == 1 ? 0 : static_cast<std::int64_t>(s);
      s *= static_cast<std::size_t>(e.shape[k]);
    }
    std::fill(at.begin(), at.end(), 0);
    std::int64_t src = 0;
    for (std::int64_t j = 0; j < nb; ++j) {
      boff[static_cast<std::size_t>(j)] += e.v[static_cast<std::size_t>(src)] * stride[e.xdim];
      for (std::size_t a = B.size(); a-- > 0;) {  // the odometer over B, src following
        src += es[a];
        if (++at[a] < B[a]) break;
        src -= es[a] * B[a];
        at[a] = 0;
      }
    }
  }
  // B replaces the indexed axes where they are adjacent (no basic axis between them), else goes first.
  bool adjacent = std::all_of(adv_at.begin(), adv_at.end(), [&](std::size_t p) { return p == adv_at[0]; });
  auto p = static_cast<std::ptrdiff_t>(adjacent && !adv_at.empty() ? adv_at[0] : 0);
  std::vector<Axis> outer(axes.begin(), axes.begin() + p), inner(axes.begin() + p, axes.end());
  Offsets o;
  for (const Axis& a : outer) o.shape.push_back(a.count);
  o.shape.insert(o.shape.end(), B.begin(), B.end());
  for (const Axis& a : inner) o.shape.push_back(a.count);
  std::vector<std::int64_t> ov = walk(outer), iv = walk(inner);
  o.flat.reserve(ov.size() * boff.size() * iv.size());
  for (std::int64_t a : ov)
    for (std::int64_t b : boff)
      for (std::int64_t c : iv) o.flat.push_back(base + a + b + c);
  return o;
}

Tensor offsets_tensor(const Offsets& o, const Tensor& x) {
  return Tensor(o.flat, {static_cast<std::int64_t>(o.flat.size())},
                {.device = x.device(), .requires_grad = false});
}

}  // namespace

Tensor subscript::advanced_read(const Tensor& x, const std::vector<Index>& index) {
  Offsets o = offsets("index", x, index);
  Tensor flat = x.reshape({-1});
  if (o.flat.empty()) return flat.shrink({{0, 0}}).reshape(o.shape);
  return flat.index_select(0, offsets_tensor(o, x)).reshape(o.shape);
}

Tensor Tensor::index_put(const std::vector<Index>& index, const Tensor& values, bool accumulate) const {
  Offsets o = offsets("index_put", *this, index);
  const Dims& vs = values.shape();
  bool fits = vs.size() <= o.shape.size();
  for (std::size_t k = 0; fits && k < vs.size(); ++k) {
    std::int64_t want = o.shape[o.shape.size() - vs.size() + k];
    fits = vs[k] == want || vs[k] == 1;
  }
  if (!fits)
    throw std::invalid_argument(detail::cat("index_put: values ", to_string(vs),
                                            " do not broadcast to the indexed shape ", str(o.shape),
                                            " of a tensor of shape ", to_string(shape())));
  if (values.device() != device())
    throw std::invalid_argument(
        detail::cat("index_put: the values are on ", values.device(), ", the tensor on ", device()));
  Shape padded(o.shape.size() - vs.size(), 1);
  padded.insert(padded.end(), vs.begin(), vs.end());
  Tensor v = values.cast(dtype()).reshape(padded).expand(o.shape).reshape({-1});
  Tensor flat = reshape({-1}), at = offsets_tensor(o, *this);
  Tensor out = accumulate ? flat.scatter_add(0, at, v) : flat.scatter(0, at, v);
  return out.reshape(Shape(shape().begin(), shape().end()));
}

// The old data keeps its own state (the result's graph refers to it), and this handle's state takes the
// result's data and graph, so every copy sees the write.
Tensor& Tensor::index_put_(const std::vector<Index>& index, const Tensor& values, bool accumulate) {
  if (requires_grad.get().value_or(false) && !state_->ctx)
    throw std::invalid_argument(
        detail::cat("index_put_: ", to_string(*this),
                    " is a leaf that requires grad, so cannot be written in place; use "
                    "index_put"));
  Tensor old(defined_data(), state_->requires_grad);
  old._ctx = state_->ctx;
  Tensor r = old.index_put(index, values, accumulate);
  note_assign(state_->lazydata, r.state_->lazydata);  // TinyJit learns which state a step updates
  state_->lazydata = r.state_->lazydata;
  state_->ctx = r.state_->ctx;
  state_->requires_grad = r.state_->requires_grad;
  return *this;
}

}  // namespace metagrad
