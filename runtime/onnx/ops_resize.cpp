// Sampling: Resize (and the older Upsample), separable, one axis at a time, as ONNX's reference does,
// GridSample and RoiAlign. For each output position the host computes the source coordinate, its taps (1
// nearest, 2 linear, 4 cubic per axis) and their weights; the Tensor side is an index_select per tap
// and a weighted sum, so every mode follows the reference's arithmetic exactly.
#include <algorithm>
#include <cmath>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;

struct ResizeAttrs {
  std::string mode, coord, nearest;
  double cubic_a, extrapolation;
  bool exclude_outside;
  I64s axes;
  std::string policy;
};

struct Taps {
  std::vector<I64s> idx;               // per tap: the source index of each output position
  std::vector<std::vector<double>> w;  // per tap: its weight
  std::vector<double> extra;           // added (tf_crop_and_resize's extrapolation value)
};

std::vector<double> cubic(double r, double A) {
  double s = 1 - r;
  return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
          ((A + 2) * s - (A + 3)) * s * s + 1, ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
}

Taps taps(const ResizeAttrs& at, std::int64_t in, std::int64_t out, double scale, double roi_lo,
          double roi_hi) {
  std::size_t n = at.mode == "nearest" ? 1 : at.mode == "linear" ? 2 : 4;
  Taps t{std::vector<I64s>(n), std::vector<std::vector<double>>(n), {}};
  for (std::int64_t o = 0; o < out; ++o) {
    double x = static_cast<double>(o), xo;
    const std::string& c = at.coord;
    if (c == "half_pixel")
      xo = (x + 0.5) / scale - 0.5;
    else if (c == "pytorch_half_pixel")
      xo = out > 1 ? (x + 0.5) / scale - 0.5 : 0;
    else if (c == "align_corners")  // over the unrounded output size, as the reference
      xo = out == 1 ? 0 : x * static_cast<double>(in - 1) / (scale * static_cast<double>(in) - 1);
    else if (c == "tf_half_pixel_for_nn")
      xo = (x + 0.5) / scale;
    else if (c == "asymmetric")
      xo = x / scale;
    else if (c == "half_pixel_symmetric") {
      double adj = static_cast<double>(out) / (scale * static_cast<double>(in));
      xo = static_cast<double>(in) / 2 * (1 - adj) + (x + 0.5) / scale - 0.5;
    } else {  // tf_crop_and_resize
      xo = out > 1 ? roi_lo * static_cast<double>(in - 1) +
                         x * (roi_hi - roi_lo) * static_cast<double>(in - 1) / static_cast<double>(out - 1)
                   : 0.5 * (roi_lo + roi_hi) * static_cast<double>(in - 1);
    }
    bool outside = c == "tf_crop_and_resize" && (xo < 0 || xo > static_cast<double>(in - 1));
    t.extra.push_back(outside ? at.extrapolation : 0);
    // The left neighbour i0 and ratio in (0, 1] (an integral xo takes ratio 1: its right neighbour).
    double i1 = std::ceil(xo);
    auto i0 = static_cast<std::int64_t>(i1) - 1;
    double r = xo - static_cast<double>(i0);
    auto clampi = [&](std::int64_t i) { return std::clamp<std::int64_t>(i, 0, in - 1); };
    std::vector<double> w;
    I64s idx;
    if (n == 1) {
      bool right = r == 1 || (at.nearest == "round_prefer_floor"  ? r > 0.5
                              : at.nearest == "round_prefer_ceil" ? r >= 0.5
                              : at.nearest == "floor"             ? false
                                                                  : r > 0);
      idx = {clampi(right ? i0 + 1 : i0)}, w = {1};
    } else if (n == 2) {
      idx = {clampi(i0), clampi(i0 + 1)}, w = {1 - r, r};
    } else {
      w = cubic(r, at.cubic_a);
      I64s raw{i0 - 1, i0, i0 + 1, i0 + 2};
      if (at.exclude_outside) {
        double sum = 0;
        for (std::size_t k = 0; k < 4; ++k) {
          if (raw[k] < 0 || raw[k] >= in) w[k] = 0;
          sum += w[k];
        }
        for (auto& v : w) v /= sum;
      }
      for (auto i : raw) idx.push_back(clampi(i));
    }
    for (std::size_t k = 0; k < n; ++k) {
      t.idx[k].push_back(idx[k]);
      t.w[k].push_back(outside ? 0 : w[k]);
    }
  }
  return t;
}

