// Shape and movement operators: Constant, Shape, Reshape, Transpose, Squeeze, Concat, Split, Slice,
// Gather, Expand, Tile, Pad, Range ... Host constants (shapes and the arithmetic on them) stay on the
// host, so that a Reshape's target is at hand without a realize.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "../aot/indexed_load.hpp"
#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;

I64s vec(const Dims& d) { return I64s(d.begin(), d.end()); }
std::int64_t prod(const Dims& d, std::size_t from = 0, std::size_t to = 64) {
  std::int64_t n = 1;
  for (std::size_t k = from; k < std::min(to, d.size()); ++k) n *= d[k];
  return n;
}

Host reshaped(Host h, const Dims& shape) {
  h.shape = shape;
  return h;
}

// The same data viewed with a new shape: host constants stay on the host.
Value reshape_value(Args& a, std::size_t k, const Dims& shape) {
  if (a.is_string(k)) {
    StringTensor s = a.str(k);
    s.shape = shape;
    return s;
  }
  if (a.is_host(k)) return reshaped(a.h(k), shape);
  return a.t(k).reshape(vec(shape));
}

// Axes from the attribute (before `input_from`) or from input 1 (from it on).
struct AxesSource {
  bool from_input;
  I64s attr;
  bool present;
};
AxesSource axes_source(const NodeInfo& n, std::int64_t input_from, const char* name = "axes") {
  if (n.opset() >= input_from) return {true, {}, n.has_input(1)};
  return {false, n.ints(name), n.has(name)};
}
I64s axes_of(Args& a, const AxesSource& s, std::size_t k = 1) {
  if (!s.from_input) return s.attr;
  return a.has(k) ? a.ints(k) : I64s{};
}

// Host gather along an axis: shape[:axis] + indices.shape + shape[axis+1:].
Host host_gather(const Host& x, const Host& idx, std::int64_t axis) {
  Host r;
  r.dtype = x.dtype;
  for (std::int64_t k = 0; k < axis; ++k) r.shape.push_back(x.shape[static_cast<std::size_t>(k)]);
  for (auto d : idx.shape) r.shape.push_back(d);
  for (std::size_t k = static_cast<std::size_t>(axis) + 1; k < x.shape.size(); ++k)
    r.shape.push_back(x.shape[k]);
  std::int64_t outer = prod(x.shape, 0, static_cast<std::size_t>(axis)),
               n = x.shape[static_cast<std::size_t>(axis)],
               inner = prod(x.shape, static_cast<std::size_t>(axis) + 1);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < idx.numel(); ++j) {
      std::int64_t i = idx.int_at(j);
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        throw Error("Gather: index " + std::to_string(idx.int_at(j)) + " is out of range for size " +
                    std::to_string(n));
      for (std::int64_t q = 0; q < inner; ++q) {
        std::int64_t src = (o * n + i) * inner + q;
        if (x.is_float())
          r.f.push_back(x.f[static_cast<std::size_t>(src)]);
        else
          r.i.push_back(x.i[static_cast<std::size_t>(src)]);
      }
    }
  return r;
}

// Normalised ONNX slice bounds of one axis: start, end (-1: before the first element) and step.
struct Bounds {
  std::int64_t start, end, step;
};
Bounds slice_bounds(std::int64_t s, std::int64_t e, std::int64_t step, std::int64_t dim) {
  if (step == 0) throw Error("Slice: a step of 0");
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  if (step > 0) return {std::clamp<std::int64_t>(s, 0, dim), std::clamp<std::int64_t>(e, 0, dim), step};
  return {std::clamp<std::int64_t>(s, 0, dim - 1), std::clamp<std::int64_t>(e, -1, dim - 1), step};
}
I64s bound_indices(const Bounds& b) {
  I64s out;
  for (std::int64_t i = b.start; b.step > 0 ? i < b.end : i > b.end; i += b.step) out.push_back(i);
  return out;
}

Host host_take(const Host& x, const std::vector<I64s>& idx) {
  Host r = x;
  for (std::size_t ax = 0; ax < idx.size(); ++ax)
    r = host_gather(r, Host::ints_of(idx[ax]), static_cast<std::int64_t>(ax));
  return r;
}

