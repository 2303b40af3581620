// Movement Tensor ops: views through the movement mlops (nothing is copied), and what is built on them.
// Every hlop here is reshape/expand/permute/pad/shrink/flip (plus adds of zero-padded pieces), so
// each stays a view of its input and is differentiable through those mlops alone.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>

#include "metagrad/detail/cat.hpp"
#include "metagrad/tensor.hpp"
#include "subscript.hpp"

namespace metagrad {

namespace {
using Shape = std::vector<std::int64_t>;
using PadArg = std::vector<std::pair<std::int64_t, std::int64_t>>;

std::string str(const Shape& v) {
  return detail::dims_string(v);
}  // (any length: an error may name too many)

// `axis` counted from the end when negative, checked against a rank of n (ops that add an axis
// pass n + 1).
std::int64_t axis_in(const char* op, const Tensor& t, std::int64_t axis, std::int64_t n) {
  std::int64_t a = axis < 0 ? axis + std::max<std::int64_t>(n, 1) : axis;  // a 0-d tensor has axis 0 = -1
  if (a < 0 || a >= n)
    throw std::invalid_argument(detail::cat(op, " of shape ", to_string(t.shape()), ": dim ",
                                            std::to_string(axis), " is out of range [", std::to_string(-n),
                                            ", ", std::to_string(n - 1), "]"));
  return a;
}

Shape shape_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end()); }
PadArg zero_pads(std::int64_t n) { return PadArg(static_cast<std::size_t>(n), {0, 0}); }
PadArg full_range(const Tensor& t) {
  PadArg r;
  for (std::int64_t s : t.shape()) r.push_back({0, s});
  return r;
}
}  // namespace

std::int64_t Tensor::resolve_axis(std::int64_t axis) const {
  std::int64_t n = ndim();
  std::int64_t a = axis < 0 ? axis + std::max<std::int64_t>(n, 1) : axis;  // a 0-d tensor has axis 0 = -1
  if (a < 0 || a >= std::max<std::int64_t>(n, 1))
    throw std::invalid_argument(
        detail::cat("axis ", std::to_string(axis), " is out of range for shape ", to_string(shape())));
  return a;
}

// ---- the mlop wrappers: arguments are checked here, before an mlop sees them ----

Tensor Tensor::reshape(const std::vector<std::int64_t>& new_shape) const {
  if (new_shape.size() > kMaxDims)
    throw std::length_error(detail::cat("reshape of ", to_string(shape()), " to ", str(new_shape), ": ",
                                        std::to_string(new_shape.size()), " dimensions, more than the ",
                                        std::to_string(kMaxDims), " of this build (METAGRAD_MAX_DIMS)"));
  Dims s;
  std::int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      if (infer >= 0)
        throw std::invalid_argument(detail::cat("reshape of ", to_string(shape()), " to ", str(new_shape),
                                                ": only one dimension can be -1"));
      infer = static_cast<std::int64_t>(i);
    } else if (new_shape[i] < 0) {
      throw std::invalid_argument(
          detail::cat("reshape of ", to_string(shape()), " to ", str(new_shape), ": negative size"));
    } else if (new_shape[i] != 0 && __builtin_mul_overflow(known, new_shape[i], &known)) {
      throw std::invalid_argument(detail::cat("reshape of ", to_string(shape()), " to ", str(new_shape),
                                              ": has more elements than int64 holds"));
    }
    s.push_back(new_shape[i]);
  }
  bool zero = std::find(new_shape.begin(), new_shape.end(), 0) != new_shape.end();
  if (infer >= 0) {
    if (zero || numel() % known != 0)
      throw std::invalid_argument(
          detail::cat("reshape of ", to_string(shape()), " to ", str(new_shape), ": cannot infer the -1"));
    s[static_cast<std::size_t>(infer)] = numel() / known;
  }
  if (check_shape("reshape", s) != numel())
    throw std::invalid_argument(
        detail::cat("reshape of ", to_string(shape()), " to ", to_string(s), ": element counts differ"));
  return s == shape() ? *this : mlops::Reshape::apply(*this, s);
}