Tensor along(const Tensor& x, std::int64_t axis, const std::vector<double>& v) {
  I64s s(static_cast<std::size_t>(x.ndim()), 1);
  s[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(v.size());
  return Tensor(v, Dims(s)).cast(x.dtype());
}

Tensor resize(Tensor x, const ResizeAttrs& at, std::vector<double> scales, I64s sizes,
              std::vector<double> roi) {
  auto rank = static_cast<std::size_t>(x.ndim());
  I64s axes = at.axes;
  for (auto& a : axes) a = norm_axis(a, static_cast<std::int64_t>(rank), "Resize: axis");
  if (axes.empty())
    for (std::size_t k = 0; k < rank; ++k) axes.push_back(static_cast<std::int64_t>(k));
  std::size_t na = axes.size();
  if (!sizes.empty() && sizes.size() != na)
    throw Error("Resize: " + std::to_string(sizes.size()) + " sizes for " + std::to_string(na) + " axes");
  if (sizes.empty() && scales.size() != na)
    throw Error("Resize: " + std::to_string(scales.size()) + " scales for " + std::to_string(na) + " axes");
  I64s out(na);
  std::vector<double> sc(na);
  Dims in = x.shape();
  for (std::size_t k = 0; k < na; ++k) {
    auto d = static_cast<double>(in[static_cast<std::size_t>(axes[k])]);
    if (sizes.empty())
      sc[k] = scales[k], out[k] = static_cast<std::int64_t>(std::floor(d * scales[k]));
    else
      sc[k] = static_cast<double>(sizes[k]) / d, out[k] = sizes[k];
  }
  if (!sizes.empty() && at.policy != "stretch") {
    double s = at.policy == "not_larger" ? *std::min_element(sc.begin(), sc.end())
                                         : *std::max_element(sc.begin(), sc.end());
    for (std::size_t k = 0; k < na; ++k)
      sc[k] = s, out[k] = static_cast<std::int64_t>(
                     std::round(s * static_cast<double>(in[static_cast<std::size_t>(axes[k])])));
  }
  DType dt = x.dtype();
  for (std::size_t k = 0; k < na; ++k) {
    auto ax = static_cast<std::size_t>(axes[k]);
    std::int64_t n = in[ax];
    if (out[k] == n && sc[k] == 1 && at.coord != "tf_crop_and_resize") continue;
    double lo = roi.empty() ? 0 : roi[ax], hi = roi.empty() ? 1 : roi[ax + rank];
    Taps t = taps(at, n, out[k], sc[k], lo, hi);
    auto a = static_cast<std::int64_t>(ax);
    std::optional<Tensor> r;
    for (std::size_t j = 0; j < t.idx.size(); ++j) {
      Tensor picked = x.index_select(a, Tensor(t.idx[j], Dims{static_cast<std::int64_t>(t.idx[j].size())}));
      if (t.idx.size() == 1 && at.coord != "tf_crop_and_resize") {
        r = picked;
        break;
      }
      Tensor term = picked * along(picked, a, t.w[j]);
      r = r ? *r + term : term;
    }
    if (at.coord == "tf_crop_and_resize") r = *r + along(*r, a, t.extra);
    x = *r;
  }
  return x.dtype() == dt ? x : x.cast(dt);
}

// sum_k w[k] * x[n, c, idx[k]] over the flattened (N * H * W) pixels: (C, points).
Tensor weighted_taps(const Tensor& x, const std::vector<I64s>& idx,
                     const std::vector<std::vector<double>>& w) {
  Dims s = x.shape();
  Tensor flat = x.permute({1, 0, 2, 3}).reshape({s[1], s[0] * s[2] * s[3]});
  std::optional<Tensor> r;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    auto n = static_cast<std::int64_t>(idx[k].size());
    Tensor term = flat.index_select(1, Tensor(idx[k], Dims{n})) * Tensor(w[k], Dims{1, n}).cast(x.dtype());
    r = r ? *r + term : term;
  }
  return *r;
}

struct RoiAttrs {
  std::int64_t h, w, ratio;
  double scale;
  bool half_pixel;
};

