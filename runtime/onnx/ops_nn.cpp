// Neural-network operators: MatMul, Gemm, Einsum, Conv, ConvTranspose, pooling, and the
// normalisations (BatchNormalization at inference, InstanceNormalization, LayerNormalization, LRN,
// MeanVarianceNormalization).
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <utility>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;
using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

// The window attributes that Conv, ConvTranspose and the pools share.
struct Window {
  std::string auto_pad;
  I64s kernel, strides, dilations, pads;
  bool ceil = false;

  static Window read(const NodeInfo& n) {
    Window w{n.s("auto_pad", "NOTSET"), n.ints("kernel_shape"), n.ints("strides"), n.ints("dilations"),
             n.ints("pads")};
    w.ceil = n.i("ceil_mode", 0);
    if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" &&
        w.auto_pad != "VALID")
      n.unsupported("auto_pad '" + w.auto_pad + "'");
    // What the attributes say of the number of spatial axes must agree, at load, where they say it.
    std::size_t sp = !w.kernel.empty()      ? w.kernel.size()
                     : !w.strides.empty()   ? w.strides.size()
                     : !w.dilations.empty() ? w.dilations.size()
                                            : w.pads.size() / 2;
    w.check(sp);
    return w;
  }
  // Each given attribute has one entry per spatial axis (pads two), each in range.
  void check(std::size_t spatial) const {
    auto count = [&](const I64s& v, const char* what, std::size_t n) {
      if (!v.empty() && v.size() != n)
        throw Error(std::string(what) + " has " + std::to_string(v.size()) + " entries for " +
                    std::to_string(spatial) + " spatial axes");
    };
    count(kernel, "kernel_shape", spatial), count(strides, "strides", spatial);
    count(dilations, "dilations", spatial), count(pads, "pads", 2 * spatial);
    auto at_least = [](const I64s& v, const char* what, std::int64_t low) {
      for (std::int64_t x : v)
        if (x < low)
          throw Error(std::string(what) + " holds " + std::to_string(x) +
                      " (each must be >= " + std::to_string(low) + ")");
    };
    at_least(kernel, "kernel_shape", 1), at_least(strides, "strides", 1), at_least(dilations, "dilations", 1);
    at_least(pads, "pads", 0);
  }
  // The spatial axes of an input (N, C, spatial...).
  static std::size_t spatial_axes(const Dims& in) {
    if (in.size() < 3)
      throw Error("the input " + shape_str(in) + " must be (N, C, spatial...): rank 3 or more");
    return in.size() - 2;
  }
  // Per spatial axis: kernel (from the weight when not given), strides, dilations, pads (begin, end).
  void resolve(const Dims& in, std::size_t spatial, const I64s& weight_kernel) {
    if (kernel.empty()) kernel = weight_kernel;
    if (in.size() < spatial + 2) spatial_axes(in);
    check(spatial);
    if (kernel.size() != spatial)
      throw Error("kernel_shape has " + std::to_string(kernel.size()) + " entries for " +
                  std::to_string(spatial) + " spatial axes");
    if (strides.empty()) strides.assign(spatial, 1);
    if (dilations.empty()) dilations.assign(spatial, 1);
    if (pads.empty()) pads.assign(2 * spatial, 0);
    if (auto_pad == "VALID") pads.assign(2 * spatial, 0);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      for (std::size_t k = 0; k < spatial; ++k) {
        std::int64_t i = in[in.size() - spatial + k], s = strides[k];
        std::int64_t out = (i + s - 1) / s, eff = (kernel[k] - 1) * dilations[k] + 1;
        std::int64_t total = std::max<std::int64_t>(0, (out - 1) * s + eff - i);
        std::int64_t small = total / 2, big = total - small;
        pads[k] = auto_pad == "SAME_UPPER" ? small : big;
        pads[k + spatial] = auto_pad == "SAME_UPPER" ? big : small;
      }
  }
  // (begin, end) per axis of the whole tensor, zero on the first `lead` axes.
  Pairs pad_pairs(std::size_t lead) const {
    Pairs p(lead, {0, 0});
    for (std::size_t k = 0; k < kernel.size(); ++k) p.push_back({pads[k], pads[k + kernel.size()]});
    return p;
  }
  // A copy resolved for an input of shape `in` (N, C, spatial...), the kernel given by the attribute.
  Window at(const Dims& in) const {
    Window w = *this;
    w.resolve(in, spatial_axes(in), {});
    return w;
  }
  bool padded() const {
    return std::any_of(pads.begin(), pads.end(), [](auto p) { return p != 0; });
  }
  // metagrad's per-side padding: last axis first, (begin, end) each.
  I64s sides() const {
    I64s out;
    for (std::size_t k = kernel.size(); k-- > 0;)
      out.push_back(pads[k]), out.push_back(pads[k + kernel.size()]);
    return out;
  }
};