Tensor Tensor::expand(const std::vector<std::int64_t>& new_shape) const {
  auto fail = [&](const char* why) {
    throw std::invalid_argument(
        detail::cat("expand of ", to_string(shape()), " to ", str(new_shape), ": ", why));
  };
  if (new_shape.size() < shape().size()) fail("fewer dimensions");
  std::size_t lead_n = new_shape.size() - shape().size();
  Shape lead(lead_n, 1);
  lead.insert(lead.end(), shape().begin(), shape().end());
  Dims s;
  for (std::size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1 && i < lead_n) fail("-1 (keep the size) only applies to existing dimensions");
    if (new_shape[i] < -1) fail("negative size");
    s.push_back(new_shape[i] == -1 ? lead[i] : new_shape[i]);
    if (s.back() != lead[i] && lead[i] != 1) fail("only size-1 dimensions can expand");
  }
  check_shape("expand", s);
  Tensor x = reshape(lead);
  return s == x.shape() ? x : mlops::Expand::apply(x, s);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& order) const {
  std::int64_t n = ndim();
  Dims o;
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  bool ok = order.size() == static_cast<std::size_t>(n);
  for (std::size_t i = 0; ok && i < order.size(); ++i) {
    std::int64_t r = order[i] < 0 ? order[i] + n : order[i];
    ok = r >= 0 && r < n && !seen[static_cast<std::size_t>(r)];
    if (ok) seen[static_cast<std::size_t>(r)] = true, o.push_back(r);
  }
  if (!ok)
    throw std::invalid_argument(detail::cat("permute of shape ", to_string(shape()), " with ", str(order),
                                            ": not a permutation of the ", std::to_string(n), " axes"));
  return mlops::Permute::apply(*this, o);
}

Tensor Tensor::flip(const Axes& axes) const {
  Dims a;
  std::vector<bool> seen(static_cast<std::size_t>(ndim()), false);
  if (axes.all)
    for (std::int64_t i = 0; i < ndim(); ++i) a.push_back(i);
  for (std::int64_t x : axes.axes) {
    std::int64_t r = axis_in("flip", *this, x, ndim());
    if (seen[static_cast<std::size_t>(r)])
      throw std::invalid_argument(detail::cat("flip of shape ", to_string(shape()), " with axes ",
                                              str(axes.axes), ": axis ", std::to_string(x), " repeats"));
    seen[static_cast<std::size_t>(r)] = true;
    a.push_back(r);
  }
  return a.empty() ? *this : mlops::Flip::apply(*this, a);
}

Tensor Tensor::pad(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg, double value) const {
  Pairs p;
  bool noop = true;
  for (auto [b, e] : arg) p.push_back({b, e}), noop = noop && b == 0 && e == 0;
  if (p.size() != shape().size())
    throw std::invalid_argument(detail::cat("pad of shape ", to_string(shape()), " with ", to_string(p),
                                            ": one (before, after) per dimension"));
  Dims grown;
  for (std::size_t i = 0; i < p.size(); ++i) {
    auto [b, e] = p[i];
    std::int64_t size = 0;
    if (b < 0 || e < 0)
      throw std::invalid_argument(detail::cat("pad of shape ", to_string(shape()), " with ", to_string(p),
                                              ": padding must be non-negative"));
    if (__builtin_add_overflow(shape()[i], b, &size) || __builtin_add_overflow(size, e, &size))
      throw std::invalid_argument(
          detail::cat("pad of shape ", to_string(shape()), " with ", to_string(p), ": a size leaves int64"));
    grown.push_back(size);
  }
  check_shape("pad", grown);
  if (noop) return *this;
  Tensor ret = mlops::Pad::apply(*this, p);
  if (value == 0) return ret;
  // The border is `value` and the inside exactly x: add one constant slab per side, zero-padded
  // to the full shape, rather than x * mask + value * (1 - mask), which turns -inf into NaN.
  // Slab (d, side) holds the points whose first coordinate outside the box is d, on that side.
  const Dims& s = shape();
  Dims full = ret.shape();
  for (std::size_t d = 0; d < p.size(); ++d) {
    for (int side = 0; side < 2; ++side) {
      std::int64_t w = side == 0 ? p[d].first : p[d].second;
      if (w == 0) continue;
      Dims slab;
      Pairs where;
      for (std::size_t i = 0; i < p.size(); ++i) {
        if (i < d) slab.push_back(s[i]), where.push_back(p[i]);
        if (i > d) slab.push_back(full[i]), where.push_back({0, 0});
        if (i == d)
          slab.push_back(w), where.push_back(side == 0 ? Pair{0, full[i] - w} : Pair{full[i] - w, 0});
      }
      Tensor c(LazyBuffer::full(slab, value, dtype(), device()), false);
      ret = ret + mlops::Pad::apply(c, where);
    }
  }
  return ret;
}

