// Operators computed on the host from small inputs: the window functions (Hann, Hamming, Blackman),
// Det, NonMaxSuppression and TfIdfVectorizer (on integer tokens) (a data-dependent selection, so its boxes
// and scores are read back); and the training domain's Gradient, through metagrad's autograd.
#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

Prepare window(double a0, double a1, double a2) {
  return [=](const NodeInfo& n) -> Run {
    bool periodic = n.i("periodic", 1);
    auto dt = dtype_of_onnx(static_cast<int>(n.i("output_datatype", 1)));
    if (!dt) n.unsupported("output_datatype");
    return [=, dt = *dt](Args& a) -> std::vector<Value> {
      std::int64_t size = a.h(0).int_at(0);
      double N = static_cast<double>(periodic ? size : size - 1);
      Host h;
      h.dtype = dt, h.shape = {size};
      for (std::int64_t k = 0; k < size; ++k) {
        double x = 2 * std::numbers::pi * static_cast<double>(k) / N;
        h.push(a0 - a1 * std::cos(x) + a2 * std::cos(2 * x));
      }
      return {h.tensor()};
    };
  };
}

// The determinant by Gaussian elimination with partial pivoting, in double.
double det(std::vector<double> a, std::size_t n) {
  double d = 1;
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
    if (a[p * n + c] == 0) return 0;
    if (p != c) {
      for (std::size_t k = 0; k < n; ++k) std::swap(a[p * n + k], a[c * n + k]);
      d = -d;
    }
    d *= a[c * n + c];
    for (std::size_t r = c + 1; r < n; ++r) {
      double f = a[r * n + c] / a[c * n + c];
      for (std::size_t k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
    }
  }
  return d;
}

struct Box {
  double y1, x1, y2, x2;
};

