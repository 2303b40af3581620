// Losses (tinygrad's), built from elementwise ops and reductions. The class axis is the last one:
// logits or log-probabilities (..., C), integer labels (...).
#include <cmath>
#include <optional>
#include <sstream>

#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {
// A label as written: 4, -1, 1.5.
std::string num(double v) {
  if (std::floor(v) == v && std::abs(v) < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  std::ostringstream o;
  o << v;
  return o.str();
}

Tensor floating(const Tensor& x) { return dtypes::is_float(x.dtype()) ? x : x.cast(dtypes::float32); }

// Stable log_softmax over the last axis. The shift is detached: log-softmax does not depend on it,
// so its gradient is exactly zero and the graph stays smaller.
Tensor log_softmax_last(const Tensor& x) {
  Tensor m = x - x.max(-1, true).detach();
  return m - m.exp().sum(-1, true).log();
}

// Checks that the labels fit (..., C) and reads them once on the host, so a label out of [0, C) is
// an error naming it instead of silently contributing nothing. Labels are small and usually host
// data, so this costs one copy of Y.
void check_labels(const char* op, const Tensor& x, const Tensor& Y,
                  std::optional<std::int64_t> ignore_index) {
  Dims want = x.shape();
  if (want.empty())
    throw std::invalid_argument(
        detail::cat(op, ": the input ", to_string(x.shape()), " needs a class axis (..., C)"));
  want.pop_back();
  if (Y.shape() != want)
    throw std::invalid_argument(detail::cat(op, ": the input ", to_string(x.shape()),
                                            " needs labels of shape ", to_string(want), ", got ",
                                            to_string(Y.shape())));
  auto classes = x.shape()[x.shape().size() - 1];
  std::vector<double> labels = Y.to_vector<double>();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    double y = labels[i];
    if (ignore_index && y == static_cast<double>(*ignore_index)) continue;
    if (!(y >= 0 && y < static_cast<double>(classes) && std::floor(y) == y))
      throw std::invalid_argument(detail::cat(op, ": label ", num(y), " at flat index ", std::to_string(i),
                                              " is not a class of the input ", to_string(x.shape()),
                                              " (0 to ", std::to_string(classes - 1), ")"));
  }
}

// -sum(logp * one_hot(Y)) / (number of labels not ignored), from (..., C) log-probabilities.
Tensor nll(const Tensor& logp, const Tensor& Y, std::optional<std::int64_t> ignore_index) {
  std::int64_t classes = logp.shape()[logp.shape().size() - 1];
  DType dt = logp.dtype();
  Tensor labels = Y.detach().reshape({-1, 1});
  Tensor counter = Tensor::arange(static_cast<double>(classes), {.device = Y.device(), .dtype = Y.dtype()});
  Tensor one_hot = labels.eq(counter.reshape({1, classes})).cast(dt);
  Tensor count =
      Tensor::full({1}, static_cast<double>(labels.shape()[0]), {.device = logp.device(), .dtype = dt});
  if (ignore_index) {
    Tensor keep = labels.ne(scalar_for(labels, static_cast<double>(*ignore_index), true)).cast(dt);
    one_hot = one_hot * keep;
    count = keep.sum();
  }
  // A select, not a product: a -inf log-probability in another class (a masked logit) is not read.
  Tensor lp = logp.reshape({-1, classes});
  return -one_hot.where(lp, lp.scalar_like(0)).sum() / count.reshape({});
}

void check_same_shape(const char* op, const Tensor& x, const Tensor& Y) {
  // Broadcasting (N, 1) against (N,) would silently give (N, N): require the same shape.
  if (x.shape() != Y.shape())
    throw std::invalid_argument(detail::cat(op, ": the input ", to_string(x.shape()), " and the target ",
                                            to_string(Y.shape()), " must have the same shape"));
}
}  // namespace

// Mean cross-entropy of logits (..., C) against integer labels (...); labels equal to
// ignore_index are left out of both the sum and the count (all ignored gives NaN, as PyTorch).
Tensor Tensor::sparse_categorical_crossentropy(const Tensor& Y, std::int64_t ignore_index) const {
  check_labels("sparse_categorical_crossentropy", *this, Y, ignore_index);
  return nll(log_softmax_last(floating(*this)), Y, ignore_index);
}

// Mean negative log-likelihood: this holds log-probabilities (..., C), Y integer labels (...).
Tensor Tensor::nll_loss(const Tensor& Y) const {
  check_labels("nll_loss", *this, Y, std::nullopt);
  return nll(floating(*this), Y, std::nullopt);
}

// Mean of -(Y log x + (1 - Y) log(1 - x)) for probabilities x. The logs are clamped at -100, as
// PyTorch does, so x = 0 or 1 gives a finite loss (and not 0 * -inf = NaN).
Tensor Tensor::binary_crossentropy(const Tensor& Y) const {
  check_same_shape("binary_crossentropy", *this, Y);
  Tensor x = floating(*this), y = Y.cast(x.dtype());
  return (-(y * x.log().maximum(-100)) - (1 - y) * (1 - x).log().maximum(-100)).mean();
}

// The same from logits, stably: softplus(x) - Y x, with softplus(x) = m + log(exp(-m) + exp(x - m))
// and m = max(x, 0) detached (every exp argument is <= 0; the gradient is sigmoid(x) - Y exactly).
Tensor Tensor::binary_crossentropy_logits(const Tensor& Y) const {
  check_same_shape("binary_crossentropy_logits", *this, Y);
  Tensor x = floating(*this), y = Y.cast(x.dtype());
  Tensor m = x.relu().detach();
  return (m + ((-m).exp() + (x - m).exp()).log() - y * x).mean();
}

}  // namespace metagrad