// Each axis in turn: the borders are slices of x (flipped for reflect) concatenated on either side,
// so the gradient of every copy flows back to the element it copied. A negative pad crops that side
// after the other is padded, as PyTorch's (output j reads input j - before, reflected, clamped or
// wrapped into the input).
Tensor Tensor::pad(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg,
                   std::string_view mode) const {
  bool constant = mode == "constant", reflect = mode == "reflect", replicate = mode == "replicate",
       circular = mode == "circular";
  Pairs p;
  for (auto [b, e] : arg) p.push_back({b, e});
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(detail::cat("pad of shape ", to_string(shape()), " with ", to_string(p), " (",
                                            std::string(mode), "): ", why));
  };
  if (!constant && !reflect && !replicate && !circular)
    fail("mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\"");
  if (p.size() != shape().size()) fail("one (before, after) per dimension");
  PadArg grow, keep;
  for (std::size_t d = 0; d < p.size(); ++d) {
    auto [b, e] = p[d];
    std::int64_t n = shape()[d];
    if (n + b + e < 0)
      fail(detail::cat("dimension ", std::to_string(d), " of size ", std::to_string(n), " cropped below 0"));
    grow.push_back({std::max<std::int64_t>(b, 0), std::max<std::int64_t>(e, 0)});
    std::int64_t from = std::max<std::int64_t>(-b, 0);
    keep.push_back({from, n + grow.back().first + grow.back().second - std::max<std::int64_t>(-e, 0)});
  }
  auto crop = [&](const Tensor& t) { return keep == full_range(t) ? t : t.shrink(keep); };
  if (constant) return crop(pad(grow, 0.0));
  Tensor x = *this;
  for (std::size_t d = 0; d < p.size(); ++d) {
    auto [b, e] = grow[d];
    std::int64_t n = shape()[d];
    if (b == 0 && e == 0) continue;
    if (n == 0) fail(detail::cat("dimension ", std::to_string(d), " is empty"));
    if (reflect && (b >= n || e >= n))
      fail(detail::cat("reflect needs each pad below the size ", std::to_string(n)));
    if (circular && (b > n || e > n))
      fail(detail::cat("circular needs each pad at most the size ", std::to_string(n)));
    auto slice = [&](std::int64_t from, std::int64_t to) {
      PadArg r = full_range(x);
      r[d] = {from, to};
      return x.shrink(r);
    };
    auto repeat = [&](std::int64_t at, std::int64_t k) {
      std::vector<std::int64_t> s(x.shape().begin(), x.shape().end());
      s[d] = k;
      return slice(at, at + 1).expand(s);
    };
    auto axis = static_cast<std::int64_t>(d);
    std::vector<Tensor> parts;
    if (b) parts.push_back(reflect ? slice(1, b + 1).flip(axis) : replicate ? repeat(0, b) : slice(n - b, n));
    parts.push_back(x);
    if (e)
      parts.push_back(reflect     ? slice(n - 1 - e, n - 1).flip(axis)
                      : replicate ? repeat(n - 1, e)
                                  : slice(0, e));
    x = parts[0].cat(std::vector<Tensor>(parts.begin() + 1, parts.end()), axis);
  }
  return crop(x);
}

Tensor Tensor::shrink(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg) const {
  Pairs p;
  for (auto [b, e] : arg) p.push_back({b, e});
  auto fail = [&](const char* why) {
    throw std::invalid_argument(
        detail::cat("shrink of shape ", to_string(shape()), " with ", to_string(p), ": ", why));
  };
  if (p.size() != shape().size()) fail("one (begin, end) per dimension");
  bool noop = true;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i].first < 0 || p[i].second < p[i].first || p[i].second > shape()[i])
      fail("need 0 <= begin <= end <= size");
    noop = noop && p[i] == Pair{0, shape()[i]};
  }
  return noop ? *this : mlops::Shrink::apply(*this, p);
}

// ---- hlops ----

// (left, right, top, bottom, ...) from the last dimension backwards; negative entries crop.
Tensor Tensor::pad2d(const std::vector<std::int64_t>& padding, double value) const {
  auto n = static_cast<std::int64_t>(padding.size() / 2);
  if (padding.size() % 2 || n > ndim())
    throw std::invalid_argument(detail::cat("pad2d of shape ", to_string(shape()), " with ", str(padding),
                                            ": needs a (before, after) pair for each of at most ",
                                            std::to_string(ndim()), " trailing dimensions"));
  PadArg grow = zero_pads(ndim()), keep = full_range(*this);
  for (std::int64_t k = 0; k < n; ++k) {
    auto d = static_cast<std::size_t>(ndim() - 1 - k);
    std::int64_t b = padding[static_cast<std::size_t>(2 * k)],
                 e = padding[static_cast<std::size_t>(2 * k + 1)];
    std::int64_t grown = 0;
    if (__builtin_add_overflow(shape()[d], b, &grown) || __builtin_add_overflow(grown, e, &grown))
      throw std::invalid_argument(detail::cat("pad2d of shape ", to_string(shape()), " with ", str(padding),
                                              ": a size leaves int64"));
    if (grown < 0)
      throw std::invalid_argument(detail::cat("pad2d of shape ", to_string(shape()), " with ", str(padding),
                                              ": crops dimension ", std::to_string(d), " below zero"));
    grow[d] = {std::max<std::int64_t>(b, 0), std::max<std::int64_t>(e, 0)};
    std::int64_t size = shape()[d] + grow[d].first + grow[d].second;
    keep[d] = {std::max<std::int64_t>(-b, 0), size - std::max<std::int64_t>(-e, 0)};
  }
  return pad(grow, value).shrink(keep);
}