double iou(const Box& a, const Box& b) {
  double h = std::max(0.0, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  double w = std::max(0.0, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  double inter = h * w, uni = (a.y2 - a.y1) * (a.x2 - a.x1) + (b.y2 - b.y1) * (b.x2 - b.x1) - inter;
  return uni <= 0 ? 0 : inter / uni;
}

}  // namespace

void add_misc_ops(OpTable& t) {
  t["HannWindow"] = window(0.5, 0.5, 0);
  t["HammingWindow"] = window(25.0 / 46, 21.0 / 46, 0);
  t["BlackmanWindow"] = window(0.42, 0.5, 0.08);
  // Gradient (ai.onnx.preview.training): d sum(y) / d x for each x of xs. The loader traces the xs (they
  // require grad from where they are set) and passes y as the last input.
  t["Gradient"] = [](const NodeInfo& n) -> Run {
    if (n.has("zs")) n.unsupported("zs");
    return [](Args& a) -> std::vector<Value> {
      Tensor y = a.t(a.size() - 1);
      std::vector<Tensor> xs;
      for (std::size_t k = 0; k + 1 < a.size(); ++k) xs.push_back(a.t(k));
      y.sum().backward();
      std::vector<Value> out;
      for (auto& x : xs) out.push_back(x.grad ? (*x.grad).detach() : Tensor::zeros_like(x));
      return out;
    };
  };
  t["Det"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      const Host& x = a.h(0);
      if (x.shape.size() < 2 || x.shape.back() != x.shape[x.shape.size() - 2])
        throw Error("Det: needs square matrices (..., M, M), the shape is " + shape_str(x.shape));
      auto m = static_cast<std::size_t>(x.shape.back());
      Host r;
      r.dtype = x.dtype;
      for (std::size_t k = 0; k + 2 < x.shape.size(); ++k) r.shape.push_back(x.shape[k]);
      std::vector<double> v = x.doubles();
      for (std::size_t b = 0; b * m * m < v.size(); ++b)
        r.push(det(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(b * m * m),
                                       v.begin() + static_cast<std::ptrdiff_t>((b + 1) * m * m)),
                   m));
      return {r.tensor()};
    };
  };
  t["TfIdfVectorizer"] = [](const NodeInfo& n) -> Run {
    if (n.has("pool_strings")) n.unsupported("pool_strings (metagrad has no string dtype)");
    std::string mode = n.s("mode", "TF");
    if (mode != "TF" && mode != "IDF" && mode != "TFIDF") n.unsupported("mode '" + mode + "'");
    std::int64_t lo = n.i("min_gram_length", 1), hi = n.i("max_gram_length", 1),
                 skips = n.i("max_skip_count", 0);
    auto counts = n.ints("ngram_counts"), indexes = n.ints("ngram_indexes"), pool = n.ints("pool_int64s");
    auto weights = n.floats("weights");
    // Each n-gram of the pool (1-grams from counts[0], 2-grams from counts[1], ...) -> (column, weight).
    std::map<std::vector<std::int64_t>, std::pair<std::int64_t, double>> grams;
    std::size_t next = 0;
    for (std::size_t g = 0; g < counts.size(); ++g) {
      auto len = static_cast<std::int64_t>(g + 1),
           end = g + 1 < counts.size() ? counts[g + 1] : static_cast<std::int64_t>(pool.size());
      for (std::int64_t p = counts[g]; p + len <= end; p += len, ++next) {
        if (next >= indexes.size()) n.unsupported("a pool with more n-grams than ngram_indexes");
        grams[std::vector<std::int64_t>(pool.begin() + p, pool.begin() + p + len)] = {
            indexes[next], next < weights.size() ? weights[next] : 1.0};
      }
    }
    std::int64_t width = indexes.empty() ? 0 : *std::max_element(indexes.begin(), indexes.end()) + 1;
    return [=](Args& a) -> std::vector<Value> {
      const Host& x = a.h(0);
      std::int64_t cols = x.shape.back(), rows = x.shape.size() == 2 ? x.shape[0] : 1;
      Host out;
      out.dtype = dtypes::float32;
      out.shape = x.shape.size() == 2 ? Dims{rows, width} : Dims{width};
      for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<double> tf(static_cast<std::size_t>(width)), w(static_cast<std::size_t>(width));
        for (std::int64_t len = lo; len <= hi; ++len)
          for (std::int64_t skip = 0; skip <= (len == 1 ? 0 : skips); ++skip)
            for (std::int64_t s = 0; s + (len - 1) * (skip + 1) < cols; ++s) {
              std::vector<std::int64_t> gram;
              for (std::int64_t j = 0; j < len; ++j) gram.push_back(x.int_at(r * cols + s + j * (skip + 1)));
              if (auto it = grams.find(gram); it != grams.end())
                tf[static_cast<std::size_t>(it->second.first)] += 1,
                    w[static_cast<std::size_t>(it->second.first)] = it->second.second;
            }
        for (std::size_t c = 0; c < tf.size(); ++c)
          out.push(mode == "TF" ? tf[c] : mode == "IDF" ? (tf[c] > 0 ? w[c] : 0) : tf[c] * w[c]);
      }
      return {out.tensor()};
    };
  };
  t["NonMaxSuppression"] = [](const NodeInfo& n) -> Run {
    bool center = n.i("center_point_box", 0);
    return [center](Args& a) -> std::vector<Value> {
      const Host &boxes = a.h(0), &scores = a.h(1);
      std::int64_t limit = a.has(2) ? a.h(2).int_at(0) : 0;
      double iou_max = a.has(3) ? a.scalar(3) : 0, score_min = a.has(4) ? a.scalar(4) : -INFINITY;
      bool thresholded = a.has(4);
      std::int64_t batches = scores.shape[0], classes = scores.shape[1], count = scores.shape[2];
      std::vector<std::int64_t> out;
      for (std::int64_t b = 0; b < batches; ++b) {
        std::vector<Box> bx;
        for (std::int64_t i = 0; i < count; ++i) {
          std::int64_t o = (b * count + i) * 4;
          double c0 = boxes.at(o), c1 = boxes.at(o + 1), c2 = boxes.at(o + 2), c3 = boxes.at(o + 3);
          if (center)
            bx.push_back({c1 - c3 / 2, c0 - c2 / 2, c1 + c3 / 2, c0 + c2 / 2});
          else
            bx.push_back({std::min(c0, c2), std::min(c1, c3), std::max(c0, c2), std::max(c1, c3)});
        }
        for (std::int64_t c = 0; c < classes; ++c) {
          std::vector<std::pair<double, std::int64_t>> cand;
          for (std::int64_t i = 0; i < count; ++i) {
            double s = scores.at((b * classes + c) * count + i);
            if (!thresholded || s > score_min) cand.push_back({s, i});
          }
          std::stable_sort(cand.begin(), cand.end(),
                           [](const auto& x, const auto& y) { return x.first > y.first; });
          std::vector<std::int64_t> kept;
          for (const auto& [s, i] : cand) {
            if (static_cast<std::int64_t>(kept.size()) >= limit) break;
            bool ok = std::none_of(kept.begin(), kept.end(), [&](std::int64_t k) {
              return iou(bx[static_cast<std::size_t>(k)], bx[static_cast<std::size_t>(i)]) > iou_max;
            });
            if (ok) kept.push_back(i), out.insert(out.end(), {b, c, i});
          }
        }
      }
      Host h = Host::ints_of(out);
      h.shape = {static_cast<std::int64_t>(out.size() / 3), 3};
      return {h.tensor()};
    };
  };
}

}  // namespace metagrad::onnx::detail