Tensor pool(const Tensor& x, bool max, const Window& w, I64s padding = {0}, bool include_pad = true) {
  switch (w.kernel.size()) {
    case 1:
      return max ? x.max_pool1d(w.kernel, w.strides, w.dilations, padding, w.ceil)
                 : x.avg_pool1d(w.kernel, w.strides, w.dilations, padding, w.ceil, include_pad);
    case 2:
      return max ? x.max_pool2d(w.kernel, w.strides, w.dilations, padding, w.ceil)
                 : x.avg_pool2d(w.kernel, w.strides, w.dilations, padding, w.ceil, include_pad);
    case 3:
      return max ? x.max_pool3d(w.kernel, w.strides, w.dilations, padding, w.ceil)
                 : x.avg_pool3d(w.kernel, w.strides, w.dilations, padding, w.ceil, include_pad);
    default:
      throw Error(std::to_string(w.kernel.size()) + " spatial axes (1 to 3 are supported)");
  }
}

I64s spatial_of(const Dims& s, std::size_t from = 2) { return I64s(s.begin() + from, s.end()); }

// The transposes of a Gemm's constant B (transB = 1: nn.Linear's weight), made contiguous and realized
// once per device and kept: a product with a strided B packs it on every call (ResNet-18's classifier,
// 1 x 512 by 1000 x 512: 0.9 ms a call against 64 us for B laid out as (512, 1000)).
class Transposed {
 public:
  Tensor of(const Tensor& b) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [src, t] : done_)
      if (src.lazydata.get() == b.lazydata.get()) return t;
    done_.emplace_back(b, b.transpose(0, 1).contiguous().realize());  // src kept: its address stays unique
    return done_.back().second;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<Tensor, Tensor>> done_;
};

// A per-channel parameter (C,) shaped to broadcast against (N, C, spatial...).
Tensor channel(const Tensor& p, std::int64_t rank) {
  I64s s(static_cast<std::size_t>(rank - 1), 1);
  s[0] = -1;
  return p.reshape(s);
}

}  // namespace