namespace subscript {
void index_error(const Tensor& t, const std::string& why) {
  throw std::invalid_argument(detail::cat("indexing a tensor of shape ", to_string(t.shape()), ": ", why));
}
}  // namespace subscript

namespace {
using subscript::index_error;

// The index with its Ellipsis (or, without one, the end) filled with full slices: one integer or
// slice per dimension of t, new axes where they were.
std::vector<Index> expand_ellipsis(const Tensor& t, const std::vector<Index>& index) {
  t.shape("operator[]");  // (an undefined tensor's error names the subscript)
  std::int64_t consuming = 0, ellipses = 0;
  for (const Index& i : index) {
    consuming += std::holds_alternative<std::int64_t>(i) || std::holds_alternative<Slice>(i);
    ellipses += std::holds_alternative<EllipsisT>(i);
  }
  if (ellipses > 1) index_error(t, "an index can only have a single Ellipsis");
  if (consuming > t.ndim())
    index_error(t, detail::cat("too many indices (", std::to_string(consuming), ") for ",
                               std::to_string(t.ndim()), " dimensions"));
  auto rest = static_cast<std::size_t>(t.ndim() - consuming);
  std::vector<Index> idx;
  for (const Index& i : index) {
    if (!std::holds_alternative<EllipsisT>(i))
      idx.push_back(i);
    else
      idx.insert(idx.end(), rest, Slice{});
  }
  if (!ellipses) idx.insert(idx.end(), rest, Slice{});
  return idx;
}

}  // namespace

// A slice follows Python's slice.indices (subscript.hpp).
subscript::Taken subscript::taken(const Tensor& t, const Index& i, std::size_t d) {
  std::int64_t n = t.shape()[d];
  if (const auto* e = std::get_if<std::int64_t>(&i)) {
    if (*e < -n || *e >= n)
      index_error(t, detail::cat("index ", std::to_string(*e), " is out of range for dimension ",
                                 std::to_string(d), " of size ", std::to_string(n)));
    return {*e < 0 ? *e + n : *e, 1, 1};
  }
  const Slice& s = std::get<Slice>(i);
  std::int64_t step = s.step.value_or(1);
  if (step == 0) index_error(t, detail::cat("slice step cannot be 0 (dimension ", std::to_string(d), ")"));
  std::int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
  auto norm = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, lo, hi);
  };
  std::int64_t start = norm(s.start, step < 0 ? hi : lo), stop = norm(s.stop, step < 0 ? lo : hi);
  // |step| past n takes what n takes (one element at most): no overflow for steps near the int64
  // limits (-INT64_MIN is not an int64), and a step of 1 where one element is taken.
  std::int64_t a =
      std::min(step == std::numeric_limits<std::int64_t>::min() ? std::numeric_limits<std::int64_t>::max()
                                                                : std::abs(step),
               std::max<std::int64_t>(n, 1));
  std::int64_t span = step < 0 ? start - stop : stop - start, count = span > 0 ? (span + a - 1) / a : 0;
  if (count <= 1) a = 1;
  return {start, step < 0 ? -a : a, count};
}

namespace {
// Every steps[k]-th element of axis k of x, from the first, counts[k] of them: pad to
// count * step (where the tensor ends first), reshape to (count, step) and keep column 0.
Tensor every_step(const Tensor& x, const Shape& steps, const Shape& counts) {
  PadArg grow, keep;
  Shape split;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    std::int64_t a = counts[k] ? steps[k] : 1;
    grow.push_back({0, counts[k] * a - x.shape()[k]});
    split.push_back(counts[k]), split.push_back(a);
    keep.push_back({0, counts[k]}), keep.push_back({0, 1});
  }
  return x.pad(grow).reshape(split).shrink(keep);
}
}  // namespace