Value concat(Args& a, std::int64_t axis_attr) {
  std::int64_t rank = static_cast<std::int64_t>(a.shape(0).size());
  std::int64_t axis = norm_axis(axis_attr, rank, "Concat: axis");
  if (a.all_host()) {
    Host r;
    r.dtype = a.dtype(0);
    r.shape = a.shape(0);
    r.shape[static_cast<std::size_t>(axis)] = 0;
    std::vector<const Host*> hs;
    for (std::size_t k = 0; k < a.size(); ++k)
      if (a.has(k))
        hs.push_back(&a.h(k)),
            r.shape[static_cast<std::size_t>(axis)] += a.shape(k)[static_cast<std::size_t>(axis)];
    std::int64_t outer = prod(r.shape, 0, static_cast<std::size_t>(axis));
    for (std::int64_t o = 0; o < outer; ++o)
      for (const Host* h : hs) {
        std::int64_t chunk = prod(h->shape, static_cast<std::size_t>(axis));
        for (std::int64_t q = 0; q < chunk; ++q) {
          if (r.is_float())
            r.f.push_back(h->at(o * chunk + q));
          else
            r.i.push_back(h->int_at(o * chunk + q));
        }
      }
    return r;
  }
  std::vector<Tensor> rest;
  for (std::size_t k = 1; k < a.size(); ++k)
    if (a.has(k)) rest.push_back(a.t(k));
  return a.t(0).cat(rest, axis);
}

}  // namespace