// GridSample's reflection of a coordinate into [lo, hi].
double reflect(double x, double lo, double hi) {
  double range = hi - lo;
  if (range <= 0) return lo;
  if (x >= lo && x <= hi) return x;
  double d = x < lo ? lo - x : x - hi;
  auto n = static_cast<std::int64_t>(d / range);
  double r = d - static_cast<double>(n) * range;
  bool even = n % 2 == 0;
  return x < lo ? (even ? lo + r : hi - r) : (even ? hi - r : lo + r);
}

struct GridAttrs {
  std::string mode, padding;
  bool align;
};

// X (N, C, H, W) sampled at grid (N, Ho, Wo, 2) of normalised (x, y).
Tensor grid_sample(const Tensor& x, const Host& grid, const GridAttrs& at) {
  if (x.ndim() != 4) throw Error("GridSample: only 4-D inputs (N, C, H, W) are supported");
  Dims s = x.shape();
  std::int64_t N = s[0], C = s[1], H = s[2], W = s[3], Ho = grid.shape[1], Wo = grid.shape[2];
  std::size_t taps = at.mode == "nearest" ? 1 : at.mode == "bilinear" ? 4 : 16;
  std::vector<I64s> idx(taps);
  std::vector<std::vector<double>> w(taps);
  double bx0 = at.align ? 0 : -0.5, by0 = bx0,
         bx1 = at.align ? static_cast<double>(W - 1) : static_cast<double>(W) - 0.5,
         by1 = at.align ? static_cast<double>(H - 1) : static_cast<double>(H) - 0.5;
  auto denorm = [&](double g, std::int64_t len) {
    return at.align ? (g + 1) / 2 * static_cast<double>(len - 1)
                    : ((g + 1) * static_cast<double>(len) - 1) / 2;
  };
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t p = 0; p < Ho * Wo; ++p) {
      double gx = denorm(grid.at((n * Ho * Wo + p) * 2), W),
             gy = denorm(grid.at((n * Ho * Wo + p) * 2 + 1), H);
      if (at.mode == "nearest") gx = std::nearbyint(gx), gy = std::nearbyint(gy);
      if (gx < bx0 || gx > bx1 || gy < by0 || gy > by1) {
        if (at.padding == "border")
          gx = std::clamp(gx, 0.0, static_cast<double>(W - 1)),
          gy = std::clamp(gy, 0.0, static_cast<double>(H - 1));
        else if (at.padding == "reflection")
          gx = reflect(gx, bx0, bx1), gy = reflect(gy, by0, by1);
      }
      // A source pixel's flat index (-1: outside, a zero), as the padding mode reads it.
      auto pixel = [&](std::int64_t r, std::int64_t c) -> std::int64_t {
        if (at.padding == "border")
          r = std::clamp<std::int64_t>(r, 0, H - 1), c = std::clamp<std::int64_t>(c, 0, W - 1);
        if (at.padding == "reflection")
          r = static_cast<std::int64_t>(reflect(static_cast<double>(r), by0, by1)),
          c = static_cast<std::int64_t>(reflect(static_cast<double>(c), bx0, bx1));
        if (r < 0 || r >= H || c < 0 || c >= W) return -1;
        return (n * H + r) * W + c;
      };
      std::vector<std::int64_t> at_idx;
      std::vector<double> at_w;
      if (taps == 1) {
        at_idx.push_back(pixel(static_cast<std::int64_t>(gy), static_cast<std::int64_t>(gx))),
            at_w.push_back(1);
      } else if (taps == 4) {
        double fx = std::floor(gx), fy = std::floor(gy), dx = gx - fx, dy = gy - fy;
        auto x1 = static_cast<std::int64_t>(fx), y1 = static_cast<std::int64_t>(fy);
        at_idx = {pixel(y1, x1), pixel(y1, x1 + 1), pixel(y1 + 1, x1), pixel(y1 + 1, x1 + 1)};
        at_w = {(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx};
      } else {
        double fx = std::floor(gx), fy = std::floor(gy);
        auto cx = cubic(gx - fx, -0.75), cy = cubic(gy - fy, -0.75);
        auto x0 = static_cast<std::int64_t>(fx) - 1, y0 = static_cast<std::int64_t>(fy) - 1;
        for (std::int64_t i = 0; i < 4; ++i)
          for (std::int64_t j = 0; j < 4; ++j)
            at_idx.push_back(pixel(y0 + i, x0 + j)),
                at_w.push_back(cy[static_cast<std::size_t>(i)] * cx[static_cast<std::size_t>(j)]);
      }
      for (std::size_t k = 0; k < taps; ++k) {
        idx[k].push_back(std::max<std::int64_t>(at_idx[k], 0));
        w[k].push_back(at_idx[k] < 0 ? 0 : at_w[k]);
      }
    }
  return weighted_taps(x, idx, w).reshape({C, N, Ho, Wo}).permute({1, 0, 2, 3});
}