// numpy basic indexing. Each dimension becomes shrink -> flip (negative step) -> for |step| > 1,
// every_step; a final reshape drops integer-indexed axes and inserts the new ones.
Tensor Tensor::operator[](const std::vector<Index>& index) const {
  if (subscript::advanced(index)) return subscript::advanced_read(*this, index);
  PadArg bounds;                     // the shrink
  std::vector<std::int64_t> flips;   // dimensions walked backwards
  Shape steps, counts, final_shape;  // |step| and element count per dimension
  std::size_t d = 0;
  for (const Index& i : expand_ellipsis(*this, index)) {
    if (std::holds_alternative<NewAxisT>(i)) {
      final_shape.push_back(1);
      continue;
    }
    auto [start, step, count] = subscript::taken(*this, i, d);
    if (std::holds_alternative<Slice>(i)) final_shape.push_back(count);
    // count * |step| elements from start where the tensor has them, so every_step pads only at
    // its end
    std::int64_t a = step < 0 ? -step : step, reach = count * a, n = shape()[d];
    if (count == 0)
      bounds.push_back({0, 0});
    else
      bounds.push_back(step > 0 ? std::pair{start, std::min(n, start + reach)}
                                : std::pair{std::max<std::int64_t>(0, start + 1 - reach), start + 1});
    if (step < 0 && bounds.back().second - bounds.back().first > 1)
      flips.push_back(static_cast<std::int64_t>(d));
    steps.push_back(a), counts.push_back(count);
    ++d;
  }
  if (final_shape.size() > kMaxDims)
    throw std::length_error(detail::cat("operator[] of ", to_string(shape()), ": a result of ",
                                        std::to_string(final_shape.size()), " dimensions, more than the ",
                                        std::to_string(kMaxDims), " of this build (METAGRAD_MAX_DIMS)"));
  Tensor x = shrink(bounds);
  if (!flips.empty()) x = x.flip(Axes(flips));
  if (std::any_of(steps.begin(), steps.end(), [](std::int64_t a) { return a > 1; }))
    x = every_step(x, steps, counts);
  return x.reshape(final_shape);
}

// Each piece zero-padded to the full size along dim, then summed: a view of every input.
Tensor Tensor::cat(const std::vector<Tensor>& others, std::int64_t dim) const {
  if (ndim() == 0) throw std::invalid_argument("cat: a 0-d tensor cannot be concatenated");
  std::int64_t d = axis_in("cat", *this, dim, ndim());
  std::vector<Tensor> all{*this};
  all.insert(all.end(), others.begin(), others.end());
  DType dt = dtype();
  std::int64_t total = 0;
  for (const Tensor& t : all) {
    bool ok = t.ndim() == ndim();
    for (std::int64_t i = 0; ok && i < ndim(); ++i) ok = i == d || t.shape()[i] == shape()[i];
    if (!ok)
      throw std::invalid_argument(detail::cat("cat along dim ", std::to_string(dim), ": shape ",
                                              to_string(t.shape()), " does not match ", to_string(shape()),
                                              " outside that dim"));
    dt = promote_types(dt, t.dtype());
    if (__builtin_add_overflow(total, t.shape()[d], &total))
      throw std::invalid_argument(
          detail::cat("cat along dim ", std::to_string(dim), ": the total size leaves int64"));
  }
  if (all.size() == 1) return *this;
  Tensor ret = *this;
  std::int64_t at = 0;
  // Floats sum the padded pieces negated, then negate: -0 + +0 is +0, so a plain sum loses a -0
  // next to another piece's zero padding; -(-v + -0 + ...) is v for every v, -0 included.
  bool negate = dtypes::is_float(dt);
  for (std::size_t k = 0; k < all.size(); ++k) {
    PadArg p = zero_pads(ndim());
    p[d] = {at, total - at - all[k].shape()[d]};
    at += all[k].shape()[d];
    Tensor piece = all[k].cast(dt).pad(p);
    if (negate) piece = -piece;
    ret = k == 0 ? piece : ret + piece;
  }
  return negate ? -ret : ret;
}

Tensor Tensor::stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  if (tensors.empty()) throw std::invalid_argument("stack: needs at least one tensor");
  std::vector<Tensor> rest;
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].shape() != tensors[0].shape())
      throw std::invalid_argument(detail::cat("stack: shape ", to_string(tensors[i].shape()), " of tensor ",
                                              std::to_string(i), " differs from ",
                                              to_string(tensors[0].shape())));
    rest.push_back(tensors[i].unsqueeze(dim));
  }
  return tensors[0].unsqueeze(dim).cat(rest, dim);
}