void add_shape_ops(OpTable& t) {
  t["Constant"] = [](const NodeInfo& n) -> Run {
    Host h;
    const auto* value = n.find("value");
    if (value && value->t().data_type() == ::onnx::TensorProto::STRING) {
      Value v(strings_from_proto(value->t()));
      return [v](Args&) -> std::vector<Value> { return {v}; };
    }
    if (n.has("value_string") || n.has("value_strings")) {
      StringTensor st;
      st.data = n.has("value_string") ? std::vector<std::string>{n.s("value_string", "")}
                                      : n.strings("value_strings");
      if (n.has("value_strings")) st.shape = {static_cast<std::int64_t>(st.data.size())};
      Value v(std::move(st));
      return [v](Args&) -> std::vector<Value> { return {v}; };
    }
    if (n.has("value"))
      h = n.tensor("value");
    else if (n.has("value_float"))
      h = Host::scalar(n.f("value_float", 0), dtypes::float32);
    else if (n.has("value_int"))
      h = Host::scalar(static_cast<double>(n.i("value_int", 0)), dtypes::int64);
    else if (n.has("value_floats")) {
      h.dtype = dtypes::float32, h.f = n.floats("value_floats"),
      h.shape = {static_cast<std::int64_t>(h.f.size())};
    } else if (n.has("value_ints"))
      h = Host::ints_of(n.ints("value_ints"));
    else
      n.unsupported(n.has("sparse_value") ? "a sparse_value" : "a Constant without a value");
    Value v = h.numel() > kHostLimit ? Value(h.tensor()) : Value(h);
    return [v](Args&) -> std::vector<Value> { return {v}; };
  };
  t["Identity"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {*a.in[0]}; };
  };
  t["Shape"] = [](const NodeInfo& n) -> Run {
    std::int64_t start = n.i("start", 0), end = n.i("end", 1 << 30);
    bool has_end = n.has("end");
    return [start, end, has_end](Args& a) -> std::vector<Value> {
      I64s s = vec(a.shape(0));
      auto r = static_cast<std::int64_t>(s.size());
      std::int64_t b = std::clamp<std::int64_t>(start < 0 ? start + r : start, 0, r);
      std::int64_t e = has_end ? std::clamp<std::int64_t>(end < 0 ? end + r : end, 0, r) : r;
      return {Host::ints_of(I64s(s.begin() + b, s.begin() + std::max(b, e)))};
    };
  };
  t["Size"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      return {Host::scalar(static_cast<double>(prod(a.shape(0))), dtypes::int64)};
    };
  };
  t["Reshape"] = [](const NodeInfo& n) -> Run {
    bool allowzero = n.i("allowzero", 0);
    bool attr = n.opset() < 5;
    I64s attr_shape = n.ints("shape");
    return [=](Args& a) -> std::vector<Value> {
      I64s want = attr ? attr_shape : a.ints(1);
      Dims in = a.shape(0), out;
      std::int64_t known = 1, infer = -1;
      for (std::size_t k = 0; k < want.size(); ++k) {
        std::int64_t d = want[k];
        if (d == 0 && !allowzero) {
          if (k >= in.size())
            throw Error("Reshape: a 0 at position " + std::to_string(k) + " beyond the input's rank");
          d = in[k];
        }
        if (d == -1) {
          if (infer >= 0) throw Error("Reshape: two -1 in the shape");
          infer = static_cast<std::int64_t>(k);
          out.push_back(1);
          continue;
        }
        known *= d;
        out.push_back(d);
      }
      if (infer >= 0) out[static_cast<std::size_t>(infer)] = known ? prod(in) / known : 0;
      if (prod(out) != prod(in))
        throw Error("Reshape: cannot reshape " + shape_str(in) + " to " + shape_str(out));
      return {reshape_value(a, 0, out)};
    };
  };
  t["Flatten"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 1);
    return [axis](Args& a) -> std::vector<Value> {
      Dims s = a.shape(0);
      std::int64_t ax = axis < 0 ? axis + static_cast<std::int64_t>(s.size()) : axis;
      if (ax < 0 || ax > static_cast<std::int64_t>(s.size())) throw Error("Flatten: axis out of range");
      return {reshape_value(
          a, 0, {prod(s, 0, static_cast<std::size_t>(ax)), prod(s, static_cast<std::size_t>(ax))})};
    };
  };
  t["Transpose"] = [](const NodeInfo& n) -> Run {
    I64s perm = n.ints("perm");
    return [perm](Args& a) -> std::vector<Value> {
      I64s p = perm;
      if (p.empty())
        for (std::int64_t k = static_cast<std::int64_t>(a.shape(0).size()); k-- > 0;) p.push_back(k);
      return {a.t(0).permute(p)};
    };
  };
  t["Squeeze"] = [](const NodeInfo& n) -> Run {
    auto src = axes_source(n, 13);
    return [src](Args& a) -> std::vector<Value> {
      I64s axes = axes_of(a, src);
      Dims s = a.shape(0), out;
      auto r = static_cast<std::int64_t>(s.size());
      for (auto& ax : axes) ax = norm_axis(ax, r, "Squeeze: axis");
      for (std::int64_t k = 0; k < r; ++k) {
        bool drop =
            axes.empty() ? s[static_cast<std::size_t>(k)] == 1 : std::count(axes.begin(), axes.end(), k) > 0;
        if (drop && s[static_cast<std::size_t>(k)] != 1)
          throw Error("Squeeze: axis " + std::to_string(k) + " of " + shape_str(s) + " is not 1");
        if (!drop) out.push_back(s[static_cast<std::size_t>(k)]);
      }
      return {reshape_value(a, 0, out)};
    };
  };
  t["Unsqueeze"] = [](const NodeInfo& n) -> Run {
    auto src = axes_source(n, 13);
    return [src](Args& a) -> std::vector<Value> {
      I64s axes = axes_of(a, src);
      Dims s = a.shape(0);
      auto r = static_cast<std::int64_t>(s.size() + axes.size());
      for (auto& ax : axes) ax = norm_axis(ax, r, "Unsqueeze: axis");
      std::sort(axes.begin(), axes.end());
      Dims out;
      for (std::int64_t k = 0, j = 0; k < r; ++k)
        out.push_back(std::binary_search(axes.begin(), axes.end(), k) ? 1 : s[static_cast<std::size_t>(j++)]);
      return {reshape_value(a, 0, out)};
    };
  };
  t["Concat"] = [](const NodeInfo& n) -> Run {
    if (!n.has("axis")) n.unsupported("a Concat without its axis attribute");
    std::int64_t axis = n.i("axis", 0);
    return [axis](Args& a) -> std::vector<Value> { return {concat(a, axis)}; };
  };
  t["Split"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0), num = n.i("num_outputs", 0);
    auto src = axes_source(n, 13, "split");
    return [=](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "Split: axis");
      I64s sizes = axes_of(a, src);
      std::int64_t dim = x.shape()[static_cast<std::size_t>(ax)];
      if (sizes.empty()) {
        auto parts = static_cast<std::int64_t>(num ? num : static_cast<std::int64_t>(a.n_out));
        std::int64_t each = (dim + parts - 1) / parts;
        for (std::int64_t k = 0; k < parts; ++k)
          sizes.push_back(std::max<std::int64_t>(0, std::min(each, dim - k * each)));
      }
      std::vector<Value> out;
      for (const auto& p : x.split(sizes, ax)) out.push_back(p);
      return out;
    };
  };
  t["Slice"] = [](const NodeInfo& n) -> Run {
    bool attrs = n.opset() < 10;
    I64s starts = n.ints("starts"), ends = n.ints("ends"), axes_attr = n.ints("axes");
    return [=](Args& a) -> std::vector<Value> {
      I64s s = attrs ? starts : a.ints(1), e = attrs ? ends : a.ints(2);
      I64s axes = attrs ? axes_attr : (a.has(3) ? a.ints(3) : I64s{});
      I64s steps = !attrs && a.has(4) ? a.ints(4) : I64s(s.size(), 1);
      Dims shape = a.shape(0);
      auto r = static_cast<std::int64_t>(shape.size());
      if (axes.empty())
        for (std::int64_t k = 0; k < static_cast<std::int64_t>(s.size()); ++k) axes.push_back(k);
      if (e.size() != s.size() || axes.size() != s.size() || steps.size() != s.size())
        throw Error("Slice: starts, ends, axes and steps differ in length");
      std::vector<Bounds> b(shape.size());
      for (std::size_t k = 0; k < shape.size(); ++k) b[k] = {0, shape[k], 1};
      for (std::size_t k = 0; k < s.size(); ++k) {
        auto ax = static_cast<std::size_t>(norm_axis(axes[k], r, "Slice: axis"));
        b[ax] = slice_bounds(s[k], e[k], steps[k], shape[ax]);
      }
      if (a.is_host(0) && a.h(0).numel() <= kHostLimit) {
        std::vector<I64s> idx;
        for (const auto& x : b) idx.push_back(bound_indices(x));
        return {host_take(a.h(0), idx)};
      }
      std::vector<Index> index;
      for (const auto& x : b) {
        if (x.step > 0)
          index.push_back(Slice{x.start, std::max(x.start, x.end), x.step});
        else
          index.push_back(Slice{x.start, x.end < 0 ? std::optional<std::int64_t>{} : x.end, x.step});
      }
      return {a.t(0)[index]};
    };
  };
  t["Gather"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0);
    return [axis](Args& a) -> std::vector<Value> {
      Dims s = a.shape(0), is = a.shape(1);
      std::int64_t ax = norm_axis(axis, static_cast<std::int64_t>(s.size()), "Gather: axis");
      if (a.all_host() && a.h(0).numel() <= kHostLimit) return {host_gather(a.h(0), a.h(1), ax)};
      const Tensor& x = a.t(0);
      std::int64_t dim = s[static_cast<std::size_t>(ax)];
      I64s out;
      for (std::int64_t k = 0; k < ax; ++k) out.push_back(s[static_cast<std::size_t>(k)]);
      for (auto d : is) out.push_back(d);
      for (std::size_t k = static_cast<std::size_t>(ax) + 1; k < s.size(); ++k) out.push_back(s[k]);
      // Host indices that run consecutively (a GPT's positions, Range(0, T)) select a slice: a view,
      // no gather kernel.
      if (a.is_host(1) && a.h(1).numel() > 0) {
        I64s v = a.h(1).ints();
        for (auto& i : v) i = i < 0 ? i + dim : i;
        bool run = v[0] >= 0 && v.back() < dim;
        for (std::size_t k = 1; run && k < v.size(); ++k) run = v[k] == v[k - 1] + 1;
        if (run) {
          std::vector<std::pair<std::int64_t, std::int64_t>> cut;
          for (std::size_t k = 0; k < s.size(); ++k) cut.push_back({0, s[k]});
          cut[static_cast<std::size_t>(ax)] = {v[0], v.back() + 1};
          return {x.shrink(cut).reshape(out)};
        }
      }
      Tensor idx = a.t(1).cast(dtypes::int64).reshape({-1});
      idx = (idx < 0).where(idx + dim, idx);
      // Indices from an input (token ids) are read when the gather runs, not now: a graph that
      // TinyJit replays and metagrad-aot compiles to an indexed load in C.
      if (!a.is_host(1)) return {aot::indexed_load(x, ax, idx).reshape(out)};
      return {x.index_select(ax, idx).reshape(out)};
    };
  };
  t["GatherElements"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0);
    return [axis](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "GatherElements: axis");
      Tensor idx = a.t(1).cast(dtypes::int64);
      idx = (idx < 0).where(idx + x.shape()[static_cast<std::size_t>(ax)], idx);
      return {x.gather(ax, idx)};
    };
  };
  auto scatter = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0);
    std::string red = n.s("reduction", "none");
    static const std::pair<const char*, const char*> names[] = {
        {"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
    std::string mg;
    for (auto [o, m] : names)
      if (red == o) mg = m;
    if (red != "none" && mg.empty()) n.unsupported("reduction '" + red + "'");
    return [axis, mg](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "ScatterElements: axis");
      Tensor idx = a.t(1).cast(dtypes::int64);
      idx = (idx < 0).where(idx + x.shape()[static_cast<std::size_t>(ax)], idx);
      if (mg.empty()) return {x.scatter(ax, idx, a.t(2))};
      return {x.scatter_reduce(ax, idx, a.t(2), mg)};
    };
  };
  t["ScatterElements"] = scatter;
  t["Scatter"] = scatter;
  t["Expand"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      Dims s = a.shape(0), want(a.ints(1));
      Dims out = broadcast_shapes(s, want);
      Tensor x = a.t(0);
      I64s r(out.size() - s.size(), 1);
      for (auto d : s) r.push_back(d);
      return {x.reshape(r).expand(vec(out))};
    };
  };
  t["Tile"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0).repeat(a.ints(1))}; };
  };
  t["Pad"] = [](const NodeInfo& n) -> Run {
    std::string mode = n.s("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
      n.unsupported("mode '" + mode + "'");
    bool attrs = n.opset() < 11;
    I64s pads_attr = n.ints(n.opset() < 2 ? "paddings" : "pads");
    double value_attr = n.f("value", 0);
    return [=](Args& a) -> std::vector<Value> {
      Tensor x = a.t(0);
      auto r = static_cast<std::size_t>(x.ndim());
      I64s pads = attrs ? pads_attr : a.ints(1);
      double value = attrs ? value_attr : (a.has(2) ? a.scalar(2) : 0.0);
      I64s axes;
      if (!attrs && a.has(3))
        axes = a.ints(3);
      else
        for (std::size_t k = 0; k < r; ++k) axes.push_back(static_cast<std::int64_t>(k));
      if (pads.size() != 2 * axes.size())
        throw Error("Pad: " + std::to_string(pads.size()) + " pads for " + std::to_string(axes.size()) +
                    " axes");
      std::vector<std::pair<std::int64_t, std::int64_t>> p(r, {0, 0}), cut(r);
      bool negative = false;
      for (std::size_t k = 0; k < axes.size(); ++k) {
        auto ax = static_cast<std::size_t>(norm_axis(axes[k], static_cast<std::int64_t>(r), "Pad: axis"));
        std::int64_t b = pads[k], e = pads[k + axes.size()];
        p[ax] = {std::max<std::int64_t>(b, 0), std::max<std::int64_t>(e, 0)};
        negative = negative || b < 0 || e < 0;
      }
      if (negative) {
        for (std::size_t k = 0; k < r; ++k) cut[k] = {0, x.shape()[k]};
        for (std::size_t k = 0; k < axes.size(); ++k) {
          auto ax = static_cast<std::size_t>(norm_axis(axes[k], static_cast<std::int64_t>(r), "Pad: axis"));
          cut[ax] = {std::max<std::int64_t>(-pads[k], 0),
                     x.shape()[ax] - std::max<std::int64_t>(-pads[k + axes.size()], 0)};
        }
        x = x.shrink(cut);
      }
      if (mode == "constant") return {x.pad(p, value)};
      return {x.pad(p, mode == "edge" ? "replicate" : mode == "wrap" ? "circular" : "reflect")};
    };
  };
  t["ConstantOfShape"] = [](const NodeInfo& n) -> Run {
    Host v = n.has("value") ? n.tensor("value") : Host::scalar(0, dtypes::float32);
    if (v.numel() != 1) n.unsupported("a value of more than one element");
    return [v](Args& a) -> std::vector<Value> {
      Dims shape(a.ints(0));
      if (prod(shape) <= kHostLimit) {
        Host h;
        h.dtype = v.dtype, h.shape = shape;
        for (std::int64_t k = 0; k < prod(shape); ++k) h.push(v.at(0));
        if (!h.is_float()) std::fill(h.i.begin(), h.i.end(), v.i[0]);
        return {h};
      }
      return {Tensor::full(shape, v.at(0), {.dtype = v.dtype})};
    };
  };
  t["Range"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      double start = a.scalar(0), limit = a.scalar(1), delta = a.scalar(2);
      if (delta == 0) throw Error("Range: a delta of 0");
      auto count = static_cast<std::int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
      Host h;
      h.dtype = a.dtype(0);
      h.shape = {count};
      for (std::int64_t k = 0; k < count; ++k) h.push(start + static_cast<double>(k) * delta);
      if (!h.is_float())
        for (std::int64_t k = 0; k < count; ++k)
          h.i[static_cast<std::size_t>(k)] = a.h(0).int_at(0) + k * a.h(2).int_at(0);
      if (count > kHostLimit) return {h.tensor()};
      return {h};
    };
  };
  t["Dropout"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      bool training = a.has(2) && a.scalar(2) != 0;
      if (training && a.has(1) && a.scalar(1) != 0)
        throw Error("Dropout in training mode (random) is not supported");
      std::vector<Value> out{*a.in[0]};
      if (a.n_out > 1) out.push_back(Tensor::ones(a.shape(0), {.dtype = dtypes::bool_}));
      return out;
    };
  };
  t["Trilu"] = [](const NodeInfo& n) -> Run {
    bool upper = n.i("upper", 1);
    return [upper](Args& a) -> std::vector<Value> {
      std::int64_t k = a.has(1) ? a.h(1).int_at(0) : 0;
      return {upper ? a.t(0).triu(k) : a.t(0).tril(k)};
    };
  };
  t["EyeLike"] = [](const NodeInfo& n) -> Run {
    std::int64_t k = n.i("k", 0);
    auto dt = n.has("dtype") ? dtype_of_onnx(static_cast<int>(n.i("dtype", 1))) : std::optional<DType>{};
    if (n.has("dtype") && !dt) n.unsupported("dtype");
    return [k, dt](Args& a) -> std::vector<Value> {
      Dims s = a.shape(0);
      Host h;
      h.dtype = dt.value_or(a.dtype(0)), h.shape = s;
      for (std::int64_t i = 0; i < s[0]; ++i)
        for (std::int64_t j = 0; j < s[1]; ++j) h.push(j - i == k ? 1 : 0);
      return {h.tensor()};
    };
  };
  t["NonZero"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0).nonzero().transpose(0, 1)}; };
  };
  t["DepthToSpace"] = [](const NodeInfo& n) -> Run {
    std::int64_t b = n.i("blocksize", 0);
    std::string mode = n.s("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") n.unsupported("mode '" + mode + "'");
    return [b, mode](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Dims s = x.shape();
      std::int64_t N = s[0], C = s[1], H = s[2], W = s[3];
      Tensor r = mode == "DCR" ? x.reshape({N, b, b, C / (b * b), H, W}).permute({0, 3, 4, 1, 5, 2})
                               : x.reshape({N, C / (b * b), b, b, H, W}).permute({0, 1, 4, 2, 5, 3});
      return {r.reshape({N, C / (b * b), H * b, W * b})};
    };
  };
  t["SpaceToDepth"] = [](const NodeInfo& n) -> Run {
    std::int64_t b = n.i("blocksize", 0);
    return [b](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Dims s = x.shape();
      std::int64_t N = s[0], C = s[1], H = s[2], W = s[3];
      return {x.reshape({N, C, H / b, b, W / b, b})
                  .permute({0, 3, 5, 1, 2, 4})
                  .reshape({N, C * b * b, H / b, W / b})};
    };
  };
}

}  // namespace metagrad::onnx::detail