// RoiAlign (avg): each output bin the mean of its sampling points, each point bilinear in X.
Tensor roi_align(const Tensor& x, const Host& rois, const Host& batch, const RoiAttrs& at) {
  if (x.ndim() != 4) throw Error("RoiAlign: the input must be 4-D (N, C, H, W)");
  std::int64_t C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], R = rois.shape[0];
  double off = at.half_pixel ? 0.5 : 0;
  std::vector<std::vector<std::pair<std::int64_t, double>>> bins;
  for (std::int64_t r = 0; r < R; ++r) {
    std::int64_t b = batch.int_at(r);
    double x0 = rois.at(r * 4) * at.scale - off, y0 = rois.at(r * 4 + 1) * at.scale - off;
    double rw = rois.at(r * 4 + 2) * at.scale - off - x0, rh = rois.at(r * 4 + 3) * at.scale - off - y0;
    if (!at.half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    double bh = rh / static_cast<double>(at.h), bw = rw / static_cast<double>(at.w);
    auto gh = at.ratio > 0 ? at.ratio : static_cast<std::int64_t>(std::ceil(rh / static_cast<double>(at.h)));
    auto gw = at.ratio > 0 ? at.ratio : static_cast<std::int64_t>(std::ceil(rw / static_cast<double>(at.w)));
    double count = static_cast<double>(std::max<std::int64_t>(gh * gw, 1));
    for (std::int64_t ph = 0; ph < at.h; ++ph)
      for (std::int64_t pw = 0; pw < at.w; ++pw) {
        auto& taps = bins.emplace_back();
        for (std::int64_t iy = 0; iy < gh; ++iy)
          for (std::int64_t ix = 0; ix < gw; ++ix) {
            double y = y0 + static_cast<double>(ph) * bh +
                       (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
            double xx = x0 + static_cast<double>(pw) * bw +
                        (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
            if (y < -1 || y > static_cast<double>(H) || xx < -1 || xx > static_cast<double>(W)) continue;
            y = std::max(y, 0.0), xx = std::max(xx, 0.0);
            auto yl = static_cast<std::int64_t>(y), xl = static_cast<std::int64_t>(xx);
            std::int64_t yh = yl + 1, xh = xl + 1;
            if (yl >= H - 1) yl = yh = H - 1, y = static_cast<double>(yl);
            if (xl >= W - 1) xl = xh = W - 1, xx = static_cast<double>(xl);
            double ly = y - static_cast<double>(yl), lx = xx - static_cast<double>(xl);
            auto at_px = [&](std::int64_t r_, std::int64_t c_) { return (b * H + r_) * W + c_; };
            taps.push_back({at_px(yl, xl), (1 - ly) * (1 - lx) / count});
            taps.push_back({at_px(yl, xh), (1 - ly) * lx / count});
            taps.push_back({at_px(yh, xl), ly * (1 - lx) / count});
            taps.push_back({at_px(yh, xh), ly * lx / count});
          }
      }
  }
  std::size_t most = 1;
  for (const auto& t : bins) most = std::max(most, t.size());
  std::vector<I64s> idx(most);
  std::vector<std::vector<double>> w(most);
  for (const auto& t : bins)
    for (std::size_t k = 0; k < most; ++k) {
      idx[k].push_back(k < t.size() ? t[k].first : 0);
      w[k].push_back(k < t.size() ? t[k].second : 0);
    }
  return weighted_taps(x, idx, w).reshape({C, R, at.h, at.w}).permute({1, 0, 2, 3});
}

}  // namespace

void add_resize_ops(OpTable& t) {
  t["RoiAlign"] = [](const NodeInfo& n) -> Run {
    std::string mode = n.s("mode", "avg"), coord = n.s("coordinate_transformation_mode", "half_pixel");
    if (mode != "avg") n.unsupported("mode '" + mode + "'");
    if (coord != "half_pixel" && coord != "output_half_pixel")
      n.unsupported("coordinate_transformation_mode '" + coord + "'");
    RoiAttrs at{n.i("output_height", 1), n.i("output_width", 1), n.i("sampling_ratio", 0),
                n.f("spatial_scale", 1), coord == "half_pixel" && n.opset() >= 16};
    return [at](Args& a) -> std::vector<Value> { return {roi_align(a.t(0), a.h(1), a.h(2), at)}; };
  };
  t["GridSample"] = [](const NodeInfo& n) -> Run {
    GridAttrs at{n.s("mode", "bilinear"), n.s("padding_mode", "zeros"), n.i("align_corners", 0) != 0};
    if (at.mode == "linear") at.mode = "bilinear";
    if (at.mode == "cubic") at.mode = "bicubic";
    if (at.mode != "bilinear" && at.mode != "nearest" && at.mode != "bicubic")
      n.unsupported("mode '" + at.mode + "'");
    if (at.padding != "zeros" && at.padding != "border" && at.padding != "reflection")
      n.unsupported("padding_mode '" + at.padding + "'");
    return [at](Args& a) -> std::vector<Value> { return {grid_sample(a.t(0), a.h(1), at)}; };
  };
  t["Resize"] = [](const NodeInfo& n) -> Run {
    ResizeAttrs at{n.s("mode", "nearest"),
                   n.s("coordinate_transformation_mode", "half_pixel"),
                   n.s("nearest_mode", "round_prefer_floor"),
                   n.f("cubic_coeff_a", -0.75),
                   n.f("extrapolation_value", 0),
                   n.i("exclude_outside", 0) != 0,
                   n.ints("axes"),
                   n.s("keep_aspect_ratio_policy", "stretch")};
    if (at.mode != "nearest" && at.mode != "linear" && at.mode != "cubic")
      n.unsupported("mode '" + at.mode + "'");
    static const char* coords[] = {"half_pixel",          "pytorch_half_pixel", "align_corners",
                                   "asymmetric",          "tf_crop_and_resize", "half_pixel_symmetric",
                                   "tf_half_pixel_for_nn"};
    if (std::none_of(std::begin(coords), std::end(coords), [&](const char* c) { return at.coord == c; }))
      n.unsupported("coordinate_transformation_mode '" + at.coord + "'");
    static const char* nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    if (std::none_of(std::begin(nearest), std::end(nearest), [&](const char* c) { return at.nearest == c; }))
      n.unsupported("nearest_mode '" + at.nearest + "'");
    if (at.policy != "stretch" && at.policy != "not_larger" && at.policy != "not_smaller")
      n.unsupported("keep_aspect_ratio_policy '" + at.policy + "'");
    if (n.i("antialias", 0)) n.unsupported("antialias=1");
    bool v10 = n.opset() < 11;
    if (v10) at.coord = "asymmetric", at.nearest = "floor";
    return [at, v10](Args& a) -> std::vector<Value> {
      std::vector<double> scales, roi;
      I64s sizes;
      if (v10)
        scales = a.h(1).doubles();
      else {
        if (a.has(1) && a.h(1).numel()) roi = a.h(1).doubles();
        if (a.has(2) && a.h(2).numel()) scales = a.h(2).doubles();
        if (a.has(3) && a.h(3).numel()) sizes = a.ints(3);
      }
      return {resize(a.t(0), at, scales, sizes, roi)};
    };
  };
  t["Upsample"] = [](const NodeInfo& n) -> Run {
    ResizeAttrs at{n.s("mode", "nearest"), "asymmetric", "floor", -0.75, 0, false, {}, "stretch"};
    if (at.mode != "nearest" && at.mode != "linear") n.unsupported("mode '" + at.mode + "'");
    std::vector<double> attr = n.floats("scales");
    bool from_attr = n.has("scales");
    return [at, attr, from_attr](Args& a) -> std::vector<Value> {
      return {resize(a.t(0), at, from_attr ? attr : a.h(1).doubles(), {}, {})};
    };
  };
}

}  // namespace metagrad::onnx::detail