// Each dim of size s becomes (1, s), expands to (r, s) and merges to r * s.
Tensor Tensor::repeat(const std::vector<std::int64_t>& repeats) const {
  if (static_cast<std::int64_t>(repeats.size()) < ndim() ||
      std::any_of(repeats.begin(), repeats.end(), [](std::int64_t r) { return r < 0; }))
    throw std::invalid_argument(detail::cat("repeat of shape ", to_string(shape()), " with ", str(repeats),
                                            ": needs a non-negative count for each dimension"));
  Shape base(repeats.size() - shape().size(), 1), split, expanded, final_shape;
  base.insert(base.end(), shape().begin(), shape().end());
  for (std::size_t i = 0; i < base.size(); ++i) {
    split.push_back(1), split.push_back(base[i]);
    expanded.push_back(repeats[i]), expanded.push_back(base[i]);
    std::int64_t n = 0;
    if (__builtin_mul_overflow(repeats[i], base[i], &n))
      throw std::invalid_argument(detail::cat("repeat of shape ", to_string(shape()), " with ", str(repeats),
                                              ": a size leaves int64"));
    final_shape.push_back(n);
  }
  check_shape("repeat", Dims(final_shape));
  return reshape(split).expand(expanded).reshape(final_shape);
}

// As PyTorch: pieces of ceil(size / n) along dim, the last one smaller, so fewer than n can come
// back; a dimension of size 0 gives one empty piece.
std::vector<Tensor> Tensor::chunk(std::int64_t n, std::int64_t dim) const {
  if (n <= 0)
    throw std::invalid_argument(detail::cat("chunk of shape ", to_string(shape()), " into ",
                                            std::to_string(n), " pieces: the count must be positive"));
  if (ndim() == 0) throw std::invalid_argument("chunk: a 0-d tensor cannot be split");
  auto d = static_cast<std::size_t>(axis_in("chunk", *this, dim, ndim()));
  std::int64_t size = shape()[d], step = (size + n - 1) / n;
  if (size == 0) return {*this};
  std::vector<Tensor> out;
  for (std::int64_t at = 0; at < size; at += step) {
    PadArg r = full_range(*this);
    r[d] = {at, std::min(size, at + step)};
    out.push_back(shrink(r));
  }
  return out;
}

std::vector<Tensor> Tensor::split(std::int64_t size, std::int64_t dim) const {
  if (size <= 0)
    throw std::invalid_argument(detail::cat("split of shape ", to_string(shape()), " into pieces of ",
                                            std::to_string(size), ": the size must be positive"));
  if (ndim() == 0) throw std::invalid_argument("split: a 0-d tensor cannot be split");
  std::int64_t n = shape()[static_cast<std::size_t>(axis_in("split", *this, dim, ndim()))];
  std::vector<std::int64_t> sizes;
  for (std::int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  return sizes.empty() ? std::vector<Tensor>{*this} : split(sizes, dim);
}
std::vector<Tensor> Tensor::split(const std::vector<std::int64_t>& sizes, std::int64_t dim) const {
  if (ndim() == 0) throw std::invalid_argument("split: a 0-d tensor cannot be split");
  auto d = static_cast<std::size_t>(axis_in("split", *this, dim, ndim()));
  std::int64_t total = 0;
  for (std::int64_t s : sizes) total += s;
  if (total != shape()[d] || std::any_of(sizes.begin(), sizes.end(), [](std::int64_t s) { return s < 0; }))
    throw std::invalid_argument(
        detail::cat("split of shape ", to_string(shape()), " along dim ", std::to_string(d), " into sizes ",
                    str(sizes), ": they must be non-negative and sum to ", std::to_string(shape()[d])));
  std::vector<Tensor> out;
  std::int64_t at = 0;
  for (std::int64_t s : sizes) {
    PadArg r = full_range(*this);
    r[d] = {at, at + s};
    out.push_back(shrink(r));
    at += s;
  }
  return out;
}

Tensor Tensor::roll(std::int64_t shift, std::int64_t dim) const { return roll(Shape{shift}, Shape{dim}); }
// Each dim: the last `shift` elements (mod the size) come first, a cat of two slices.
Tensor Tensor::roll(std::int64_t shift) const { return roll(Shape{shift}, Shape{}); }
Tensor Tensor::roll(const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims) const {
  if (dims.empty() && shifts.size() == 1)
    return flatten().roll(shifts[0], 0).reshape(Shape(shape().begin(), shape().end()));
  if (shifts.size() != dims.size())
    throw std::invalid_argument(detail::cat("roll of shape ", to_string(shape()), ": ",
                                            std::to_string(shifts.size()), " shifts for ",
                                            std::to_string(dims.size()), " dims"));
  Tensor out = *this;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto d = static_cast<std::size_t>(axis_in("roll", *this, dims[i], ndim()));
    std::int64_t n = shape()[d];
    if (n == 0) continue;
    std::int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    auto parts = out.split(Shape{n - s, s}, static_cast<std::int64_t>(d));
    out = parts[1].cat({parts[0]}, static_cast<std::int64_t>(d));
  }
  return out;
}