void add_nn_ops(OpTable& t) {
  t["MatMul"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> { return {a.t(0).matmul(a.t(1))}; };
  };
  t["Gemm"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 1), beta = n.f("beta", 1);
    bool ta = n.i("transA", 0), tb = n.i("transB", 0);
    auto transposed = std::make_shared<Transposed>();
    return [=](Args& a) -> std::vector<Value> {
      Tensor A = ta ? a.t(0).transpose(0, 1) : a.t(0);
      Tensor B = !tb ? a.t(1) : a.is_const(1) ? transposed->of(a.t(1)) : a.t(1).transpose(0, 1);
      Tensor r = A.matmul(B);
      if (alpha != 1) r = r * alpha;
      if (a.has(2)) r = r + (beta == 1 ? a.t(2) : a.t(2) * beta);
      return {r};
    };
  };
  t["Einsum"] = [](const NodeInfo& n) -> Run {
    std::string eq = n.s("equation", "");
    eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
    return [eq](Args& a) -> std::vector<Value> {
      std::vector<Tensor> ops;
      for (std::size_t k = 0; k < a.size(); ++k) ops.push_back(a.t(k));
      return {Tensor::einsum(eq, ops)};
    };
  };
  t["Conv"] = [](const NodeInfo& n) -> Run {
    Window w0 = Window::read(n);
    std::int64_t group = n.i("group", 1);
    return [w0, group](Args& a) -> std::vector<Value> {
      const Tensor &x = a.t(0), &wt = a.t(1);
      Window w = w0;
      w.resolve(x.shape(), Window::spatial_axes(x.shape()), spatial_of(wt.shape()));
      std::optional<Tensor> bias;
      if (a.has(2)) bias = a.t(2);
      return {x.conv2d(wt, bias, group, w.strides, w.dilations, w.sides())};
    };
  };
  t["ConvTranspose"] = [](const NodeInfo& n) -> Run {
    Window w0 = Window::read(n);
    std::int64_t group = n.i("group", 1);
    I64s out_pad = n.ints("output_padding"), out_shape = n.ints("output_shape");
    return [=](Args& a) -> std::vector<Value> {
      const Tensor &x = a.t(0), &wt = a.t(1);
      std::size_t sp = Window::spatial_axes(x.shape());
      Window w = w0;
      std::string ap = w.auto_pad;
      w.auto_pad = "NOTSET";
      w.resolve(x.shape(), sp, spatial_of(wt.shape()));
      if ((!out_pad.empty() && out_pad.size() != sp) || (!out_shape.empty() && out_shape.size() < sp))
        throw Error("output_padding or output_shape does not have an entry per spatial axis of the input " +
                    shape_str(x.shape()));
      I64s op = out_pad.empty() ? I64s(sp, 0) : out_pad;
      // The full result (no padding), then the window ONNX keeps: [begin, begin + out) per axis.
      Tensor full = x.conv_transpose2d(wt, {}, group, w.strides, w.dilations, {0});
      Pairs cut, grow;
      for (std::size_t k = 0; k < 2; ++k) cut.push_back({0, full.shape()[k]}), grow.push_back({0, 0});
      for (std::size_t k = 0; k < sp; ++k) {
        std::int64_t in = x.shape()[2 + k], s = w.strides[k], eff = (w.kernel[k] - 1) * w.dilations[k] + 1;
        std::int64_t natural = s * (in - 1) + op[k] + eff, begin = w.pads[k], out;
        if (!out_shape.empty() || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
          out = out_shape.empty() ? in * s : out_shape[out_shape.size() - sp + k];
          std::int64_t total = natural - out;
          begin = (ap == "SAME_LOWER") ? total - total / 2 : total / 2;
        } else {
          out = natural - w.pads[k] - w.pads[k + sp];
        }
        std::int64_t have = full.shape()[2 + k];
        std::int64_t lo = std::clamp<std::int64_t>(begin, 0, have),
                     hi = std::clamp<std::int64_t>(begin + out, 0, have);
        cut.push_back({lo, std::max(lo, hi)});
        grow.push_back({std::max<std::int64_t>(0, -begin), std::max<std::int64_t>(0, begin + out - have)});
      }
      Tensor r = full.shrink(cut).pad(grow, 0.0);
      if (a.has(2)) r = r + channel(a.t(2), r.ndim());
      return {r};
    };
  };
  t["MaxPool"] = [](const NodeInfo& n) -> Run {
    Window w0 = Window::read(n);
    // Indices with explicit asymmetric pads: known at load (with auto_pad SAME it depends on the shape).
    const std::size_t half = w0.pads.size() / 2;
    if (n.has_output(1) && w0.auto_pad == "NOTSET")
      for (std::size_t k = 0; k < half; ++k)
        if (w0.pads[k] != w0.pads[k + half]) n.unsupported("the Indices output with asymmetric pads");
    bool column_major = n.i("storage_order", 0);
    return [w0, column_major](Args& a) -> std::vector<Value> {
      Tensor x = a.t(0);
      Window w = w0.at(x.shape());
      std::size_t sp = Window::spatial_axes(x.shape());
      if (a.n_out > 1) {
        I64s sym;
        for (std::size_t k = 0; k < sp; ++k) {
          if (w.pads[k] != w.pads[k + sp])
            throw Error("MaxPool's Indices output with asymmetric pads is not supported");
          sym.push_back(w.pads[k]);
        }
        std::pair<Tensor, Tensor> r =
            sp == 1   ? x.max_pool1d_with_indices(w.kernel, w.strides, w.dilations, sym, w.ceil)
            : sp == 2 ? x.max_pool2d_with_indices(w.kernel, w.strides, w.dilations, sym, w.ceil)
                      : x.max_pool3d_with_indices(w.kernel, w.strides, w.dilations, sym, w.ceil);
        std::int64_t plane = 1;
        for (std::size_t k = 2; k < x.shape().size(); ++k) plane *= x.shape()[k];
        std::int64_t nc = x.shape()[0] * x.shape()[1];
        Tensor base = (Tensor::arange(static_cast<double>(nc), {.dtype = dtypes::int64}) * plane)
                          .reshape({x.shape()[0], x.shape()[1]});
        I64s s{x.shape()[0], x.shape()[1]};
        for (std::size_t k = 0; k < sp; ++k) s.push_back(1);
        Tensor idx = r.second;
        if (column_major) {  // h * W + w -> w * H + h (2-D)
          if (sp != 2)
            throw Error("storage_order=1 with " + std::to_string(sp) + " spatial axes is not supported");
          std::int64_t H = x.shape()[2], W = x.shape()[3];
          idx = (idx % W) * H +
                idx.div(Tensor::full({}, static_cast<double>(W), {.dtype = dtypes::int64}), "floor");
        }
        return {r.first, idx + base.reshape(s)};
      }
      if (w.padded()) x = x.pad(w.pad_pairs(2), -std::numeric_limits<double>::infinity());
      return {pool(x, true, w)};
    };
  };
  t["AveragePool"] = [](const NodeInfo& n) -> Run {
    Window w0 = Window::read(n);
    bool include = n.i("count_include_pad", 0);
    return [w0, include](Args& a) -> std::vector<Value> {
      Tensor x = a.t(0);
      Window w = w0.at(x.shape());
      std::size_t sp = Window::spatial_axes(x.shape());
      if (!w.padded()) return {pool(x, false, w)};
      Tensor r = pool(x.pad(w.pad_pairs(2), 0.0), false, w);
      if (include) return {r};
      I64s ones{1, 1};
      for (std::size_t k = 0; k < sp; ++k) ones.push_back(x.shape()[2 + k]);
      Dims od(ones);
      Tensor mask = pool(Tensor::ones(od, {.dtype = x.dtype()}).pad(w.pad_pairs(2), 0.0), false, w);
      return {r / mask};
    };
  };
  auto global = [](bool max) -> Prepare {
    return [max](const NodeInfo&) -> Run {
      return [max](Args& a) -> std::vector<Value> {
        const Tensor& x = a.t(0);
        I64s axes;
        for (std::int64_t k = 2; k < x.ndim(); ++k) axes.push_back(k);
        return {max ? x.max(axes, true) : x.mean(axes, true)};
      };
    };
  };
  t["GlobalAveragePool"] = global(false);
  t["GlobalMaxPool"] = global(true);
  t["BatchNormalization"] = [](const NodeInfo& n) -> Run {
    double eps = n.f("epsilon", 1e-5), momentum = n.f("momentum", 0.9);
    bool training = n.i("training_mode", 0);
    if (n.opset() < 9 && !n.i("spatial", 1)) n.unsupported("spatial=0");
    return [eps, momentum, training](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t r = x.ndim();
      if (!training) {
        Tensor inv = (a.t(4) + eps).rsqrt() * a.t(1);
        return {(x - channel(a.t(3), r)) * channel(inv, r) + channel(a.t(2), r)};
      }
      // Training mode: the batch's statistics normalise; the running ones are updated and returned.
      I64s axes{0};
      for (std::int64_t k = 2; k < r; ++k) axes.push_back(k);
      auto [var, mean] = x.var_mean(axes, false, 0);
      Tensor y = (x - channel(mean, r)) * channel((var + eps).rsqrt() * a.t(1), r) + channel(a.t(2), r);
      return {y, a.t(3) * momentum + mean * (1 - momentum), a.t(4) * momentum + var * (1 - momentum)};
    };
  };
  t["MaxUnpool"] = [](const NodeInfo& n) -> Run {
    Window w0 = Window::read(n);
    return [w0](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::size_t sp = Window::spatial_axes(x.shape());
      Window w = w0.at(x.shape());
      I64s out, sym;
      for (std::size_t k = 0; k < sp; ++k) {
        if (w.pads[k] != w.pads[k + sp]) throw Error("MaxUnpool with asymmetric pads is not supported");
        sym.push_back(w.pads[k]);
        out.push_back((x.shape()[2 + k] - 1) * w.strides[k] + w.kernel[k] - w.pads[k] - w.pads[k + sp]);
      }
      std::int64_t plane = 1;
      for (auto d : out) plane *= d;
      Tensor idx = a.t(1) % plane;  // ONNX's indices count whole (N, C, ...) tensors; metagrad's one plane
      Tensor r = sp == 1   ? x.max_unpool1d(idx, w.kernel, w.strides, w.dilations, sym, out)
                 : sp == 2 ? x.max_unpool2d(idx, w.kernel, w.strides, w.dilations, sym, out)
                           : x.max_unpool3d(idx, w.kernel, w.strides, w.dilations, sym, out);
      if (a.has(2)) {  // the indices count the default shape; output_shape only grows it (zeros at the end)
        I64s want = a.ints(2);
        Pairs grow(2, {0, 0});
        for (std::size_t k = 0; k < sp; ++k)
          grow.push_back({0, std::max<std::int64_t>(0, want[2 + k] - out[k])});
        r = r.pad(grow, 0.0);
      }
      return {r};
    };
  };
  t["InstanceNormalization"] = [](const NodeInfo& n) -> Run {
    double eps = n.f("epsilon", 1e-5);
    return [eps](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      I64s axes;
      for (std::int64_t k = 2; k < x.ndim(); ++k) axes.push_back(k);
      auto [var, mean] = x.var_mean(axes, true, 0);
      return {(x - mean) * (var + eps).rsqrt() * channel(a.t(1), x.ndim()) + channel(a.t(2), x.ndim())};
    };
  };
  t["LayerNormalization"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", -1);
    double eps = n.f("epsilon", 1e-5);
    return [axis, eps](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "axis");
      I64s axes;
      for (std::int64_t k = ax; k < x.ndim(); ++k) axes.push_back(k);
      Tensor xf = x.dtype() == dtypes::float64 ? x : x.cast(dtypes::float32);
      auto [var, mean] = xf.var_mean(axes, true, 0);
      Tensor inv = (var + eps).rsqrt();
      Tensor y = ((xf - mean) * inv).cast(x.dtype()) * a.t(1);
      if (a.has(2)) y = y + a.t(2);
      std::vector<Value> out{y};
      if (a.n_out > 1) out.push_back(mean);
      if (a.n_out > 2) out.push_back(inv);
      return out;
    };
  };
  t["MeanVarianceNormalization"] = [](const NodeInfo& n) -> Run {
    I64s axes = n.ints("axes", {0, 2, 3});
    return [axes](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      auto [var, mean] = x.var_mean(axes, true, 0);
      return {(x - mean) / (var.sqrt() + 1e-9)};
    };
  };
  t["LRN"] = [](const NodeInfo& n) -> Run {
    double alpha = n.f("alpha", 1e-4), beta = n.f("beta", 0.75), bias = n.f("bias", 1);
    std::int64_t size = n.i("size", 0);
    if (size <= 0) n.unsupported("a size of " + std::to_string(size));
    return [=](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Dims s = x.shape();
      std::int64_t N = s[0], C = s[1], rest = x.numel() / std::max<std::int64_t>(1, N * C);
      Tensor sq =
          x.square().reshape({N, 1, C, rest}).pad({{0, 0}, {0, 0}, {(size - 1) / 2, size / 2}, {0, 0}}, 0.0);
      Tensor sum = sq.avg_pool2d({size, 1}, {1, 1}) * static_cast<double>(size);
      Tensor den =
          pow(sum.reshape(I64s(s.begin(), s.end())) * (alpha / static_cast<double>(size)) + bias, beta);
      return {x / den};
    };
  };
}

}  // namespace metagrad::onnx::detail
