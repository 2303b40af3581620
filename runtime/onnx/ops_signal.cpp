// Fourier transforms: DFT and STFT as matrix products with cos and sin tables built on the host, on
// (real, imaginary) pairs in the last axis as ONNX lays complex values out; MelWeightMatrix's
// triangular filters, on the host.
#include <cmath>
#include <numbers>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;

// The DFT of the last axis of re and im (both (..., n)): k bins (all n, or n/2 + 1 one-sided), as
// (re, im) of (..., k).
std::pair<Tensor, Tensor> dft_last(const Tensor& re, const std::optional<Tensor>& im, bool inverse,
                                   bool onesided) {
  std::int64_t n = re.shape().back(), k = onesided ? n / 2 + 1 : n;
  std::vector<double> c(static_cast<std::size_t>(n * k)), s(c.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < k; ++j) {
      double a = 2 * std::numbers::pi * static_cast<double>((i * j) % n) / static_cast<double>(n);
      c[static_cast<std::size_t>(i * k + j)] = std::cos(a),
                                         s[static_cast<std::size_t>(i * k + j)] = std::sin(a);
    }
  Tensor C = Tensor(c, Dims{n, k}).cast(re.dtype()), S = Tensor(s, Dims{n, k}).cast(re.dtype());
  // (re + i im) e^{sign i a} = re cos - sign im sin + i (im cos + sign re sin); the inverse also / n
  double sign = inverse ? 1 : -1, scale = inverse ? 1 / static_cast<double>(n) : 1;
  Tensor r = re.matmul(C), q = re.matmul(S) * sign;
  if (im) r = r - im->matmul(S) * sign, q = q + im->matmul(C);
  return {r * scale, q * scale};
}

// The real and imaginary parts of x's last axis (1: real, 2: complex).
std::pair<Tensor, std::optional<Tensor>> parts(const Tensor& x) {
  std::int64_t c = x.shape().back(), last = x.ndim() - 1;
  if (c != 1 && c != 2)
    throw Error("the last axis must be 1 (real) or 2 (complex), it is " + std::to_string(c));
  std::vector<std::pair<std::int64_t, std::int64_t>> all;
  for (auto d : x.shape()) all.push_back({0, d});
  auto pick = [&](std::int64_t j) {
    auto a = all;
    a[static_cast<std::size_t>(last)] = {j, j + 1};
    return x.shrink(a).squeeze(last);
  };
  return {pick(0), c == 2 ? std::optional<Tensor>(pick(1)) : std::nullopt};
}

}  // namespace

void add_signal_ops(OpTable& t) {
  t["MelWeightMatrix"] = [](const NodeInfo& n) -> Run {
    auto dt = dtype_of_onnx(static_cast<int>(n.i("output_datatype", 1)));
    if (!dt) n.unsupported("output_datatype");
    return [dt = *dt](Args& a) -> std::vector<Value> {
      std::int64_t mels = a.h(0).int_at(0), dft = a.h(1).int_at(0), rate = a.h(2).int_at(0);
      double lo = a.scalar(3), hi = a.scalar(4);
      std::int64_t bins = dft / 2 + 1;
      auto mel = [](double hz) { return 2595 * std::log10(1 + hz / 700); };
      double step = (mel(hi) - mel(lo)) / static_cast<double>(mels + 2);
      I64s f;  // the filters' edges as spectrogram bins, the reference's arithmetic
      for (std::int64_t k = 0; k < mels + 2; ++k) {
        double hz = 700 * (std::pow(10.0, (static_cast<double>(k) * step + mel(lo)) / 2595) - 1);
        f.push_back(static_cast<std::int64_t>(
            std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate))));
      }
      std::vector<double> w(static_cast<std::size_t>(bins * mels));
      auto at = [&](std::int64_t j, std::int64_t i) -> double& {
        if (j < 0 || j >= bins) throw Error("MelWeightMatrix: a filter edge outside the spectrogram's bins");
        return w[static_cast<std::size_t>(j * mels + i)];
      };
      for (std::int64_t i = 0; i < mels; ++i) {
        std::int64_t l = f[static_cast<std::size_t>(i)], c = f[static_cast<std::size_t>(i + 1)],
                     r = f[static_cast<std::size_t>(i + 2)];
        if (c == l)
          at(c, i) = 1;
        else
          for (std::int64_t j = l; j <= c; ++j)
            at(j, i) = static_cast<double>(j - l) / static_cast<double>(c - l);
        for (std::int64_t j = c; j < r; ++j)
          at(j, i) = static_cast<double>(r - j) / static_cast<double>(r - c);
      }
      Host h;
      h.dtype = dt, h.shape = {bins, mels};
      for (double v : w) h.push(v);
      return {h.tensor()};
    };
  };
  t["DFT"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 1);
    bool inverse = n.i("inverse", 0), onesided = n.i("onesided", 0);
    if (inverse && onesided) n.unsupported("inverse with onesided");
    return [=](Args& a) -> std::vector<Value> {
      auto [re, im] = parts(a.t(0));
      std::int64_t ax = norm_axis(axis, re.ndim(), "DFT: axis");
      auto move = [&](const Tensor& x) { return x.transpose(ax, -1); };
      Tensor r = move(re);
      std::optional<Tensor> i;
      if (im) i = move(*im);
      if (a.has(1)) {  // dft_length: zero-padded or truncated
        std::int64_t len = a.h(1).int_at(0), have = r.shape().back();
        auto fit = [&](const Tensor& x) {
          std::vector<std::pair<std::int64_t, std::int64_t>> s, p;
          for (auto d : x.shape()) s.push_back({0, d}), p.push_back({0, 0});
          s.back().second = std::min(len, have), p.back().second = std::max<std::int64_t>(0, len - have);
          return x.shrink(s).pad(p, 0.0);
        };
        r = fit(r);
        if (i) i = fit(*i);
      }
      auto [fr, fi] = dft_last(r, i, inverse, onesided);
      return {Tensor::stack({move(fr), move(fi)}, -1)};
    };
  };
  t["STFT"] = [](const NodeInfo& n) -> Run {
    bool onesided = n.i("onesided", 1);
    return [onesided](Args& a) -> std::vector<Value> {
      auto [re, im] = parts(a.t(0));  // (batch, length)
      std::int64_t step = a.h(1).int_at(0);
      std::int64_t len = a.has(3) ? a.h(3).int_at(0) : a.shape(2)[0];
      auto frames = [&](const Tensor& x) {  // (batch, frames, len), windowed
        Tensor f = x.unfold(1, len, step);
        return a.has(2) ? f * a.t(2) : f;
      };
      std::optional<Tensor> fi;
      if (im) fi = frames(*im);
      auto [r, q] = dft_last(frames(re), fi, false, onesided && !im);
      return {Tensor::stack({r, q}, -1)};
    };
  };
}

}  // namespace metagrad::onnx::detail