Tensor Tensor::unflatten(std::int64_t dim, const std::vector<std::int64_t>& sizes) const {
  auto d = static_cast<std::size_t>(axis_in("unflatten", *this, dim, ndim()));
  Shape s(shape().begin(), shape().begin() + static_cast<std::ptrdiff_t>(d));
  s.insert(s.end(), sizes.begin(), sizes.end());
  s.insert(s.end(), shape().begin() + static_cast<std::ptrdiff_t>(d) + 1, shape().end());
  try {
    return reshape(s);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(detail::cat("unflatten of shape ", to_string(shape()), " dim ",
                                            std::to_string(d), " into ", str(sizes),
                                            ": the sizes must multiply to ", std::to_string(shape()[d])));
  }
}

// The two dims last; a square m x m window of the plane at the offset, flattened and padded to
// m (m + 1), is m rows whose first elements are the diagonal (numpy's strided trick, as views).
// A vector on the main diagonal is a view: each element followed by n zeros, the first n * n of them
// reshaped to (n, n); an offset pads |offset| rows and columns around it.
Tensor Tensor::diag(std::int64_t offset) const {
  if (ndim() == 2) return diagonal(offset);
  if (ndim() != 1)
    throw std::invalid_argument(
        detail::cat("diag of shape ", to_string(shape()), ": needs a vector (1-D) or a matrix (2-D)"));
  std::int64_t n = shape()[0], lim = std::numeric_limits<std::int64_t>::max() / 2 - n;
  if (offset > lim || offset < -lim)
    throw std::invalid_argument(detail::cat("diag of shape ", to_string(shape()), ": offset ",
                                            std::to_string(offset), " is too large"));
  std::int64_t above = std::max<std::int64_t>(offset, 0), below = std::max<std::int64_t>(-offset, 0);
  Tensor m = unsqueeze(-1).pad({{0, 0}, {0, n}}).flatten().shrink({{0, n * n}}).reshape({n, n});
  return m.pad({{below, above}, {above, below}});
}

Tensor Tensor::diagonal(std::int64_t offset, std::int64_t dim1, std::int64_t dim2) const {
  if (ndim() < 2)
    throw std::invalid_argument(
        detail::cat("diagonal of shape ", to_string(shape()), ": needs 2 or more dims"));
  std::int64_t a = axis_in("diagonal", *this, dim1, ndim()), b = axis_in("diagonal", *this, dim2, ndim());
  if (a == b)
    throw std::invalid_argument(detail::cat("diagonal of shape ", to_string(shape()),
                                            ": dim1 and dim2 are both ", std::to_string(a)));
  Shape order;
  for (std::int64_t i = 0; i < ndim(); ++i)
    if (i != a && i != b) order.push_back(i);
  order.push_back(a), order.push_back(b);
  Tensor x = permute(order);
  Shape lead(order.size() - 2);
  for (std::size_t i = 0; i + 2 < order.size(); ++i) lead[i] = shape()[static_cast<std::size_t>(order[i])];
  std::int64_t rows = shape()[static_cast<std::size_t>(a)], cols = shape()[static_cast<std::size_t>(b)];
  std::int64_t r0 = offset < 0 ? std::min(-offset, rows) : 0, c0 = offset > 0 ? std::min(offset, cols) : 0;
  std::int64_t m = std::max<std::int64_t>(std::min(rows - r0, cols - c0), 0);
  PadArg r = full_range(x);
  r[r.size() - 2] = {r0, r0 + m}, r[r.size() - 1] = {c0, c0 + m};
  Shape flat = lead, rows_of = lead, first = lead;
  flat.push_back(m * m), rows_of.push_back(m), rows_of.push_back(m + 1);
  PadArg pad(flat.size(), {0, 0}), take = PadArg();
  pad.back() = {0, m};
  Tensor sq = x.shrink(r).reshape(flat).pad(pad).reshape(rows_of);
  take = full_range(sq);
  take.back() = {0, 1};
  first.push_back(m);
  return sq.shrink(take).reshape(first);
}

Tensor Tensor::repeat_interleave(std::int64_t repeats, std::optional<std::int64_t> dim) const {
  if (repeats < 0)
    throw std::invalid_argument(detail::cat("repeat_interleave of shape ", to_string(shape()), ": repeats ",
                                            std::to_string(repeats), " must be non-negative"));
  if (!dim) return flatten().repeat_interleave(repeats, 0);
  auto d = static_cast<std::size_t>(axis_in("repeat_interleave", *this, *dim, ndim()));
  Shape s = shape_of(*this), e = s;
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(d) + 1, 1);
  e.insert(e.begin() + static_cast<std::ptrdiff_t>(d) + 1, repeats);
  Shape out = shape_of(*this);
  out[d] *= repeats;
  return reshape(s).expand(e).reshape(out);
}

Tensor Tensor::squeeze(std::optional<std::int64_t> dim) const {
  Shape s;
  if (!dim) {
    for (std::int64_t x : shape())
      if (x != 1) s.push_back(x);
    return reshape(s);
  }
  if (ndim() == 0 && (*dim == 0 || *dim == -1)) return *this;  // as PyTorch
  std::int64_t d = axis_in("squeeze", *this, *dim, ndim());
  if (shape()[static_cast<std::size_t>(d)] != 1) return *this;
  for (std::int64_t i = 0; i < ndim(); ++i)
    if (i != d) s.push_back(shape()[static_cast<std::size_t>(i)]);
  return reshape(s);
}

Tensor Tensor::unsqueeze(std::int64_t dim) const {
  std::int64_t d = axis_in("unsqueeze", *this, dim, ndim() + 1);
  Shape s = shape_of(*this);
  s.insert(s.begin() + d, 1);
  return reshape(s);
}

Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const {
  Shape order(static_cast<std::size_t>(ndim()));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[static_cast<std::size_t>(axis_in("transpose", *this, dim0, ndim()))],
            order[static_cast<std::size_t>(axis_in("transpose", *this, dim1, ndim()))]);
  return permute(order);
}

Tensor Tensor::flatten(std::int64_t start_dim, std::int64_t end_dim) const {
  std::int64_t n = std::max<std::int64_t>(ndim(), 1);  // a 0-d tensor flattens to (1,)
  std::int64_t a = axis_in("flatten", *this, start_dim, n), b = axis_in("flatten", *this, end_dim, n);
  if (a > b)
    throw std::invalid_argument(detail::cat("flatten of shape ", to_string(shape()), ": start_dim ",
                                            std::to_string(start_dim), " comes after end_dim ",
                                            std::to_string(end_dim)));
  if (ndim() == 0) return reshape({1});
  Shape s(shape().begin(), shape().begin() + a);
  s.push_back(
      std::accumulate(shape().begin() + a, shape().begin() + b + 1, std::int64_t{1}, std::multiplies<>()));
  s.insert(s.end(), shape().begin() + b + 1, shape().end());
  return reshape(s);
}

namespace {
// Keeps x[..., i, j] where j - i >= k (upper) or j - i <= k (lower) and zeroes the rest, with
// movement ops only (a mask multiply would turn an -inf above the diagonal into NaN). The skew:
// pad each row with r zeros in front and lay the rows out one column wider, so (i, j) lands in
// column j - i + r and each diagonal is a column; shrink and zero-pad those columns, then unskew.
Tensor band(const Tensor& x, std::int64_t k, bool upper, const char* op) {
  if (x.ndim() < 2)
    throw std::invalid_argument(
        detail::cat(op, " of shape ", to_string(x.shape()), ": needs at least 2 dims"));
  if (x.numel() == 0) return x;
  Shape lead(x.shape().begin(), x.shape().end() - 2);
  std::int64_t nd = x.ndim(), r = x.shape()[nd - 2], c = x.shape()[nd - 1], w = r + c;
  auto with = [&](std::initializer_list<std::int64_t> tail) {
    Shape s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  auto last = [&](std::int64_t n, std::pair<std::int64_t, std::int64_t> p) {
    PadArg a = zero_pads(n);
    a.back() = p;
    return a;
  };
  auto keep_last = [&](const Tensor& t, std::int64_t b, std::int64_t e) {
    PadArg a = full_range(t);
    a.back() = {b, e};
    return t.shrink(a);
  };
  Tensor y =
      x.pad(last(nd, {r, 0})).reshape(with({r * w})).pad(last(nd - 1, {0, r})).reshape(with({r, w + 1}));
  std::int64_t col = std::clamp(k, -w - 1, w + 1) + r;  // the column of diagonal k
  std::int64_t b = upper ? std::clamp<std::int64_t>(col, 0, w + 1) : 0;
  std::int64_t e = upper ? w + 1 : std::clamp<std::int64_t>(col + 1, 0, w + 1);
  y = keep_last(y, b, e).pad(last(nd, {b, w + 1 - e}));
  return keep_last(keep_last(y.reshape(with({r * (w + 1)})), 0, r * w).reshape(with({r, w})), r, w);
}
}  // namespace

Tensor Tensor::triu(std::int64_t k) const { return band(*this, k, true, "triu"); }
Tensor Tensor::tril(std::int64_t k) const { return band(*this, k, false, "tril"); }

}  // namespace metagrad
